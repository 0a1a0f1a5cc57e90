"""Topology acceptance: the GPUs, their PCIe links, the `nvidia-smi topo -m` matrix, NVLinks, affinity.

Each test declares the promise it judges (``promise``): one the profile does not make is skipped before anything is
read; one the evidence cannot show is "not checked", with the files a bundle would need.
"""

from __future__ import annotations

from pytest_gpufabric.checks import topology
from pytest_gpufabric.promise import promise


def _affinity_promised(profile, params) -> bool:
    label = f"GPU{params['promised_gpu']}"
    return any(label in profile.topology.get(key, {}) for key in ("cpu_affinity", "numa_affinity"))


@promise("gpu-count")
def test_gpu_count(gpu_profile, fabric, gpufabric_check):
    gpufabric_check(topology.check_gpu_count(gpu_profile, fabric))


@promise("gpu-model", "GPU model", lambda profile, _: profile.gpu_model)
def test_gpu_model(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_gpu_model(gpu_profile, promised_gpu, fabric.source))


@promise("gpu-memory", "GPU memory size", lambda profile, _: profile.gpu_memory_bytes)
def test_gpu_memory(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_gpu_memory(gpu_profile, promised_gpu, fabric.source))


@promise("pcie-link", "PCIe generation or width", lambda profile, _: profile.pcie)
def test_pcie_link(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_pcie(gpu_profile, promised_gpu, fabric.source))


@promise("ecc-mode", "ECC mode", lambda profile, _: profile.ecc is not None)
def test_ecc_mode(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_ecc(gpu_profile, promised_gpu, fabric.source))


@promise("topology-matrix", "topology matrix", lambda profile, _: profile.matrix)
def test_topology_matrix(gpu_profile, fabric, gpufabric_check):
    gpufabric_check(topology.check_matrix(gpu_profile, fabric))


@promise("nvlinks", "NVLinks", lambda profile, _: profile.nvlink)
def test_nvlinks(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_nvlinks(gpu_profile, fabric, promised_gpu))


@promise("affinity", "CPU/NUMA affinity for this GPU", _affinity_promised)
def test_affinity(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_affinity(gpu_profile, fabric, promised_gpu))
