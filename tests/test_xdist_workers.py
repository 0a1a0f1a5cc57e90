"""How many workers the README's `python3 -m pytest -n auto` starts (tests/conftest.py).

The files are the kernel's formats (Documentation/admin-guide/cgroup-v2.rst, `cpu.max`: "$MAX $PERIOD", "max" for
no limit; cgroup v1's `cpu.cfs_quota_us` reads -1 without a quota, as on the 2-core CI machine)."""

from __future__ import annotations

import os
from pathlib import Path

import conftest
import pytest


def _cgroup(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(("files", "cpus"), [
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "200000 100000\n"}, 2.0),
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4.0),
    ({}, None),
])
def test_a_cpu_quota_is_read_from_cgroup_v2_or_v1(tmp_path, files, cpus):
    assert conftest.cpu_quota(_cgroup(tmp_path, files)) == cpus


@pytest.mark.parametrize(("cores", "files", "workers"), [
    (2, {}, 2),
    (64, {}, conftest.MOST_WORKERS),
    (64, {"cpu.max": "200000 100000\n"}, 2),  # a 2-CPU container on a 64-core host
    (64, {"cpu.max": "150000 100000\n"}, 2),
    (1, {}, 1),
])
def test_auto_starts_a_worker_per_usable_core(request, monkeypatch, tmp_path, cores, files, workers):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(conftest, "CGROUP", _cgroup(tmp_path, files))
    assert conftest.pytest_xdist_auto_num_workers(request.config) == workers


def test_the_environment_variable_and_acceptance_runs_are_left_to_xdist(request, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(request.config) is None
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS")
    monkeypatch.setattr(request.config.option, "gpu_profile", "h200-nvswitch-x2")
    assert conftest.pytest_xdist_auto_num_workers(request.config) is None
