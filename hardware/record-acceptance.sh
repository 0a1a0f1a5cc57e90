#!/usr/bin/env bash
# Run on a GPU machine: record its bundle, run the acceptance suites live against a profile, replay the
# recorded bundle against the same profile, and write a profile from the machine. Everything lands in OUTDIR.
#
#   hardware/record-acceptance.sh PROFILE OUTDIR
#
# Expects the package and its missing dependencies as wheels in .whl/ (see hardware/README.md).
set -u -o pipefail
profile=$1
out=$2
source "$(dirname "$0")/common.sh"
log="$out/log.txt"
{
  step nvidia-smi -L
  step python3 -m pytest_gpufabric snapshot bundle
  step python3 -m pytest_gpufabric show
  step python3 -m pytest_gpufabric show --replay bundle
  step python3 -m pytest --gpu-profile "$profile" -p no:cacheprovider -rA \
       --html "$out/acceptance.html" --self-contained-html --junitxml "$out/junit.xml"
  cp reports/gpufabric-results.json "$out/results-live.json"
  step python3 -m pytest --gpu-profile "$profile" --gpu-replay bundle -p no:cacheprovider -q
  cp reports/gpufabric-results.json "$out/results-replay.json"
  step python3 -m pytest_gpufabric profile init -o "$out/profile-init.yaml"
  step python3 -m pytest --gpu-profile "$out/profile-init.yaml" -p no:cacheprovider -q
  for other in titan-rtx-nvlink rtx-2080ti-pcie h200-nvswitch-x2; do
    [ "$other" = "$profile" ] || step python3 -m pytest --gpu-profile "$other" -p no:cacheprovider -q --no-header
  done
  tar czf "$out/bundle.tar.gz" bundle
} 2>&1 | tee "$log"
