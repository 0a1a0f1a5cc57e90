"""The platform facts a customer can send as text, read into the platform model (fabric/platform.py): ``lspci
-vvv`` (the PCI path of each GPU and RDMA NIC, and whether the text shows it whole), ``lsmod`` (and what its pasted
filter lets it show), the kernel log, and ``nvidia-smi -q -x``'s persistence mode."""

from __future__ import annotations

import re

from ..formats.lsmod import command_shows, parse_module_list
from ..formats.lspci import LspciDevice, lspci_parents, normalize_bdf, parse_lspci
from .platform_record import _GPU_CLASSES, _NIC_DRIVERS, _NIC_WORDS, _NVIDIA, Endpoint, PciNode, Platform, Reading


def modules_reading(text: str, source: str) -> Reading:
    """A module list paste (lsmod.txt) as a Reading: {"loaded": names, "complete": whether it shows every loaded
    module, "searched": the patterns of its plain greps, "commands": the filtering command lines it holds}."""
    modules = parse_module_list(text)
    return Reading({"loaded": sorted(modules.loaded), "complete": modules.complete, "searched": modules.searched(),
                    "commands": list(modules.commands)}, source)


def module_state(modules: Reading, name: str) -> bool | None:
    """True loaded, False shown absent (the list is whole, or a pasted filter would have shown its line), None not
    known from this list."""
    if not modules.known:
        return None
    if name in modules.value["loaded"]:
        return True
    # a record of an earlier version holds "searched" (plain greps) without "commands"
    commands = modules.value.get("commands", [f"lsmod | grep {p}" for p in modules.value.get("searched", [])])
    if modules.value["complete"] or any(command_shows(c, name) for c in commands):
        return False
    return None


def module_list_kind(modules: Reading) -> str:
    """What the module list is, in words: "a whole module list", or "filtered (`lsmod | grep -v nv`)"."""
    if not modules.known:
        return "no module list"
    if modules.value["complete"]:
        return "a whole module list"
    commands = modules.value.get("commands") or [f"lsmod | grep {p}" for p in modules.value.get("searched", [])]
    return "a filtered module list (" + ", ".join(f"`{c}`" for c in commands) + ")"


_LOG_CMDLINE = re.compile(r"Kernel command line:\s*(?P<cmdline>.*)$")
_LOG_DOMAIN = re.compile(r"iommu: Default domain type:\s*(?P<type>\w+)(?P<how>.*)$")
_LOG_DMAR = re.compile(r"(?:DMAR|AMD-Vi): IOMMU (?P<state>enabled|disabled)", re.IGNORECASE)


def kernel_log_reading(text: str, source: str) -> tuple[Reading, Reading]:
    """(the IOMMU facts, the kernel command line) a kernel log (``dmesg``, a ``dmesg | grep -i iommu``) states."""
    facts: dict[str, str] = {}
    cmdline = None
    for line in text.splitlines():
        if m := _LOG_CMDLINE.search(line):
            cmdline = m.group("cmdline").strip()
        elif m := _LOG_DOMAIN.search(line):
            facts["default_domain"] = m.group("type")
            facts["default_domain_line"] = line.strip()
        elif m := _LOG_DMAR.search(line):
            facts["iommu"] = m.group("state").lower()
    return (Reading(facts or None, source), Reading(cmdline, f"{source}, 'Kernel command line:'") if cmdline
            else Reading())


def persistence_from_query_xml(text: str, source: str) -> dict[str, Reading]:
    """``<persistence_mode>`` of each ``<gpu>`` of ``nvidia-smi -q -x`` (document order = NVML index order)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return {}
    readings = {}
    for index, gpu in enumerate(root.findall("gpu")):
        mode = (gpu.findtext("persistence_mode") or "").strip()
        if mode in ("Enabled", "Disabled"):
            readings[f"GPU{index}"] = Reading(mode == "Enabled", f"{source} <persistence_mode>")
        elif mode:
            readings[f"GPU{index}"] = Reading(source=f"{source} <persistence_mode>",
                                              unreadable=f"not readable here: nvidia-smi printed {mode!r}")
    return readings


def _is_gpu(device: LspciDevice) -> bool:
    klass = (device.facts.class_code or 0) >> 8
    nvidia = device.facts.vendor_id == _NVIDIA or "NVIDIA" in device.description or device.driver == "nvidia"
    return klass in _GPU_CLASSES and nvidia


def _is_nic(device: LspciDevice) -> bool:
    klass = (device.facts.class_code or 0) >> 8
    if klass == 0x0207 or device.driver in _NIC_DRIVERS:
        return True
    return klass == 0x0200 and any(word in device.description for word in _NIC_WORDS)


def apply_lspci(platform: Platform, text: str, source: str, gpu_bus_ids: dict[int, str] | None = None,
                nic_bus_ids: dict[str, str] | None = None) -> None:
    """The PCI functions of an ``lspci -vvv`` text fill a platform that has none readable. GPUs are NVIDIA
    display-class functions (named GPUn where ``gpu_bus_ids`` has their bus id), NICs RDMA-capable ones (named
    by ``nic_bus_ids``: RDMA device -> bus id). Raises ValueError for text that is not lspci's."""
    devices = parse_lspci(text)
    parents = lspci_parents(devices)
    by_bdf = {d.bdf: d for d in devices if d.bdf}
    gpu_names = {normalize_bdf(b): f"GPU{i}" for i, b in (gpu_bus_ids or {}).items()}
    nic_names = {normalize_bdf(b): name for name, b in (nic_bus_ids or {}).items()}
    # a grepped ACSCtl line cut short is kept, acs_control None with why: the check must not read it as "off"
    platform.loose_acs = [{"line": d.line, "acs_control": d.facts.acs_control, "source": source,
                           "unreadable": d.facts.unreadable_reason("ACSCtl")}
                          for d in devices if d.bdf is None
                          and (d.facts.acs_control is not None or d.facts.unreadable_reason("ACSCtl"))]
    endpoints = []
    for device in devices:
        if device.bdf is None:
            continue
        if _is_gpu(device):
            label, kind = gpu_names.get(device.bdf, f"NVIDIA GPU {device.bdf}"), "gpu"
        elif _is_nic(device):
            label, kind = nic_names.get(device.bdf, f"NIC {device.bdf} ({_short(device.description)})"), "nic"
        else:
            continue
        chain, bdf = [], parents.get(device.bdf)
        while bdf is not None and bdf not in chain:
            chain.insert(0, bdf)
            bdf = parents.get(bdf)
        top = by_bdf[chain[0]] if chain else device
        endpoints.append(Endpoint(label, kind, device.bdf, bridges=chain, above_unknown=_above_unknown(top, source)))
    platform.devices = {}
    for endpoint in endpoints:
        for bdf in [*endpoint.bridges, endpoint.bdf]:
            device = by_bdf[bdf]
            node = PciNode(bdf=bdf, description=device.description, facts=device.facts)
            if device.access_denied and device.facts.pcie is None:
                node.unreadable = f"not readable here: {device.facts.capabilities_unreadable}"
            platform.devices[bdf] = node
    platform.endpoints = endpoints
    platform.pci_source = source
    platform.pci_unreadable = None if endpoints else f"{source} shows no NVIDIA GPU and no RDMA NIC"


def bind_to_machine(platform: Platform, machine_gpus: dict[str, str | None], source: str,
                    device_ids: dict[str, int] | None = None) -> None:
    """Keep the PCI functions an lspci text filled only where the text is this machine's: the NVIDIA GPUs it shows
    are exactly the machine's GPUs (``machine_gpus``: "GPU0" -> PCI bus id, as NVML recorded them), and each is
    the PCI device the machine has there where both say which (``device_ids``: "GPU0" -> NVML's pciDeviceId,
    device << 16 | vendor). A text of another machine, of part of this one, or beside a record without bus ids
    shows nothing of this machine's PCIe path: its functions are dropped and ``pci_foreign`` names both sides."""
    shown = sorted(e.bdf for e in platform.endpoints if e.kind == "gpu" and e.bdf)
    mine = {normalize_bdf(bus_id): label for label, bus_id in machine_gpus.items() if bus_id}
    unbound = [label for label, bus_id in machine_gpus.items() if not bus_id]
    if mine and not unbound and set(shown) == set(mine):
        why = _other_devices(platform, mine, device_ids or {}, source)
        if why is None:
            return
        platform.devices, platform.endpoints, platform.loose_acs = {}, [], []
        platform.pci_foreign = why
        return
    theirs = f"NVIDIA GPU(s) {', '.join(shown)}" if shown else "no NVIDIA GPU"
    if not mine or unbound:
        whose = f"{', '.join(unbound)}" if unbound else "its GPUs"
        why = (f"{source} cannot be bound to this machine: the evidence records no PCI bus id for {whose} "
               f"(nvml.json or nvidia-smi-q.xml), and the text shows {theirs}")
    else:
        ours = ", ".join(f"{label} {bdf}" for bdf, label in sorted(mine.items(), key=lambda item: item[1]))
        missing = [f"{mine[bdf]} {bdf}" for bdf in sorted(mine) if bdf not in shown]
        foreign = [bdf for bdf in shown if bdf not in mine]
        parts = ([f"it does not show {', '.join(missing)}"] if missing else []) + (
            [f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not among them"] if foreign else [])
        why = (f"{source} shows {theirs}; this machine's GPUs are {ours} (PCI bus ids): {'; '.join(parts)}. An lspci "
               "of another machine, or of part of this one, shows nothing of this machine's PCIe path")
    platform.devices, platform.endpoints, platform.loose_acs = {}, [], []
    platform.pci_foreign = why


def _other_devices(platform: Platform, mine: dict[str, str], device_ids: dict[str, int], source: str) -> str | None:
    """Why a GPU the text shows at one of this machine's bus ids is another PCI device than the one there, or None
    (the same, or either side does not say)."""
    for bdf, label in sorted(mine.items()):
        node, recorded = platform.devices.get(bdf), device_ids.get(label)
        facts = node.facts if node else None
        if facts is None or facts.vendor_id is None or facts.device_id is None or recorded is None:
            continue
        theirs, ours = (facts.vendor_id, facts.device_id), (recorded & 0xFFFF, recorded >> 16)
        if theirs != ours:
            return (f"{source} shows {bdf} as PCI device {theirs[0]:04x}:{theirs[1]:04x}; this machine's {label} at "
                    f"that bus id is {ours[0]:04x}:{ours[1]:04x} (NVML's PCI device id): an lspci of another machine "
                    "shows nothing of this machine's PCIe path")
    return None


#: port types that sit on a root bus: nothing of the PCI tree is above them
_ON_ROOT_BUS = ("root port", "root complex integrated endpoint", "root complex event collector")


def _above_unknown(top: LspciDevice, source: str) -> str | None:
    """Why the bridges above the topmost function an lspci text shows of a GPU's or NIC's path are not known, or
    None when that function sits on a root bus (a root port, a function on bus 00). A switch port always has a port
    above it; a device on another bus has the bridge whose secondary bus that is: a paste without them (``lspci -vvv
    -s 04:00.0``) shows only part of the path, whose ACS cannot be judged whole."""
    port = top.facts.port_type
    domain, bus = top.bus or ("0000", 0)
    if port in _ON_ROOT_BUS or (bus == 0 and port not in ("switch downstream port", "switch upstream port")):
        return None
    if port == "switch downstream port":
        missing = "the switch's upstream port and the ports above it up to the root port"
    elif port == "switch upstream port":
        missing = f"the root port or switch port above it (the one whose secondary bus is {bus:02x})"
    else:
        missing = f"the bridge above it (the port whose secondary bus is {bus:02x})"
    return f"{source} shows {top.bdf} but not {missing}"


def _short(description: str) -> str:
    text = description.split(":", 1)[-1].strip()
    return re.sub(r"\s*\(rev [0-9a-f]+\).*$", "", text)[:60]


def _pci_readable(platform: Platform) -> bool:
    return any(node.facts is not None and node.facts.pcie is not None for node in platform.devices.values())
