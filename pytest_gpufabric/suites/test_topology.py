"""Topology acceptance: the GPUs, their PCIe links, the `nvidia-smi topo -m` matrix, NVLinks, affinity.

Each test asks the profile for the promise; a promise the profile does not make is skipped with its reason.
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks import topology


def _promise(condition: object, what: str, profile) -> None:
    if not condition:
        pytest.skip(f"profile {profile.name} promises no {what}")


def test_gpu_count(gpu_profile, fabric, gpufabric_check):
    gpufabric_check(topology.check_gpu_count(gpu_profile, fabric))


def test_gpu_model(gpu_profile, fabric, promised_gpu, gpufabric_check):
    _promise(gpu_profile.gpu_model, "GPU model", gpu_profile)
    gpufabric_check(topology.check_gpu_model(gpu_profile, promised_gpu, fabric.source))


def test_gpu_memory(gpu_profile, fabric, promised_gpu, gpufabric_check):
    _promise(gpu_profile.gpu_memory_bytes, "GPU memory size", gpu_profile)
    gpufabric_check(topology.check_gpu_memory(gpu_profile, promised_gpu, fabric.source))


def test_pcie_link(gpu_profile, fabric, promised_gpu, gpufabric_check):
    _promise(gpu_profile.pcie, "PCIe generation or width", gpu_profile)
    gpufabric_check(topology.check_pcie(gpu_profile, promised_gpu, fabric.source))


def test_ecc_mode(gpu_profile, fabric, promised_gpu, gpufabric_check):
    _promise(gpu_profile.ecc is not None, "ECC mode", gpu_profile)
    gpufabric_check(topology.check_ecc(gpu_profile, promised_gpu, fabric.source))


def test_topology_matrix(gpu_profile, fabric, gpufabric_check):
    _promise(gpu_profile.matrix, "topology matrix", gpu_profile)
    gpufabric_check(topology.check_matrix(gpu_profile, fabric))


def test_nvlinks(gpu_profile, fabric, promised_gpu, gpufabric_check):
    _promise(gpu_profile.nvlink, "NVLinks", gpu_profile)
    gpufabric_check(topology.check_nvlinks(gpu_profile, fabric, promised_gpu))


def test_affinity(gpu_profile, fabric, promised_gpu, gpufabric_check):
    topo = gpu_profile.topology
    promised = any(promised_gpu.label in topo.get(key, {}) for key in ("cpu_affinity", "numa_affinity"))
    _promise(promised, f"CPU/NUMA affinity for {promised_gpu.label}", gpu_profile)
    gpufabric_check(topology.check_affinity(gpu_profile, fabric, promised_gpu))
