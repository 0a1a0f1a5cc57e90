#!/usr/bin/env bash
# Run on a one-GPU machine (an H100 or H200): everything issue 22 and 23 ask of it, in one
# command, packed into OUTDIR/single-gpu.tar.gz with the log beside it.
#
#   hardware/record-single-gpu.sh OUTDIR
#
# 1. `gpufabric snapshot bundle`;
# 2. `gpufabric profile init --measure` (timed): the profile this machine measures, floors at 0.9;
# 3. benchmarks/acceptance_time.py on that profile: the acceptance without burn-in, then a 60 s burn-in (timed);
# 4. the acceptance's measurement files copied into the bundle, which is then replayed against the profile;
# 5. the pattern test with a bit planted on GPU 0: must be REJECTED naming the board's serial;
# 6. `gpufabric accept` live on the measured profile, signed with a key made for the run: the report a customer
#    signs, as the machine wrote it (its screenshots are taken back home: the GPU machine has no Chromium), and
#    `gpufabric verify` of it with the public key.
set -u -o pipefail
out=$1
source "$(dirname "$0")/common.sh"
{
  step nvidia-smi -L
  mkdir -p live
  step python3 -m pytest_gpufabric snapshot bundle
  started=$SECONDS
  step python3 -m pytest_gpufabric profile init --measure -o measured.yaml
  echo "### profile init --measure took $((SECONDS - started)) s"
  [ -f measured.yaml ] || { echo "### no measured profile: stopping"; exit 1; }
  cat measured.yaml
  step python3 "$repo/benchmarks/acceptance_time.py" --profile measured.yaml --burn-in 60s --out timing
  for f in timing/acceptance/*.json; do
    case "$(basename "$f")" in gpufabric-results.json) ;; *) cp "$f" bundle/ ;; esac
  done
  step python3 -m pytest --gpu-profile measured.yaml --gpu-replay bundle -p no:cacheprovider -q \
       --gpu-report-dir replay
  step python3 -m pytest --gpu-profile measured.yaml --gpu-plant-memory-fault 0 -k test_memory_pattern \
       -p no:cacheprovider -q -rA --gpu-report-dir plant
  python3 -c "import json; print('memory phases', json.load(open('timing/acceptance/memory.json')).get('phase_seconds'))"
  cp measured.yaml bundle/
  run_key live/run-pub.pem
  step python3 -m pytest_gpufabric accept --profile measured.yaml --sign-key run-key.pem --customer "ACME Labs" \
       --operator "pytest-gpufabric maintainers" --report-dir live --html live/acceptance.html -p no:cacheprovider -q
  step python3 -m pytest_gpufabric verify live/gpufabric-results.json live/acceptance.html --key live/run-pub.pem
  tar czf "$out/single-gpu.tar.gz" bundle timing replay plant live measured.yaml
} 2>&1 | tee "$out/log.txt"
