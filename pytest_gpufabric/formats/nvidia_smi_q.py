"""``nvidia-smi -q -x``: the driver's inventory (serials, UUIDs, bus ids, PCIe, memory, VBIOS, ECC) as XML.

Reads no files and runs no tools; raises ``ValueError`` naming what it expected on anything else.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from ..fabric.model import Gpu
from ..units import NA, parse_bytes

__all__ = ["XmlInventory", "parse_nvidia_smi_q_xml"]

_NA_TEXTS = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}


@dataclass
class XmlInventory:
    """What ``nvidia-smi -q -x`` says about the machine: versions and one model.Gpu per ``<gpu>``."""

    driver_version: str | None = None
    cuda_version: str | None = None  # the CUDA version the driver supports, "13.0"
    gpus: list[Gpu] = field(default_factory=list)


def _text(elem: ET.Element, path: str):
    """The stripped text at path: None when absent or empty, NA for N/A / Not Supported."""
    node = elem.find(path)
    if node is None or node.text is None or not node.text.strip():
        return None
    value = node.text.strip()
    return NA if value in _NA_TEXTS else value


def _int(elem: ET.Element, path: str, where: str, suffix: str = ""):
    value = _text(elem, path)
    if value is None or value is NA:
        return value
    digits = value[: -len(suffix)] if suffix and value.endswith(suffix) else value
    try:
        return int(digits)
    except ValueError:
        raise ValueError(f"nvidia-smi -q -x, {where}: <{path}> is {value!r}, expected an integer") from None


def parse_nvidia_smi_q_xml(text: str) -> XmlInventory:
    """Parse ``nvidia-smi -q -x`` into versions and model.Gpu records, GPUs in document order.

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

    def version(path: str) -> str | None:
        value = _text(root, path)
        return None if value is None else str(value)

    inventory = XmlInventory(driver_version=version("driver_version"), cuda_version=version("cuda_version"))
    for index, elem in enumerate(root.findall("gpu")):
        where = f"GPU {index} ({elem.get('id')})"
        memory = _text(elem, "fb_memory_usage/total")
        if memory is not None and memory is not NA:
            try:
                memory = parse_bytes(memory)
            except ValueError:
                raise ValueError(
                    f"nvidia-smi -q -x, {where}: <fb_memory_usage/total> is {memory!r}, "
                    "expected e.g. '143771 MiB'"
                ) from None
        link = "pci/pci_gpu_link_info"
        inventory.gpus.append(
            Gpu(
                index=index,
                name=_text(elem, "product_name"),
                uuid=_text(elem, "uuid"),
                serial=_text(elem, "serial"),
                pci_bus_id=_text(elem, "pci/pci_bus_id"),
                memory_bytes=memory,
                pcie_gen_max=_int(elem, f"{link}/pcie_gen/max_link_gen", where),
                pcie_gen_current=_int(elem, f"{link}/pcie_gen/current_link_gen", where),
                pcie_width_max=_int(elem, f"{link}/link_widths/max_link_width", where, suffix="x"),
                pcie_width_current=_int(elem, f"{link}/link_widths/current_link_width", where, suffix="x"),
                vbios_version=_text(elem, "vbios_version"),
                ecc_mode=_text(elem, "ecc_mode/current_ecc"),
            )
        )
    if not inventory.gpus:
        raise ValueError("nvidia-smi -q -x: no <gpu> element (no GPU visible, or not the -q -x output)")
    return inventory


