"""The platform's record: each host setting as a ``Reading`` (value, where it was read, why it could not be), the
PCI functions and endpoints above the GPUs and NICs, ``platform.json`` (format ``gpufabric-platform/1``) and the
names of the files a bundle holds them in. fabric/platform.py reads a machine into it, platform_text.py what a
customer pastes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..formats.pci_config import PciFacts

FORMAT = "gpufabric-platform/1"
PLATFORM_FILE = "platform.json"
PLATFORM_DIR = "platform"
LSPCI_FILE = "lspci-vvv.txt"
MODULES_FILE = "lsmod.txt"
CMDLINE_FILE = "proc-cmdline.txt"
KERNEL_LOG_FILE = "dmesg.txt"
TEXT_FILES = (LSPCI_FILE, MODULES_FILE, CMDLINE_FILE, KERNEL_LOG_FILE)

PEER_MEMORY_MODULES = ("nvidia_peermem", "nv_peer_mem")
PEER_MEMORY_FILES = ("/sys/module/nvidia_peermem/version", "/sys/module/nv_peer_mem/version",
                     "/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nv_mem_nc/version")
_NVIDIA = 0x10DE
_GPU_CLASSES = (0x0300, 0x0302, 0x0380)  # VGA, 3D controller, display controller
_NIC_DRIVERS = ("mlx5_core", "mlx4_core", "irdma", "i40iw", "bnxt_en", "qedr", "efa", "ionic")
_NIC_WORDS = ("Mellanox", "ConnectX", "Infiniband", "InfiniBand", "BlueField")


@dataclass
class Reading:
    """One setting: its value, where it was read, and why it could not be (``value`` None)."""

    value: Any = None
    source: str = ""
    unreadable: str | None = None  # "not readable here: ..." (the machine hides it); None with no value: not recorded

    @property
    def known(self) -> bool:
        return self.value is not None


@dataclass
class PciNode:
    """One PCI function on the path of a GPU or NIC: its configuration space and IOMMU group."""

    bdf: str
    description: str | None = None
    sysfs_path: str | None = None
    facts: PciFacts | None = None
    unreadable: str | None = None  # why its configuration space could not be read at all
    iommu_group: str | None = None
    iommu_domain: str | None = None  # the group's type: identity, DMA, DMA-FQ, unmanaged, blocked
    iommu_source: str | None = None


@dataclass
class Endpoint:
    """A GPU or an RDMA NIC and the bridges above it (nearest the root complex first)."""

    label: str  # "GPU0", "mlx5_0", or "NVIDIA GPU 0000:02:00.0" where nothing names it
    kind: str  # "gpu" | "nic"
    bdf: str | None
    bridges: list[str] = field(default_factory=list)
    placed: bool = True  # False: where it sits in the PCI tree is not known
    #: why the bridges above ``bridges`` (or above the function itself) are not known: a paste of lspci that shows
    #: the function, or a switch port, without what lies between it and the root complex
    above_unknown: str | None = None


@dataclass
class Platform:
    """Everything the platform checks judge, with where each fact came from."""

    source: str = ""
    hypervisor: Reading = field(default_factory=Reading)
    kernel_cmdline: Reading = field(default_factory=Reading)
    kernel_log: Reading = field(default_factory=Reading)  # {"default_domain": "Translated", "iommu": "enabled"}
    iommu_units: Reading = field(default_factory=Reading)  # ["dmar0", ...]
    modules: Reading = field(default_factory=Reading)  # {"loaded": [...], "complete": bool, "searched": [...]}
    peer_memory_files: Reading = field(default_factory=Reading)  # {path: version text} of the files present
    persistence_mode: dict[str, Reading] = field(default_factory=dict)  # "GPU0" -> True / False
    cpu_governors: Reading = field(default_factory=Reading)  # {"performance": "0-63"}
    numa_balancing: Reading = field(default_factory=Reading)  # 0, 1, 2, 3
    hugepages: Reading = field(default_factory=Reading)  # {"2048": {"total": 0, "free": 0}} by page size in kB
    nic_firmware: dict[str, Reading] = field(default_factory=dict)  # "mlx5_0" -> "28.39.1002"
    devices: dict[str, PciNode] = field(default_factory=dict)
    endpoints: list[Endpoint] = field(default_factory=list)
    pci_source: str = ""  # where the PCI functions came from
    pci_unreadable: str | None = None  # why no PCI function could be read at all
    #: why the PCI functions a text showed are not this machine's (an lspci of another machine, or of part of this
    #: one: its NVIDIA GPUs are not the machine's GPUs by PCI bus id); its functions are then left out
    pci_foreign: str | None = None
    loose_acs: list[dict] = field(default_factory=list)  # ACSCtl lines of a grep that names no device
    files: list[str] = field(default_factory=list)  # what was read, relative to the root (the snapshot copies them)
    links: dict[str, str] = field(default_factory=dict)  # symlinks followed: path -> target, as the machine names it

    def endpoint(self, label: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.label == label), None)

    def recorded(self) -> bool:
        """Whether the evidence holds any platform fact at all."""
        readings = [self.hypervisor, self.kernel_cmdline, self.kernel_log, self.iommu_units, self.modules,
                    self.peer_memory_files, self.cpu_governors, self.numa_balancing, self.hugepages,
                    *self.persistence_mode.values(), *self.nic_firmware.values()]
        return bool(self.devices or self.loose_acs or self.pci_foreign
                    or any(r.known or r.unreadable for r in readings))

    def to_record(self) -> dict:
        record = {"format": FORMAT, **asdict(self)}
        return record


def platform_from_record(record: dict, *, source: str | None = None) -> Platform:
    """A Platform from ``platform.json``. Raises ValueError for a document that is not one."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"expected format {FORMAT!r}, found {found!r}")

    def reading(data) -> Reading:
        return Reading(**data) if isinstance(data, dict) else Reading()

    devices = {}
    for bdf, node in (record.get("devices") or {}).items():
        facts = node.get("facts")
        devices[bdf] = PciNode(**{**node, "facts": PciFacts.from_dict(facts) if facts else None})
    platform = Platform(
        source=source or record.get("source", ""),
        devices=devices,
        endpoints=[Endpoint(**e) for e in record.get("endpoints") or []],
        persistence_mode={k: reading(v) for k, v in (record.get("persistence_mode") or {}).items()},
        nic_firmware={k: reading(v) for k, v in (record.get("nic_firmware") or {}).items()},
        pci_source=record.get("pci_source", ""),
        pci_unreadable=record.get("pci_unreadable"),
        pci_foreign=record.get("pci_foreign"),
        loose_acs=list(record.get("loose_acs") or []),
        files=list(record.get("files") or []),
        links=dict(record.get("links") or {}),
    )
    for name in ("hypervisor", "kernel_cmdline", "kernel_log", "iommu_units", "modules", "peer_memory_files",
                 "cpu_governors", "numa_balancing", "hugepages"):
        setattr(platform, name, reading(record.get(name)))
    return platform
