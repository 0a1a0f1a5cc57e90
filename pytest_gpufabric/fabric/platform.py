"""The host settings that decide GPU and RDMA performance, read from sysfs and procfs (no root where the OS
allows), from NVML, or from what a bundle recorded.

Every reader takes ``root`` ("/" on a live machine, a bundle's ``platform/`` copy in replay) and returns a
``Reading``: the value, where it was read, and, when the machine hides it, why (``"not readable here: ..."``).
A value of None without a reason means the evidence did not record it (a customer's bundle without the file).

Where each setting is read, and the kernel documents that say so: docs/evidence/platform.md.

``gpufabric snapshot`` writes the readings as ``platform.json`` (format ``gpufabric-platform/1``:
platform_record.py's ``Platform`` as JSON) and copies the small files it read under ``platform/`` (links as
``<path>.symlink`` text, as the RDMA copy does), so ``read_platform(<bundle>/platform)`` reads the same again.
A customer without the plugin can send ``lspci-vvv.txt`` (``sudo lspci -vvv``, ``-vvvxxxx`` even better),
``lsmod.txt`` (``lsmod`` or ``cat /proc/modules``), ``proc-cmdline.txt`` and ``dmesg.txt``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

from ..errors import BundleError
from ..formats.lsmod import parse_module_list
from ..formats.lspci import normalize_bdf
from ..formats.pci_config import parse_config_space
from ..formats.strict import load_json_text
from ..units import format_cpu_list
from .bundle import load_rdma_devices
from .bundle import read_bundle_file as _read
from .nvml import _init_nvml, error_name, is_error, query
from .platform_record import (
    _GPU_CLASSES,
    _NVIDIA,
    CMDLINE_FILE,
    KERNEL_LOG_FILE,
    LSPCI_FILE,
    MODULES_FILE,
    PEER_MEMORY_FILES,
    PLATFORM_DIR,
    PLATFORM_FILE,
    Endpoint,
    PciNode,
    Platform,
    Reading,
    platform_from_record,
)
from .platform_text import (
    _pci_readable,
    apply_lspci,
    bind_to_machine,
    kernel_log_reading,
    modules_reading,
    persistence_from_query_xml,
)
from .sysfs_pci import _in_root, _natural_key, _read_text, _under, parse_pci_path

SYMLINK_SUFFIX = ".symlink"


# ------------------------------------------------------------------------------------------------- readers


class _Reader:
    """File access below a root, remembering what was read (for the snapshot's copy)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.files: list[str] = []
        self.links: dict[str, str] = {}

    def path(self, path: str) -> str:
        return _in_root(self.root, path)

    def text(self, path: str, *, copy: bool = True) -> str | None:
        """The file's text; ``copy=False`` for large files the snapshot leaves out (/proc/cpuinfo: platform.json
        holds what was read from it)."""
        text = _read_text(self.path(path))
        if text is not None and copy and path not in self.files:
            self.files.append(path)
        return text

    def bytes(self, path: str) -> bytes | None:
        try:
            with open(self.path(path), "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        if path not in self.files:
            self.files.append(path)
        return data

    def exists(self, path: str) -> bool:
        return os.path.exists(self.path(path)) or os.path.exists(self.path(path) + SYMLINK_SUFFIX)

    def listdir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(self.path(path)), key=_natural_key)
        except OSError:
            return None

    def link(self, path: str) -> str | None:
        """Where a sysfs link leads, as the machine names it (a live link, or a copy's ``.symlink`` text)."""
        real = self.path(path)
        if os.path.islink(real):
            target = _under(self.root, os.path.realpath(real))
        else:
            target = _read_text(real + SYMLINK_SUFFIX) or None
        if target:
            self.links[path] = target
        return target


def _virtualization(reader: _Reader) -> Reading:
    cpuinfo = reader.text("/proc/cpuinfo", copy=False)
    vendor = reader.text("/sys/class/dmi/id/sys_vendor")
    product = reader.text("/sys/class/dmi/id/product_name")
    dmi = " ".join(x for x in (vendor, product) if x)
    where = "/proc/cpuinfo flags" + (f"; DMI: {dmi}" if dmi else "")
    if cpuinfo is None:
        return Reading()
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    if flags is None:
        return Reading(source=where, unreadable="not readable here: /proc/cpuinfo has no flags line (not x86)")
    return Reading("hypervisor" in flags, where)


def _cmdline(reader: _Reader) -> Reading:
    text = reader.text("/proc/cmdline")
    return Reading(text, "/proc/cmdline") if text is not None else Reading()


def _iommu_units(reader: _Reader) -> Reading:
    units = reader.listdir("/sys/class/iommu")
    if units is not None:
        return Reading(units, "/sys/class/iommu")
    if reader.listdir("/sys/class") is not None:
        return Reading([], "/sys/class/iommu (absent: no IOMMU driver registered a unit)")
    return Reading()


def _modules(reader: _Reader) -> Reading:
    text = reader.text("/proc/modules")
    if text is not None:
        return Reading({"loaded": sorted(parse_module_list(text).loaded), "complete": True, "searched": [],
                        "commands": []}, "/proc/modules")
    if reader.text("/proc/cmdline") is not None:
        return Reading(source="/proc/modules", unreadable="not readable here: /proc/modules absent (a kernel built "
                                                          "without loadable modules)")
    return Reading()


def _peer_memory_files(reader: _Reader) -> Reading:
    if reader.listdir("/sys/module") is None and reader.listdir("/sys/kernel") is None:
        return Reading()
    present = {}
    for path in PEER_MEMORY_FILES:
        text = reader.text(path)
        if text is not None:
            present[path] = text
        elif path.startswith("/sys/module/") and reader.listdir(os.path.dirname(path)) is not None:
            present[os.path.dirname(path)] = ""  # the module is there, without a version file
    return Reading(present, ", ".join(PEER_MEMORY_FILES))


def _cpu_governors(reader: _Reader) -> Reading:
    cpus = [name for name in reader.listdir("/sys/devices/system/cpu") or [] if re.fullmatch(r"cpu\d+", name)]
    if not cpus:
        return Reading()
    by_governor: dict[str, set[int]] = {}
    for cpu in cpus:
        governor = reader.text(f"/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor")
        if governor is not None:
            by_governor.setdefault(governor, set()).add(int(cpu[3:]))
    where = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"
    if not by_governor:
        return Reading(source=where, unreadable="not readable here: no cpufreq in this kernel/VM "
                                                f"(/sys/devices/system/cpu/{cpus[0]}/cpufreq absent)")
    return Reading({g: format_cpu_list(ids) for g, ids in sorted(by_governor.items())}, where)


def _numa_balancing(reader: _Reader) -> Reading:
    text = reader.text("/proc/sys/kernel/numa_balancing")
    if text is not None:
        try:
            return Reading(int(text), "/proc/sys/kernel/numa_balancing")
        except ValueError:
            return Reading(source="/proc/sys/kernel/numa_balancing",
                           unreadable=f"not readable here: not a number: {text!r}")
    if reader.listdir("/proc/sys/kernel") is not None:
        return Reading(0, "/proc/sys/kernel/numa_balancing absent: a kernel built without NUMA balancing (off)")
    return Reading()


def _hugepages(reader: _Reader) -> Reading:
    sizes = reader.listdir("/sys/kernel/mm/hugepages")
    if sizes:
        pages = {}
        for name in sizes:
            m = re.fullmatch(r"hugepages-(\d+)kB", name)
            if not m:
                continue
            total = reader.text(f"/sys/kernel/mm/hugepages/{name}/nr_hugepages")
            free = reader.text(f"/sys/kernel/mm/hugepages/{name}/free_hugepages")
            if total is not None:
                pages[m.group(1)] = {"total": int(total), "free": int(free) if free is not None else None}
        if pages:
            return Reading(pages, "/sys/kernel/mm/hugepages/hugepages-*kB/nr_hugepages")
    meminfo = reader.text("/proc/meminfo")
    if meminfo is None:
        return Reading()
    values = dict(re.findall(r"^(HugePages_Total|HugePages_Free|Hugepagesize):\s+(\d+)", meminfo, re.MULTILINE))
    if "Hugepagesize" not in values:
        return Reading(source="/proc/meminfo", unreadable="not readable here: /proc/meminfo has no Hugepagesize")
    return Reading({values["Hugepagesize"]: {"total": int(values.get("HugePages_Total", 0)),
                                             "free": int(values.get("HugePages_Free", 0))}}, "/proc/meminfo")


def _device_path(reader: _Reader, bdf: str) -> str | None:
    return reader.link(f"/sys/bus/pci/devices/{bdf}")


def _gpu_functions(reader: _Reader) -> list[str]:
    """NVIDIA display-class functions under /sys/bus/pci/devices, in bus order (NVML's order)."""
    found = []
    for entry in reader.listdir("/sys/bus/pci/devices") or []:
        bdf = entry.removesuffix(SYMLINK_SUFFIX)
        path = _device_path(reader, bdf)
        if path is None:
            continue
        vendor = reader.text(f"{path}/vendor")
        klass = reader.text(f"{path}/class")
        try:
            if int(vendor or "0", 16) == _NVIDIA and int(klass or "0", 16) >> 8 in _GPU_CLASSES:
                found.append(bdf)
        except ValueError:
            continue
    return sorted(set(found))


def _read_node(reader: _Reader, bdf: str, path: str) -> PciNode:
    node = PciNode(bdf=bdf, sysfs_path=path)
    data = reader.bytes(f"{path}/config")
    if data is None:
        node.unreadable = f"not readable here: {path}/config could not be read"
    else:
        try:
            node.facts = parse_config_space(data, f"{path}/config ({len(data)} bytes)")
        except ValueError as exc:
            node.unreadable = f"not readable here: {path}/config: {exc}"
    group_link = reader.link(f"{path}/iommu_group")
    if group_link:
        node.iommu_group = os.path.basename(group_link)
        domain = reader.text(f"/sys/kernel/iommu_groups/{node.iommu_group}/type")
        node.iommu_domain = domain
        node.iommu_source = f"/sys/kernel/iommu_groups/{node.iommu_group}/type" if domain else f"{path}/iommu_group"
    return node


def _place(reader: _Reader, platform: Platform, label: str, kind: str, bdf: str) -> None:
    path = _device_path(reader, bdf)
    if path is None:
        platform.endpoints.append(Endpoint(label, kind, bdf, placed=False))
        return
    try:
        _, chain = parse_pci_path(path)
    except ValueError:
        chain = []
    if not chain or chain[-1] != bdf:  # not a plain PCI path (a VMD domain between): its bridges are not known
        platform.endpoints.append(Endpoint(label, kind, bdf, placed=False))
        return
    # each function's own path is the endpoint's path up to that function's component
    parts = path.split("/")
    for function in chain:
        if function not in platform.devices:
            prefix = "/".join(parts[:parts.index(function) + 1])
            platform.devices[function] = _read_node(reader, function, prefix)
    platform.endpoints.append(Endpoint(label, kind, bdf, bridges=chain[:-1]))


def read_platform(root: str = "/", gpu_bus_ids: dict[int, str] | None = None, *, source: str | None = None
                  ) -> Platform:
    """Every setting this module reads, below ``root``. ``gpu_bus_ids``: NVML index -> PCI bus id (either
    spelling); without them the NVIDIA display-class functions in sysfs are the GPUs, in bus order."""
    reader = _Reader(root)
    platform = Platform(source=source or ("this machine" if os.path.realpath(root) == os.sep else root))
    platform.hypervisor = _virtualization(reader)
    platform.kernel_cmdline = _cmdline(reader)
    platform.iommu_units = _iommu_units(reader)
    platform.modules = _modules(reader)
    platform.peer_memory_files = _peer_memory_files(reader)
    platform.cpu_governors = _cpu_governors(reader)
    platform.numa_balancing = _numa_balancing(reader)
    platform.hugepages = _hugepages(reader)
    if gpu_bus_ids:
        gpus = {f"GPU{index}": normalize_bdf(bus_id) for index, bus_id in sorted(gpu_bus_ids.items())}
    else:
        gpus = {f"GPU{i}": bdf for i, bdf in enumerate(_gpu_functions(reader))}
    for label, bdf in gpus.items():
        _place(reader, platform, label, "gpu", bdf)
    for name in reader.listdir("/sys/class/infiniband") or []:
        where = f"/sys/class/infiniband/{name}/fw_ver"
        fw = reader.text(where)
        platform.nic_firmware[name] = Reading(fw, where) if fw else Reading(
            source=where, unreadable=f"not readable here: {where} absent")
        link = reader.link(f"/sys/class/infiniband/{name}/device")
        try:
            bdf = parse_pci_path(link)[1][-1] if link else None
        except ValueError:
            bdf = None  # a software device (rxe, siw): no PCI function
        if bdf:
            _place(reader, platform, name, "nic", bdf)
    platform.pci_source = "sysfs /sys/bus/pci/devices/*/config" if platform.devices else ""
    if not platform.endpoints and reader.listdir("/sys/bus/pci/devices") is not None:
        platform.pci_unreadable = "no NVIDIA GPU and no RDMA NIC among the PCI functions in /sys/bus/pci/devices"
    platform.files, platform.links = reader.files, reader.links
    return platform


def read_peer_memory(root: str = "/") -> Platform:
    """The peer-memory readings alone (the module list and the files NCCL tests) below ``root``: `gpufabric
    health`'s, judged by platform_state.peer_memory_loaded as the acceptance judges them."""
    reader = _Reader(root)
    platform = Platform(source="this machine" if os.path.realpath(root) == os.sep else root)
    platform.modules = _modules(reader)
    platform.peer_memory_files = _peer_memory_files(reader)
    return platform


def read_persistence_nvml() -> dict[str, Reading]:
    """Each GPU's persistence mode through NVML (the project's funnel, fabric.nvml.query); {} without NVML."""
    pynvml, why = _init_nvml()
    if pynvml is None:
        return {}
    readings: dict[str, Reading] = {}
    try:
        count = query(pynvml.nvmlDeviceGetCount)
        for index in range(0 if is_error(count) else count):
            handle = query(pynvml.nvmlDeviceGetHandleByIndex, index)
            mode = handle if is_error(handle) else query(pynvml.nvmlDeviceGetPersistenceMode, handle)
            where = "NVML nvmlDeviceGetPersistenceMode"
            if is_error(mode):
                readings[f"GPU{index}"] = Reading(source=where, unreadable=f"not readable here: NVML answered "
                                                                           f"{mode['error']}")
            else:
                readings[f"GPU{index}"] = Reading(int(mode) == 1, where)
        return readings
    except pynvml.NVMLError as exc:
        reason = f"not readable here: NVML failed ({error_name(exc.value)})"
        return {label: Reading(source="NVML", unreadable=reason) for label in readings} if readings else {}
    finally:
        pynvml.nvmlShutdown()


def collect_platform(fabric=None) -> Platform:
    """This machine's platform settings (files below / and NVML)."""
    ids = {g.index: g.pci_bus_id for g in fabric.gpus if isinstance(g.pci_bus_id, str)} if fabric else {}
    platform = read_platform("/", ids or None)
    platform.persistence_mode = read_persistence_nvml()
    platform.source = "this machine"
    return platform


# ------------------------------------------------------------------------------------------------ bundles


def load_platform(directory: Path, fabric=None) -> Platform | None:
    """The platform a bundle records: ``platform.json`` (gpufabric snapshot), else its ``platform/`` copy read
    again; text files (lspci-vvv.txt, lsmod.txt, proc-cmdline.txt, dmesg.txt, nvidia-smi-q.xml) fill what
    those do not hold. None when the bundle holds no platform fact. Raises BundleError naming a bad file."""
    directory = Path(directory)
    ids = {g.index: g.pci_bus_id for g in fabric.gpus if isinstance(g.pci_bus_id, str)} if fabric else {}
    record_path = directory / PLATFORM_FILE
    if record_path.is_file():
        try:
            platform = platform_from_record(load_json_text(record_path.read_text(encoding="utf-8")),
                                            source=f"bundle {directory}")
        except (ValueError, TypeError, KeyError) as exc:
            raise BundleError(f"{record_path}: not a gpufabric platform record ({exc})") from None
        platform.source = str(record_path)
    elif (directory / PLATFORM_DIR).is_dir():
        platform = read_platform(str(directory / PLATFORM_DIR), ids or None,
                                 source=str(directory / PLATFORM_DIR))
    else:
        platform = Platform(source=f"bundle {directory}")
    machine_gpus = {g.label: g.pci_bus_id if isinstance(g.pci_bus_id, str) else None
                    for g in fabric.gpus} if fabric else {}
    device_ids = {g.label: g.pci_device_id for g in fabric.gpus if isinstance(g.pci_device_id, int)} if fabric else {}
    _apply_text_files(platform, directory, ids, machine_gpus, device_ids)
    return platform if platform.recorded() else None


def _apply_text_files(platform: Platform, directory: Path, gpu_bus_ids: dict[int, str],
                      machine_gpus: dict[str, str | None], device_ids: dict[str, int]) -> None:
    lspci = _read(directory, LSPCI_FILE)
    if lspci is not None and not _pci_readable(platform):
        nic_ids = {e.label: e.bdf for e in platform.endpoints if e.kind == "nic" and e.bdf}
        try:
            apply_lspci(platform, lspci, str(directory / LSPCI_FILE), gpu_bus_ids, nic_ids)
        except ValueError as exc:
            raise BundleError(f"{directory / LSPCI_FILE}: {exc}") from None
        bind_to_machine(platform, machine_gpus, str(directory / LSPCI_FILE), device_ids)
    modules = _read(directory, MODULES_FILE)
    if modules is not None and not platform.modules.known:
        try:
            platform.modules = modules_reading(modules, str(directory / MODULES_FILE))
        except ValueError as exc:
            raise BundleError(f"{directory / MODULES_FILE}: {exc}") from None
    cmdline = _read(directory, CMDLINE_FILE)
    if cmdline is not None and not platform.kernel_cmdline.known:
        lines = [line for line in cmdline.splitlines() if line.strip() and not re.search(r"\bcat\b", line)]
        platform.kernel_cmdline = Reading(lines[-1].strip() if lines else "", str(directory / CMDLINE_FILE))
    log = _read(directory, KERNEL_LOG_FILE)
    if log is not None:
        facts, log_cmdline = kernel_log_reading(log, str(directory / KERNEL_LOG_FILE))
        if not platform.kernel_log.known:
            platform.kernel_log = facts
        if not platform.kernel_cmdline.known and log_cmdline.known:
            platform.kernel_cmdline = log_cmdline
    query = _read(directory, "nvidia-smi-q.xml")
    if query is not None:
        for label, reading in persistence_from_query_xml(query, str(directory / "nvidia-smi-q.xml")).items():
            if not platform.persistence_mode.get(label, Reading()).known:
                platform.persistence_mode[label] = reading
    if not platform.nic_firmware:
        for device in load_rdma_devices(directory) or []:
            platform.nic_firmware[device.name] = Reading(device.fw_ver, f"bundle {directory} RDMA devices (fw_ver)") \
                if device.fw_ver else Reading()


def snapshot_platform(platform: Platform, target: Path, root: str = "/") -> list[str]:
    """Write ``platform.json`` and copy the files it was read from under ``platform/`` (links as
    ``<path>.symlink`` text). Returns the copied paths, relative to the bundle."""
    target = Path(target)
    copied = []
    for path in platform.files:
        src = _in_root(root, path)
        dst = target / PLATFORM_DIR / path.lstrip("/")
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        except OSError:
            continue
        copied.append(str(dst.relative_to(target)))
    for path, link in platform.links.items():
        dst = target / PLATFORM_DIR / (path.lstrip("/") + SYMLINK_SUFFIX)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(link + "\n", encoding="utf-8")
        copied.append(str(dst.relative_to(target)))
    # a directory's being there (and empty) is itself a fact: /sys/class/iommu without units, /proc/sys/kernel
    for path in ("/sys/class", "/sys/class/iommu", "/sys/module", "/sys/kernel", "/proc/sys/kernel",
                 "/sys/devices/system/cpu", "/sys/bus/pci/devices"):
        if os.path.isdir(_in_root(root, path)):
            (target / PLATFORM_DIR / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for unit in platform.iommu_units.value or []:
        (target / PLATFORM_DIR / "sys/class/iommu" / unit).mkdir(parents=True, exist_ok=True)
    for name in platform.nic_firmware:
        (target / PLATFORM_DIR / "sys/class/infiniband" / name).mkdir(parents=True, exist_ok=True)
    for cpu in os.listdir(_in_root(root, "/sys/devices/system/cpu")) if platform.cpu_governors.unreadable else []:
        if re.fullmatch(r"cpu\d+", cpu):  # without cpufreq: the CPUs are there, their governors are not
            (target / PLATFORM_DIR / "sys/devices/system/cpu" / cpu).mkdir(parents=True, exist_ok=True)
    write_record(platform, target / PLATFORM_FILE)
    return copied


def write_record(platform: Platform, path: Path) -> Path:
    record = platform.to_record()
    record["recorded_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def platform_for_session(fabric_session) -> Platform | None:
    """The run's platform: the bundle's (None when it records none), or this machine's, written to
    ``<report dir>/platform.json`` so that a bundle of the run replays it."""
    if fabric_session.replay:
        return load_platform(fabric_session.bundle_dir, fabric_session.fabric)
    platform = collect_platform(fabric_session.fabric)
    try:
        write_record(platform, fabric_session.report_dir / PLATFORM_FILE)
    except OSError:
        pass  # the readings are judged all the same; the results JSON carries every check's found values
    return platform

