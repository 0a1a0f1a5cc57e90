"""The power-hold and PCIe-under-load diagnostics: both workloads run for real on CPU through run_workload (short
windows), and their checks are judged on rows built from those runs' real output.

Rows from a GPU are never invented: a row keeps the layout (and every value) the CPU run gave it, and takes its
GPU figures from real recordings of this repo: the H200 burn-in's health timeline (power, SM clock, temperature
and clock events every 2 s under bf16 GEMMs, tests/data/results/burn-in-10min-live-on-h200-x2.json), the H200's
and H100's `nvidia-smi -q` and NVML records (power limit, maximum SM clock, PCIe link, replay counter). Any value
made by hand (a fault planted into real samples, a figure from a run not yet recorded here) is marked DERIVED.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import re
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_gpufabric.checks.pcie_load import check_pcie_under_load
from pytest_gpufabric.checks.power import HARDWARE_REASONS, check_power_hold, power_figures
from pytest_gpufabric.checks.result import FAILED, NOT_CHECKED, PASSED
from pytest_gpufabric.errors import WorkloadError
from pytest_gpufabric.workloads import pcie_load, power_hold
from pytest_gpufabric.workloads.environment import workload_environment
from pytest_gpufabric.workloads.power_pcie import (
    PCIE_LOAD_FORMAT,
    POWER_HOLD_FORMAT,
    measure_pcie_load,
    measure_power_hold,
    pcie_load_command,
    power_hold_command,
)
from pytest_gpufabric.workloads.runner import run_workload

torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data"
POWER_SECTION = {"seconds": 1.0, "size": 64, "interval_s": 0.1, "warmup_s": 0.2}
PCIE_SECTION = {"size": "4 MiB", "seconds": 0.3}

GPU_ROW_KEYS = {"cuda", "index", "uuid", "serial", "name", "power_limit_w", "max_sm_clock_mhz", "thresholds_c",
                "tflops", "iterations", "unread", "samples", "summary"}
SAMPLE_KEYS = {"t_s", "power_w", "sm_clock_mhz", "temperature_c", "margin_c", "reasons"}
SUMMARY_KEYS = {"samples", "power_w_median", "power_w_max", "sm_clock_mhz_median", "sm_clock_mhz_median_at_limit",
                "temperature_c_max", "margin_c_min", "reasons_seen", "at_limit_fraction"}
PCIE_ROW_KEYS = {"cuda", "index", "uuid", "serial", "name", "h2d_gbps", "d2h_gbps", "copies", "cpu_affinity", "link",
                 "replay_counter", "unread"}


# ---------------------------------------------------------------------------------------------------------
# the workloads, for real on CPU
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def power_run() -> dict:
    """power_hold.py on 2 CPU workers through the runner, its measured window bracketed by the handshake."""
    events: list[tuple[str, float]] = []
    result = run_workload(power_hold_command(POWER_SECTION, device="cpu", workers=2), timeout_s=120,
                          env=workload_environment(),
                          on_begin=lambda: events.append(("begin", time.monotonic())),
                          on_end=lambda: events.append(("end", time.monotonic())))
    result["_events"] = events
    return result


@pytest.fixture(scope="module")
def pcie_run() -> dict:
    """pcie_load.py on CPU through power_pcie.measure_pcie_load (and so through the runner)."""
    return measure_pcie_load(PCIE_SECTION, device="cpu", gpus=1)


def test_power_hold_runs_on_cpu_and_says_nvml_was_not_read(power_run):
    assert power_run["format"] == POWER_HOLD_FORMAT
    assert power_run["device"] == "cpu" and power_run["dtype"] == "float32" and power_run["size"] == 64
    assert power_run["nvml"] == {"available": False, "why": "--device cpu: no GPU, NVML not read"}
    assert 1.0 <= power_run["seconds"] < 2.0 and power_run["interval_s"] == 0.1
    # no NVML, so no power reading to end the warm-up sooner: it ran its whole length
    assert power_run["warmup_max_s"] == 0.2 and 0.2 <= power_run["warmup_s"] < 1.0
    assert [gpu["index"] for gpu in power_run["gpus"]] == [0, 1]
    for gpu in power_run["gpus"]:
        assert set(gpu) == GPU_ROW_KEYS
        assert gpu["cuda"] is None and gpu["uuid"] is None and gpu["serial"] is None and gpu["name"] == "cpu"
        assert gpu["power_limit_w"] is None and gpu["max_sm_clock_mhz"] is None
        assert gpu["thresholds_c"] == {"slowdown": None, "shutdown": None, "gpu_max": None}
        assert gpu["iterations"] > 0 and math.isfinite(gpu["tflops"]) and gpu["tflops"] > 0
        assert gpu["unread"] == {}
        # a sample every 0.1 s over the 1 s window, on a fixed grid
        samples = gpu["samples"]
        assert 8 <= len(samples) <= 12
        assert all(set(s) == SAMPLE_KEYS for s in samples)
        assert all(s[key] is None for s in samples for key in SAMPLE_KEYS - {"t_s"})
        times = [s["t_s"] for s in samples]
        assert times == sorted(times) and times[0] == 0.0
        assert all(abs(t - 0.1 * i) < 0.05 for i, t in enumerate(times))
        assert set(gpu["summary"]) == SUMMARY_KEYS
        assert gpu["summary"]["samples"] == len(samples) and gpu["summary"]["reasons_seen"] == {}
        assert all(gpu["summary"][key] is None for key in SUMMARY_KEYS - {"samples", "reasons_seen"})
    # both workers' sample lists come from the one sampler: read at the same moments
    assert [s["t_s"] for s in power_run["gpus"][0]["samples"]] == [s["t_s"] for s in power_run["gpus"][1]["samples"]]


def test_power_hold_brackets_its_window_for_the_runner(power_run):
    """ready/go before the measured window, done/release after: a sampler in pytest sees exactly the load."""
    assert [name for name, _ in power_run["_events"]] == ["begin", "end"]
    assert power_run["_events"][1][1] - power_run["_events"][0][1] >= power_run["seconds"]


@pytest.mark.parametrize(("at_limit_after_s", "expected_s"), [(0.0, (1.0, 1.5)), (1.6, (1.6, 2.2)), (None, (3.0, 3.5))])
def test_the_warm_up_ends_once_every_gpu_is_at_its_power_limit(at_limit_after_s, expected_s):
    """The warm-up ends when the power reading says every GPU is at its limit, but never before MIN_WARMUP_S
    (NVML's power figure averages the last second), and never later than its length. Real GEMM threads on the
    CPU; ``at_limit`` stands in for NVML's reading, which is what a CPU run lacks."""
    import threading

    measure, stop = threading.Event(), threading.Event()
    torch = power_hold.torch
    loads = [power_hold.Load(torch.device("cpu"), 64, torch.float32, measure, stop)]
    sampler = power_hold.Sampler(None, [None], [{}], 0.1)
    began = time.perf_counter()
    at_limit = None if at_limit_after_s is None else (lambda: time.perf_counter() - began >= at_limit_after_s)
    warmed_s, window_s = power_hold._hold(loads, sampler, 0.2, 3.0, None, measure, stop, at_limit)
    # _hold times its warm-up from its own start, a little after ``began``: a loaded machine shows the gap
    assert expected_s[0] - 0.05 <= warmed_s < expected_s[1] and window_s >= 0.2
    assert power_hold.MIN_WARMUP_S == 1.0 and loads[0].iterations > 0 and sampler.samples[0]


def test_measure_power_hold_returns_the_result_without_the_output_tail():
    result = measure_power_hold({**POWER_SECTION, "seconds": 0.3}, device="cpu")
    assert result["format"] == POWER_HOLD_FORMAT and "stdout_tail" not in result
    assert len(result["gpus"]) == 1 and result["gpus"][0]["iterations"] > 0


def test_pcie_load_runs_on_cpu_and_says_nvml_was_not_read(pcie_run):
    assert pcie_run["format"] == PCIE_LOAD_FORMAT and "stdout_tail" not in pcie_run
    assert pcie_run["device"] == "cpu" and pcie_run["size"] == 4 << 20 and pcie_run["seconds"] == 0.3
    assert pcie_run["nvml"] == {"available": False, "why": "--device cpu: no GPU, NVML not read"}
    (gpu,) = pcie_run["gpus"]
    assert set(gpu) == PCIE_ROW_KEYS
    assert gpu["index"] == 0 and gpu["cuda"] is None and gpu["name"] == "cpu"
    assert math.isfinite(gpu["h2d_gbps"]) and gpu["h2d_gbps"] > 0 and math.isfinite(gpu["d2h_gbps"])
    assert gpu["copies"]["h2d"] >= 1 and gpu["copies"]["d2h"] >= 1
    assert gpu["cpu_affinity"] is None  # no NVML: the process is not bound
    assert gpu["link"] == {"idle": {"gen": None, "width": None},
                           "under_load": {"gen_min": None, "width_min": None, "gen_max": None, "width_max": None,
                                          "reads": 0, "gen_reads": {}, "width_reads": {}},
                           "after": {"gen": None, "width": None},
                           "max": {"gen": None, "width": None, "gpu_gen": None}}
    assert gpu["replay_counter"] == {"before": None, "after": None, "rise": None}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU runs the CUDA path for real")
@pytest.mark.parametrize("command", [power_hold_command({"seconds": 0.1}), pcie_load_command({"seconds": 0.1})],
                         ids=["power_hold", "pcie_load"])
def test_without_a_gpu_the_cuda_path_refuses_to_measure(command):
    """No GPU, no NVML: the boards cannot be named, so nothing is measured (identity.py's rule)."""
    with pytest.raises(WorkloadError, match="NVML not available|no CUDA device|nvidia-ml-py"):
        run_workload(command, timeout_s=120, env=workload_environment())


def test_commands_from_profile_sections():
    power = power_hold_command({"seconds": 20, "size": 8192, "interval_s": 0.25, "timeout_s": 60})
    assert Path(power[1]) == Path(power_hold.__file__) and power[0] == sys.executable
    assert power[2:] == ["--seconds", "20.0", "--warmup", "3.0", "--size", "8192", "--dtype", "bfloat16",
                         "--interval", "0.25", "--device", "cuda"]
    pcie = pcie_load_command({"size": "1 GiB", "seconds": 3, "timeout_s": 300})
    assert Path(pcie[1]) == Path(pcie_load.__file__)
    assert pcie[2:] == ["--size", "1073741824", "--seconds", "3.0", "--device", "cuda"]
    assert pcie_load_command({})[2:4] == ["--size", str(1 << 30)]


def _nvml_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return {name for name in names if re.match(r"nvml[A-Z]", name)}  # NVML's functions, not our ``nvml`` names


@pytest.mark.parametrize("script", [power_hold, pcie_load], ids=["power_hold", "pcie_load"])
def test_the_workloads_only_ever_read_nvml(script):
    """Never a setter: the machine is measured as delivered (no clocks, power limit, persistence or app clocks)."""
    names = _nvml_names(Path(script.__file__))
    assert names, "the scan found no NVML call: it proves nothing"
    assert all(re.fullmatch(r"nvml(Init|Shutdown|DeviceGet\w+)", name) for name in names), sorted(names)


def test_clock_event_bits_decode_as_nvml_defines_them():
    import pynvml

    pairs = {"GpuIdle": "gpu_idle", "ApplicationsClocksSetting": "applications_clocks_setting",
             "SwPowerCap": "sw_power_cap", "HwSlowdown": "hw_slowdown", "SyncBoost": "sync_boost",
             "SwThermalSlowdown": "sw_thermal_slowdown", "HwThermalSlowdown": "hw_thermal_slowdown",
             "HwPowerBrakeSlowdown": "hw_power_brake_slowdown", "DisplayClockSetting": "display_clocks_setting"}
    for constant, name in pairs.items():
        assert power_hold.decode_reasons(getattr(pynvml, f"nvmlClocksEventReason{constant}")) == [name]
        assert power_hold.decode_reasons(getattr(pynvml, f"nvmlClocksThrottleReason{constant}")) == [name]
    both = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
    assert power_hold.decode_reasons(both) == ["sw_power_cap", "hw_slowdown"]
    assert power_hold.decode_reasons(0) == []
    assert power_hold.decode_reasons(0x400) == ["bit_0x400"]  # a bit this script does not know is kept


# ---------------------------------------------------------------------------------------------------------
# GPU rows: the CPU run's row, with figures from real recordings
# ---------------------------------------------------------------------------------------------------------

H200_LIVE = json.loads((DATA / "results" / "burn-in-10min-live-on-h200-x2.json").read_text())
H200_TIMELINE = H200_LIVE["health"]["timeline"]
H200_LOG = [json.loads(line) for line in
            (DATA / "bundles" / "h200-burn-in-10min" / "gpufabric-burnin.jsonl").read_text().splitlines()]


def _smi(path: Path, tag: str) -> str:
    """The first GPU's value of an nvidia-smi -q XML tag path, e.g. 'gpu_power_readings/current_power_limit'."""
    return ET.parse(path).getroot().find(f"gpu/{tag}").text


def h200_row(cpu_row: dict, gpu: int = 0) -> dict:
    """An H200 under bf16 GEMM (the burn-in's four 150 s chunks and the pauses between them) in a power-hold row:
    the CPU run's row, its samples replaced by the H200's timeline reads, its identity and rate the burn-in's."""
    row = copy.deepcopy(cpu_row)
    start = H200_TIMELINE[0]["t"]
    # the health timeline reads no thermal margin and keeps only the slowdown reasons (fabric/health.py)
    row["samples"] = [{"t_s": round(p["t"] - start, 3), "power_w": p["gpus"][str(gpu)]["power_w"],
                       "sm_clock_mhz": p["gpus"][str(gpu)]["sm_clock_mhz"],
                       "temperature_c": p["gpus"][str(gpu)]["temperature_c"], "margin_c": None,
                       "reasons": list(p["gpus"][str(gpu)]["throttle"])} for p in H200_TIMELINE]
    chunks = [r["result"]["gpus"][gpu] for r in H200_LOG if r["type"] == "gemm"]
    row.update(index=gpu, serial=H200_LOG[0]["serials"][str(gpu)], name=chunks[0]["name"],
               tflops=statistics.mean(c["tflops"] for c in chunks),
               iterations=sum(c["iterations"] for c in chunks))
    # DERIVED: the burn-in did not record the limit or the maximum clock; these are another H200's of the same
    # model (tests/data/bundles/h200-nvswitch-x2/nvidia-smi-q.xml)
    smi = DATA / "bundles" / "h200-nvswitch-x2" / "nvidia-smi-q.xml"
    row["power_limit_w"] = float(_smi(smi, "gpu_power_readings/current_power_limit").split()[0])
    row["max_sm_clock_mhz"] = int(_smi(smi, "max_clocks/sm_clock").split()[0])
    return row


@pytest.fixture
def cpu_power_row(power_run) -> dict:
    return copy.deepcopy(power_run["gpus"][0])


@pytest.fixture
def h200(cpu_power_row) -> dict:
    return h200_row(cpu_power_row)


def _plant(row: dict, reason: str, every: int) -> int:
    """DERIVED: add ``reason`` to every ``every``-th loaded sample (a fault no healthy machine here showed)."""
    planted = 0
    for i, sample in enumerate(s for s in row["samples"] if s["power_w"] > 600):
        if i % every == 0:
            sample["reasons"] = [*sample["reasons"], reason]
            planted += 1
    return planted


# ---------------------------------------------------------------------------------------------------------
# check_power_hold
# ---------------------------------------------------------------------------------------------------------


def test_a_cpu_row_is_not_checked(cpu_power_row):
    result = check_power_hold(cpu_power_row, {"min_sm_clock_mhz": 1000}, "this machine")
    assert result.verdict == NOT_CHECKED
    assert result.message == (f"GPU0 (serial unknown): no power or clock-event sample under load "
                              f"({len(cpu_power_row['samples'])} samples, none read; the run read no NVML (a CPU run "
                              "or a machine without the driver)) [this machine]: power and thermal cannot be judged")


def test_nvml_answers_that_hid_the_samples_are_named(cpu_power_row):
    cpu_power_row["unread"] = {"power_w": "NOT_SUPPORTED", "reasons": "NO_PERMISSION"}  # DERIVED: a VM's answers
    result = check_power_hold(cpu_power_row, {}, "bundle x")
    assert result.verdict == NOT_CHECKED
    assert "NVML answered power_w: NOT_SUPPORTED, reasons: NO_PERMISSION" in result.message


def test_the_script_summary_and_the_check_agree_on_real_h200_samples(h200):
    """The check derives its figures from the samples again; they are the script's summary's."""
    figures = power_figures(h200["samples"], h200["power_limit_w"])
    summary = power_hold.summarize(h200["samples"], h200["power_limit_w"])
    assert {k: v for k, v in figures.items() if k != "samples_with_reasons"} == summary
    loaded = [s for s in h200["samples"] if s["power_w"] >= 0.95 * 700]
    assert summary["sm_clock_mhz_median_at_limit"] == statistics.median(s["sm_clock_mhz"] for s in loaded)
    assert summary["at_limit_fraction"] == len(loaded) / len(h200["samples"])
    assert set(summary["reasons_seen"]) == {"sw_power_cap"}


def test_a_healthy_h200_at_its_power_cap_passes(h200):
    result = check_power_hold(h200, {"min_sm_clock_mhz": 1400, "max_temperature_c": 85, "min_tflops": 500},
                              "tests/data/results/burn-in-10min-live-on-h200-x2.json")
    assert result.verdict == PASSED, result.message
    f = result.found
    assert f["power_limit_w"] == 700.0 and f["max_sm_clock_mhz"] == 1980
    assert 1400 <= f["sm_clock_mhz_median_at_limit"] < 1980  # the power cap holds the clock well below its max
    assert f["reasons_seen"]["sw_power_cap"] > 0.5 and f["temperature_c_max"] <= 85
    # the figures the verdict rests on, in the message
    assert result.message.startswith(f"GPU0 (serial {H200_LOG[0]['serials']['0']}) NVIDIA H200: ")
    assert f"SM clock median {f['sm_clock_mhz_median_at_limit']:.0f} MHz at the limit (max 1980 MHz)" in result.message
    assert f"of a 700 W limit, at the limit in {f['at_limit_fraction']:.0%} of {len(h200['samples'])} samples" \
        in result.message
    assert f"clock events: sw_power_cap {f['reasons_seen']['sw_power_cap']:.0%}" in result.message


def test_a_clock_below_the_promise_at_the_power_limit_fails(h200):
    median = power_figures(h200["samples"], 700.0)["sm_clock_mhz_median_at_limit"]
    result = check_power_hold(h200, {"min_sm_clock_mhz": median + 100}, "src")
    assert result.verdict == FAILED
    assert result.details == [f"SM clock median {median:.0f} MHz at the power limit, below the {median + 100:g} MHz "
                              "promised (a GPU that needs more power for the same clock: a hot or leaky chip, or a "
                              "lower power limit than the profile assumes)"]


def test_a_gpu_that_never_reaches_its_limit_is_judged_on_all_samples(h200):
    h200["power_limit_w"] = 1000.0  # DERIVED: a limit the H200 never reached under this load
    all_median = statistics.median(s["sm_clock_mhz"] for s in h200["samples"])
    result = check_power_hold(h200, {"min_sm_clock_mhz": all_median + 1}, "src")
    assert result.verdict == FAILED and result.found["sm_clock_mhz_median_at_limit"] is None
    assert result.details[0].startswith(f"never at its power limit, SM clock median {all_median:.0f} MHz over all")
    assert check_power_hold(h200, {"min_sm_clock_mhz": all_median}, "src").verdict == PASSED


@pytest.mark.parametrize("reason", HARDWARE_REASONS)
def test_a_hardware_slowdown_in_any_sample_fails(h200, reason):
    planted = _plant(h200, reason, every=10)
    result = check_power_hold(h200, {}, "src")
    assert result.verdict == FAILED
    fraction = planted / len(h200["samples"])
    assert result.details[0].startswith(f"{reason} in {fraction:.0%} of {len(h200['samples'])} samples (")
    assert result.found["reasons_seen"][reason] == pytest.approx(fraction)


def test_one_sample_is_enough(h200):
    h200["samples"][len(h200["samples"]) // 2]["reasons"].append("hw_slowdown")  # DERIVED: one planted read
    result = check_power_hold(h200, {}, "src")
    assert result.verdict == FAILED and result.details[0].startswith(f"hw_slowdown in 0% of {len(h200['samples'])}")


def test_software_thermal_slowdown_fails_only_where_the_spec_forbids_it(h200):
    _plant(h200, "sw_thermal_slowdown", every=5)
    assert check_power_hold(h200, {}, "src").verdict == PASSED
    result = check_power_hold(h200, {"forbid_throttle": ["sw_thermal_slowdown"]}, "src")
    assert result.verdict == FAILED and result.details[0].startswith("sw_thermal_slowdown in ")
    assert "sw_thermal_slowdown" in result.expected["forbidden_reasons"]


def test_the_power_cap_is_reported_not_failed_unless_forbidden(h200):
    assert check_power_hold(h200, {}, "src").verdict == PASSED
    assert check_power_hold(h200, {"forbid_throttle": ["sw_power_cap"]}, "src").verdict == FAILED


def test_an_unknown_reason_name_is_refused(h200):
    with pytest.raises(ValueError, match="forbid_throttle names hw_slowdwn: no such clock event reason"):
        check_power_hold(h200, {"forbid_throttle": ["hw_slowdwn"]}, "src")


def test_temperature_and_rate_limits(h200):
    hottest = max(s["temperature_c"] for s in h200["samples"])
    result = check_power_hold(h200, {"max_temperature_c": hottest - 1, "min_tflops": h200["tflops"] + 1}, "src")
    assert result.verdict == FAILED
    assert result.details == [f"reached {hottest} C, above the {hottest - 1} C allowed (cooling)",
                              f"{h200['tflops']:.0f} TFLOP/s under sustained load, below the "
                              f"{h200['tflops'] + 1:g} promised"]


def test_a_number_that_is_not_finite_is_not_judged(h200):
    h200["tflops"] = float("nan")  # DERIVED
    result = check_power_hold(h200, {}, "src")
    assert result.verdict == NOT_CHECKED and "found.tflops = nan" in result.message


# ---------------------------------------------------------------------------------------------------------
# check_pcie_under_load
# ---------------------------------------------------------------------------------------------------------

H100_NVML = json.loads((DATA / "bundles" / "h100-x1" / "nvml.json").read_text())["gpus"][0]
H100_SMI = DATA / "bundles" / "h100-x1" / "nvidia-smi-q.xml"


@pytest.fixture
def cpu_pcie_row(pcie_run) -> dict:
    return copy.deepcopy(pcie_run["gpus"][0])


@pytest.fixture
def h100(cpu_pcie_row) -> dict:
    """The CPU run's row with the H100's link as tests/data/bundles/h100-x1 recorded it."""
    row = cpu_pcie_row
    row.update(index=H100_NVML["index"], uuid=H100_NVML["uuid"], serial=H100_NVML["serial"], name=H100_NVML["name"])
    link = row["link"]
    link["idle"] = {"gen": H100_NVML["pcie_gen_current"], "width": H100_NVML["pcie_width_current"]}
    link["max"] = {"gen": H100_NVML["pcie_gen_max"], "width": H100_NVML["pcie_width_max"], "gpu_gen": None}
    # DERIVED: under load as a 1x H100 SXM 80GB read it on 2026-11-25 (pcie_load.py, 300 of 300 reads at
    # gen 5 x16); the bundle holds idle reads only
    link["under_load"] = {"gen_min": 5, "width_min": 16, "gen_max": 5, "width_max": 16, "reads": 300,
                          "gen_reads": {"5": 300}, "width_reads": {"16": 300}}
    replays = int(_smi(H100_SMI, "pci/replay_counter"))
    row["replay_counter"] = {"before": replays, "after": replays, "rise": 0}
    # DERIVED: that run's 1 GiB pinned copies; the CPU run's host-to-host rates say nothing of a PCIe link
    row["h2d_gbps"], row["d2h_gbps"] = 55.0, 55.1
    return row


def test_a_cpu_pcie_row_is_not_checked_but_its_floors_still_count(cpu_pcie_row):
    result = check_pcie_under_load(cpu_pcie_row, {}, "this machine")
    assert result.verdict == NOT_CHECKED
    assert "NVML could not read the link under load (no read under load)" in result.message
    assert "NVML could not read the replay counter (before None, after None)" in result.message
    result = check_pcie_under_load(cpu_pcie_row, {"min": "100000 GB/s"}, "this machine")
    assert result.verdict == FAILED  # a floor missed fails whatever else could not be judged
    assert result.details[0].startswith("host to device ") and "below the 100000 GB/s promised" in result.details[0]


def test_a_full_link_under_load_passes(h100):
    result = check_pcie_under_load(h100, {"gen": 5, "width": 16, "min": "50 GB/s"}, "h100 run")
    assert result.verdict == PASSED, result.message
    assert result.message == (
        "GPU0 (serial 1752624010498) NVIDIA H100 80GB HBM3: host to device 55.0 GB/s (87% of the 63.0 GB/s gen 5 x16 "
        "peak); device to host 55.1 GB/s (87% of the 63.0 GB/s gen 5 x16 peak); link under load gen 5 x16 at the "
        "lowest of 300 reads (gen: 5 in 300; width: 16 in 300), idle gen 5 x16, maximum gen 5 x16; replay counter "
        "0 -> 0 (+0) [h100 run]")
    assert check_pcie_under_load(h100, {}, "src").verdict == PASSED  # judged against the link's own maximum


def test_a_link_that_trains_down_under_load_fails(h100):
    # DERIVED: 12 of 300 reads at x8, the rest at x16
    h100["link"]["under_load"].update(width_min=8, width_reads={"8": 12, "16": 288})
    result = check_pcie_under_load(h100, {}, "src")
    assert result.verdict == FAILED
    assert result.details == ["the link ran at x8 under load, narrower than x16 (the link's maximum)"]
    assert "(gen: 5 in 300; width: 8 in 12, 16 in 288)" in result.message
    assert "a riser, cable or retimer" in result.message


def test_an_idle_link_that_sleeps_is_not_a_fault(h100):
    h100["link"]["idle"] = {"gen": 1, "width": 16}  # DERIVED: a link slowed for power at idle, as GPUs do
    result = check_pcie_under_load(h100, {}, "src")
    assert result.verdict == PASSED and "idle gen 1 x16" in result.message


def test_a_gen5_gpu_in_a_gen4_slot_fails_only_a_gen5_promise(h100):
    # DERIVED: NVML's maximum is what GPU and slot reach together
    h100["link"]["max"] = {"gen": 4, "width": 16, "gpu_gen": 5}
    h100["link"]["under_load"].update(gen_min=4, gen_max=4, gen_reads={"4": 300})
    h100["h2d_gbps"], h100["d2h_gbps"] = 27.0, 27.1
    assert check_pcie_under_load(h100, {}, "src").verdict == PASSED
    result = check_pcie_under_load(h100, {"gen": 5, "width": 16, "min": "50 GB/s"}, "src")
    assert result.verdict == FAILED
    assert result.details == ["host to device 27.0 GB/s, below the 50 GB/s promised",
                              "device to host 27.1 GB/s, below the 50 GB/s promised",
                              "the link ran at gen 4 under load, below gen 5 (promised)"]
    assert "host to device 27.0 GB/s (86% of the 31.5 GB/s gen 4 x16 peak)" in result.message


def test_replays_during_the_copies_fail_beyond_the_allowance(h100):
    h100["replay_counter"] = {"before": 10, "after": 13, "rise": 0}  # DERIVED; the row's own "rise" is not trusted
    result = check_pcie_under_load(h100, {}, "src")
    assert result.verdict == FAILED and result.found["replay_rise"] == 3
    assert result.details == ["the PCIe replay counter rose by 3 during the copies (at most 0 allowed): packets were "
                              "resent, the link's signal is marginal"]
    assert check_pcie_under_load(h100, {"max_replay_rise": 3}, "src").verdict == PASSED


def test_a_counter_reset_counts_its_new_value(h100):
    h100["replay_counter"] = {"before": 10, "after": 2, "rise": None}  # DERIVED: reset between the reads
    assert check_pcie_under_load(h100, {}, "src").found["replay_rise"] == 2


def test_what_nvml_cannot_say_is_not_judged(h100):
    h100["replay_counter"] = {"before": None, "after": None, "rise": None}  # DERIVED: a driver without it
    h100["unread"] = {"replay_counter.before": "NOT_SUPPORTED", "replay_counter.after": "NOT_SUPPORTED"}
    result = check_pcie_under_load(h100, {}, "src")
    assert result.verdict == NOT_CHECKED
    assert result.message.endswith("[src]; not judged: NVML could not read the replay counter (before None, after "
                                   "None)")


def test_a_rate_that_is_not_finite_is_not_judged(h100):
    h100["h2d_gbps"] = float("inf")  # DERIVED
    result = check_pcie_under_load(h100, {"min": "50 GB/s"}, "src")
    assert result.verdict == NOT_CHECKED and "found.h2d_gbps = inf" in result.message


def test_the_workloads_nvml_funnel_keeps_data_answers_and_raises_the_rest():
    """workloads/nvml_reads.py, shared by power_hold.py and pcie_load.py: an NVML answer that describes the machine
    is None with its name under ``unread``; a missing function likewise; a renamed function is found by its old
    name; any other NVML error fails the workload. nvidia-ml-py's own error classes, no driver needed."""
    import types

    import pynvml

    from pytest_gpufabric.workloads.nvml_reads import Nvml

    def answers(code):
        def fn(*_):
            raise pynvml.NVMLError(code)
        return fn

    nvml = Nvml.__new__(Nvml)  # without nvmlInit: the module is a stand-in holding nvidia-ml-py's errors
    nvml.p = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVML_ERROR_NOT_SUPPORTED=pynvml.NVML_ERROR_NOT_SUPPORTED,
        NVML_ERROR_GPU_IS_LOST=pynvml.NVML_ERROR_GPU_IS_LOST,
        nvmlDeviceGetMarginTemperature=answers(pynvml.NVML_ERROR_NOT_SUPPORTED),
        nvmlDeviceGetPowerUsage=answers(pynvml.NVML_ERROR_GPU_IS_LOST),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda handle: 0x4)
    unread: dict = {}
    assert nvml.get(unread, "margin_c", "nvmlDeviceGetMarginTemperature", "h") is None
    assert nvml.get(unread, "link.max.gen", "nvmlDeviceGetMaxPcieLinkGeneration", "h") is None
    assert nvml.get(unread, "reasons", ("nvmlDeviceGetCurrentClocksEventReasons",
                                        "nvmlDeviceGetCurrentClocksThrottleReasons"), "h") == 0x4
    assert unread == {"margin_c": "NOT_SUPPORTED", "link.max.gen": "FUNCTION_NOT_FOUND"}
    with pytest.raises(pynvml.NVMLError):
        nvml.get(unread, "power_w", ("nvmlDeviceGetPowerUsage",), "h")
