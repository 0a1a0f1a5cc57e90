#!/usr/bin/env bash
# Run on a multi-GPU machine: the bandwidth suite live (timed), every collective through `gpufabric bench`,
# the harness-vs-nccl-tests comparison, and a bundle holding the measurements for replay.
#
#   hardware/record-bandwidth.sh PROFILE OUTDIR
set -u -o pipefail
profile=$1
out=$2
source "$(dirname "$0")/common.sh"
{
  step python3 -m pytest_gpufabric snapshot bandwidth
  start=$(date +%s%N)
  step python3 -m pytest --gpu-profile "$profile" -p no:cacheprovider -rA --durations=8 -k bandwidth \
       --html "$out/acceptance.html" --self-contained-html
  echo "bandwidth suite wall time: $(( ($(date +%s%N) - start) / 1000000 )) ms"
  cp reports/gpufabric-results.json "$out/results-live.json"
  cp reports/bandwidth.json bandwidth/
  step python3 -m pytest --gpu-profile "$profile" --gpu-replay bandwidth -p no:cacheprovider -q -k bandwidth
  step python3 -m pytest_gpufabric bench all_reduce,all_gather,reduce_scatter,broadcast,sendrecv \
       --sizes 1M,16M,256M,1G,4G --json > "$out/bench.json"
  step python3 -m pytest_gpufabric bench all_gather,reduce_scatter,broadcast,sendrecv --sizes 1M,256M,1G
  step python3 "$repo/benchmarks/nccl_compare.py" --runs 2 --json "$out/compare.json"
  tar czf "$out/bundle.tar.gz" bandwidth
} 2>&1 | tee "$out/log.txt"
