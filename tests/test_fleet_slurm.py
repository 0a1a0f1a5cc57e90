"""A fleet accepted through a real Slurm (Debian's slurmctld, slurmd and munge, started by tests/slurm_cluster.py
on this one host): `srun -n 6` runs six tasks, each standing for one node and replaying the recorded bundle of a
real machine through the plugin, into its own results folder; `gpufabric fleet report` then judges what they
wrote, as it would the nodes of a real job. What it says is checked against the recorded files."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from slurm_cluster import slurm_fixture  # noqa: F401  (the fixture `slurm`)

from pytest_gpufabric.fleet.report import validate_fleet_document

DATA = Path(__file__).parent / "data"
BUNDLES = DATA / "bundles"

#: task -> (node name, bundle): four 2x H200 SXM 141GB hosts, a planted-fault burn-in of a fifth, a 4x H200 SXM 141GB
NODES = [
    ("h200c", BUNDLES / "h200-nvswitch-x2-acceptance"),  # every suite and a 10-minute burn-in
    ("h200e", BUNDLES / "h200-nvswitch-x2-bandwidth"),
    ("h200g", BUNDLES / "h200-nvswitch-x2-training"),
    ("h200f", BUNDLES / "h200-nvswitch-x2"),
    ("h200a", None),  # the planted-fault burn-in log of the first host, alone (made below)
    ("h200x4b", BUNDLES / "h200-nvswitch-x4"),
]
PLANTED_LOG = DATA / "results" / "burn-in-planted-fault-on-h200-x2.jsonl"

# Each task picks its node by SLURM_PROCID, as each node of a real job would be itself; the results folder is
# named after it ({host} in a real fleet, where every task is on its own host).
TASK = """
set -eu
names=({names})
bundles=({bundles})
name=${{names[$SLURM_PROCID]}}
mkdir -p "$WORK/$name" "$FLEET" && cd "$WORK/$name"
{python} -m pytest -p no:cacheprovider -q --gpu-profile h200-nvswitch-x2 --gpu-replay "${{bundles[$SLURM_PROCID]}}" \\
    --gpu-waive "xid-events=the recording holds no kernel log; agreed for the Slurm test" \\
    --gpu-report-dir "$FLEET/$name" > "$FLEET/$name.log" 2>&1 || true
"""


def test_a_fleet_accepted_through_slurm(slurm, tmp_path):
    planted = tmp_path / "planted-bundle"
    planted.mkdir()
    shutil.copy(PLANTED_LOG, planted / "gpufabric-burnin.jsonl")
    bundles = [str(bundle or planted) for _, bundle in NODES]
    fleet, work = tmp_path / "fleet", tmp_path / "work"
    script = TASK.format(names=" ".join(name for name, _ in NODES), bundles=" ".join(bundles), python=sys.executable)
    done = slurm.srun(["-n", str(len(NODES)), "--job-name", "gpufabric-fleet", "bash", "-c", script],
                      env={"FLEET": str(fleet), "WORK": str(work)}, timeout=600)
    assert done.returncode == 0, done.stderr
    for name, _ in NODES:
        results = json.loads((fleet / name / "gpufabric-results.json").read_text(encoding="utf-8"))
        assert results["run"]["fleet_id"] and results["run"]["fleet_id"].isdigit()  # Slurm's job id

    out = tmp_path / "report"
    report = slurm.run([sys.executable, "-m", "pytest_gpufabric", "fleet", "report", "--allow-replays", str(fleet),
                        "--expect",
                        ",".join([*(name for name, _ in NODES), "h200h"]), "-o", str(out)], timeout=300)
    assert report.returncode == 1, report.stdout + report.stderr  # rejected
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    validate_fleet_document(document)
    nodes = {n["name"]: n for n in document["nodes"]}
    assert document["missing"] == ["h200h"]
    assert len(document["fleet_ids"]) == 1  # every task of the one srun
    # the nodes that replayed one suite's recording or a snapshot alone show only part of the profile: incomplete,
    # not accepted and not accused
    assert {name: n["verdict"] for name, n in nodes.items()} == {
        "h200c": "ACCEPTED", "h200e": "INCOMPLETE", "h200g": "INCOMPLETE", "h200f": "INCOMPLETE",
        "h200a": "REJECTED", "h200x4b": "REJECTED"}

    # the planted fault, as the recorded log has it: GPU1 of the first host, by serial, with its wrong elements
    log = [json.loads(line) for line in PLANTED_LOG.read_text(encoding="utf-8").splitlines()]
    serial = log[0]["serials"]["1"]
    wrong = sum(g["errors_self"] + g["errors_cross"] for r in log if r.get("type") == "gemm"
                for g in r["result"]["gpus"] if g["gpu"] == 1)
    (failed,) = nodes["h200a"]["failed"]  # the burn-in alone: the log records no topology to judge
    assert failed["subject"] == f"GPU1 (serial {serial})"
    assert f"{wrong} wrong elements" in failed["message"]
    assert {gpu: b["wrong_elements"] for gpu, b in nodes["h200a"]["burn_in"].items()} == {"GPU0": 0, "GPU1": wrong}

    # the 4-GPU machine among 2-GPU ones: rejected by the 2-GPU profile, its GPU count drifted from the fleet's
    x4 = json.loads((BUNDLES / "h200-nvswitch-x4" / "nvml.json").read_text(encoding="utf-8"))
    assert {"field": "gpu_count", "value": str(len(x4["gpus"])), "majority": "2"} in nodes["h200x4b"]["drift"]
    assert any(f["check"] == "gpu-count" and f["message"].startswith(f"expected 2 GPUs, found {len(x4['gpus'])}")
               for f in nodes["h200x4b"]["failed"])

    # the passing hosts' figures, against the bundles they replayed: nothing flagged in a healthy fleet
    busbw = []
    for bundle in ("h200-nvswitch-x2-acceptance", "h200-nvswitch-x2-bandwidth"):
        recorded = json.loads((BUNDLES / bundle / "bandwidth.json").read_text(encoding="utf-8"))
        busbw += [r["busbw"] for r in recorded["collectives"]["ops"]["all_reduce"] if r["size"] == 4 << 30]
    assert sorted(busbw) == sorted(
        c["found"]["busbw_gbps"] for name in ("h200c", "h200e")
        for c in json.loads((fleet / name / "gpufabric-results.json").read_text(encoding="utf-8"))["checks"]
        if c["name"] == "bandwidth-all_reduce" and c["subject"] == "all_reduce 4GiB")
    assert not any(n["outliers"] for n in nodes.values())
    assert (out / "fleet.html").is_file() and (out / "fleet-junit.xml").is_file()
    assert "fleet: REJECTED" in report.stdout
