"""The NVML record's vocabulary (format ``gpufabric-nvml/1``, laid out in fabric/nvml.py): its format tag, the
NVML answers it records in place of a value, nvml.h's enums, PCI bus ids as NVML spells them, and the
`nvidia-smi topo -m` label of two recorded GPUs. Pure: it needs no NVML, so the live reader (nvml.py) and the
record's reader (nvml_record.py) share it.
"""

from __future__ import annotations

from ..formats.gpu import Gpu, NvLink
from ..units import NA, NAType

FORMAT = "gpufabric-nvml/1"

#: NVML answers that are data about the machine, recorded in place of the value
RECORDED_ERRORS = frozenset({"NOT_SUPPORTED", "NOT_FOUND", "NO_PERMISSION", "FUNCTION_NOT_FOUND",
                             "INVALID_ARGUMENT"})

#: nvmlGpuTopologyLevel_t (nvml.h), as `nvidia-smi topo -m` labels it
TOPOLOGY_INTERNAL, TOPOLOGY_SINGLE, TOPOLOGY_MULTIPLE = 0, 10, 20
TOPOLOGY_HOSTBRIDGE, TOPOLOGY_NODE, TOPOLOGY_SYSTEM = 30, 40, 50

#: nvmlIntNvLinkDeviceType_t (nvml.h)
REMOTE_TYPES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH", 0xFF: "UNKNOWN"}

#: the remote PCI bus id NVML reports for a link that ends at an NVSwitch
NVSWITCH_BUS_ID = "FFFFFFFF:FF:FF.0"


def recorded_error(name: str) -> dict:
    """The record's form of an NVML answer that is not a value: ``{"error": "NOT_SUPPORTED"}``."""
    return {"error": name}


def is_error(value: object) -> bool:
    """True for a recorded error (``{"error": ...}``), in a fresh record or one read back from JSON."""
    return isinstance(value, dict) and set(value) == {"error"}


def normalize_bus_id(bus_id: str) -> str:
    """A PCI bus id as NVML prints it: upper case, 8-digit domain. '0000:00:06.0' -> '00000000:00:06.0'."""
    text = str(bus_id).strip()
    parts = text.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    try:
        domain, bus, devfn = parts
        dev, _, fn = devfn.partition(".")
        return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}.{int(fn or '0', 16):X}"
    except ValueError:
        return text.upper()


def cuda_version_text(version: int) -> str:
    """nvmlSystemGetCudaDriverVersion's int as nvidia-smi prints it: 13000 -> '13.0', 12040 -> '12.4'."""
    return f"{version // 1000}.{(version % 1000) // 10}"


# ---------------------------------------------------------------------------------------------------------
# labels: pure, for fabric_from_record and for tests


def pcie_label(level: int) -> str:
    """An NVML topology level (nvmlDeviceGetTopologyCommonAncestor) as `nvidia-smi topo -m` labels it.

    INTERNAL (0, two GPUs on one board) and SINGLE (10) -> PIX, MULTIPLE (20) -> PXB, HOSTBRIDGE (30) -> PHB,
    NODE (40) -> NODE, SYSTEM (50) -> SYS. nvml.h spaces the enum for future levels: a value between two
    known ones takes the farther label.
    """
    for limit, label in ((TOPOLOGY_SINGLE, "PIX"), (TOPOLOGY_MULTIPLE, "PXB"), (TOPOLOGY_HOSTBRIDGE, "PHB"),
                         (TOPOLOGY_NODE, "NODE")):
        if level <= limit:
            return label
    return "SYS"


def is_switch_link(link: NvLink) -> bool:
    """A link that ends at an NVSwitch: remote type SWITCH, or (type not known) the all-F remote bus id."""
    if link.remote_type == "SWITCH":
        return True
    if link.remote_type in (None, NA) and isinstance(link.remote_pci_bus_id, str) and link.remote_pci_bus_id:
        return normalize_bus_id(link.remote_pci_bus_id) == NVSWITCH_BUS_ID
    return False


def direct_nvlink_count(a: Gpu, b: Gpu) -> int:
    """Active links of ``a`` whose remote PCI bus id is ``b``'s (a bridge or a direct mesh)."""
    if not isinstance(b.pci_bus_id, str) or b.pci_bus_id in ("", NA):
        return 0
    target = normalize_bus_id(b.pci_bus_id)
    count = 0
    for link in a.active_nvlinks() or []:
        remote = link.remote_pci_bus_id
        if isinstance(remote, str) and remote and remote is not NA and not is_switch_link(link):
            count += normalize_bus_id(remote) == target
    return count


def switch_nvlink_count(gpu: Gpu) -> int:
    """Active links of a GPU that end at an NVSwitch."""
    return sum(1 for link in gpu.active_nvlinks() or [] if is_switch_link(link))


def nvlink_pair_count(a: Gpu, b: Gpu) -> int:
    """The # of `NV#` between two GPUs (0: no NVLink between them).

    Direct links count first. On an NVSwitch system every link's remote is the switch
    (FFFFFFFF:FF:FF.0), so bus ids never name the peer: both GPUs having switch links joins them, with
    k = the smaller of their switch link counts (the 2x H200 prints NV18 with 18 switch links each).
    """
    direct = direct_nvlink_count(a, b)
    if direct:
        return direct
    switch_a, switch_b = switch_nvlink_count(a), switch_nvlink_count(b)
    if switch_a and switch_b:
        return min(switch_a, switch_b)
    return 0


def pair_label(a: Gpu, b: Gpu, common_ancestor: int | NAType | None = None) -> str | None:
    """The `nvidia-smi topo -m` cell for two GPUs: "X", "NV<k>", else the PCIe label of their common ancestor.

    ``common_ancestor``: the NVML topology level; NA when NVML refused it ("N/A" is returned); None when not
    recorded (None is returned: the cell is unknown).
    """
    if a.index == b.index:
        return "X"
    k = nvlink_pair_count(a, b)
    if k:
        return f"NV{k}"
    if common_ancestor is None:
        return None
    if common_ancestor is NA or not isinstance(common_ancestor, int):
        return "N/A"
    return pcie_label(common_ancestor)
