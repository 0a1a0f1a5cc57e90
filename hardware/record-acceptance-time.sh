#!/usr/bin/env bash
# Run on a GPU machine, before and after a change, on the same machine (issue 31): how long
# `gpufabric profile init --measure` takes, then the acceptance on the profile it wrote and a 60 s burn-in, with
# where the time went. Everything is written into OUTDIR as it goes:
#
#   hardware/record-acceptance-time.sh OUTDIR
#
#   OUTDIR/log.txt                     the whole terminal output, with the per-phase tables
#   OUTDIR/nvidia-smi-topo-m.txt       the machine (GPUs, NVLinks, CPU and NUMA affinity)
#   OUTDIR/timing/                     init-measure.log, measured.yaml, acceptance/ and burn-in/ (each run's
#                                      results JSON, measurement files, pytest.log), timing.json, timing.md
#   OUTDIR/acceptance_time.last.json   the summary: device, gpus, init_measure_s, acceptance_wall_s, burn_in_s,
#                                      burn_in_wall_s, the phases (copy it to benchmarks/ with the results)
#
# It times the package installed from .whl/ (common.sh), with this checkout's benchmark: for "before", build the
# wheel of the old commit (git worktree add /tmp/old OLD && pip wheel --no-deps -w .whl /tmp/old), for "after" the
# wheel of this one (pip wheel --no-deps -w .whl .). Expected on 4x H100 SXM (docs/acceptance-time.md): about
# 4.5 min with issue 31's changes (init 85-90 s, acceptance 75-80 s, the burn-in run about 80 s), about 6.5 min
# before them (128 + 165 + about 80 s); under 8 min either way, within one 10-minute call.
set -u -o pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
out=$(realpath -m "$1")
mkdir -p "$out" || exit 1
source "$(dirname "$0")/common.sh"
{
  step nvidia-smi -L
  nvidia-smi topo -m > "$out/nvidia-smi-topo-m.txt" 2>&1
  step python3 "$repo/benchmarks/acceptance_time.py" --measure --burn-in 60s --out "$out/timing" --last "$out/acceptance_time.last.json"
  echo "### done in $SECONDS s"
} 2>&1 | tee "$out/log.txt"
