#!/usr/bin/env bash
# Run on a one-GPU machine (an H100 or H200): a whole acceptance, burn-in included, recorded as a bundle that
# replays anywhere, the shipped demo `gpufabric accept` runs without a driver. Packed into OUTDIR/demo.tar.gz.
#
#   [PROFILE=FILE] [BURN_IN=150s] [PROOFS=0] hardware/record-demo.sh OUTDIR
#
# PROFILE: a profile this machine type measured before (step 2 skipped); PROOFS=0 leaves steps 5 and 6 out.
#
# 1. `gpufabric snapshot bundle` (NVML, nvidia-smi, health.json with the kernel log read live);
# 2. `gpufabric profile init --measure` (timed): the profile this machine measures, floors at 0.9;
# 3. `gpufabric accept` live on that profile with a burn-in ($BURN_IN, default 150 s: the memory workload runs once
#    past half of it, between GEMM chunks of 60 s), signed with a key made for the run (timed);
# 4. the run's recordings (not its results) copied into the bundle, which is replayed against the profile;
# 5. the memory pattern with a bit planted on GPU 0: must be REJECTED naming the board's serial;
# 6. `gpufabric health` passive and quick against the profile, timed; `gpufabric verify` of the signed pair.
set -u -o pipefail
out=$1
source "$(dirname "$0")/common.sh"
timed() { local started=$SECONDS; step "$@"; echo "### took $((SECONDS - started)) s: $*"; }
{
  step nvidia-smi -L
  step python3 -m pytest_gpufabric snapshot bundle
  if [ -n "${PROFILE:-}" ]; then cp "$repo/$PROFILE" measured.yaml
  else timed python3 -m pytest_gpufabric profile init --measure -o measured.yaml; fi
  [ -f measured.yaml ] || { echo "### no measured profile: stopping"; exit 1; }
  run_key run-pub.pem
  mkdir -p live && cp run-pub.pem live/
  timed python3 -m pytest_gpufabric accept --profile measured.yaml --burn-in "${BURN_IN:-150s}" --sign-key run-key.pem \
       --customer "ACME Labs" --operator "pytest-gpufabric maintainers" --report-dir live -p no:cacheprovider
  for f in live/*.json live/gpufabric-burnin.jsonl; do
    case "$(basename "$f")" in gpufabric-results.json) ;; *) cp "$f" bundle/ ;; esac
  done
  cp measured.yaml bundle/
  timed python3 -m pytest_gpufabric accept --profile measured.yaml --replay bundle --report-dir replay \
       -p no:cacheprovider
  if [ "${PROOFS:-1}" != 0 ]; then
    timed python3 -m pytest --gpu-profile measured.yaml --gpu-plant-memory-fault 0 -k test_memory_pattern \
         -p no:cacheprovider -q --gpu-report-dir plant
    for tier in "" --quick; do
      timed python3 -m pytest_gpufabric health --profile measured.yaml $tier --json "health$tier.json"
    done
  fi
  step python3 -m pytest_gpufabric verify live/gpufabric-results.json live/acceptance.html --key run-pub.pem
  tar czf "$out/demo.tar.gz" bundle live replay measured.yaml $(ls -d plant health*.json 2>/dev/null)
} 2>&1 | tee "$out/log.txt"
