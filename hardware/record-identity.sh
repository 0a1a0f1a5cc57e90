#!/usr/bin/env bash
# GPU identity on a GPU machine (any number of GPUs):
#
#   hardware/record-identity.sh OUTDIR
#
# 1. what CUDA and NVML say of each GPU (torch's device UUID, NVML's index, serial and bus id), and the
#    workloads' mapping (workloads/identity.cuda_boards) under CUDA_VISIBLE_DEVICES unset, as indexes (reversed
#    where there are two GPUs or more), as a UUID and as a UUID prefix;
# 2. `gpufabric snapshot` and `profile init`, plus a copy and burn-in section (identity.yaml);
# 3. the burn-in with a planted fault on CUDA device 1 (0 on one GPU) and the copy tests, with CUDA_VISIBLE_DEVICES
#    reversed: the rejected board must be the one CUDA device 1 is, named by NVML index and serial;
# 4. the profile with its last GPU hidden from CUDA (CUDA_VISIBLE_DEVICES of the others, or empty on one GPU):
#    the workload tests must fail naming the hidden GPU, the topology must pass.
# Everything lands in OUTDIR/identity.tar.gz.
set -u -o pipefail
out=$1
source "$(dirname "$0")/common.sh"
count=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$count" -ge 2 ]; then
  reversed=$(seq -s, $((count - 1)) -1 0); planted=1; hide=$(seq -s, 1 $((count - 1)))
else
  reversed=0; planted=0; hide=""
fi
{
  step nvidia-smi -L
  step python3 - <<'PY'
import json, os, subprocess, sys
probe = r'''
import json, os, torch
from pytest_gpufabric.workloads.identity import cuda_boards
props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
print(json.dumps({"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "torch_uuid": [str(p.uuid) for p in props],
                  "torch_pci": [[p.pci_domain_id, p.pci_bus_id, p.pci_device_id] for p in props],
                  "boards": cuda_boards(torch)}))
'''
import pynvml
pynvml.nvmlInit()
uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
uuids = [u.decode() if isinstance(u, bytes) else u for u in uuids]
settings = [None, ",".join(str(i) for i in reversed(range(len(uuids)))), uuids[-1], uuids[-1][:12]]
runs = []
for visible in settings:
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    runs.append(json.loads(done.stdout) if done.returncode == 0 else {"CUDA_VISIBLE_DEVICES": visible,
                                                                       "error": done.stderr[-2000:]})
    print(json.dumps(runs[-1]))
json.dump({"nvml_uuids": uuids, "runs": runs}, open("identity-probe.json", "w"), indent=2)
PY
  step python3 -m pytest_gpufabric snapshot snapshot
  step python3 -m pytest_gpufabric profile init -o machine.yaml
  cat > identity.yaml <<YAML
name: identity
extends: machine.yaml
bandwidth:
  copy:
    size: 1 GiB
    gpu_to_gpu: {min_fraction_of_peak: 0.3}
    host_to_device: {min: 20 GB/s}
    device_to_host: {min: 20 GB/s}
burn_in: {chunk_s: 10}
YAML
  step python3 -m pytest_gpufabric profile validate identity.yaml
  step env CUDA_VISIBLE_DEVICES="$reversed" python3 -m pytest --gpu-profile identity.yaml --gpu-burn-in 20s \
       --gpu-burn-in-plant-fault "$planted" -k "burn_in or copy or test_topology" -p no:cacheprovider -rA \
       --html planted.html --self-contained-html --junitxml planted.junit.xml
  cp reports/gpufabric-results.json planted-results.json
  cp reports/gpufabric-burnin.jsonl planted-burnin.jsonl
  cp reports/bandwidth.json planted-bandwidth.json 2>/dev/null
  step env CUDA_VISIBLE_DEVICES="$hide" python3 -m pytest --gpu-profile identity.yaml \
       -k "copy or test_topology or burn_in" --gpu-burn-in 10s -p no:cacheprovider -rA
  cp reports/gpufabric-results.json hidden-results.json
} > log.txt 2>&1
grep -E "^### |passed|failed|error|REJECTED|ACCEPTED|hidden" log.txt | tail -60
tar czf "$out/identity.tar.gz" .
