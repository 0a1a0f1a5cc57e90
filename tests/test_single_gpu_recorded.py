"""The single-GPU acceptance recorded on nvidia-h100-x1 (tests/data/results/single-gpu-on-h100-x1/README.md):
its bundle replays against the profile `profile init --measure` wrote there, to the live verdict and figures; the
planted memory fault was rejected naming the board; `profile init --measure --replay` writes, from the bundle, a
profile that accepts it with no promise left unchecked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "results" / "single-gpu-on-h100-x1"
BUNDLE = DATA / "bundles" / "h100-x1-diagnostics"
SERIAL = "1793226006610"  # the board of run-2 (nvidia-smi -q, and every workload's own NVML read)


def _replay(pytester: pytest.Pytester, profile: Path) -> dict:
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(BUNDLE))
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    document["exit"] = result.ret
    return document


def _promises(document: dict) -> dict[str, str]:
    return {p["id"]: p["outcome"] for p in document["promises"]}


def _check(document: dict, name: str) -> dict:
    (found,) = [c for c in document["checks"] if c["name"] == name]
    return found


def test_the_bundle_replays_to_the_live_acceptance(pytester: pytest.Pytester):
    live = json.loads((RECORDED / "run-2" / "acceptance-results.json").read_text())
    replay = _replay(pytester, RECORDED / "run-2" / "measured.yaml")
    assert replay["summary"]["verdict"] == live["summary"]["verdict"] == "ACCEPTED" and replay["exit"] == 0
    assert _promises(replay) == _promises(live)
    assert len(_promises(replay)) == 25 and set(_promises(replay).values()) == {"passed"}
    for name in ("hbm-bandwidth", "memory-pattern", "power-hold", "pcie-under-load"):
        assert _check(replay, name)["verdict"] == _check(live, name)["verdict"] == "passed"
        assert _check(replay, name)["found"] == _check(live, name)["found"]


def test_the_recorded_figures_are_the_ones_read_by_hand():
    hbm = json.loads((BUNDLE / "hbm.json").read_text())["gpus"][0]
    assert hbm["serial"] == SERIAL and round(hbm["best_gbps"], 1) == 3275.1 and hbm["peak_gbps"] == 3352.32
    assert round(hbm["copy_gbps"], 1) == 3020.2 and round(hbm["read_gbps"], 1) == 3090.4
    pattern = json.loads((BUNDLE / "memory-pattern.json").read_text())["gpus"][0]
    assert (pattern["tested_bytes"], pattern["total_bytes"], pattern["mismatches"]) == (74742464512, 85017493504, 0)
    power = json.loads((BUNDLE / "power-hold.json").read_text())["gpus"][0]
    assert power["summary"]["sm_clock_mhz_median_at_limit"] == 1365.0 and power["power_limit_w"] == 700.0
    assert power["summary"]["reasons_seen"] == {"sw_power_cap": 1.0} and power["summary"]["samples"] == 24
    pcie = json.loads((BUNDLE / "pcie-load.json").read_text())["gpus"][0]
    assert pcie["link"]["under_load"]["gen_reads"] == {"5": 202} and pcie["replay_counter"]["rise"] == 0
    assert (round(pcie["h2d_gbps"], 2), round(pcie["d2h_gbps"], 2)) == (55.23, 55.12)


def test_the_planted_memory_fault_was_rejected_naming_the_board():
    for run in ("run-1", "run-2"):
        document = json.loads((RECORDED / run / "planted-memory-fault-results.json").read_text())
        assert document["summary"]["verdict"] == "REJECTED" and document["summary"]["exit_code"] == 1
        assert _promises(document) == {"memory-pattern[GPU0]": "failed"}
        message = _check(document, "memory-pattern")["message"]
        serial = json.loads((RECORDED / run / "planted-memory-fault-pattern.json").read_text())["gpus"][0]["serial"]
        assert f"GPU0 (serial {serial})" in message and "planted on purpose" in message
        assert "offset 37371232256 (0x8b37fc000) in walking_ones" in message and "bit(s) 17 flipped" in message


def test_the_profile_measured_there_says_where_each_floor_came_from():
    profile = (RECORDED / "run-2" / "measured.yaml").read_text()
    document = yaml.safe_load(profile)
    assert document["memory_bandwidth"]["min"] == "2945 GB/s"  # 0.9 x 3272, the lowest of 3280, 3272, 3280
    assert "3280, 3272, 3280 GB/s (spread 0.3%); NVML's peak 3352 GB/s; floor 0.9 x the lowest" in profile
    assert document["power"] == {"seconds": 6, "min_sm_clock_mhz": 1235}  # int(0.9 x 1372)
    assert "# Published reference h100-sxm (NVIDIA H100 SXM5 80GB): 80 GB sold" in profile


def test_profile_init_measure_from_the_bundle_accepts_it_with_nothing_unchecked(pytester: pytest.Pytester):
    from pytest_gpufabric.cli import main

    output = pytester.path / "from-bundle.yaml"
    assert main(["profile", "init", "--measure", "--replay", str(BUNDLE), "-o", str(output)]) == 0
    written = yaml.safe_load(output.read_text())
    assert written["memory_bandwidth"]["min"] == "2948 GB/s"  # 0.9 x 3275.1
    assert written["power"]["min_sm_clock_mhz"] == 1228  # int(0.9 x 1365)
    assert written["pcie_load"] == {"seconds": 2, "max_replay_rise": 0, "gen": 5, "width": 16}
    assert written["bandwidth"]["copy"]["host_to_device"] == {"min": "49.5 GB/s"}  # 0.9 x 54.97
    assert written["memory"]["lms"][0]["threshold"] == "8 MiB" and "memory_pattern" in written
    assert "burn_in" not in written  # the bundle holds no burn-in log: no GEMM rate to promise
    replay = _replay(pytester, output)
    assert replay["summary"]["verdict"] == "ACCEPTED" and replay["exit"] == 0
    assert set(_promises(replay).values()) == {"passed"} and not replay["not_run"]
