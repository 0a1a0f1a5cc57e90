"""Per-GPU diagnostics of the depth `dcgmi diag` gives, each judged per GPU by its serial: device-memory (HBM)
bandwidth against the peak NVML gives, the memory pattern test over most of the free memory, the GPU held at its
power limit, and the PCIe link under load.

Each is one workload (workloads/), made once per run on every promised GPU, recorded into the report folder as a
bundle file, and replayed from it (measurements.py); its descriptor (diagnostics.py) names its promise, its profile
section and its fixture. A new diagnostic's test is one more of these (docs/adding-a-diagnostic.md).
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks.boards import board_row
from pytest_gpufabric.checks.hbm import check_hbm_bandwidth, check_mem_pattern, hbm_coverage
from pytest_gpufabric.checks.pcie_load import check_pcie_under_load, pcie_coverage
from pytest_gpufabric.checks.power import check_power_hold, power_coverage
from pytest_gpufabric.diagnostics import HBM, MEMORY_PATTERN, PCIE_LOAD, POWER_HOLD
from pytest_gpufabric.parametrize import per_gpu
from pytest_gpufabric.promise import not_checked, promise
from pytest_gpufabric.reference import hbm_fraction_floor


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu_index" in metafunc.fixturenames:
        per_gpu(metafunc, "gpu_index")


def _row(recording, index: int, fabric, what: str) -> dict:
    """The recording's row of this machine's GPU<index>, bound by serial and UUID (checks/boards.py); not checked
    where there is none, it names another board, or it cannot be read."""
    if fabric.gpus_recorded and fabric.gpu(index) is None:
        not_checked(f"this machine has no GPU{index} to bind the {what} to (it has {len(fabric.gpus)} GPUs)")
    row, why = board_row(recording, index, fabric.gpu(index), what)
    if why:
        not_checked(why)
    return row


def _covered(why: str | None, fabric_session) -> None:
    """Not checked where the record does not cover what the profile promises (seconds, samples, sizes)."""
    if why:
        not_checked(f"{why} [{_source(fabric_session)}]")


@promise(HBM.name)
def test_hbm_bandwidth(gpu_profile, gpu_index, fabric, hbm_bandwidth, gpufabric_run, gpufabric_check):
    row = _row(hbm_bandwidth, gpu_index, fabric, HBM.one)
    section = gpu_profile.data[HBM.key]
    _covered(hbm_coverage(hbm_bandwidth, row, section), gpufabric_run)
    floor = {k: section[k] for k in ("min", "min_fraction_of_peak") if k in section}
    gpufabric_check(check_hbm_bandwidth(row, floor, hbm_fraction_floor(row.get("name")), _source(gpufabric_run)))


@promise(MEMORY_PATTERN.name)
def test_memory_pattern(gpu_profile, gpu_index, fabric, memory_pattern, gpufabric_run, gpufabric_check):
    row = _row(memory_pattern, gpu_index, fabric, MEMORY_PATTERN.one)
    section = gpu_profile.data[MEMORY_PATTERN.key]
    gpu = fabric.gpu(gpu_index)
    gpufabric_check(check_mem_pattern(row, section.get("min_coverage"), _source(gpufabric_run), promised=section,
                                      gpu_memory_bytes=gpu.memory_bytes if gpu is not None else None))


@promise(POWER_HOLD.name)
def test_power_hold(gpu_profile, gpu_index, fabric, power_hold, gpufabric_run, gpufabric_check):
    row = _row(power_hold, gpu_index, fabric, POWER_HOLD.one)
    section = gpu_profile.data[POWER_HOLD.key]
    _covered(power_coverage(power_hold, row, section), gpufabric_run)
    gpufabric_check(check_power_hold(row, section, _source(gpufabric_run)))


@promise(PCIE_LOAD.name)
def test_pcie_under_load(gpu_profile, gpu_index, fabric, pcie_load, gpufabric_run, gpufabric_check):
    row = _row(pcie_load, gpu_index, fabric, PCIE_LOAD.one)
    section = gpu_profile.data[PCIE_LOAD.key]
    _covered(pcie_coverage(pcie_load, row, section), gpufabric_run)
    gpufabric_check(check_pcie_under_load(row, section, _source(gpufabric_run)))


def _source(fabric_session) -> str:
    return f"bundle {fabric_session.replay}" if fabric_session.replay else "this machine"
