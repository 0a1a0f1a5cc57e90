"""Burn-in: the loop, its log and resume on real CPU workers (gemm_burn.py --device cpu); the verdicts on the
real 10-minute log of nvidia-h200-x2; the health watchdog's judgement on counters recorded there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpufabric.checks.burn_in import check_burn_in_gpu
from pytest_gpufabric.fabric.health import GpuHealth
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.watchdog import health_problems
from pytest_gpufabric.workloads.burn_in import BurnIn, parse_duration, read_log, run_burn_in

REAL_LOG = Path(__file__).parent / "data" / "bundles" / "h200-burn-in-10min" / "gpufabric-burnin.jsonl"
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
    assert "nvlink_crc_data link 0 rose by" in check.message and "NVLink data with CRC errors" in check.message


def test_health_problems_name_gpu_serial_link_and_counter():
    """Before/after reads with the counter values recorded in the burn-in's first chunk (GPU 1)."""
    chunk = next(r for r in read_log(REAL_LOG) if r["type"] == "gemm")
    rose = chunk["health"]["1"]["rose"]
    before = {1: GpuHealth(1, "1653824016216", {name: 0 for name in rose})}
    after = {1: GpuHealth(1, "1653824016216", dict(rose), temperature_c=chunk["health"]["1"]["temperature_c"])}
    problems = health_problems(before, after, {"forbid": ["nvlink_crc_data"], "max_temperature_c": 45})
    assert any(p.startswith("GPU1 (serial 1653824016216) link 0: nvlink_crc_data rose by ") for p in problems)
    assert f"GPU1 (serial 1653824016216): {chunk['health']['1']['temperature_c']} C after this test" in problems[-1]
    assert health_problems(before, after, {"forbid": ["xid"]}) == []


def test_burn_in_bundle_replays(judged, pytester: pytest.Pytester):
    bundle = pytester.path / "burn-in"
    bundle.mkdir()
    shutil.copy(REAL_LOG, bundle / REAL_LOG.name)
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle), "-k", "burn_in")
    judged(result, passed=4)
    results = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    assert results["summary"]["verdict"] == "ACCEPTED"


def test_the_report_health_table_shows_recorded_counters():
    """The report's Health table, fed the counters the first burn-in chunk recorded (as the watchdog records a
    test: per GPU the counters that rose, the temperature, power and clock events after it)."""
    from pytest_gpufabric.report.html import health_html

    chunk = next(r for r in read_log(REAL_LOG) if r["type"] == "gemm")
    html = health_html({"tests": {"suites/test_x.py::test_burn": chunk["health"]}, "timeline": [],
                        "xid_events": [], "xid_watch": "on"})
    assert "<h2>Health</h2>" in html and "XID events: 0 (on)" in html
    crc = chunk["health"]["1"]["rose"]["nvlink_crc_data:0"]
    assert f"nvlink_crc_data:0 +{crc}" in html and f"<td>{chunk['health']['1']['temperature_c']}</td>" in html
    assert "No health reads" in health_html({})
