"""Per-GPU diagnostics of the depth `dcgm diag` gives, each judged per GPU by its serial: device-memory (HBM)
bandwidth against the peak NVML gives, the memory pattern test over most of the free memory, the GPU held at its
power limit, the PCIe link under load, and whatever other kind carries a measurement (kinds.diagnostics()).

Each is one workload (workloads/), made once per run on every promised GPU, recorded into the report folder as a
bundle file, and replayed from it (measurements.py); its kind (kinds/<family>/) names its promise, its profile
section, its fixture and the check that judges one GPU's row. One test judges them all: a new diagnostic adds no
test here (docs/adding-a-diagnostic.md).
"""

from __future__ import annotations

import functools

import pytest

from pytest_gpufabric.checks.boards import board_row
from pytest_gpufabric.kinds import diagnostics
from pytest_gpufabric.parametrize import per_gpu
from pytest_gpufabric.promise import not_checked, promise


def _promise_id(kind_name: str, params: dict) -> str:
    return f"{kind_name}[GPU{params['gpu_index']}]"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "diagnostic" in metafunc.fixturenames:
        # each case is bound to its own kind's promise: its id is the kind's name and the GPU (gpu-memory[GPU0])
        metafunc.parametrize("diagnostic", [
            pytest.param(kind, id=kind.name, marks=promise(functools.partial(_promise_id, kind.name), kind.what))
            for kind in diagnostics()])
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


@pytest.fixture
def recording(diagnostic, request):
    """The diagnostic's measurement, by the fixture the measurement registry makes for it (made in set-up)."""
    return request.getfixturevalue(diagnostic.measurement.diagnostic.fixture)


def test_diagnostic(diagnostic, gpu_profile, gpu_index, fabric, recording, gpufabric_run, gpufabric_check):
    measurement = diagnostic.measurement
    descriptor = measurement.diagnostic
    row = _row(recording, gpu_index, fabric, descriptor.one)
    section = gpu_profile.data[descriptor.key]
    source = _source(gpufabric_run)
    if measurement.coverage is not None:
        why = measurement.coverage(recording, row, section)
        if why:  # the record does not cover what the profile promises (seconds, samples, sizes)
            not_checked(f"{why} [{source}]")
    gpufabric_check(measurement.judge(row, section, source, fabric.gpu(gpu_index)))


def _source(fabric_session) -> str:
    return f"bundle {fabric_session.replay}" if fabric_session.replay else "this machine"
