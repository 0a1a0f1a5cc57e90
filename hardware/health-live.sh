#!/usr/bin/env bash
# `gpufabric health` (issue 43) live on a GPU machine: both tiers timed, a planted fault drained and kept drained.
#
#   hardware/health-live.sh OUTDIR
#
# 1. `profile init` (machine.yaml: the profile this machine passes);
# 2. the passive tier three times and the quick tier twice, each timed (wall seconds, the interpreter's start
#    included), with the node's state in OUTDIR/state and --json/--prom (OUTDIR/prom: a file per tier);
# 3. the quick tier with a fault planted on CUDA device 0 (one wrong GEMM element, one flipped bit): it must drain
#    GPU0 (rma); then three passive runs and a clean quick run must keep it drained (exit 1: the passive tier does
#    not run the GEMM, and an rma fault is lifted only after a reboot); `--clear all --by health-live` lifts it and
#    the next passive run is healthy (exit 0).
# Targets: passive <= 2 s, quick <= 20 s. OUTDIR gets timings.txt (each run, then PASS/FAIL per target), the JSON
# and .prom files, the state file and log.txt. About a minute on one H100 (the quick tier is ~12 s a run).
set -u -o pipefail
mkdir -p "$1" && out=$(readlink -f "$1")
source "$(dirname "$0")/common.sh"
state="$out/state" prom="$out/prom"
timed_dir=$out  # common.sh's timed writes here
mkdir -p "$state" "$prom"
: > "$out/timings.txt"
health() {  # health NAME ARGS...: one timed run against the node's state, its JSON kept
  local name=$1; shift
  timed "$name" python3 -m pytest_gpufabric health --profile machine.yaml --state-dir "$state" --prom "$prom" \
    --json "$out/$name.json" "$@"
}
{
  step nvidia-smi -L
  step python3 -m pytest_gpufabric profile init -o machine.yaml
  cp machine.yaml "$out/"
  for n in 1 2 3; do health "passive-$n"; done
  for n in 1 2; do health "quick-$n" --quick --deadline 120; done
  health quick-planted --quick --deadline 120 --plant-fault 0
  for n in 1 2 3; do health "passive-after-$n"; done
  health quick-after --quick --deadline 120
  timed clear python3 -m pytest_gpufabric health --clear all --by health-live --state-dir "$state"
  health passive-cleared
  cp "$state/health-state.json" "$out/" 2>/dev/null
  cp "$prom"/*.prom "$out/" 2>/dev/null
} > "$out/log.txt" 2>&1
verdict() {  # verdict WHAT OK
  if [ "$2" = yes ]; then echo "PASS $1"; else echo "FAIL $1"; fi | tee -a "$out/timings.txt"
}
slowest() { grep -E "^$1 " "$out/timings.txt" | sed 's/.*wall_s=\([0-9.]*\).*/\1/' | sort -n | tail -n1; }
rc_of() { grep -E "^$1 rc=" "$out/timings.txt" | sed 's/^[^ ]* rc=\([0-9]*\).*/\1/'; }
p=$(slowest 'passive-[0-9]'); q=$(slowest 'quick-[0-9]')
verdict "passive <= 2 s (slowest $p s)" "$(awk -v t="${p:-99}" 'BEGIN{print (t <= 2) ? "yes" : "no"}')"
verdict "quick <= 20 s (slowest $q s)" "$(awk -v t="${q:-99}" 'BEGIN{print (t <= 20) ? "yes" : "no"}')"
kept=yes
[ "$(rc_of quick-planted)" = 1 ] || kept=no
for name in passive-after-1 passive-after-2 passive-after-3 quick-after; do [ "$(rc_of "$name")" = 1 ] || kept=no; done
verdict "planted fault drained, kept drained across passive runs and a clean quick run" "$kept"
verdict "lifted by --clear, then healthy" "$([ "$(rc_of passive-cleared)" = 0 ] && echo yes || echo no)"
cat "$out/timings.txt"
