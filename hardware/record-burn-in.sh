#!/usr/bin/env bash
# Run on a multi-GPU machine, in two steps: `start` returns once the runs are going (detached with setsid), `wait`
# collects them, so no one command has to last the whole burn-in:
#
#   hardware/record-burn-in.sh start PROFILE DURATION [SUITES]   # installs, snapshots, starts the runs, returns
#   hardware/record-burn-in.sh wait OUTDIR MAX_SECONDS           # waits for them; packs everything when done
#
# 1. `gpufabric snapshot` of the machine (the bundle the run is replayed from later);
# 2. pytest --gpu-profile PROFILE --gpu-burn-in DURATION over SUITES (a -k expression; default: every suite),
#    with the HTML report and JUnit XML; the suites' measurement files land in reports/ beside the burn-in log;
# 3. a short burn-in with a planted GEMM fault on GPU 1, which must be REJECTED naming it.
# `wait` packs the lot into OUTDIR/burn-in-run.tar.gz: snapshot/, main/ (reports and logs), plant/.
set -u -o pipefail
W=/tmp/gpufabric-burn-in
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site
case "$1" in
start)
  profile=$2 duration=$3 suites=${4:-}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  rm -rf "$W" && mkdir -p "$W/main" "$W/plant"
  (cd "$W" && python3 -m pytest_gpufabric snapshot snapshot > snapshot.log 2>&1; echo "exit $?" >> snapshot.log)
  tail -3 "$W/snapshot.log"
  cat > "$W/plant/plant.yaml" <<YAML
name: plant-fault
extends: $profile
burn_in: {chunk_s: 30, memory: false}
YAML
  select=""
  [ -n "$suites" ] && select="-k $(printf %q "$suites")"
  cat > "$W/run.sh" <<RUN
cd $W/main && python3 -m pytest --gpu-profile $profile --gpu-burn-in $duration $select \
  -p no:cacheprovider -rA --durations=10 --gpu-customer "burn-in acceptance" \
  --html $W/main/acceptance.html --self-contained-html --junitxml $W/main/junit.xml > $W/main/main.log 2>&1
echo "exit \$?" >> $W/main/main.log
cd $W/plant && python3 -m pytest --gpu-profile $W/plant/plant.yaml --gpu-burn-in 30s \
  --gpu-burn-in-plant-fault 1 -p no:cacheprovider -rA -k test_burn_in_gpu > $W/plant/plant.log 2>&1
echo "exit \$?" >> $W/plant/plant.log
touch $W/done
RUN
  setsid nohup bash "$W/run.sh" > /dev/null 2>&1 < /dev/null &
  sleep 60
  tail -5 "$W/main/main.log"
  ;;
wait)
  out=$2 max=$3
  end=$(( $(date +%s) + max ))
  while [ ! -e "$W/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  tail -4 "$W/main/main.log"
  if [ -e "$W/done" ]; then
    tail -30 "$W/plant/plant.log"
    tar czf "$out/burn-in-run.tar.gz" -C "$W" snapshot snapshot.log main plant
    echo DONE
  else
    echo "STILL RUNNING"
  fi
  ;;
esac
