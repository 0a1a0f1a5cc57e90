"""The README's demo: the shipped bundle h100-sxm-x1-acceptance (a whole acceptance of a 1x H100 SXM 80GB machine,
recorded 2026-12-06 with its kernel log and a 150 s burn-in) replayed against profiles/h100-sxm-x1.yaml. The figures
below were read by hand off the bundle's files (bandwidth.json, hbm.json, power-hold.json, gpufabric-burnin.jsonl)
and the live run's signed results kept in tests/data/results/demo-live-h100-x1/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
LIVE = DATA / "results" / "demo-live-h100-x1"
SERIAL = "1651624029650"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> dict:
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "h100-sxm-x1", "--replay",
                           "h100-sxm-x1-acceptance", "-q", "-p", "no:cacheprovider", "--report-dir", "out",
                           "--gpu-customer", "ACME Labs"], cwd=where, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((where / "out" / "gpufabric-results.json").read_text(encoding="utf-8"))


def _found(document: dict, name: str) -> dict:
    return next(c["found"] for c in document["checks"] if c["name"] == name)


def test_the_demo_is_accepted_on_every_promise_of_its_profile(replayed):
    summary = replayed["summary"]
    assert summary["verdict"] == "ACCEPTED" and summary["promises"]["passed"] == 22
    assert {p["outcome"] for p in replayed["promises"]} == {"passed"}
    ids = {p["id"] for p in replayed["promises"]}
    # the arrival state from the kernel log read live, and the burn-in the bundle holds
    assert {"gpu-health[GPU0]", "xid-events", "burn-in-gpu[GPU0]", "copy-bandwidth[host_to_device]"} <= ids
    assert not ids & {"memory-estimate", "oversized-batch", "burn-in-memory"}  # the memory suite: not promised


def test_the_figures_are_the_recordings(replayed):
    assert round(_found(replayed, "copy-host_to_device")["GPU0"], 1) == 46.2  # bandwidth.json: 46.188036 GB/s
    assert round(_found(replayed, "copy-device_to_host")["GPU0"], 1) == 49.1
    hbm = _found(replayed, "hbm-bandwidth")
    assert round(hbm["best_gbps"]) == 3280 and round(hbm["peak_gbps"], 2) == 3352.32  # hbm.json: write 3280.16
    burn = _found(replayed, "burn-in-gpu")
    assert round(burn["tflops"]) == 657 and burn["errors_self"] == burn["errors_cross"] == 0
    assert _found(replayed, "power-hold")["power_limit_w"] == 700.0
    subjects = {c["subject"] for c in replayed["checks"] if c["name"] in ("hbm-bandwidth", "burn-in-gpu")}
    assert subjects == {f"GPU0 (serial {SERIAL})"}


def test_the_live_run_rejected_the_floors_init_measured_minutes_before():
    """Why the shipped profile promises 40 GB/s host copies: the same machine, judged live against the floors
    `profile init --measure` wrote (0.9 of 54 GB/s), failed them on the next run's copies."""
    live = json.loads((LIVE / "gpufabric-results.json").read_text(encoding="utf-8"))
    assert live["summary"]["verdict"] == "REJECTED" and live["run"]["mode"] == "live"
    failed = {p["id"]: p["reason"] for p in live["promises"] if p["outcome"] == "failed"}
    assert set(failed) == {"copy-bandwidth[host_to_device]", "copy-bandwidth[device_to_host]"}
    assert "46.2 GB/s" in failed["copy-bandwidth[host_to_device]"] and "48.5 GB/s" in failed[
        "copy-bandwidth[host_to_device]"]
