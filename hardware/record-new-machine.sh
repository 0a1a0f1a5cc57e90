#!/usr/bin/env bash
# Run on a GPU machine of a kind no shipped profile describes yet (4 or 8 GPUs on NVSwitch):
#
#   hardware/record-new-machine.sh NAME OUTDIR
#
# 1. `gpufabric snapshot` of the machine, and `gpufabric profile init -o NAME.yaml` from it;
# 2. NAME-measured.yaml: NAME.yaml plus the NVLink traffic and bandwidth suites with floors low enough to record
#    what the machine does (the thresholds of a real profile come from these numbers, not before them);
# 3. the suites live against it, with a 1-minute burn-in, the HTML report and JUnit XML; the snapshot
#    replayed against it;
# 4. the shipped profiles of other machines against this one: each must fail, naming what differs.
# Everything lands in OUTDIR/new-machine.tar.gz.
set -u -o pipefail
name=$1
out=$2
source "$(dirname "$0")/common.sh"
{
  step nvidia-smi -L
  step python3 -m pytest_gpufabric snapshot snapshot
  step python3 -m pytest_gpufabric profile init -o "$name.yaml"
  cat > "$name-measured.yaml" <<YAML
name: $name-measured
extends: $name.yaml
nvlink_traffic: {steps: 50, model: {layers: 8, width: 4096}, min_fraction: 0.95, sample_interval_s: 0.01}
bandwidth:
  collectives:
    all_reduce:
      - {size: 1 MiB, max_time: 200 us}
      - {size: 256 MiB, min_fraction_of_peak: 0.3}
      - {size: 1 GiB, min_fraction_of_peak: 0.3}
      - {size: 4 GiB, min_fraction_of_peak: 0.3}
    sendrecv:
      - {size: 1 GiB, min_fraction_of_peak: 0.3}
  copy:
    size: 1 GiB
    gpu_to_gpu: {min_fraction_of_peak: 0.3}
    host_to_device: {min: 20 GB/s}
    device_to_host: {min: 20 GB/s}
YAML
  step python3 -m pytest_gpufabric profile validate "$name.yaml" "$name-measured.yaml"
  step python3 -m pytest --gpu-profile "$name-measured.yaml" --gpu-burn-in 1m -p no:cacheprovider -rA \
       --durations=5 --html acceptance.html --self-contained-html --junitxml junit.xml
  cp reports/gpufabric-results.json results-live.json
  step python3 -m pytest --gpu-profile "$name-measured.yaml" --gpu-replay snapshot -p no:cacheprovider -q
  cp reports/gpufabric-results.json results-replay.json
  for other in titan-rtx-nvlink rtx-2080ti-pcie h200-nvswitch-x2; do
    step python3 -m pytest --gpu-profile "$other" -p no:cacheprovider -q --no-header -k test_topology
  done
} > log.txt 2>&1
grep -E "^### |passed|failed|error" log.txt | tail -40
tar czf "$out/new-machine.tar.gz" .
