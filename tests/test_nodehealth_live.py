"""gpufabric health as it ran live on 2x H100 SXM 80GB (tests/data/results/health-h100-x2, bundle h100-x2-health):
its snapshot replays to what the live check said, and the fault planted on CUDA device 0 drained GPU0 by serial."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
LIVE = DATA / "results" / "health-h100-x2"
BUNDLE = DATA / "bundles" / "h100-x2-health"
SERIALS = ("1652024011167", "1651224020708")  # read off the bundle's nvml.json


def _live(name: str) -> dict:
    return json.loads((LIVE / name).read_text(encoding="utf-8"))


def test_the_live_snapshot_replays_to_what_the_live_check_said(tmp_path):
    out = tmp_path / "replay.json"
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--profile", str(LIVE / "machine.yaml"),
                           "--replay", str(BUNDLE), "--json", str(out)], capture_output=True, text=True, timeout=120)
    live = _live("passive-1.json")
    replay = json.loads(out.read_text(encoding="utf-8"))
    assert done.returncode == live["exit_code"] == 0
    assert done.stdout.splitlines()[0] == live["line"] == "gpufabric: HEALTHY 2 GPUs, profile machine"
    assert replay["findings"] == live["findings"] == []
    assert [g["serial"] for g in replay["gpus"]] == [g["serial"] for g in live["gpus"]] == list(SERIALS)


def test_the_live_tiers_met_their_times_on_two_gpus():
    times = {}
    for line in (LIVE / "timings.txt").read_text().splitlines():
        name, rc, wall = line.split()[:3]
        times[name] = (int(rc.removeprefix("rc=")), float(wall.removeprefix("wall_s=")))
    assert all(rc == 0 and wall <= 2 for name, (rc, wall) in times.items() if name.startswith("passive"))
    assert all(rc == 0 and wall <= 5 for name, (rc, wall) in times.items() if name.startswith("replay"))
    assert all(rc == 0 and wall <= 20 for name, (rc, wall) in times.items() if name.startswith("quick-")
               and name != "quick-planted")


def test_the_planted_fault_drained_gpu0_by_serial_live():
    planted = _live("quick-planted.json")
    assert planted["verdict"] == "DRAIN" and planted["exit_code"] == 1
    assert planted["line"] == f"gpufabric: DRAIN GPU0 (serial {SERIALS[0]}) 172 wrong GEMM elements (+1 more): rma"
    assert len(planted["line"]) <= 128
    assert {f["gpu"] for f in planted["findings"] if f["severity"] == "drain"} == {0}
