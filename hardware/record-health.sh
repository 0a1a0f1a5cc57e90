#!/usr/bin/env bash
# `gpufabric health` (issue 34) on a GPU machine:
#
#   hardware/record-health.sh OUTDIR [PROFILE]
#
# 1. `gpufabric snapshot` (it writes health.json with the live check's own reader) and `profile init` (machine.yaml,
#    the profile the checks run against unless PROFILE is given);
# 2. the passive tier three times, each timed (wall seconds, the interpreter's start included), with --json and
#    --prom; the snapshot replayed three times, timed;
# 3. the quick tier three times, timed, with --json and --prom; once more with a fault planted on CUDA device 0 (it
#    must drain GPU0 naming its serial: rma);
# 4. the passive tier as `nobody` (the kernel log is root's: the check must say it could not read it).
# Targets: passive <= 2 s on 4 GPUs, replay <= 5 s, quick <= 20 s. Everything lands in OUTDIR/health.tar.gz, the
# wall times in timings.txt.
set -u -o pipefail
out=$1
profile_arg=${2:-}
source "$(dirname "$0")/common.sh"
{
  step nvidia-smi -L
  step python3 -m pytest_gpufabric snapshot snapshot
  step python3 -m pytest_gpufabric profile init -o machine.yaml
  profile=${profile_arg:-machine.yaml}
  echo "profile: $profile"
  for n in 1 2 3; do
    timed "passive-$n" python3 -m pytest_gpufabric health --profile "$profile" --json "passive-$n.json" \
      --prom "passive-$n.prom"
  done
  for n in 1 2 3; do
    timed "replay-$n" python3 -m pytest_gpufabric health --profile "$profile" --replay snapshot --json "replay-$n.json"
  done
  for n in 1 2 3; do
    timed "quick-$n" python3 -m pytest_gpufabric health --quick --profile "$profile" --json "quick-$n.json" \
      --prom "quick-$n.prom"
  done
  timed quick-planted python3 -m pytest_gpufabric health --quick --plant-fault 0 --profile "$profile" \
    --json quick-planted.json
  chmod -R a+rX "$work" /tmp/site
  [ -f "$profile" ] && profile=$(readlink -f "$profile")
  timed passive-nobody runuser -u nobody -- env PYTHONPATH=/tmp/site python3 -m pytest_gpufabric health \
    --profile "$profile"
  cat passive-1.out quick-1.out
} > log.txt 2>&1
cat timings.txt
tar czf "$out/health.tar.gz" .
