"""Burn-in: the loop, its log and resume on real CPU workers (gemm_burn.py --device cpu); the verdicts on the
real 10-minute log of nvidia-h200-x2 and its planted-fault run. (The health watchdog: tests/test_watchdog.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpufabric.checks.burn_in import check_burn_in_gpu
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.workloads.burn_in import BurnIn, parse_duration, read_log, run_burn_in

REAL_LOG = Path(__file__).parent / "data" / "bundles" / "h200-burn-in-10min" / "gpufabric-burnin.jsonl"
RESULTS = Path(__file__).parent / "data" / "results"
LIVE_RESULTS = RESULTS / "burn-in-10min-live-on-h200-x2.json"
PLANT_RESULTS = RESULTS / "burn-in-planted-fault-on-h200-x2.json"
PLANT_LOG = RESULTS / "burn-in-planted-fault-on-h200-x2.jsonl"
CPU_PROFILE = "name: cpu-burn\ngpus: {count: 2}\nburn_in: {chunk_s: 1, gemm_size: 256, device: cpu}\n"


@pytest.fixture
def cpu_profile(tmp_path):
    path = tmp_path / "cpu-burn.yaml"
    path.write_text(CPU_PROFILE)
    return load_profile(str(path))


def test_parse_duration():
    assert [parse_duration(t) for t in ("90s", "10m", "2h", "45")] == [90, 600, 7200, 45]
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("ten minutes")


def test_burn_in_logs_every_chunk_and_catches_a_planted_fault(cpu_profile, tmp_path):
    log = tmp_path / "gpufabric-burnin.jsonl"
    seen = []
    burn_in = run_burn_in(cpu_profile, 2.5, log, plant_fault=1, sha256=cpu_profile.sha256,
                          progress=lambda b, r: seen.append(round(b.elapsed_s)))
    types = [r["type"] for r in read_log(log)]
    assert types[0] == "start" and types[-1] == "end" and types.count("gemm") == 2 and seen == [1, 2]
    totals = burn_in.gpu_totals()
    assert totals[0]["errors_self"] == totals[0]["errors_cross"] == 0 and totals[0]["iterations"] > 0
    assert totals[1]["errors_self"] == totals[1]["checks"] > 0  # one wrong element in every check
    check = check_burn_in_gpu(1, "1653824016216", totals[1], {}, {}, burn_in.elapsed_s)
    assert check.verdict == "failed" and check.message.startswith("GPU1 (serial 1653824016216)")
    assert "differed from its own first product" in check.message and check.message.endswith("REJECTED")
    assert check_burn_in_gpu(0, None, totals[0], {}, {}, burn_in.elapsed_s).verdict == "passed"


def test_a_rerun_resumes_an_unfinished_burn_in(cpu_profile, tmp_path):
    log = tmp_path / "gpufabric-burnin.jsonl"
    run_burn_in(cpu_profile, 2.5, log, sha256=cpu_profile.sha256)
    lines = log.read_text().splitlines()
    # a power loss after the first chunk: the log as it stood then (the later lines never reached the disk)
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])
    resumed = run_burn_in(cpu_profile, 2.5, log, sha256=cpu_profile.sha256)
    assert resumed.resumed_from_s >= 1.0 and resumed.finished
    assert [r["type"] for r in read_log(log)] == ["start", "gemm", "gemm", "end"]
    # another duration (or profile) starts afresh
    fresh = run_burn_in(cpu_profile, 1.5, log, sha256=cpu_profile.sha256)
    assert fresh.resumed_from_s == 0 and [r["type"] for r in read_log(log)] == ["start", "gemm", "end"]


def _real_burn_in() -> BurnIn:
    records = read_log(REAL_LOG)
    return BurnIn(records[0]["duration_s"], records)


def test_the_real_burn_in_passes_each_gpu():
    burn_in = _real_burn_in()
    profile = load_profile("h200-nvswitch-x2")
    assert round(burn_in.elapsed_s) == 600 and burn_in.finished
    for index, totals in burn_in.gpu_totals().items():
        check = check_burn_in_gpu(index, None, totals, profile.data["burn_in"], profile.data["health"],
                                  burn_in.elapsed_s)
        assert check.verdict == "passed", check.message
        assert totals["errors_self"] == totals["errors_cross"] == 0 and 600 < check.found["tflops"] < 630
        # the NVLink data counters rose under load on this healthy machine (corrected by the link layer)
        assert totals["health"]["nvlink_ecc_data:0"] > 1000


def test_a_profile_forbidding_nvlink_crc_data_rejects_that_burn_in():
    burn_in = _real_burn_in()
    totals = burn_in.gpu_totals()[1]
    check = check_burn_in_gpu(1, "1653824016216", totals, {}, {"forbid": ["nvlink_crc_data"]}, burn_in.elapsed_s)
    assert check.verdict == "failed"
    crc = {int(name.split(":")[1]): delta for name, delta in totals["health"].items() if name.startswith("nvlink_crc")}
    assert f"nvlink_crc_data rose by {sum(crc.values())} on 18 links (0: +{crc[0]}, 1: +{crc[1]}," in check.message
    assert f"17: +{crc[17]}) (NVLink data with CRC errors)" in check.message


def _replay(pytester: pytest.Pytester, log: Path, *args: str) -> tuple[pytest.RunResult, dict]:
    bundle = pytester.path / "burn-in"
    bundle.mkdir()
    shutil.copy(log, bundle / "gpufabric-burnin.jsonl")
    result = pytester.runpytest("--gpu-replay", str(bundle), *args)
    return result, json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def _burn_in_checks(document: dict) -> list[tuple[str, str, str]]:
    return [(c["subject"], c["verdict"], c["message"]) for c in document["checks"] if c["name"].startswith("burn-in")]


def test_the_live_burn_in_was_accepted_and_its_log_replays_to_the_same_verdicts(judged, pytester: pytest.Pytester):
    """`hardware/record-burn-in.sh start h200-nvswitch-x2 10m` on nvidia-h200-x2: the pytest run, and its log."""
    live = json.loads(LIVE_RESULTS.read_text())
    assert live["run"]["mode"] == "live" and live["summary"]["verdict"] == "ACCEPTED"
    assert live["summary"]["passed"] == 18 and live["summary"]["failed"] == 0
    result, replayed = _replay(pytester, REAL_LOG, "--gpu-profile", "h200-nvswitch-x2", "-k", "burn_in")
    judged(result, passed=4)
    assert replayed["summary"]["verdict"] == "ACCEPTED"
    assert _burn_in_checks(replayed) == _burn_in_checks(live)


def test_the_planted_fault_rejects_gpu1_by_serial_live_and_replayed(judged, pytester: pytest.Pytester):
    """The script's second run on nvidia-h200-x2: GPU1's GEMM workload returns a wrong element in every product
    (--gpu-burn-in-plant-fault 1) for 30 s."""
    live = json.loads(PLANT_RESULTS.read_text())
    assert live["run"]["mode"] == "live" and live["summary"]["verdict"] == "REJECTED"
    failed = [c for c in live["checks"] if c["verdict"] == "failed"]
    serial = live["machine"]["gpus"][1]["serial"]
    assert [c["subject"] for c in failed] == [f"GPU1 (serial {serial})"]
    assert failed[0]["found"]["errors_self"] == failed[0]["found"]["errors_cross"] == failed[0]["found"]["checks"]
    assert failed[0]["message"].startswith(f"GPU1 (serial {serial}) NVIDIA H200: ")
    assert failed[0]["message"].endswith("REJECTED")
    profile = pytester.path / "plant.yaml"  # as the script wrote it
    profile.write_text("name: plant-fault\nextends: h200-nvswitch-x2\nburn_in: {chunk_s: 30, memory: false}\n")
    result, replayed = _replay(pytester, PLANT_LOG, "--gpu-profile", str(profile), "-k", "test_burn_in_gpu")
    judged(result, passed=1, failed=1)
    assert result.ret == 1 and replayed["summary"]["verdict"] == "REJECTED"
    assert _burn_in_checks(replayed) == _burn_in_checks(live)


def test_the_report_health_section_of_the_live_burn_in():
    """The report's Health section from the watchdog of the live run: real NVML counters per test and GPU, and
    the timeline read every 2 s through the 12 minutes (the run predates the window opening at set-up, so the
    burn-in's own counters are in its checks, not in the first test's row)."""
    from pytest_gpufabric.report.html import health_html

    health = json.loads(LIVE_RESULTS.read_text())["health"]
    assert health["xid_watch"] == "on" and health["xid_events"] == []
    assert len(health["timeline"]) > 300
    html = health_html(health)
    assert "<h2>Health</h2>" in html and "XID events: 0 (on)" in html and 'alt="GPU health timeline"' in html
    rows = health["tests"]["test_burn_in.py::test_burn_in_collectives"]
    risen = [(gpu, name, delta) for gpu, record in rows.items() for name, delta in record["rose"].items()]
    assert risen and all(f"{name} +{delta}" in html for _, name, delta in risen)
    assert "No health reads" in health_html({})
