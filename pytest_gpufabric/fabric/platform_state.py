"""What the platform's readings say, before any promise is held to them: the bridges whose ACS sends peer-to-peer
traffic up to the root complex, each GPU's and NIC's IOMMU mode, whether a peer-memory module is loaded. The
platform checks (checks/platform.py) judge these against a profile; ``gpufabric profile init`` writes them into one.
"""

from __future__ import annotations

import re

from ..formats.pci_config import ACS_BITS, REDIRECT_BITS
from ..units import GIB
from .platform_record import PEER_MEMORY_MODULES, Platform
from .platform_text import module_list_kind, module_state


def acs_state(platform: Platform, *, strict: bool = False) -> tuple[dict[str, dict], list[str], list[str]]:
    """The bridges above the GPUs and NICs: (bad bridge -> {"set": bits, "below": labels, "source"}, reasons some
    could not be judged, what was judged). ``strict``: any ACS control bit counts, not only the redirects."""
    bad: dict[str, dict] = {}
    unreadable: list[str] = []
    judged: list[str] = []
    on_root_bus = []
    for endpoint in platform.endpoints:
        if not endpoint.placed:
            unreadable.append(f"{endpoint.label}: where it sits in the PCI tree is not known")
            continue
        if endpoint.above_unknown:  # the bridges shown are judged below; those above them cannot be
            unreadable.append(f"{endpoint.label}: {endpoint.above_unknown}")
        elif not endpoint.bridges:
            on_root_bus.append(endpoint.label)
            continue
        for bdf in endpoint.bridges:
            node = platform.devices.get(bdf)
            facts = node.facts if node else None
            if facts is None:
                unreadable.append(f"{bdf} above {endpoint.label}: " + ((node.unreadable if node else None)
                                                                        or "its config space was not recorded"))
                continue
            if facts.acs is None or (facts.acs and facts.acs_control is None):
                why = (facts.unreadable_reason("ACSCtl") or facts.extended_unreadable or facts.capabilities_unreadable
                       or "ACSCtl not shown")
                unreadable.append(f"{bdf} above {endpoint.label}: {why} [{facts.source}]")
                continue
            judged.append(bdf)
            bits = [b for b in (ACS_BITS if strict else REDIRECT_BITS) if (facts.acs_control or {}).get(b)]
            if bits:
                entry = bad.setdefault(bdf, {"set": bits, "below": [], "source": facts.source,
                                             "control": facts.acs_control})
                if endpoint.label not in entry["below"]:
                    entry["below"].append(endpoint.label)
    if on_root_bus:
        if platform.hypervisor.value:
            verb = "sits" if len(on_root_bus) == 1 else "sit"
            unreadable.append(f"{', '.join(on_root_bus)} {verb} directly on the root bus of this VM's PCI tree: "
                              "the host's PCIe switches and their ACS are hidden from the guest")
        else:
            judged.extend(f"{label} (directly on the root bus: no bridge to redirect)" for label in on_root_bus)
    return bad, unreadable, judged


_DOMAINS = {"identity": "passthrough", "DMA": "translated", "DMA-FQ": "translated", "unmanaged": "unmanaged",
            "blocked": "blocked"}
_OFF = re.compile(r"(?:^|\s)(?:iommu=off|intel_iommu=off|amd_iommu=off)(?:\s|$)")
_PT = re.compile(r"(?:^|\s)(?:iommu=pt|iommu\.passthrough=(?:1|on|y))(?:\s|$)")
_NOPT = re.compile(r"(?:^|\s)iommu\.passthrough=(?:0|off|n)(?:\s|$)")
_ON = re.compile(r"(?:^|\s)(?:intel_iommu=on|amd_iommu=on|iommu=on|iommu=force)(?:\s|$)")


def machine_iommu_mode(platform: Platform) -> tuple[str | None, str]:
    """The IOMMU mode the kernel as a whole runs in, and the evidence; (None, why) when nothing says."""
    cmdline = platform.kernel_cmdline.value or ""
    log = platform.kernel_log.value or {}
    evidence = []
    if log.get("default_domain"):
        evidence.append(f"{platform.kernel_log.source}: '{log['default_domain_line']}'")
    if cmdline:
        params = " ".join(p for p in cmdline.split() if "iommu" in p) or "no iommu parameter"
        evidence.append(f"kernel command line ({platform.kernel_cmdline.source}): {params}")
    units = platform.iommu_units
    if log.get("iommu") == "disabled" or _OFF.search(cmdline):
        return "off", "; ".join(evidence)
    if units.known and not units.value:
        return "off", "; ".join([f"no IOMMU unit in {units.source}", *evidence])
    if log.get("default_domain") in ("Translated", "Passthrough"):
        return log["default_domain"].lower(), "; ".join(evidence)
    if _PT.search(cmdline):
        return "passthrough", "; ".join(evidence)
    if _NOPT.search(cmdline) or (_ON.search(cmdline) and (units.value or log.get("iommu") == "enabled")):
        return "translated", "; ".join(evidence + ["no iommu=pt: the default domain translates (unless the "
                                                   "kernel was built with CONFIG_IOMMU_DEFAULT_PASSTHROUGH)"])
    if units.value and cmdline:
        return "translated", "; ".join(evidence + [f"IOMMU units {', '.join(units.value)} and no iommu=pt"])
    return None, "; ".join(evidence) or "neither the kernel command line nor the IOMMU units were recorded"


def iommu_modes(platform: Platform) -> dict[str, tuple[str | None, str]]:
    """Each GPU's and NIC's IOMMU mode ("passthrough", "translated", "off", "unmanaged", ...) and its evidence: its
    IOMMU group's type where sysfs says, else the kernel's. Keyed "machine" when no device is known."""
    machine = machine_iommu_mode(platform)
    modes = {}
    for endpoint in platform.endpoints:
        node = platform.devices.get(endpoint.bdf or "")
        if node and node.iommu_domain:
            modes[endpoint.label] = (_DOMAINS.get(node.iommu_domain, node.iommu_domain),
                                     f"{node.iommu_source}: {node.iommu_domain}")
        else:
            modes[endpoint.label] = machine
    return modes or {"machine": machine}


def peer_memory_loaded(platform: Platform) -> tuple[bool | None, str]:
    """Whether a peer-memory module is loaded, and the evidence; None when neither list says, with why: the
    module list is filtered so that it cannot show them, or the machine hides it ("not readable here: ...")."""
    modules = platform.modules
    states = {name: module_state(modules, name) for name in PEER_MEMORY_MODULES}
    files = platform.peer_memory_files
    present = list((files.value or {}).items())
    if any(states.values()) or present:
        shown = [n for n, s in states.items() if s] + [f"{path} {version}".strip() for path, version in present]
        return True, f"{', '.join(shown)} [{modules.source or files.source}]"
    evidence = []
    if all(state is False for state in states.values()):
        listing = modules.value
        only_greps = len(listing["searched"]) == len(listing.get("commands", listing["searched"]))
        if not listing["complete"] and listing["searched"] and only_greps:
            how = " (its " + " and ".join(f"`grep {p}`" for p in listing["searched"]) + " printed nothing)"
        else:
            how = f" ({module_list_kind(modules)})"
        evidence.append(f"neither {' nor '.join(PEER_MEMORY_MODULES)} in {modules.source}{how}")
    if files.known:
        evidence.append(f"none of {files.source} exists")
    if evidence:
        return False, "; ".join(evidence)
    if modules.known:
        unknown_ones = [name for name, state in states.items() if state is None]
        return None, (f"{modules.source} is {module_list_kind(modules)}: it cannot show whether "
                      f"{' or '.join(unknown_ones)} is loaded (a whole `lsmod`, or cat /proc/modules, can)")
    return None, modules.unreadable or ""


def hugepage_size_text(size_kb: int) -> str:
    return f"{size_kb // (GIB // 1024)} GiB" if size_kb >= GIB // 1024 else f"{size_kb // 1024} MiB"
