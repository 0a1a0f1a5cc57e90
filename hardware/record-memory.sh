#!/usr/bin/env bash
# Run on a single-GPU machine: the memory suite live (GoogLeNet at the profile's budget: estimate,
# out-of-memory and recovery, large-model support), then its recording replayed.
#
#   hardware/record-memory.sh PROFILE OUTDIR
set -u -o pipefail
profile=$1
out=$2
source "$(dirname "$0")/common.sh"
selection="test_memory_estimate or test_oversized_batch or test_large_model_support or test_offload_changes"
{
  step nvidia-smi -L
  step python3 -m pytest --gpu-profile "$profile" -p no:cacheprovider -rA --durations=3 -k "$selection" \
       --html "$out/acceptance.html" --self-contained-html
  cp reports/gpufabric-results.json "$out/results-live.json"
  cp reports/memory.json "$out/memory.json"
  mkdir -p replay && cp reports/memory.json replay/ && python3 -m pytest_gpufabric snapshot snap >/dev/null \
    && cp snap/nvml.json replay/
  step python3 -m pytest --gpu-profile "$profile" --gpu-replay replay -p no:cacheprovider -q -k "$selection"
} 2>&1 | tee "$out/log.txt"
