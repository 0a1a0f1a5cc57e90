"""Per-GPU diagnostics of the depth `dcgmi diag` gives, each judged per GPU by its serial: device-memory (HBM)
bandwidth against the peak NVML gives, the memory pattern test over most of the free memory, the GPU held at its
power limit, and the PCIe link under load.

Each is one workload (workloads/), made once per run on every promised GPU, recorded into the report folder as a
bundle file, and replayed from it (measurements.py).
"""

from __future__ import annotations

from pytest_gpufabric.checks.hbm import check_hbm_bandwidth, check_mem_pattern
from pytest_gpufabric.promise import not_checked, promise

#: the fraction of NVML's peak (bus width x max memory clock x 2) a healthy GPU of the model reaches, where the
#: profile states none: measured 0.978 (a write kernel) on nvidia-h100-x1; DCGM's memory bandwidth plugin holds
#: H100s to a fixed floor of its own of the same order
MODEL_MIN_FRACTION = {"H100": 0.88, "H200": 0.88}


def _row(measurement: dict, index: int, what: str) -> dict:
    row = next((g for g in measurement.get("gpus", []) if g.get("index") == index), None)
    if row is None:
        seen = ", ".join(f"GPU{g.get('index')}" for g in measurement.get("gpus", [])) or "none"
        not_checked(f"the {what} has no result for GPU{index} (the GPUs it saw: {seen})")
    return row


def _model_fraction(name: object) -> float | None:
    return next((f for model, f in MODEL_MIN_FRACTION.items() if model in str(name or "")), None)


@promise("hbm-bandwidth")
def test_hbm_bandwidth(gpu_profile, gpu_index, hbm_bandwidth, gpufabric_run, gpufabric_check):
    row = _row(hbm_bandwidth, gpu_index, "HBM bandwidth measurement")
    section = gpu_profile.data["memory_bandwidth"]
    floor = {k: section[k] for k in ("min", "min_fraction_of_peak") if k in section}
    gpufabric_check(check_hbm_bandwidth(row, floor, _model_fraction(row.get("name")), _source(gpufabric_run)))


@promise("memory-pattern")
def test_memory_pattern(gpu_profile, gpu_index, memory_pattern, gpufabric_run, gpufabric_check):
    row = _row(memory_pattern, gpu_index, "memory pattern test")
    gpufabric_check(check_mem_pattern(row, gpu_profile.data["memory_pattern"].get("min_coverage"),
                                      _source(gpufabric_run)))


@promise("power-hold")
def test_power_hold(gpu_profile, gpu_index, power_hold, gpufabric_run, gpufabric_check):
    from pytest_gpufabric.checks.power import check_power_hold

    row = _row(power_hold, gpu_index, "power hold")
    gpufabric_check(check_power_hold(row, gpu_profile.data["power"], _source(gpufabric_run)))


@promise("pcie-under-load")
def test_pcie_under_load(gpu_profile, gpu_index, pcie_load, gpufabric_run, gpufabric_check):
    from pytest_gpufabric.checks.pcie_load import check_pcie_under_load

    row = _row(pcie_load, gpu_index, "PCIe-under-load measurement")
    gpufabric_check(check_pcie_under_load(row, gpu_profile.data["pcie_load"], _source(gpufabric_run)))


def _source(run) -> str:
    return f"bundle {run.replay}" if run.replay else "this machine"
