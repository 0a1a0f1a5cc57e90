"""Topology acceptance: the GPUs, their PCIe links, the `nvidia-smi topo -m` matrix, NVLinks, affinity.

Each test declares the kind of promise it judges (``promise``; kinds/topology.py says which ids a profile makes): one
the profile does not make is skipped before anything is read; one the evidence cannot show is "not checked", with
the files a bundle would need.
"""

from __future__ import annotations

from pytest_gpufabric.checks import topology
from pytest_gpufabric.kinds.topology import (
    AFFINITY,
    ECC_MODE,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_MODEL,
    NVLINKS,
    PCIE_LINK,
    TOPOLOGY_MATRIX,
)
from pytest_gpufabric.promise import promise


@promise(GPU_COUNT.name)
def test_gpu_count(gpu_profile, fabric, gpufabric_check):
    gpufabric_check(topology.check_gpu_count(gpu_profile, fabric))


@promise(GPU_MODEL.name)
def test_gpu_model(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_gpu_model(gpu_profile, promised_gpu, fabric.source))


@promise(GPU_MEMORY.name)
def test_gpu_memory(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_gpu_memory(gpu_profile, promised_gpu, fabric.source))


@promise(PCIE_LINK.name)
def test_pcie_link(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_pcie(gpu_profile, promised_gpu, fabric.source))


@promise(ECC_MODE.name)
def test_ecc_mode(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_ecc(gpu_profile, promised_gpu, fabric.source))


@promise(TOPOLOGY_MATRIX.name)
def test_topology_matrix(gpu_profile, fabric, gpufabric_check):
    gpufabric_check(topology.check_matrix(gpu_profile, fabric))


@promise(NVLINKS.name)
def test_nvlinks(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_nvlinks(gpu_profile, fabric, promised_gpu))


@promise(AFFINITY.name)
def test_affinity(gpu_profile, fabric, promised_gpu, gpufabric_check):
    gpufabric_check(topology.check_affinity(gpu_profile, fabric, promised_gpu))
