"""benchmarks/acceptance_time.py and hardware/record-acceptance-time.sh without a GPU: the timing tables and the
summary are read off a real run's report folder (run-6 of tests/data/results/single-gpu-on-h100-x1: its results
JSON and memory workload file, with the measurement files of the bundle h100-x1-measured recorded on the same kind
of machine), and the script is checked for what the lead runs it for.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN6 = ROOT / "tests" / "data" / "results" / "single-gpu-on-h100-x1" / "run-6"
MEASURED = ROOT / "tests" / "data" / "bundles" / "h100-x1-measured"
SCRIPT = ROOT / "hardware" / "record-acceptance-time.sh"


def _benchmark():
    spec = importlib.util.spec_from_file_location("acceptance_time", ROOT / "benchmarks" / "acceptance_time.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def report_folder(tmp_path) -> Path:
    """A report folder as a live acceptance leaves it, from files recorded on 1x H100 SXM 80GB."""
    shutil.copy(RUN6 / "acceptance-results.json", tmp_path / "gpufabric-results.json")
    shutil.copy(RUN6 / "acceptance-memory.json", tmp_path / "memory.json")
    for name in ("hbm.json", "pcie-load.json", "power-hold.json", "memory-pattern.json", "bandwidth.json"):
        shutil.copy(MEASURED / name, tmp_path / name)
    return tmp_path


def test_the_phases_of_a_recorded_acceptance(report_folder):
    bench = _benchmark()
    timing = bench.read_run(report_folder, 41.1, 0)
    assert timing["verdict"] == "ACCEPTED" and timing["exit"] == 0
    assert bench.phases(timing) == [
        {"phase": "test_memory.py::test_memory_estimate", "seconds": 9.42},
        {"phase": "test_diagnostics.py::test_power_hold[GPU0]", "seconds": 7.88},
        {"phase": "test_bandwidth.py::test_copy_bandwidth[host_to_device]", "seconds": 7.26},
        {"phase": "test_diagnostics.py::test_memory_pattern[GPU0]", "seconds": 5.83},
        {"phase": "test_diagnostics.py::test_pcie_under_load[GPU0]", "seconds": 5.25},
        {"phase": "test_diagnostics.py::test_hbm_bandwidth[GPU0]", "seconds": 0.91},
        {"phase": "the other 37 tests", "seconds": 0.08},
        {"phase": "pytest start-up, collection and report", "seconds": 4.46}]
    # every workload's runner timing, the bandwidth file's parts included
    assert sorted(timing["workloads"]) == ["bandwidth.copy", "hbm", "memory", "memory-pattern", "pcie-load",
                                           "power-hold"]
    assert timing["workloads"]["bandwidth.copy"] == {"started_in": "spare", "spare_waited_s": 0.065,
                                                     "ready_s": None, "done_s": None, "exit_s": 6.247}
    text = bench.table("acceptance", timing)
    assert text.splitlines()[0] == "acceptance: ACCEPTED (exit 0) in 41.1 s wall"
    assert "| test_memory.py::test_memory_estimate | 9.4 |" in text
    assert "| hbm | spare | 6.332 | 0.133 | 0.357 | 0.913 | 1 | None |" in text


def test_the_summary_names_the_machine_and_the_goals_figures(report_folder):
    bench = _benchmark()
    acceptance = bench.read_run(report_folder, 41.1, 0)
    burn_in = {**acceptance, "wall_s": 69.6, "burn_in": 60.2}
    last = bench.summary({"init-measure": {"wall_s": 61.04, "exit": 0, "profile": "measured.yaml"},
                          "acceptance": acceptance, "burn-in": burn_in}, "60s")
    assert (last["device"], last["gpus"]) == ("1x NVIDIA H100 80GB HBM3", 1)
    assert last["boards"] == [{"index": 0, "serial": "1752624024689",
                               "uuid": "GPU-d7011069-4f69-43e9-bd68-c2f885e49e89"}]
    assert (last["init_measure_s"], last["acceptance_wall_s"], last["burn_in_s"], last["burn_in_wall_s"]) == (
        61.0, 41.1, 60.2, 69.6)
    assert last["acceptance_verdict"] == "ACCEPTED" and last["burn_in"] == "60s"
    assert last["acceptance_phases"][0] == {"phase": "test_memory.py::test_memory_estimate", "seconds": 9.42}
    json.dumps(last, allow_nan=False)
    without = bench.summary({"acceptance": acceptance}, None)
    assert without["init_measure_s"] is None and without["burn_in_wall_s"] is None


def test_a_run_that_left_no_results_is_said_so(tmp_path):
    timing = _benchmark().read_run(tmp_path, 3.0, 4)
    assert timing["verdict"] is None and timing["reason"] == "no results JSON (pytest.log)"
    assert _benchmark().summary({"acceptance": timing}, None)["device"] is None


def test_the_script_the_lead_runs_times_init_then_the_acceptance_with_a_60s_burn_in():
    text = SCRIPT.read_text()
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert 'source "$(dirname "$0")/common.sh"' in text  # NVLink multicast off, the wheels installed
    line = next(line for line in text.splitlines() if "acceptance_time.py" in line and "--measure" in line)
    assert "--burn-in 60s" in line and '--out "$out/timing"' in line
    assert '--last "$out/acceptance_time.last.json"' in line
