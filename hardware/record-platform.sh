#!/usr/bin/env bash
# The platform settings of a GPU machine, READ-ONLY (nothing on the machine is changed: no setpci, no
# modprobe, no nvidia-smi -pm, no sysctl; the only writes are the wheels in /tmp/site and the scratch directory):
#
#   hardware/record-platform.sh OUTDIR [SHIPPED_PROFILE]      (SHIPPED_PROFILE default: h200-nvswitch-x2)
#
# 1. what the files say, read by hand (cat/ls/stat), to check the readers against: /proc/cmdline,
#    /sys/class/iommu, the GPUs' sysfs entries, iommu_group types, config sizes, /proc/modules, /sys/module,
#    cpufreq, numa_balancing, hugepages, persistence mode by nvidia-smi, lspci where it is installed;
# 2. `gpufabric snapshot snapshot` (platform.json and the copy under snapshot/platform/), and the same readers
#    run as an unprivileged user (nobody) when this runs as root: what a non-root user can read;
# 3. `gpufabric profile init -o machine.yaml` (its platform: section) and platform-all.yaml: machine.yaml with
#    every platform setting promised, so each is judged or says why it cannot be ("not readable here: ...");
# 4. the platform and topology suites live against machine.yaml, platform-all.yaml and the shipped profile
#    (which promises no platform settings: the platform suite is skipped at collection), then the same three
#    replayed from the snapshot.
# Everything lands in OUTDIR/platform.tar.gz; the summary at the end is what to read first.
set -u -o pipefail
out=$1
shipped=${2:-h200-nvswitch-x2}
source "$(dirname "$0")/common.sh"
{
  step nvidia-smi -L
  step id
  step uname -r
  step cat /proc/cmdline
  step ls -la /sys/class/iommu
  step sh -c 'ls /sys/kernel/iommu_groups | head; for t in /sys/kernel/iommu_groups/*/type; do echo "$t: $(cat "$t")"; done | head -40'
  step sh -c 'grep -E "^flags" /proc/cpuinfo | head -1 | tr " " "\n" | grep -x hypervisor; cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name'
  step sh -c 'for b in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader); do
      d=/sys/bus/pci/devices/$(echo "$b" | tr "A-F" "a-f" | sed "s/^0000//"); echo "$b -> $(readlink -f "$d")";
      echo "  config bytes: $(stat -c %s "$d/config"), readable as this user: $(head -c 4096 "$d/config" | wc -c)";
      echo "  iommu_group: $(readlink "$d/iommu_group" || echo none), numa_node: $(cat "$d/numa_node")"; done'
  step sh -c 'grep -E "^(nvidia|nv_peer|ib_|mlx|rdma)" /proc/modules; ls -d /sys/module/nvidia_peermem /sys/module/nv_peer_mem /sys/kernel/mm/memory_peers 2>&1'
  step sh -c 'ls /sys/devices/system/cpu/cpu0/; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor'
  step cat /proc/sys/kernel/numa_balancing
  step sh -c 'grep -i huge /proc/meminfo; for f in /sys/kernel/mm/hugepages/*/nr_hugepages; do echo "$f: $(cat "$f")"; done'
  step sh -c 'nvidia-smi -q | grep -iE "persistence|vbios|driver version"'
  step sh -c 'ls /sys/class/infiniband 2>&1; cat /sys/class/infiniband/*/fw_ver 2>&1'
  step sh -c 'command -v lspci && lspci -vvv | grep -E "^[0-9a-f]|ACSCtl|MaxPayload .* MaxReadReq" | head -80'
  step python3 -m pytest_gpufabric snapshot snapshot
  step python3 -c 'import json; d = json.load(open("snapshot/platform.json")); print(json.dumps({k: d[k] for k in d if k not in ("files", "links")}, indent=1))'
  if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null; then
    probe=/tmp/gpufabric-platform-probe.py  # the scratch directory is private to root; nobody reads this copy
    cat > "$probe" <<'PY'
import json
from pytest_gpufabric.checks.platform import acs_state, check_pcie_sizes
from pytest_gpufabric.fabric.platform import read_platform
p = read_platform("/")
print(json.dumps({k: v for k, v in p.to_record().items() if k not in ("files", "links")}, indent=1)[:8000])
print(acs_state(p))
for e in p.endpoints:
    print(check_pcie_sizes({"min_max_payload": 256}, e.label, p).message)
PY
    chmod 644 "$probe"
    step runuser -u nobody -- env PYTHONPATH=/tmp/site sh -c "cd / && python3 $probe"
  fi
  step python3 -m pytest_gpufabric profile init -o machine.yaml
  step cat machine.yaml
  cat > platform-all.yaml <<YAML
name: platform-all
extends: machine.yaml
platform:
  acs: disabled
  iommu: passthrough
  peer_memory: true
  persistence_mode: true
  cpu_governor: performance
  numa_balancing: false
  hugepages: {page_size: 2 MiB, min_pages: 1}
  pcie: {min_max_payload: 256, min_max_read_request: 512}
  nic_firmware: {min: "0"}
YAML
  step python3 -m pytest_gpufabric profile validate machine.yaml platform-all.yaml
  for p in machine.yaml platform-all.yaml "$shipped"; do
    name=$(basename "$p" .yaml)
    step python3 -m pytest --gpu-profile "$p" -k "test_platform or test_topology" -p no:cacheprovider -rA --no-header
    cp reports/gpufabric-results.json "results-$name-live.json"
    step python3 -m pytest --gpu-profile "$p" --gpu-replay snapshot -k "test_platform or test_topology" \
         -p no:cacheprovider -rA --no-header
    cp reports/gpufabric-results.json "results-$name-replay.json"
  done
  step python3 - <<'PY'
import json
for name in ("machine", "platform-all"):
    live = json.load(open(f"results-{name}-live.json"))
    replay = json.load(open(f"results-{name}-replay.json"))
    print(f"== {name}: live {live['summary']['verdict']}, replay {replay['summary']['verdict']}")
    for test, outcome in sorted(live["tests"].items()):
        if "test_platform" in test:
            reason = live["skip_reasons"].get(test, "")
            same = "same" if replay["tests"].get(test) == outcome else f"REPLAY {replay['tests'].get(test)}"
            print(f"  {outcome:7} {same:6} {test.split('::')[-1]}  {reason[:160]}")
    for check in live["checks"]:
        if check["name"].startswith("platform-") and check["verdict"] == "failed":
            print(f"  FAILED {check['name']} {check['subject']}: {check['message'][:300]}")
PY
} > log.txt 2>&1
grep -E "^### |^== |^  (passed|failed|skipped)|FAILED|REPLAY|passed|failed" log.txt | tail -80
tar czf "$out/platform.tar.gz" .
