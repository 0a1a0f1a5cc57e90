"""Platform acceptance: the host settings that make good GPUs slow, against the profile's ``platform:`` section.

PCIe ACS on the bridges above the GPUs and NICs, the IOMMU mode, the GPUDirect RDMA peer-memory module,
persistence mode, driver / VBIOS / NIC firmware versions, the CPU governor, NUMA balancing, hugepages and the
PCIe payload sizes of the GPUs and NICs: read once per run from sysfs, procfs and NVML (live), or from the bundle.

The suite runs only for a profile with a ``platform:`` section (under any other profile the plugin deselects it,
so the runs and results of profiles that promise nothing here are unchanged); within it, a setting the section
does not name is skipped, one this machine hides is skipped with "not readable here: <why>".
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks import platform as checks
from pytest_gpufabric.kinds import platform as kinds
from pytest_gpufabric.parametrize import over, per_gpu, promised_profile
from pytest_gpufabric.promise import promise


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu_index" in metafunc.fixturenames:
        per_gpu(metafunc, "gpu_index")
    if "platform_device" in metafunc.fixturenames:
        # the GPUs and the RDMA devices the profile promises, for the per-device settings
        profile = promised_profile(metafunc.config)
        devices = kinds.devices(profile) if profile else []
        over(metafunc, "platform_device", devices, devices)


def _promise(profile, key: str):
    """The promise of one setting (kinds/platform.py: made where the profile's ``platform:`` section names it)."""
    return profile.data[kinds.SECTION][key]


@promise(kinds.ACS.name)
def test_acs(gpu_profile, request, gpufabric_check):
    want = _promise(gpu_profile, "acs")
    gpus = [f"GPU{i}" for i in range(gpu_profile.gpu_count)]
    gpufabric_check(checks.check_acs(want, request.getfixturevalue("platform_facts"), gpus))


@promise(kinds.IOMMU.name)
def test_iommu(gpu_profile, request, gpufabric_check):
    want = _promise(gpu_profile, "iommu")
    gpufabric_check(checks.check_iommu(want, request.getfixturevalue("platform_facts")))


@promise(kinds.PEER_MEMORY.name)
def test_peer_memory(gpu_profile, request, gpufabric_check):
    want = _promise(gpu_profile, "peer_memory")
    gpufabric_check(checks.check_peer_memory(want, request.getfixturevalue("platform_facts")))


@promise(kinds.PERSISTENCE_MODE.name)
def test_persistence_mode(gpu_profile, gpu_index, request, gpufabric_check):
    want = _promise(gpu_profile, "persistence_mode")
    gpufabric_check(checks.check_persistence(want, f"GPU{gpu_index}", request.getfixturevalue("platform_facts")))


@promise(kinds.DRIVER.name)
def test_driver_version(gpu_profile, fabric, gpufabric_check):
    spec = _promise(gpu_profile, "driver")
    gpufabric_check(checks.check_driver(spec, fabric))


@promise(kinds.VBIOS.name)
def test_vbios_version(gpu_profile, fabric, promised_gpu, gpufabric_check):
    spec = _promise(gpu_profile, "vbios")
    if promised_gpu is None:
        return  # promised but missing: the test fails on that before it gets here
    gpufabric_check(checks.check_vbios(spec, promised_gpu, fabric.source))


@promise(kinds.NIC_FIRMWARE.name)
def test_nic_firmware(gpu_profile, request, gpufabric_check):
    spec = dict(_promise(gpu_profile, "nic_firmware"))
    names = spec.pop("devices", None) or [d["name"] for d in gpu_profile.rdma_devices]
    gpufabric_check(checks.check_nic_firmware(spec, request.getfixturevalue("platform_facts"), names))


@promise(kinds.CPU_GOVERNOR.name)
def test_cpu_governor(gpu_profile, request, gpufabric_check):
    want = _promise(gpu_profile, "cpu_governor")
    gpufabric_check(checks.check_cpu_governor(want, request.getfixturevalue("platform_facts")))


@promise(kinds.NUMA_BALANCING.name)
def test_numa_balancing(gpu_profile, request, gpufabric_check):
    want = _promise(gpu_profile, "numa_balancing")
    gpufabric_check(checks.check_numa_balancing(want, request.getfixturevalue("platform_facts")))


@promise(kinds.HUGEPAGES.name)
def test_hugepages(gpu_profile, request, gpufabric_check):
    spec = _promise(gpu_profile, "hugepages")
    gpufabric_check(checks.check_hugepages(spec, request.getfixturevalue("platform_facts")))


@promise(kinds.PCIE.name)
def test_pcie_payload(gpu_profile, platform_device, request, gpufabric_check):
    spec = _promise(gpu_profile, "pcie")
    gpufabric_check(checks.check_pcie_sizes(spec, platform_device, request.getfixturevalue("platform_facts")))
