#!/usr/bin/env bash
# Run on an NVLink machine: the acceptance suites live (topology + NVLink traffic), the negative control
# with peer-to-peer disabled for NCCL, the sampler-overhead benchmark, and bundles holding the counter samples.
#
#   hardware/record-nvlink.sh PROFILE OUTDIR
set -u -o pipefail
profile=$1
out=$2
source "$(dirname "$0")/common.sh"
{
  step python3 -m pytest_gpufabric snapshot training
  step python3 -m pytest --gpu-profile "$profile" -p no:cacheprovider -rA --durations=5 \
       --html "$out/acceptance.html" --self-contained-html
  cp reports/gpufabric-results.json "$out/results-live.json"
  cp reports/nvlink-traffic.json training/
  cp -r training p2p-disabled && rm p2p-disabled/nvlink-traffic.json
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=0 step python3 -m pytest --gpu-profile "$profile" -p no:cacheprovider \
       -rA --durations=3 -k nvlink
  cp reports/gpufabric-results.json "$out/results-p2p-disabled.json"
  cp reports/nvlink-traffic.json p2p-disabled/
  step python3 -m pytest --gpu-profile "$profile" --gpu-replay training -p no:cacheprovider -q
  step python3 -m pytest --gpu-profile "$profile" --gpu-replay p2p-disabled -p no:cacheprovider -q -k nvlink
  step python3 "$repo/benchmarks/nvlink_sampler_overhead.py" --runs 3 --json "$out/overhead.json"
  tar czf "$out/bundles.tar.gz" training p2p-disabled
} 2>&1 | tee "$out/log.txt"
