"""Issue 43's detection gaps: the quick tier honours the job's GPUs, counters judged by their rate, the row remapper
nearly full, corrected ECC, the InfoROM.

Every record is a copy of a shipped bundle's health.json with the reading planted (as tests/test_nodehealth.py
plants them): the shipped records predate these readings, so a planted copy carries what a live read records.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from test_nodehealth import CPU_PROFILE, X2, X4, gpu, planted

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output
from pytest_gpufabric.nodehealth.baseline import resolve_baseline
from pytest_gpufabric.nodehealth.finding import DRAIN
from pytest_gpufabric.nodehealth.quick_gpus import quick_gpus
from pytest_gpufabric.nodehealth.record import load_health_file
from pytest_gpufabric.nodehealth.state import HealthState, reconcile

RECORDED_X4 = datetime.fromisoformat(json.loads((X4 / "health.json").read_text())["recorded_at"]).timestamp()


@pytest.fixture(autouse=True)
def node(tmp_path, monkeypatch):
    """No health or job settings from the environment; the boot id a file of the test's."""
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS",
                 "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))
    (tmp_path / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0001\n")
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(tmp_path / "boot_id"))
    return tmp_path


def processes(index: int, *pids: int):
    """Every GPU's compute process list recorded (empty), GPU ``index`` running ``pids``."""
    def edit(data: dict) -> None:
        for g in data["gpus"]:
            g["compute_processes"] = []
        gpu(data, index)["compute_processes"] = [{"pid": p, "used_memory_bytes": 1 << 30} for p in pids]
    return edit


# ---------------------------------------------------------------------------------------------------------------
# 1. the quick tier honours the job's GPUs


def test_the_job_variables_and_other_processes_decide_the_quick_tiers_gpus(tmp_path):
    record = load_health_file(planted(tmp_path, processes(2, 4242)) / "health.json")
    selected, skipped, notes = quick_gpus(record, {"SLURM_JOB_GPUS": "1,2", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                                          own_pid=1)
    assert selected == [1]
    assert skipped == [
        {"gpu": 0, "serial": "1653724049829", "why": "not the job's GPU (SLURM_JOB_GPUS does not name it)"},
        {"gpu": 2, "serial": "1653724066364", "why": "compute process(es) 4242 on it: another job holds it"},
        {"gpu": 3, "serial": "1653724034047", "why": "not the job's GPU (SLURM_JOB_GPUS does not name it)"}]
    assert notes[0] == "quick tier GPUs: SLURM_JOB_GPUS=1,2 names GPU1, GPU2"
    # a step's GPUs, then CUDA's (by UUID too), then every GPU; our own process is not another job's
    assert quick_gpus(record, {"SLURM_STEP_GPUS": "3"}, own_pid=1)[0] == [3]
    uuid = gpu(json.loads((X4 / "health.json").read_text()), 3)["uuid"]
    assert quick_gpus(record, {"CUDA_VISIBLE_DEVICES": f"{uuid},7"}, own_pid=1)[0] == [3]
    assert quick_gpus(record, {}, own_pid=4242)[0] == [0, 1, 2, 3]
    # a job without GPUs (the variable set, empty): none
    assert quick_gpus(record, {"SLURM_JOB_GPUS": ""}, own_pid=1)[0] == []


def test_processes_that_cannot_be_read_or_are_not_recorded(tmp_path):
    unreadable = planted(tmp_path, lambda d: [g.update(compute_processes={"error": "NO_PERMISSION"})
                                             for g in d["gpus"]])
    selected, skipped, _ = quick_gpus(load_health_file(unreadable / "health.json"), {}, own_pid=1)
    assert selected == [] and skipped[0]["why"].startswith("its compute processes could not be read (NVML answered "
                                                           "NO_PERMISSION")
    selected, skipped, notes = quick_gpus(load_health_file(X4 / "health.json"), {}, own_pid=1)
    assert (selected, skipped) == ([0, 1, 2, 3], [])
    assert notes[1].startswith("the record holds no compute process list (GPU0, GPU1, GPU2, GPU3)")


def test_the_quick_tier_runs_only_on_the_gpus_given(tmp_path):
    """On CPU stand-ins: run on GPU1 alone, the planted fault (CUDA device 0 of those run on) is GPU1's; GPU0 is
    neither judged nor said unknown by the workloads."""
    from pytest_gpufabric.nodehealth.quick import run_quick

    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    baseline = resolve_baseline(str(tmp_path / "cpu-health.yaml"), None, env={})
    findings, notes, results = run_quick(load_health_file(X2 / "health.json"), baseline, plant_fault=0, gpus=[1])
    assert sorted((f.gpu, f.check, f.severity) for f in findings if f.severity != "warn") == [
        (1, "quick-gemm", DRAIN), (1, "quick-memory-pattern", DRAIN)]
    assert [r["gpu"] for r in results["gemm"]["gpus"]] == [1]
    assert run_quick(load_health_file(X2 / "health.json"), baseline, gpus=[]) == (
        [], ["quick tier workloads not run: no GPU of this node is free to run them on"], {})


def test_a_skipped_gpu_is_said_never_healthy_and_keeps_its_quick_drain(capsys, tmp_path, monkeypatch):
    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    prom = tmp_path / "prom"
    prom.mkdir()
    rc = main(["health", "--profile", str(tmp_path / "cpu-health.yaml"), "--replay", str(X2), "--quick",
               "--state-dir", str(tmp_path / "state"), "--json", str(tmp_path / "result.json"), "--prom", str(prom)])
    out = capsys.readouterr().out.splitlines()
    document = json.loads((tmp_path / "result.json").read_text())
    output.validate_result(document)
    assert (rc, document["verdict"]) == (0, "HEALTHY")
    assert document["quick_skipped"] == [{"gpu": 1, "serial": "1653824016216",
                                          "why": "not the job's GPU (SLURM_JOB_GPUS does not name it)"}]
    assert "  note: GPU1 skipped by the quick tier, not judged: not the job's GPU (SLURM_JOB_GPUS does not name " \
           "it)" in out
    text = (prom / "gpufabric-health-quick.prom").read_text()
    for check in ("quick-gemm", "quick-hbm", "quick-memory-pattern"):
        assert any(line.endswith(f'check="{check}"}} 2') and 'gpu="1"' in line
                                                   for line in text.splitlines())
        assert any(line.endswith(f'check="{check}"}} 0') and 'gpu="0"' in line for line in text.splitlines())
    # a quick drain held on a GPU the quick tier then skips is not verified gone: it stays
    state = HealthState(tmp_path / "s.json", {"quick-hbm@1653824016216": {
        "key": "quick-hbm@1653824016216", "check": "quick-hbm", "tier": "quick", "gpu": 1, "serial": "1653824016216",
        "what": "HBM 1 GB/s below floor", "remedy": "software or configuration", "boot_id": "b",
        "first_seen": "2026-12-06T00:00:00+00:00", "first_seen_s": 0.0}})
    kept, _ = reconcile(state, [], tier="quick", node_read=True, now=60.0, boot="b", quick_skipped={1})
    assert [(f.check, f.severity, f.evidence["kept_because"]) for f in kept] == [
        ("quick-hbm", DRAIN, "the quick tier skipped GPU1 (held by another job, or not the job's)")]
    kept, notes = reconcile(state, [], tier="quick", node_read=True, now=90.0, boot="b", quick_skipped=set())
    assert kept == [] and notes == ["quick-hbm@1653824016216: drained since 2026-12-06T00:00:00+00:00, now gone: "
                                    "lifted"]
