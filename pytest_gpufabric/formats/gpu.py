"""One GPU and its NVLinks as a source describes them (NVML, ``nvidia-smi -q -x``, ``nvidia-smi nvlink -s``): the
per-board records of the machine's model (fabric/model.py, whose docstring says what None, NA and
``Gpu.unreadable`` mean). They sit below fabric/ so that the parsers of formats/ fill them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import NAType
from .gpu_fabric import GpuFabricInfo

Str = str | NAType | None
Int = int | NAType | None


@dataclass
class NvLink:
    """One NVLink of one GPU, as NVML or `nvidia-smi nvlink -s/-R` describe it."""

    link: int
    active: bool | NAType | None = None
    speed_gbps: float | NAType | None = None  # GB/s per direction, as `nvidia-smi nvlink -s` prints
    remote_pci_bus_id: Str = None  # FFFFFFFF:FF:FF.0 when the remote is an NVSwitch
    remote_type: Str = None  # "GPU" | "SWITCH" | "IBMNPU"
    version: Int = None


@dataclass
class Gpu:
    index: int
    name: Str = None
    uuid: Str = None
    serial: Str = None
    pci_bus_id: Str = None  # 00000000:00:06.0, upper case, 8-digit domain as NVML prints it
    pci_device_id: Int = None  # NVML's pciDeviceId, device << 16 | vendor: 0x233010DE
    memory_bytes: Int = None
    pcie_gen_max: Int = None
    pcie_gen_current: Int = None
    pcie_width_max: Int = None
    pcie_width_current: Int = None
    vbios_version: Str = None
    compute_capability: Str = None  # "9.0"
    ecc_mode: Str = None  # "Enabled" | "Disabled"
    cpu_affinity: Str = None  # "0-31", the cpuset NVML reports for the GPU
    numa_node: Int = None
    nvlinks: list[NvLink] | None = None  # None: not recorded; []: recorded, the GPU has none
    fabric: GpuFabricInfo | None = None  # its NVLink fabric registration (formats/gpu_fabric.py); None: not recorded
    #: facts the evidence holds but that could not be read, by field name ("memory_bytes", "nvlinks", ...): why,
    #: naming file, key and value; the field itself is None
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"GPU{self.index}"

    def active_nvlinks(self) -> list[NvLink] | None:
        if self.nvlinks is None:
            return None
        return [link for link in self.nvlinks if link.active is True]
