"""The host settings that make good GPUs slow (checks/platform.py), each promised where the profile's ``platform:``
section names it: PCIe ACS, the IOMMU mode, the peer-memory module, persistence mode, the driver, VBIOS and NIC
firmware versions, the CPU governor, NUMA balancing, hugepages and the PCIe payload sizes."""

from __future__ import annotations

from collections.abc import Callable

from ..remedy_classes import SOFTWARE
from ..remedy_rules import _fixed
from ..report.phrases import settings_phrase
from .base import CheckRule, Kind, gpus
from .suite_measurement import SuiteMeasurement

POSITION = 70
SUITE = "test_platform.py"
OWN_MODULES = ("checks/platform.py", "suites/test_platform.py")

#: the profile section these kinds are made of
SECTION = "platform"


def _setting(key: str, per: Callable[..., list[str]] | None = None) -> Callable[..., list[str]]:
    """Promised where the section names ``key``: once, or once per ``per(profile)``."""
    def ids(profile) -> list[str]:
        if profile.data.get(SECTION, {}).get(key) is None:
            return []
        return per(profile) if per else [""]

    return ids


def devices(profile) -> list[str]:
    """The GPUs and the RDMA devices the profile promises."""
    return gpus(profile) + [d["name"] for d in profile.rdma_devices]


def _kind(name: str, what: str, key: str, per: Callable[..., list[str]] | None = None) -> Kind:
    return Kind(name, what, SUITE, _setting(key, per), sections=(SECTION,))


ACS = _kind("platform-acs", "PCIe ACS state", "acs")
IOMMU = _kind("platform-iommu", "IOMMU mode", "iommu")
PEER_MEMORY = _kind("platform-peer-memory", "peer-memory module", "peer_memory")
PERSISTENCE_MODE = _kind("platform-persistence-mode", "persistence mode", "persistence_mode", gpus)
DRIVER = _kind("platform-driver", "driver version", "driver")
VBIOS = _kind("platform-vbios", "VBIOS version", "vbios", gpus)
NIC_FIRMWARE = _kind("platform-nic-firmware", "NIC firmware", "nic_firmware")
CPU_GOVERNOR = _kind("platform-cpu-governor", "CPU governor", "cpu_governor")
NUMA_BALANCING = _kind("platform-numa-balancing", "NUMA balancing", "numa_balancing")
HUGEPAGES = _kind("platform-hugepages", "hugepages", "hugepages")
PCIE = _kind("platform-pcie", "PCIe payload sizes", "pcie", devices)

KINDS = (ACS, IOMMU, PEER_MEMORY, PERSISTENCE_MODE, DRIVER, VBIOS, NIC_FIRMWARE, CPU_GOVERNOR, NUMA_BALANCING,
         HUGEPAGES, PCIE)

#: every platform check's records (platform-persistence is persistence mode's): a setting, said as settings
CHECKS = (CheckRule("platform-", _fixed(SOFTWARE, "a host setting, version or module"), settings_phrase),)


# --- the measurement ----------------------------------------------------------------------------------------------


def _facts(fabric_session):
    from ..fabric.platform import platform_for_session

    return platform_for_session(fabric_session)


PLATFORM_FACTS = SuiteMeasurement(
    name="platform", fixture="platform_facts",
    doc="The host settings that decide GPU and RDMA performance (ACS, IOMMU, modules, persistence, governor, ...): "
        "read from this machine once per run (and written to platform.json), or from the bundle (platform.json, "
        "lspci-vvv.txt, lsmod.txt, ...).",
    why_not_promised=lambda profile: None,  # the platform suite runs only for a profile with a platform: section
    live=_facts, replay=lambda directory, fabric_session: _facts(fabric_session),
    nothing_recorded="the bundle records no platform settings (platform.json from gpufabric snapshot, "
                     "lspci-vvv.txt, lsmod.txt, proc-cmdline.txt or dmesg.txt)",
    check="checks/platform.py", suite="suites/test_platform.py", needs_machine=False)

MEASUREMENTS = (PLATFORM_FACTS,)
