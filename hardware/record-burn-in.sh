#!/usr/bin/env bash
# Run on a borrowed multi-GPU machine, in steps (one command may run 10 minutes at most; the burn-in runs in
# the background between them, detached with setsid, so the next call must come while the machine is warm):
#
#   hardware/record-burn-in.sh start PROFILE DURATION   # installs, starts the burn-in, returns
#   hardware/record-burn-in.sh wait OUTDIR MAX_SECONDS   # waits for it (and for the planted-fault run after it)
#
# After the burn-in it runs a short one with a planted GEMM fault on GPU 1, which must be REJECTED naming it.
set -u -o pipefail
W=/tmp/gpufabric-burn-in
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site
case "$1" in
start)
  profile=$2 duration=$3
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  rm -rf "$W" && mkdir -p "$W/main" "$W/plant"
  cat > "$W/plant/plant.yaml" <<YAML
name: plant-fault
extends: $profile
burn_in: {chunk_s: 30, memory: false}
YAML
  cat > "$W/run.sh" <<RUN
cd $W/main && python3 -m pytest --gpu-profile $profile --gpu-burn-in $duration -p no:cacheprovider -rA \
  --durations=5 -k "burn_in or test_topology" --gpu-customer "burn-in acceptance" \
  --html $W/burn-in.html --self-contained-html > $W/main.log 2>&1
echo "exit \$?" >> $W/main.log
cd $W/plant && python3 -m pytest --gpu-profile $W/plant/plant.yaml --gpu-burn-in 30s \
  --gpu-burn-in-plant-fault 1 -p no:cacheprovider -rA -k test_burn_in_gpu > $W/plant.log 2>&1
echo "exit \$?" >> $W/plant.log
touch $W/done
RUN
  setsid nohup bash "$W/run.sh" > /dev/null 2>&1 < /dev/null &
  sleep 45
  tail -5 "$W/main.log"
  ;;
wait)
  out=$2 max=$3
  end=$(( $(date +%s) + max ))
  while [ ! -e "$W/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  tail -3 "$W/main.log"
  if [ -e "$W/done" ]; then
    cp "$W/main.log" "$W/plant.log" "$W/burn-in.html" "$out/"
    cp "$W/main/reports/gpufabric-results.json" "$out/results-burn-in.json"
    cp "$W/main/reports/gpufabric-burnin.jsonl" "$out/burn-in.jsonl"
    cp "$W/plant/reports/gpufabric-results.json" "$out/results-plant.json"
    cp "$W/plant/reports/gpufabric-burnin.jsonl" "$out/plant-burn-in.jsonl"
    tail -25 "$W/plant.log"
    echo DONE
  else
    echo "STILL RUNNING"
  fi
  ;;
esac
