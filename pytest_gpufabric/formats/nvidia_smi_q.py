"""``nvidia-smi -q -x``: the driver's inventory (serials, UUIDs, bus ids, PCIe, memory, VBIOS, ECC) as XML.

Reads no files and runs no tools; raises ``ValueError`` naming what it expected on a text that is not this XML.
Each value is typed as the NVML record's are (formats.typed): one that cannot be read is named, not judged.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from ..units import NA, parse_bytes
from .gpu import Gpu
from .gpu_fabric import GpuFabricInfo
from .typed import Reader, Unreadable

__all__ = ["XmlInventory", "parse_nvidia_smi_q_xml"]

_NA_TEXTS = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}


@dataclass
class XmlInventory:
    """What ``nvidia-smi -q -x`` says about the machine: versions and one Gpu (formats/gpu.py) per ``<gpu>``.

    A value nvidia-smi printed that is not what the element holds (``<driver_version>Unknown Error``, a width
    that is no number) is None, with the sentence naming file, element and value in ``damaged`` (versions) or
    the GPU's ``unreadable`` (formats.typed)."""

    driver_version: str | None = None
    cuda_version: str | None = None  # the CUDA version the driver supports, "13.0"
    gpus: list[Gpu] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)  # "driver_version", "cuda_driver_version" -> why
    #: ``<attached_gpus>``: the GPUs the driver has, of which ``-i`` may have printed fewer (None: not printed)
    attached_gpus: int | None = None


def _text(elem: ET.Element, path: str):
    """The stripped text at path: None when absent or empty, NA for N/A / Not Supported."""
    node = elem.find(path)
    if node is None or node.text is None or not node.text.strip():
        return None
    value = node.text.strip()
    return NA if value in _NA_TEXTS else value


class _XmlReader(Reader):
    """One ``<gpu>``'s values, typed: what cannot be read goes into ``bad`` by the model's field name."""

    def __init__(self, where: str, elem: ET.Element, who: str, bad: dict[str, str]) -> None:
        super().__init__(where)
        self.elem, self.who, self.bad = elem, who, bad

    def get(self, path: str, field: str, what: str, read, *args):
        value = _text(self.elem, path)
        if value is None or value is NA:
            return value
        try:
            return read(value, f"<{path}>", f"{self.who} {what}".strip(), *args)
        except Unreadable as exc:
            self.bad.setdefault(field, str(exc))
            return None

    def count(self, value: str, key: str, what: str, low: int, high: int, suffix: str = "") -> int:
        """A whole number as nvidia-smi prints it ("16x" with ``suffix`` "x")."""
        digits = value[: -len(suffix)] if suffix and value.endswith(suffix) else value
        if not digits.isdigit():
            raise Unreadable(f"{what} {value!r} in {self.where} ({key}) is not a whole number"
                             + (f" followed by {suffix!r}" if suffix else ""))
        return self.whole(int(digits), key, what, low, high)

    def size(self, value: str, key: str, what: str) -> int:
        try:
            size = parse_bytes(value)
        except ValueError:
            raise Unreadable(f"{what} {value!r} in {self.where} ({key}) is not a size such as '143771 MiB'") from None
        return self.whole(size, key, what, 1, 1 << 50, " of bytes")


def parse_nvidia_smi_q_xml(text: str, where: str = "nvidia-smi-q.xml") -> XmlInventory:
    """Parse ``nvidia-smi -q -x`` into versions and Gpu records, GPUs in document order; ``where`` names
    the text in the sentences about values that cannot be read.

    nvidia-smi lists GPUs by PCI bus id, which is the NVML index order, so ``index`` is the position (this
    matches ``<minor_number>`` only by accident: minor numbers follow the kernel driver's probe order).
    Compute capability, CPU affinity and NUMA node are not in -q output and stay None; so do NVLinks.
    """
    if not text or not text.strip():
        raise ValueError("nvidia-smi -q -x: empty text (expected an <nvidia_smi_log> XML document)")
    try:
        # ElementTree skips the DOCTYPE line and never fetches the DTD it names.
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise ValueError(
            f"nvidia-smi -q -x: malformed XML at line {line}, column {column}: {exc} "
            "(truncated or not the output of nvidia-smi -q -x)"
        ) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi -q -x: root element is <{root.tag}>, expected <nvidia_smi_log>")

    inventory = XmlInventory()
    versions = _XmlReader(where, root, "", inventory.damaged)
    inventory.driver_version = versions.get("driver_version", "driver_version", "driver version", versions.version)
    inventory.cuda_version = versions.get("cuda_version", "cuda_driver_version", "CUDA version", versions.version)
    inventory.driver_version = _no_na(inventory.driver_version)
    inventory.cuda_version = _no_na(inventory.cuda_version)
    attached = versions.get("attached_gpus", "attached_gpus", "attached GPU count", versions.count, 0, 1024)
    inventory.attached_gpus = attached if isinstance(attached, int) else None
    link = "pci/pci_gpu_link_info"
    for index, elem in enumerate(root.findall("gpu")):
        bad: dict[str, str] = {}
        r = _XmlReader(where, elem, f"GPU{index}", bad)
        bus_id = r.get("pci/pci_bus_id", "pci_bus_id", "PCI bus id", r.bus_id)
        gpu = Gpu(
            index=index,
            name=r.get("product_name", "name", "name", r.text),
            uuid=r.get("uuid", "uuid", "UUID", r.text),
            serial=r.get("serial", "serial", "serial", r.text),
            pci_bus_id=bus_id,
            memory_bytes=r.get("fb_memory_usage/total", "memory_bytes", "memory total", r.size),
            pcie_gen_max=r.get(f"{link}/pcie_gen/max_link_gen", "pcie_gen_max", "PCIe max generation", r.count, 1, 7),
            pcie_gen_current=r.get(f"{link}/pcie_gen/current_link_gen", "pcie_gen_current", "PCIe current generation",
                                   r.count, 1, 7),
            pcie_width_max=r.get(f"{link}/link_widths/max_link_width", "pcie_width_max", "PCIe max width", r.count,
                                 1, 32, "x"),
            pcie_width_current=r.get(f"{link}/link_widths/current_link_width", "pcie_width_current",
                                     "PCIe current width", r.count, 0, 32, "x"),
            vbios_version=r.get("vbios_version", "vbios_version", "VBIOS version", r.version, True),
            ecc_mode=r.get("ecc_mode/current_ecc", "ecc_mode", "ECC mode", r.choice, ("Enabled", "Disabled")),
        )
        gpu.fabric = _fabric(elem, gpu.label)
        gpu.unreadable = bad
        inventory.gpus.append(gpu)
    if not inventory.gpus:
        raise ValueError("nvidia-smi -q -x: no <gpu> element (no GPU visible, or not the -q -x output)")
    return inventory


#: ``<fabric><health>`` elements by the words `nvidia-smi -q` prints for them
_HEALTH_TAGS = {"summary": "Summary", "bandwidth": "Bandwidth",
                "route_recovery_in_progress": "Route Recovery in progress", "route_unhealthy": "Route Unhealthy",
                "access_timeout_recovery": "Access Timeout Recovery",
                "incorrect_configuration": "Incorrect Configuration", "partition_assigned": "Partition Assigned"}


def _fabric(elem: ET.Element, who: str) -> GpuFabricInfo | None:
    """``<fabric>`` (where the driver prints it): state, status, clique id, cluster UUID and health, in -q's words."""
    if elem.find("fabric") is None:
        return None
    state = _text(elem, "fabric/state")
    info = GpuFabricInfo(state=state, status=_text(elem, "fabric/status"))
    clique = _text(elem, "fabric/cliqueId")
    if isinstance(clique, str) and clique is not NA:
        if clique.isdigit():
            info.clique_id = int(clique)
        else:
            info.unreadable["clique_id"] = f"{who} <fabric/cliqueId> {clique!r} is not a whole number"
    else:
        info.clique_id = clique
    uuid = _text(elem, "fabric/clusterUuid")
    info.cluster_uuid = uuid.lower() if isinstance(uuid, str) and uuid is not NA else uuid
    for tag, words in _HEALTH_TAGS.items():
        value = _text(elem, f"fabric/health/{tag}")
        if isinstance(value, str) and value is not NA:
            info.health[words] = value
    if state is NA:
        info.status = info.clique_id = info.cluster_uuid = NA
    return info


def _no_na(value):
    """nvidia-smi printing N/A for a version says nothing about it: not recorded."""
    return None if value is NA else value
