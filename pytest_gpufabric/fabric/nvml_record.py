"""An NVML record (``nvml.json``, format ``gpufabric-nvml/1``: docs/bundles.md documents it) read into the typed
model, in this one place: every value typed, in its physical range and finite before any check sees it.

Three outcomes per value: absent (None: not recorded), a recorded NVML error (NA: the machine's answer), or a
value. A value of the wrong type or out of range (``memory_total_bytes: 1e400``, ``driver_version: "Unknown
Error"``) is not guessed at: the model gets None and, beside it, the sentence naming file, key and value
(``Gpu.unreadable``, ``Fabric.damaged``), which the checks say instead of judging. A record whose shape is not
the format's (``gpus`` not a list, a GPU without an index) raises ValueError naming the key.
"""

from __future__ import annotations

import re

from ..formats.clean import clean_line
from ..formats.coverage import undescribed_members
from ..formats.gpu import Gpu, NvLink
from ..formats.gpu_fabric import fabric_info_from_record
from ..formats.typed import Reader, Unreadable
from ..units import NA, NAType
from .model import GPU_LIST, Fabric, Nic
from .nvml_format import FORMAT, REMOTE_TYPES, cuda_version_text, is_error, normalize_bus_id, pair_label

__all__ = ["fabric_from_record"]

_MAX_GPUS = 1024
_MAX_MEMORY_BYTES = 1 << 50  # 1 PiB: no GPU comes near it
_PATH_LABELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")


def _shape(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class _RecordReader(Reader):
    """Reads values into a dict of why-not sentences: ``get`` returns None (not recorded / unreadable), NA (an NVML
    error) or the typed value."""

    def get(self, rec: dict, key: str, path: str, what: str, read, *args, bad: dict[str, str], field: str = ""):
        """``read(value, key path, what, *args)`` of ``rec[key]``; its Unreadable goes into ``bad[field or key]``."""
        value = rec.get(key)
        if value is None:
            return None
        if is_error(value):
            return NA
        try:
            return read(value, f"{path}.{key}" if path else key, what, *args)
        except Unreadable as exc:
            bad.setdefault(field or key, str(exc))
            return None


def _then(value, convert):
    """``convert`` a read value; None (not recorded, unreadable) and NA pass through."""
    return value if value is None or value is NA else convert(value)


def _gpu(r: _RecordReader, rec: dict, position: int) -> Gpu:
    index = rec["index"]
    path, who = f"gpus[{position}]", f"GPU{index}"
    bad: dict[str, str] = {}

    def get(key, what, read, *args, field=""):
        return r.get(rec, key, path, f"{who} {what}", read, *args, bad=bad, field=field)

    gpu = Gpu(
        index=index,
        name=get("name", "name", r.text),
        uuid=get("uuid", "UUID", r.text),
        serial=get("serial", "serial", r.text),
        pci_bus_id=_then(get("pci_bus_id", "PCI bus id", r.bus_id), normalize_bus_id),
        pci_device_id=get("pci_device_id", "PCI device id", _device_id(r)),
        memory_bytes=get("memory_total_bytes", "memory total", r.whole, 1, _MAX_MEMORY_BYTES, " of bytes",
                         field="memory_bytes"),
        pcie_gen_max=get("pcie_gen_max", "PCIe max generation", r.whole, 1, 7),
        pcie_gen_current=get("pcie_gen_current", "PCIe current generation", r.whole, 1, 7),
        pcie_width_max=get("pcie_width_max", "PCIe max width", r.whole, 1, 32, " of lanes"),
        pcie_width_current=get("pcie_width_current", "PCIe current width", r.whole, 0, 32, " of lanes"),
        vbios_version=get("vbios_version", "VBIOS version", r.version, True),
        compute_capability=get("compute_capability", "compute capability", _capability(r)),
        ecc_mode=get("ecc_mode", "ECC mode", _ecc_text(r)),
        cpu_affinity=get("cpu_affinity", "CPU affinity", r.cpu_list),
        numa_node=_then(get("numa_node", "NUMA node", r.whole, -1, 4095), _numa),
    )
    links = rec.get("nvlinks")
    if links is not None:
        try:
            gpu.nvlinks = _links(r, links, f"{path}.nvlinks", who)
        except Unreadable as exc:
            bad["nvlinks"] = str(exc)
    gpu.fabric = fabric_info_from_record(rec.get("fabric"), r.where, f"{path}.fabric ({who})")
    if gpu.fabric is not None and gpu.fabric.unreadable:
        bad["fabric"] = next(iter(gpu.fabric.unreadable.values()))
    gpu.unreadable = bad
    return gpu


def _device_id(r: Reader):
    def read(value, key: str, what: str) -> int:
        if not isinstance(value, str) or not re.fullmatch(r"0x[0-9A-Fa-f]{8}", value.strip()):
            raise Unreadable(f"{what} {value!r} in {r.where} ({key}) is not a PCI device id (such as 0x233010DE)")
        return int(value.strip(), 16)
    return read


def _capability(r: Reader):
    def read(value, key: str, what: str) -> str:
        if not isinstance(value, list) or len(value) != 2:
            raise Unreadable(f"{what} {value!r} in {r.where} ({key}) is not [major, minor]")
        return f"{r.whole(value[0], f'{key}[0]', what, 1, 99)}.{r.whole(value[1], f'{key}[1]', what, 0, 99)}"
    return read


def _ecc_text(r: Reader):
    def read(mode, key: str, what: str) -> str:
        current, key = (mode.get("current"), f"{key}.current") if isinstance(mode, dict) else (mode, key)
        return "Enabled" if r.choice(current, key, what, (0, 1)) == 1 else "Disabled"
    return read


def _numa(value: int) -> int | NAType:
    return value if value >= 0 else NA


def _links(r: _RecordReader, links, path: str, who: str) -> list[NvLink]:
    """Every link of one GPU, or Unreadable for the first value that is not what NVML gives: a GPU's link count
    and speeds are judged only from a whole list."""
    if not isinstance(links, list):
        raise Unreadable(f"{who} NVLinks {links!r} in {r.where} ({path}) are not a list")
    out = []
    for position, rec in enumerate(links):
        where = f"{path}[{position}]"
        if not isinstance(rec, dict):
            raise Unreadable(f"{who} NVLink entry {rec!r} in {r.where} ({where}) is not an object")
        bad: dict[str, str] = {}
        link = r.whole(rec.get("link"), f"{where}.link", f"{who} NVLink index", 0, 63)
        what = f"{who} NVLink {link}"
        state = r.get(rec, "state", where, f"{what} state", r.choice, (0, 1), bad=bad)
        remote_type = r.get(rec, "remote_device_type", where, f"{what} remote type", r.whole, 0, 255, bad=bad)
        out.append(NvLink(
            link=link,
            active=state if state in (None, NA) else state == 1,
            speed_gbps=_then(r.get(rec, "speed_mbps", where, f"{what} speed", r.whole, 0, 1_000_000, " of MBps",
                                   bad=bad), lambda mbps: mbps / 1000),
            remote_pci_bus_id=_then(r.get(rec, "remote_pci_bus_id", where, f"{what} remote bus id", r.bus_id,
                                          bad=bad), normalize_bus_id),
            remote_type=_then(remote_type, lambda t: REMOTE_TYPES.get(t, f"TYPE_{t}")),
            version=r.get(rec, "version", where, f"{what} version", r.whole, 1, 15, bad=bad),
        ))
        if bad:
            raise Unreadable(next(iter(bad.values())))
    return out


def _numa_affinity_text(r: Reader, rec: dict, gpu: Gpu, position: int) -> str | None:
    """topo -m's "NUMA Affinity": NVML's memory affinity (node scope), else the GPU's NUMA node, else N/A; None
    when the recorded memory affinity cannot be read (said in ``gpu.unreadable``)."""
    memory = rec.get("memory_affinity")
    if isinstance(memory, str) and memory:
        try:
            return r.cpu_list(memory, f"gpus[{position}].memory_affinity", f"{gpu.label} memory affinity")
        except Unreadable as exc:
            gpu.unreadable["numa_affinity"] = str(exc)
            return None
    if isinstance(gpu.numa_node, int):
        return str(gpu.numa_node)
    if "numa_node" in gpu.unreadable:
        gpu.unreadable["numa_affinity"] = gpu.unreadable["numa_node"]
        return None
    return "N/A"


def _gpu_records(record: dict) -> list[dict]:
    gpus = record.get("gpus") or []
    _shape(isinstance(gpus, list), f"gpus is {type(gpus).__name__}, not a list of GPUs")
    seen = set()
    for position, rec in enumerate(gpus):
        _shape(isinstance(rec, dict), f"gpus[{position}] is {rec!r}, not a GPU object")
        index = rec.get("index")
        _shape(isinstance(index, int) and not isinstance(index, bool) and 0 <= index < _MAX_GPUS,
               f"gpus[{position}].index is {index!r}, not a GPU index (0 to {_MAX_GPUS - 1})")
        _shape(index not in seen, f"gpus[{position}].index {index} appears twice")
        seen.add(index)
    return sorted(gpus, key=lambda g: g["index"])


def fabric_from_record(record: dict, *, source: str = "nvml", where: str = "nvml.json") -> Fabric:
    """Build the Fabric from a ``gpufabric-nvml/1`` record. Pure: no NVML. ``where`` names the record in
    messages ("nvml.json", or "NVML" for a live read).

    Raises ValueError for a dict that is not such a record, naming the key whose shape is wrong.
    """
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"expected format {FORMAT!r}, found {found!r}")
    r = _RecordReader(where)
    damaged: dict[str, str] = {}
    gpu_records = _gpu_records(record)
    gpus = [_gpu(r, rec, position) for position, rec in enumerate(gpu_records)]
    by_index = {g.index: g for g in gpus}

    count = r.get(record, "gpu_count", "", "GPU count", r.whole, 0, _MAX_GPUS, bad=damaged, field=GPU_LIST)
    undescribed: dict[str, str] = {}
    if isinstance(count, int) and count != len(gpus):
        damaged[GPU_LIST] = (f"GPU count {count} in {where} (gpu_count) disagrees with the {len(gpus)} GPU(s) it "
                             "lists (gpus): the record is not whole")
        undescribed = undescribed_members(where, count, by_index, announcement=f"{count} GPU(s) (gpu_count)",
                                          description=f"{len(gpus)} (gpus)", name=lambda index: f"GPU{index}")

    levels: dict[tuple[int, int], object] = {}
    pairs = record.get("pairs") or []
    _shape(isinstance(pairs, list), f"pairs is {type(pairs).__name__}, not a list")
    for position, pair in enumerate(pairs):
        ids = pair.get("gpus") if isinstance(pair, dict) else None
        _shape(isinstance(ids, list) and len(ids) == 2 and all(i in by_index for i in ids if isinstance(i, int))
               and all(isinstance(i, int) and not isinstance(i, bool) for i in ids),
               f"pairs[{position}].gpus is {ids!r}, not two of the record's GPU indices")
        i, j = sorted(ids)
        why: dict[str, str] = {}
        levels[(i, j)] = r.get(pair, "common_ancestor", f"pairs[{position}]", f"GPU{i}-GPU{j} topology level",
                               r.whole, 0, 100, bad=why)
        if why:
            damaged[f"GPU{i}-GPU{j}"] = damaged[f"GPU{j}-GPU{i}"] = why["common_ancestor"]

    nic_records = record.get("nics") or []
    _shape(isinstance(nic_records, list), f"nics is {type(nic_records).__name__}, not a list")
    nics = []
    for n, nic in enumerate(nic_records):
        _shape(isinstance(nic, dict), f"nics[{n}] is {nic!r}, not a NIC object")
        why: dict[str, str] = {}
        path = f"nics[{n}]"
        nics.append(Nic(
            label=f"NIC{n}",
            device=r.get(nic, "name", path, f"NIC{n} name", r.text, bad=why),
            pci_bus_id=_then(r.get(nic, "pci_bus_id", path, f"NIC{n} PCI bus id", r.bus_id, bad=why),
                             normalize_bus_id),
            numa_node=_then(r.get(nic, "numa_node", path, f"NIC{n} NUMA node", r.whole, -1, 4095, bad=why), _numa),
        ))
        for key, text in why.items():
            damaged[f"NIC{n} {key}"] = text

    matrix: dict[str, dict[str, str]] = {g.label: {} for g in gpus}
    matrix.update({n.label: {} for n in nics})
    for a in gpus:
        for b in gpus:
            cell = pair_label(a, b, levels.get((min(a.index, b.index), max(a.index, b.index))))
            if cell is not None:
                matrix[a.label][b.label] = cell
    by_name = {nic.device: nic.label for nic in nics if nic.device}
    gpu_labels = {str(g.index): g.label for g in gpus}
    for n, (nic, rec) in enumerate(zip(nics, nic_records, strict=True)):
        matrix[nic.label][nic.label] = "X"
        for key, peers in (("path_to_gpu", gpu_labels), ("path_to_nic", by_name)):
            paths = rec.get(key) or {}
            _shape(isinstance(paths, dict), f"nics[{n}].{key} is {paths!r}, not an object")
            for peer, label in paths.items():
                if str(peer) not in peers:
                    continue
                other = peers[str(peer)]
                try:
                    r.choice(label, f"nics[{n}].{key}.{peer}", f"{nic.label}-{other} path", _PATH_LABELS)
                except Unreadable as exc:
                    damaged[f"{nic.label}-{other}"] = damaged[f"{other}-{nic.label}"] = str(exc)
                    continue
                matrix[nic.label][other] = label
                if key == "path_to_gpu":
                    matrix[other][nic.label] = label

    cpu_affinity = {}
    numa_affinity = {}
    for position, (g, rec) in enumerate(zip(gpus, gpu_records, strict=True)):
        if "cpu_affinity" in g.unreadable:
            damaged[f"{g.label} CPU Affinity"] = g.unreadable["cpu_affinity"]
        else:
            cpu_affinity[g.label] = g.cpu_affinity if isinstance(g.cpu_affinity, str) and g.cpu_affinity else "N/A"
        numa = _numa_affinity_text(r, rec, g, position)
        if numa is None:
            damaged[f"{g.label} NUMA Affinity"] = g.unreadable["numa_affinity"]
        else:
            numa_affinity[g.label] = numa

    driver = r.get(record, "driver_version", "", "driver version", r.version, bad=damaged)
    cuda_text = r.get(record, "cuda_driver_version_text", "", "CUDA driver version", r.version, bad=damaged,
                      field="cuda_driver_version")
    if cuda_text is None and "cuda_driver_version" not in damaged:
        cuda = r.get(record, "cuda_driver_version", "", "CUDA driver version", r.whole, 1000, 99999, bad=damaged)
        cuda_text = _then(cuda, cuda_version_text)
    hostname = record.get("hostname")

    provenance = {"gpus": "nvml", "nvlinks": "nvml", "matrix": "nvml", "cpu_affinity": "nvml",
                  "numa_affinity": "nvml"}
    numa_sources = {f"GPU{rec['index']}": rec["numa_node_source"] for rec in gpu_records
                    if isinstance(rec.get("numa_node_source"), str) and rec["numa_node_source"]}
    if numa_sources:
        provenance["numa_node"] = ", ".join(f"{k}: {v}" for k, v in numa_sources.items())
    if nics:
        provenance["nics"] = "sysfs /sys/class/infiniband"
    return Fabric(
        gpus=gpus,
        nics=nics,
        matrix=matrix,
        cpu_affinity=cpu_affinity,
        numa_affinity=numa_affinity,
        driver_version=driver,
        cuda_driver_version=cuda_text,
        hostname=clean_line(hostname) if isinstance(hostname, str) else None,
        source=source,
        provenance=provenance,
        damaged=damaged,
        undescribed=undescribed,
    )
