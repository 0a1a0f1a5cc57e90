"""Platform checks: the host settings that make good GPUs slow (ACS, the IOMMU, the peer-memory module,
persistence mode, versions, the CPU governor, NUMA balancing, hugepages, PCIe payload sizes) against the
profile's ``platform:`` section.

Each failure names the setting, where it was read, the value found, the one expected and what it costs. A
promised setting the machine hides (a VM without cpufreq, config space that needs root) is "not checked" with a
message starting "not readable here:" (a skip that names the reason: neither a pass nor silence); one the
evidence did not record (a bundle without the file) is "not checked", naming the files a bundle needs.
"""

from __future__ import annotations

import re

from ..fabric.model import Fabric
from ..fabric.platform_record import Endpoint, Platform, Reading
from ..fabric.platform_state import acs_state, hugepage_size_text, iommu_modes, peer_memory_loaded
from ..formats.gpu import Gpu
from ..formats.pci_config import ACS_BITS, REDIRECT_BITS
from ..units import format_bytes, is_na, parse_bytes
from .result import CheckResult, failed, passed, unknown

#: what a bundle needs for each setting, for "not recorded" messages
_FILES = {
    "acs": "platform.json (gpufabric snapshot, as root) or lspci-vvv.txt (sudo lspci -vvv)",
    "pcie": "platform.json (gpufabric snapshot, as root) or lspci-vvv.txt (sudo lspci -vvv)",
    "iommu": "platform.json (gpufabric snapshot), proc-cmdline.txt or dmesg.txt",
    "modules": "platform.json (gpufabric snapshot) or lsmod.txt (lsmod, or cat /proc/modules)",
    "persistence": "platform.json (gpufabric snapshot) or nvidia-smi-q.xml",
    "other": "platform.json (gpufabric snapshot)",
}

_ACS_COST = ("Cost: peer-to-peer traffic below these bridges (GPU to GPU, and GPUDirect RDMA between GPU and NIC) "
             "is redirected up through the CPU's root complex instead of across the switch: lower bandwidth, higher "
             "latency, and hangs where the root complex does not forward peer traffic. Disable ACS in the BIOS, or "
             "clear the ACS control register (NCCL's troubleshooting guide: setpci -s <bridge> ECAP_ACS+0x6.w=0000, "
             "until the next boot).")
_IOMMU_COST = ("Cost: every GPU and NIC DMA is translated through IOMMU page tables (IOTLB misses on large "
               "transfers), and peer-to-peer and GPUDirect RDMA traffic is routed to the root complex for "
               "translation or fails; NCCL's troubleshooting guide: boot with iommu=pt (or the IOMMU off).")
_PEER_COST = ("Cost: NCCL finds none of the files it tests (/sys/kernel/mm/memory_peers/nv_mem/version, "
              "/sys/module/nvidia_peermem/version), prints 'NET/IB : GPU Direct RDMA Disabled for HCA' and stages "
              "every inter-node transfer through host memory: a copy each way and the CPU's memory bandwidth. Load "
              "it: modprobe nvidia-peermem (newer NCCL can use DMA-BUF instead where the kernel and the open GPU "
              "driver support it).")
_PERSISTENCE_COST = ("Cost: with no client holding the GPU the driver tears its state down, so every job start pays "
                     "the GPU's initialization again (seconds per GPU) and settings made since boot are lost: "
                     "nvidia-smi -pm 1, or run nvidia-persistenced.")
_GOVERNOR_COST = ("Cost: the host side (NCCL proxy threads, kernel launches, data loading, host copies) runs at "
                  "lowered clocks that ramp up late: latency-bound collectives and small transfers slow down.")
_NUMA_COST = ("Cost: the kernel unmaps pages of busy processes to sample their access and migrates them between "
              "NUMA nodes: page faults and migrations stall pinned-memory staging and the host side of GPU traffic.")
_HUGEPAGES_COST = ("Cost: what the profile reserves them for (DPDK, pinned buffers, large-page allocators) falls "
                   "back to 4 KiB pages or fails to start.")
_PCIE_COST = ("Cost: each PCIe transaction carries less data (MaxPayload) or a read asks for less (MaxReadReq): more "
              "header overhead and more round trips, lower DMA throughput between the device and memory or peers.")
_VERSION_COST = ("Cost: another {what} than the one validated: performance, NCCL and CUDA compatibility and the fixes "
                 "in it differ from what was sold.")


# --------------------------------------------------------------------------------------------------- helpers


def _not_readable(name: str, subject: str, expected, setting: str, reading: Reading, platform: Platform,
                  files: str) -> CheckResult:
    """Not checked, for a setting that has no value: the machine hid it (its reason), or the evidence lacks it."""
    if reading.unreadable:
        where = reading.source or platform.source
        return unknown(name, subject, expected, f"{reading.unreadable} [{setting}, {where}]")
    if platform.source == "this machine":
        return unknown(name, subject, expected, f"not readable here: {setting} could not be read on this machine")
    return unknown(name, subject, expected, f"{setting}: not recorded by {platform.source}: a bundle needs {files}")


def _flags(control: dict[str, bool] | None, names=ACS_BITS) -> str:
    return " ".join(f"{n}{'+' if (control or {}).get(n) else '-'}" for n in names if control and n in control)


def version_key(text: str, *, hexadecimal: bool = False) -> tuple:
    """'580.159.04' -> (580, 159, 4); VBIOS '96.00.A5.00.1A' with hexadecimal=True -> (0x96, 0, 0xA5, 0, 0x1A).
    Parts that are not numbers compare as text, after numbers."""
    key = []
    for part in re.split(r"[.\-_ ]+", str(text).strip()):
        if not part:
            continue
        try:
            key.append((0, int(part, 16 if hexadecimal else 10), ""))
        except ValueError:
            key.append((1, 0, part.lower()))
    return tuple(key)


def _version_ok(found: str, spec: dict, *, hexadecimal: bool = False) -> tuple[bool, str]:
    if "exact" in spec:
        return str(found).strip().lower() == str(spec["exact"]).strip().lower(), f"exactly {spec['exact']}"
    return (version_key(found, hexadecimal=hexadecimal) >= version_key(spec["min"], hexadecimal=hexadecimal),
            f"at least {spec['min']}")


def _describe(platform: Platform, bdf: str) -> str:
    node = platform.devices.get(bdf)
    kind = node.facts.port_type if node and node.facts and node.facts.port_type else "bridge"
    desc = f", {_short(node.description)}" if node and node.description else ""
    return f"{kind} {bdf}{desc}"


def _short(description: str) -> str:
    text = description.split(":", 1)[-1].strip()
    return re.sub(r"\s*\(rev [0-9a-f]+\).*$", "", text)[:60]


# ---------------------------------------------------------------------------------------------------- ACS


def _acs_lines(platform: Platform, bad: dict[str, dict]) -> list[str]:
    return [f"ACS on the {_describe(platform, bdf)} above {' and '.join(entry['below'])}: ACSCtl "
            f"{' '.join(b + '+' for b in entry['set'])} ({_flags(entry['control'])}) [{entry['source']}]"
            for bdf, entry in bad.items()]


def check_acs(want: str, platform: Platform, gpus: list[str] | None = None) -> CheckResult:
    """``acs: disabled``: no bridge above a GPU or NIC redirects peer-to-peer traffic (ReqRedir, CmpltRedir,
    UpstreamFwd, EgressCtrl); ``acs: all_off``: no ACS control bit at all (NCCL's reading of ``lspci -vvv |
    grep ACSCtl``). ``gpus``: the machine's GPUs ("GPU0", ...); a record of the PCI paths that leaves one out
    shows nothing of its bridges, so ACS is not passed over the machine on the others'."""
    strict = want == "all_off"
    expected = {"acs": want}
    bits_text = "no ACS control bit set" if strict else "no peer-to-peer redirect (ReqRedir- CmpltRedir- " \
                                                        "UpstreamFwd- EgressCtrl-)"
    if platform.pci_foreign:
        return unknown("platform-acs", "machine", expected, platform.pci_foreign)
    bad, unreadable, judged = acs_state(platform, strict=strict)
    unreadable += [f"line {e['line']} of {e['source']}: {e['unreadable']}" for e in platform.loose_acs
                   if e.get("acs_control") is None]  # a grepped ACSCtl line cut short: not "off"
    loose = [entry for entry in platform.loose_acs
             if any((entry.get("acs_control") or {}).get(b) for b in (ACS_BITS if strict else REDIRECT_BITS))]
    found = {"bridges": {bdf: e["set"] for bdf, e in bad.items()}, "unreadable": unreadable, "judged": judged}
    if bad or loose:
        lines = _acs_lines(platform, bad)
        if loose:
            where = ", ".join(str(e["line"]) for e in loose)
            plural = "s" if len(loose) > 1 else ""
            lines.append(f"ACS on {len(loose)} function(s) the paste does not name (line{plural} {where} of "
                         f"{loose[0]['source']}, a grep of lspci -vvv without the device headers): "
                         f"ACSCtl {_flags(loose[0]['acs_control'])}")
        summary = "; ".join(lines)
        return failed("platform-acs", "machine", expected, found,
                      f"{summary}. Expected {bits_text} on every bridge between the GPUs and NICs and the root "
                      f"complex (acs: {want}). " + _ACS_COST
                      + (f" Also not readable: {'; '.join(unreadable)}." if unreadable else ""),
                      details=lines + unreadable)
    if not platform.endpoints and not platform.loose_acs:
        if platform.pci_unreadable:
            return unknown("platform-acs", "machine", expected, f"not readable here: {platform.pci_unreadable} "
                                                                f"[{platform.pci_source or platform.source}]")
        return _not_readable("platform-acs", "machine", expected, "PCIe ACS", Reading(), platform, _FILES["acs"])
    left_out = [label for label in gpus or [] if platform.endpoints and platform.endpoint(label) is None]
    if left_out:
        shown = ", ".join(e.label for e in platform.endpoints)
        where = platform.source if platform.source.endswith(".json") else platform.pci_source or platform.source
        return unknown("platform-acs", "machine", expected,
                       f"{where} records the PCI path of {shown} and not of "
                       f"{', '.join(left_out)}: the bridges above {'it' if len(left_out) == 1 else 'them'} are "
                       "unknown, so ACS over the machine is not shown")
    if unreadable:
        return unknown("platform-acs", "machine", expected, "not readable here: PCIe ACS above the GPUs and NICs: "
                       + "; ".join(unreadable) + (f" (judged without a redirect: {', '.join(judged)})" if judged
                                                  else ""))
    return passed("platform-acs", "machine", expected, found,
                  f"{bits_text} on the {len(judged)} bridge(s) above "
                  f"{', '.join(e.label for e in platform.endpoints) or 'the functions of the paste'}"
                  f" [{platform.pci_source or platform.source}]")


# -------------------------------------------------------------------------------------------------- IOMMU


def check_iommu(want: str, platform: Platform) -> CheckResult:
    """``passthrough``: DMA untranslated (identity domains, or no IOMMU); ``off``: no IOMMU at all;
    ``translated``: the IOMMU translates (a profile that wants DMA isolation)."""
    accepted = {"passthrough": ("passthrough", "off"), "off": ("off",), "translated": ("translated",)}[want]
    expected = {"iommu": want}
    modes = iommu_modes(platform)
    found = {label: mode for label, (mode, _) in modes.items()}
    wrong = {label: m for label, m in modes.items() if m[0] is not None and m[0] not in accepted}
    vm_note = (" (this is a VM: the host's IOMMU, which also translates the GPUs' DMA, is not visible from the "
               "guest)") if platform.hypervisor.value else ""
    if wrong:
        by_mode: dict[tuple, list[str]] = {}
        for label, (mode, evidence) in wrong.items():
            by_mode.setdefault((mode, evidence), []).append(label)
        lines = [f"IOMMU {mode} for {', '.join(labels) if labels != ['machine'] else 'the machine'} ({evidence})"
                 for (mode, evidence), labels in by_mode.items()]
        return failed("platform-iommu", "machine", expected, found,
                      "; ".join(lines) + f"; expected {want} (iommu: {want}). " + _IOMMU_COST + vm_note,
                      details=lines)
    unknowns = {label: evidence for label, (mode, evidence) in modes.items() if mode is None}
    if unknowns:
        reading = Reading(unreadable=None) if platform.source != "this machine" else Reading(
            unreadable="not readable here: " + "; ".join(f"{k}: {v}" for k, v in unknowns.items()))
        return _not_readable("platform-iommu", "machine", expected, "the IOMMU mode", reading, platform,
                             _FILES["iommu"])
    evidence = "; ".join(sorted({e for _, e in modes.values()}))
    summary = ", ".join(f"{label} {mode}" for label, (mode, _) in modes.items())
    return passed("platform-iommu", "machine", expected, found, f"IOMMU {summary} ({evidence}){vm_note}")


# ------------------------------------------------------------------------------------------ peer memory


def check_peer_memory(want: bool, platform: Platform) -> CheckResult:
    expected = {"peer_memory": want}
    loaded, evidence = peer_memory_loaded(platform)
    if loaded is None:
        if platform.modules.known:  # the list is there but filtered: say what it is, never "not recorded"
            return unknown("platform-peer-memory", "machine", expected, evidence)
        reading = Reading(unreadable=evidence if evidence.startswith("not readable") else None,
                          source=platform.modules.source)
        return _not_readable("platform-peer-memory", "machine", expected, "the peer-memory module", reading,
                             platform, _FILES["modules"])
    if loaded == want:
        state = "loaded" if loaded else "not loaded"
        return passed("platform-peer-memory", "machine", expected, {"loaded": loaded},
                      f"GPUDirect RDMA peer-memory module {state}: {evidence}")
    if want:
        return failed("platform-peer-memory", "machine", expected, {"loaded": False},
                      f"GPUDirect RDMA peer-memory module not loaded: {evidence}; expected nvidia_peermem (or "
                      "nv_peer_mem) loaded (peer_memory: true: the profile promises GPUDirect RDMA). " + _PEER_COST)
    return failed("platform-peer-memory", "machine", expected, {"loaded": True},
                  f"peer-memory module loaded ({evidence}); the profile says it must not be (peer_memory: false).")


# ------------------------------------------------------------------------------------------ per-GPU facts


def check_persistence(want: bool, label: str, platform: Platform) -> CheckResult:
    expected = {"persistence_mode": want}
    reading = platform.persistence_mode.get(label, Reading())
    if not reading.known:
        return _not_readable("platform-persistence", label, expected, f"{label}'s persistence mode", reading,
                             platform, _FILES["persistence"])
    state = "Enabled" if reading.value else "Disabled"
    if reading.value == want:
        return passed("platform-persistence", label, expected, reading.value,
                      f"{label}: persistence mode {state} [{reading.source}]")
    return failed("platform-persistence", label, expected, reading.value,
                  f"{label}: persistence mode {state} [{reading.source}], expected "
                  f"{'Enabled' if want else 'Disabled'}. " + (_PERSISTENCE_COST if want else ""))


def check_driver(spec: dict, fabric: Fabric) -> CheckResult:
    found = fabric.driver_version
    source = fabric.provenance.get("gpus") or fabric.source
    if "driver_version" in fabric.damaged:  # recorded, but no version: "Unknown Error" is not above 550
        return unknown("platform-driver", "machine", spec, f"{fabric.damaged['driver_version']} [{fabric.source}]")
    if found is None or is_na(found):
        return unknown("platform-driver", "machine", spec, f"the driver version is not recorded by {fabric.source}: "
                       "a bundle needs nvml.json (gpufabric snapshot) or nvidia-smi-q.xml")
    ok, want = _version_ok(found, spec)
    if ok:
        return passed("platform-driver", "machine", spec, found, f"NVIDIA driver {found} ({want}) [{source}]")
    return failed("platform-driver", "machine", spec, found, f"NVIDIA driver {found} [{fabric.source}], expected "
                  f"{want}. " + _VERSION_COST.format(what="driver"))


def check_vbios(spec: dict, gpu: Gpu, source: str) -> CheckResult:
    found = gpu.vbios_version
    if "vbios_version" in gpu.unreadable:
        return unknown("platform-vbios", gpu.label, spec, f"{gpu.unreadable['vbios_version']} [{source}]")
    if found is None or is_na(found):
        return unknown("platform-vbios", gpu.label, spec, f"{gpu.label}'s VBIOS version is not recorded by {source}: "
                       "a bundle needs nvml.json (gpufabric snapshot) or nvidia-smi-q.xml")
    ok, want = _version_ok(found, spec, hexadecimal=True)
    if ok:
        return passed("platform-vbios", gpu.label, spec, found, f"{gpu.label}: VBIOS {found} ({want}) [{source}]")
    return failed("platform-vbios", gpu.label, spec, found,
                  f"{gpu.label} (serial {gpu.serial or 'unknown'}): VBIOS {found} [{source}], expected {want}. "
                  + _VERSION_COST.format(what="VBIOS"))


def check_nic_firmware(spec: dict, platform: Platform, names: list[str]) -> CheckResult:
    """Every named NIC's firmware (``fw_ver``) against ``exact``/``min``; ``names`` empty: every RDMA NIC found."""
    expected = dict(spec)
    names = names or sorted(platform.nic_firmware)
    if not names:
        reading = Reading(unreadable="not readable here: no RDMA device in /sys/class/infiniband"
                          if platform.source == "this machine" else None)
        return _not_readable("platform-nic-firmware", "machine", expected, "NIC firmware", reading, platform,
                             _FILES["other"] + " or the RDMA devices (sysfs/ copy or ibv_devinfo-v.txt)")
    wrong, fine, missing = [], [], []
    for name in names:
        reading = platform.nic_firmware.get(name, Reading())
        if not reading.known:
            missing.append(f"{name}: {reading.unreadable or 'not recorded'}")
            continue
        ok, want = _version_ok(reading.value, spec)
        (fine if ok else wrong).append(f"{name} firmware {reading.value} [{reading.source}]"
                                       + ("" if ok else f", expected {want}"))
    found = {name: platform.nic_firmware.get(name, Reading()).value for name in names}
    if wrong:
        return failed("platform-nic-firmware", "machine", expected, found, "; ".join(wrong) + ". "
                      + _VERSION_COST.format(what="NIC firmware") + (f" Not read: {'; '.join(missing)}." if missing
                                                                     else ""), details=wrong)
    if missing:
        where = ("not readable here: " if platform.source == "this machine"
                 else f"NIC firmware not recorded by {platform.source}: ")
        return unknown("platform-nic-firmware", "machine", expected, where + "; ".join(missing))
    return passed("platform-nic-firmware", "machine", expected, found, "; ".join(fine))


# ---------------------------------------------------------------------------------------------- host CPU


def check_cpu_governor(want: str, platform: Platform) -> CheckResult:
    reading = platform.cpu_governors
    expected = {"cpu_governor": want}
    if not reading.known:
        return _not_readable("platform-cpu-governor", "machine", expected, "the CPU frequency governor", reading,
                             platform, _FILES["other"])
    others = {g: cpus for g, cpus in reading.value.items() if g != want}
    if not others:
        return passed("platform-cpu-governor", "machine", expected, reading.value,
                      f"CPU frequency governor {want} on CPUs {reading.value[want]} [{reading.source}]")
    text = "; ".join(f"{g} on CPUs {cpus}" for g, cpus in others.items())
    return failed("platform-cpu-governor", "machine", expected, reading.value,
                  f"CPU frequency governor {text} [{reading.source}], expected {want} on every CPU. " + _GOVERNOR_COST)


_NUMA_MODES = {0: "off", 1: "on (NUMA_BALANCING_NORMAL)", 2: "memory tiering", 3: "on and memory tiering"}


def check_numa_balancing(want: bool, platform: Platform) -> CheckResult:
    reading = platform.numa_balancing
    expected = {"numa_balancing": want}
    if not reading.known:
        return _not_readable("platform-numa-balancing", "machine", expected, "NUMA balancing", reading, platform,
                             _FILES["other"])
    state = _NUMA_MODES.get(reading.value, str(reading.value))
    if bool(reading.value) == want:
        return passed("platform-numa-balancing", "machine", expected, reading.value,
                      f"NUMA balancing {reading.value} ({state}) [{reading.source}]")
    return failed("platform-numa-balancing", "machine", expected, reading.value,
                  f"NUMA balancing {reading.value} ({state}) [{reading.source}], expected "
                  f"{'on' if want else '0 (off)'}. " + (_NUMA_COST if not want else ""))


def check_hugepages(spec: dict, platform: Platform) -> CheckResult:
    reading = platform.hugepages
    size_kb = parse_bytes(spec.get("page_size", "2 MiB")) // 1024
    want = int(spec["min_pages"])
    subject = f"hugepages {hugepage_size_text(size_kb)}"
    if not reading.known:
        return _not_readable("platform-hugepages", subject, spec, "hugepages", reading, platform, _FILES["other"])
    pages = reading.value.get(str(size_kb))
    sizes = ", ".join(f"{format_bytes(int(k) * 1024)}: {v['total']}" for k, v in reading.value.items())
    if pages is None:
        return failed("platform-hugepages", subject, spec, reading.value,
                      f"no {subject} pool on this kernel ({sizes}) [{reading.source}], expected at least {want} pages. "
                      + _HUGEPAGES_COST)
    if pages["total"] >= want:
        return passed("platform-hugepages", subject, spec, pages,
                      f"{subject}: {pages['total']} reserved, {pages['free']} free [{reading.source}]")
    return failed("platform-hugepages", subject, spec, pages,
                  f"{subject}: {pages['total']} reserved [{reading.source}], expected at least {want} "
                  f"({format_bytes(want * size_kb * 1024)}). " + _HUGEPAGES_COST)


# -------------------------------------------------------------------------------------------- PCIe sizes


def check_pcie_sizes(spec: dict, label: str, platform: Platform) -> CheckResult:
    """The Device Control register of a GPU or NIC: MaxPayload and MaxReadReq at least the profile's."""
    expected = dict(spec)
    if platform.pci_foreign:
        return unknown("platform-pcie", label, expected, platform.pci_foreign)
    endpoint: Endpoint | None = platform.endpoint(label)
    if endpoint is None:
        live = platform.source == "this machine"
        if platform.endpoints or platform.pci_unreadable:
            shown = ", ".join(e.label for e in platform.endpoints) or "no GPU or NIC"
            why = platform.pci_unreadable if live and platform.pci_unreadable else (
                f"{label}'s PCI function is not in {platform.pci_source or platform.source} (it shows {shown})")
            return unknown("platform-pcie", label, expected, f"not readable here: {why}" if live else why)
        reading = Reading(unreadable="not readable here: no PCI function read" if live else None)
        return _not_readable("platform-pcie", label, expected, f"{label}'s PCIe payload sizes", reading, platform,
                             _FILES["pcie"])
    node = platform.devices.get(endpoint.bdf or "")
    facts = node.facts if node else None
    if facts is None or facts.max_payload is None:
        why = ((facts.unreadable_reason("DevCtl") or facts.capabilities_unreadable) if facts else None) or (
            node.unreadable if node else None)
        if why:
            return unknown("platform-pcie", label, expected, (why if why.startswith("not readable") else
                                                               f"not readable here: {why}")
                           + f" [{label} {endpoint.bdf}, {facts.source if facts else platform.pci_source}]")
        return _not_readable("platform-pcie", label, expected, f"{label}'s PCIe payload sizes", Reading(), platform,
                             _FILES["pcie"])
    found = {"max_payload": facts.max_payload, "max_read_request": facts.max_read_request,
             "max_payload_supported": facts.max_payload_supported}
    summary = (f"{label} ({endpoint.bdf}): MaxPayload {facts.max_payload} bytes (device supports "
               f"{facts.max_payload_supported}), MaxReadReq {facts.max_read_request} bytes [DevCtl, {facts.source}]")
    problems = []
    if "min_max_payload" in spec and facts.max_payload < spec["min_max_payload"]:
        problems.append(f"MaxPayload {facts.max_payload} bytes, expected at least {spec['min_max_payload']}")
    if "min_max_read_request" in spec and (facts.max_read_request or 0) < spec["min_max_read_request"]:
        problems.append(f"MaxReadReq {facts.max_read_request} bytes, expected at least {spec['min_max_read_request']}")
    if problems:
        return failed("platform-pcie", label, expected, found, f"{summary}: " + "; ".join(problems) + ". "
                      + _PCIE_COST, details=problems)
    return passed("platform-pcie", label, expected, found, summary)


# ------------------------------------------------------------------------------------- bandwidth findings


def bandwidth_findings(platform: Platform) -> list[str]:
    """What in the platform explains a bandwidth below the promise, whatever the profile promises: one line per
    finding, naming the setting, where it was read and its cost in a few words."""
    lines = []
    bad, _, _ = acs_state(platform)
    lines += [f"{line}: peer-to-peer and GPUDirect RDMA traffic goes through the CPU" for line in
              _acs_lines(platform, bad)]
    for entry in platform.loose_acs:
        if any((entry.get("acs_control") or {}).get(b) for b in REDIRECT_BITS):
            lines.append(f"ACS redirect set on a function {entry['source']} line {entry['line']} does not name")
    translated = {label: evidence for label, (mode, evidence) in iommu_modes(platform).items()
                  if mode == "translated"}
    if translated:
        whom = "the machine" if list(translated) == ["machine"] else ", ".join(translated)
        lines.append(f"IOMMU translated for {whom} ({next(iter(translated.values()))}): DMA goes "
                     "through IOMMU page tables")
    nics = [e for e in platform.endpoints if e.kind == "nic"] or list(platform.nic_firmware)
    loaded, evidence = peer_memory_loaded(platform)
    if nics and loaded is False:
        lines.append(f"GPUDirect RDMA peer-memory module not loaded ({evidence}): inter-node traffic is staged "
                     "through host memory")
    off = [label for label, r in platform.persistence_mode.items() if r.value is False]
    if off:
        source = platform.persistence_mode[off[0]].source
        lines.append(f"persistence mode Disabled on {', '.join(off)} [{source}]")
    governors = platform.cpu_governors.value or {}
    slow = {g: c for g, c in governors.items() if g != "performance"}
    if slow:
        lines.append(f"CPU frequency governor {', '.join(f'{g} on CPUs {c}' for g, c in slow.items())} "
                     f"[{platform.cpu_governors.source}]: the host side runs at lowered clocks")
    if platform.numa_balancing.value:
        lines.append(f"NUMA balancing {platform.numa_balancing.value} [{platform.numa_balancing.source}]: pages of "
                     "busy processes are unmapped and migrated")
    for endpoint in platform.endpoints:
        node = platform.devices.get(endpoint.bdf or "")
        facts = node.facts if node else None
        if facts and facts.max_payload and facts.max_payload_supported and facts.max_payload < min(
                256, facts.max_payload_supported):
            lines.append(f"{endpoint.label} MaxPayload {facts.max_payload} bytes (supports "
                         f"{facts.max_payload_supported}) [{facts.source}]")
    return lines
