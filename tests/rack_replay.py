"""Builds the replayed GB200 NVL72 rack of tests/data/racks/gb200-nvl72-replayed/ (README.md there) from the real
public GB200 outputs of tests/data/captures/public/blackwell/: one nvml.json (format gpufabric-nvml/1) per tray."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_gpufabric.formats.nvidia_smi_text import parse_smi_list, parse_smi_table

ROOT = Path(__file__).resolve().parent
BLACKWELL = ROOT / "data" / "captures" / "public" / "blackwell"
RACK = ROOT / "data" / "racks" / "gb200-nvl72-replayed"
TRAYS = [f"gb200-tray{t:02d}" for t in range(1, 19)]
#: the real public 72-rank all_reduce over one GB200 NVL72 rack (its device list cut to one line)
NCCL_72 = BLACKWELL / "nccl-2.26.2-gb200-nvl72-72rank-all_reduce-one-device-line.txt"
#: the real public 18-node IMEX domain of another GB200 rack (AWS's), its nodes listed by IP address
IMEX_18 = BLACKWELL / "nvidia-imex-ctl-N-gb200-nvl72-18node-570.172-aws-p6e.txt"
#: a real `ip -j addr` recorded on this project's development VM (its README.md: command and date)
IP_ADDR_VM = ROOT / "data" / "captures" / "host-addresses-vm" / "ip" / "ip-addr.json"

#: the fabric reading every GPU of the healthy rack carries. NOT read off a GB200: no GB200 `nvidia-smi -q` or NVML
#: fabric reading was found in a copyable form. State 3 (Completed) and status 0 (Success) are what NVIDIA documents
#: for a registered GPU; clique 4026 is the clique id read by hand off a public GB200 NVML fabric dump (leptonai/gpud
#: pull request #1106, tests/data/captures/public/blackwell/SOURCES.md); the cluster UUID is this test's own value.
CLIQUE_ID = 4026
CLUSTER_UUID = "72727272-7272-4272-8272-727272727272"


def tray_record(tray: int) -> dict:
    """Tray ``tray`` (1-18): the GB200 tray's 4 GPUs as the real captures show them (names and UUIDs from
    `nvidia-smi -L`, bus ids and memory from the `nvidia-smi` table, driver from the table). Tray 1 keeps the real
    UUIDs; trays 2-18 change only each UUID's last 4 hex digits to the tray number, for 72 distinct boards."""
    listed = parse_smi_list((BLACKWELL / "nvidia-smi-L-gb200-4gpu-slurm-k8s-aarch64.txt").read_text()).gpus
    table = parse_smi_table((BLACKWELL / "nvidia-smi-gb200-4gpu-580.126.09-openshift-driver-pod.txt").read_text())
    gpus = []
    for named, row in zip(listed, table.gpus, strict=True):
        uuid = named.uuid if tray == 1 else f"{named.uuid[:-4]}{tray:04x}"
        gpus.append({"index": named.index, "name": named.name, "uuid": uuid, "pci_bus_id": row.pci_bus_id,
                     "memory_total_bytes": row.memory_bytes,
                     "fabric": {"state": 3, "status": 0, "clique_id": CLIQUE_ID, "cluster_uuid": CLUSTER_UUID}})
    return {"format": "gpufabric-nvml/1", "hostname": TRAYS[tray - 1], "driver_version": table.driver_version,
            "cuda_driver_version_text": table.cuda_version, "gpu_count": len(gpus), "gpus": gpus}


def write_rack(directory: Path) -> None:
    for tray, name in enumerate(TRAYS, start=1):
        (directory / name).mkdir(parents=True, exist_ok=True)
        (directory / name / "nvml.json").write_text(json.dumps(tray_record(tray), indent=1) + "\n")


if __name__ == "__main__":
    write_rack(RACK)


def fleet_results(verdicts: dict[str, str | None] | None = None) -> dict:
    """A fleet-results.json of the rack's trays as `gpufabric fleet report` shapes it (its own verdict, counts,
    no duplicate hosts, an unsigned integrity block), each tray ACCEPTED unless ``verdicts`` says otherwise."""
    from pytest_gpufabric.report.integrity import integrity_block

    nodes = [{"name": name, "verdict": (verdicts or {}).get(name, "ACCEPTED"), "reason": "as judged"}
             for name in TRAYS]
    said = {node["verdict"] for node in nodes}
    verdict = "REJECTED" if "REJECTED" in said else "ACCEPTED" if said == {"ACCEPTED"} else "INCOMPLETE"
    document = {"verdict": verdict, "reason": "as judged", "counts": {"nodes": len(nodes)}, "nodes": nodes,
                "duplicate_hosts": []}
    document["integrity"] = integrity_block(document, None, None, None)
    return document


def run_rack(*args: str) -> subprocess.CompletedProcess:
    """`gpufabric fleet rack ARGS`, as a user runs it from the repository's root."""
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", "fleet", "rack", *args], capture_output=True,
                          text=True, cwd=ROOT.parent)


def copied_rack(tmp_path: Path) -> Path:
    """A copy of the replayed rack, for a test to change."""
    copy = tmp_path / "rack"
    shutil.copytree(RACK, copy)
    return copy


def imex_addresses() -> list[str]:
    """The IMEX domain's node addresses, node #0 first."""
    from pytest_gpufabric.formats.imex import parse_imex_status

    return [node["address"] for node in parse_imex_status(IMEX_18.read_text())["nodes"]]


def tray_ip_addr(tray: int) -> str:
    """DERIVED: tray ``tray``'s (1-18) `ip -j addr`: the VM's real output with eth0's 192.0.2.2 replaced by IMEX
    node #tray-1's address (the node order the hostname tests use: node #i is TRAYS[i]) and its fd00::2 by
    fd00::<tray>, so each tray holds its own address. No GB200 tray's `ip -j addr` was recorded."""
    text = IP_ADDR_VM.read_text()
    assert text.count('"192.0.2.2"') == 1 and text.count('"fd00::2"') == 1
    return text.replace('"192.0.2.2"', f'"{imex_addresses()[tray - 1]}"').replace('"fd00::2"', f'"fd00::{tray:x}"')


#: DERIVED: when the addressed rack's trays say they were recorded (no GB200 tray was): 18 minutes before the real
#: IMEX status's own timestamp (5/12/2025 06:08:10.580), as a rack's trays are snapshot before its IMEX status
RECORDED_AT = "2025-05-12T05:50:00+00:00"


def write_manifest(folder: Path, recorded_at: str = RECORDED_AT, hostname: str | None = None) -> dict:
    """DERIVED: the manifest.json `gpufabric snapshot` writes (cli/machine.py: when, where, every top-level file
    with its sha256, the address recorder's entries) for a tray folder, its host the folder's name unless
    ``hostname`` is given: `ip -j addr` ran where the folder holds an ip-addr.json, else `ip` was not on PATH and
    the /proc/net files the folder holds were copied; a folder without any is a snapshot made before the addresses
    were recorded (no entry for them)."""
    files = sorted(p.name for p in folder.iterdir() if p.name != "manifest.json")
    ip = ["ip", "-j", "addr"]
    commands = {"ip-addr.json": {"cmd": ip, "returncode": 0, "stderr": ""}} if "ip-addr.json" in files else {
        "ip-addr.json": {"cmd": ip, "error": "ip not on PATH"},
        **{name: {"file": f"/proc/net/{name[len('proc-net-'):-len('.txt')]}"} for name in files
           if name in ("proc-net-fib_trie.txt", "proc-net-if_inet6.txt")}}
    if not {"ip-addr.json", "proc-net-fib_trie.txt", "proc-net-if_inet6.txt"} & set(files):
        commands = {}
    manifest = {"format": "gpufabric-bundle/1", "recorded_at": recorded_at, "hostname": hostname or folder.name,
                "files": files, "commands": commands,
                "sha256": {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in files
                           if (folder / name).is_file()}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def dated_rack(tmp_path: Path) -> Path:
    """A copy of the replayed rack whose trays each hold a manifest.json recorded at RECORDED_AT (derived), no
    addresses."""
    rack = copied_rack(tmp_path)
    for name in TRAYS:
        write_manifest(rack / name)
    return rack


def addressed_rack(tmp_path: Path) -> Path:
    """A copy of the replayed rack whose trays each recorded an ip-addr.json (tray_ip_addr: derived) and a
    manifest.json listing it with its sha256, recorded at RECORDED_AT on the tray's host (write_manifest:
    derived)."""
    rack = copied_rack(tmp_path)
    for tray, name in enumerate(TRAYS, start=1):
        (rack / name / "ip-addr.json").write_text(tray_ip_addr(tray))
        write_manifest(rack / name)
    return rack


def judge_whole_rack(rack: Path, imex_text: str) -> dict:
    """Every rack promise given, as tests/test_imex.py's path to ACCEPTED gives them (the all_reduce's device list
    taken as whole, its one device line a tray of this rack): only rack-imex decides the verdict."""
    from pytest_gpufabric.fleet.rack import all_reduce_run, judge_rack, read_trays
    from pytest_gpufabric.formats.imex import parse_imex_status

    ours = NCCL_72.read_text().replace("slurm-gb200-207-171", "gb200-tray18").replace("NVIDIA Graphics Device",
                                                                                    "NVIDIA GB200")
    return judge_rack(read_trays(rack), fleet=fleet_results(), all_reduce=dict(all_reduce_run(ours), ranks=72),
                      min_busbw=800.0, imex=parse_imex_status(imex_text))
