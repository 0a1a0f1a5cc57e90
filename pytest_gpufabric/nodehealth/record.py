"""``health.json``: every GPU's health counters and the kernel's Xid and SXid lines, read in one pass, and read back
typed.

One reader writes it (``read_live``: `gpufabric snapshot` into a bundle, `gpufabric health` in memory), one reader
reads it (``health_from_record``): a live check and a replay are judged by the same code on the same record.
The format, ``gpufabric-health/1``: docs/health.md, "health.json".

Every NVML call goes through fabric/nvml.py's funnel (``query``). An answer that says the reading does not apply to
this GPU (NOT_SUPPORTED, FUNCTION_NOT_FOUND, INVALID_ARGUMENT, NOT_FOUND) is kept as ``{"error": NAME}`` and
judged as "does not apply"; any other answer (NO_PERMISSION, UNKNOWN, ...) is kept the same way and is "could not
tell". GPU_IS_LOST ends the GPU's reads: ``"lost": "GPU_IS_LOST"``. Nothing is ever set or reset.

A record that was not read from a machine but put together from what a bundle's other files hold says so in
``"derived"`` (tests/derive_health.py).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import HardwareUnavailable
from ..fabric import nvml, sysfs_pci
from ..fabric.gpu_fabric import read_gpu_fabric
from ..formats.clean import clean_line
from ..formats.gpu_fabric import GpuFabricInfo, fabric_info_from_record
from ..formats.typed import Reader, Unreadable, load_json, show
from .record_extra import read_extra, type_extra
from .sxid_lines import sxid_of_message, type_sxids

FORMAT = "gpufabric-health/1"
HEALTH_FILE = "health.json"
KMSG = "/dev/kmsg"

#: NVML answers meaning "this GPU has no such reading" (a Hopper has remapped rows, not retired pages): data
DOES_NOT_APPLY = frozenset({"NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "INVALID_ARGUMENT", "NOT_FOUND"})

#: "NVRM: Xid (PCI:0000:b9:00): 74, pid=..., ..." (older drivers: "NVRM: Xid (0000:01:00): 3, ...")
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): "
                      r"(?P<xid>\d+)")

_NESTED = {"remapped_rows": ("correctable", "uncorrectable", "pending", "failure"),
           "retired_pages": ("single_bit_ecc", "double_bit_ecc", "pending"),
           "fabric": ("state", "status")}
_COUNT_MAX = 2**64 - 1


# ------------------------------------------------------------------------------------------------------------
# the live read


def read_live(*, sysfs_root: str = "/", kmsg: str = KMSG) -> dict:
    """This machine's health record (the format above). Raises HardwareUnavailable without NVML."""
    started = time.monotonic()
    pynvml, why = nvml._init_nvml()
    if pynvml is None:
        raise HardwareUnavailable(why, replay_hint=True)
    record: dict = {"format": FORMAT, "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "uptime_s": seconds_since_boot(), "hostname": socket.gethostname()}
    try:
        record["driver_version"] = _answer(pynvml, pynvml.nvmlSystemGetDriverVersion)
        count = _answer(pynvml, pynvml.nvmlDeviceGetCount)
        record["gpu_count"] = count
        record["gpus"] = [_gpu(pynvml, index) for index in range(count if isinstance(count, int) else 0)]
    finally:
        pynvml.nvmlShutdown()
    record["pci_gpus"] = sysfs_pci.nvidia_gpu_functions(sysfs_root)
    record["kernel_log"] = read_kernel_xids(kmsg)
    record["read_s"] = round(time.monotonic() - started, 3)
    return record


def seconds_since_boot() -> float | None:
    """The kernel's boot clock (CLOCK_BOOTTIME, /proc/uptime's first figure): unlike the wall clock it never steps
    within a boot, so the counters' rates are timed by it (counters.py); None where it cannot be read."""
    try:
        return round(time.clock_gettime(time.CLOCK_BOOTTIME), 3)
    except (AttributeError, OSError):  # not Linux
        try:
            return round(float(Path("/proc/uptime").read_text().split()[0]), 3)
        except (OSError, ValueError, IndexError):
            return None


class _Lost(Exception):
    """The GPU answered GPU_IS_LOST: it fell off the bus; nothing more is read from it."""


def _answer(pynvml, fn, *args):
    """nvml.query's answer (bytes as text), with every other NVML error kept as ``{"error": NAME}`` too: one
    unreadable field says "could not tell" of itself, not of the whole machine. GPU_IS_LOST raises _Lost."""
    try:
        value = nvml.query(fn, *args)
    except pynvml.NVMLError as exc:
        name = nvml.error_name(exc.value)
        if name == "GPU_IS_LOST":
            raise _Lost(name) from None
        return nvml.recorded_error(name)
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _gpu(pynvml, index: int) -> dict:
    rec: dict = {"index": index}
    try:
        handle = _answer(pynvml, pynvml.nvmlDeviceGetHandleByIndex, index)
        if nvml.is_error(handle):
            rec["handle"] = handle
            return rec
        _fill(pynvml, handle, rec)
    except _Lost as lost:
        rec["lost"] = str(lost)
    return rec


def _fill(p, h, rec: dict) -> None:
    ask = lambda fn, *args: _answer(p, fn, h, *args)  # noqa: E731
    rec["name"], rec["uuid"], rec["serial"] = (ask(fn) for fn in (p.nvmlDeviceGetName, p.nvmlDeviceGetUUID,
                                                                  p.nvmlDeviceGetSerial))
    pci = ask(p.nvmlDeviceGetPciInfo)
    rec["pci_bus_id"] = pci if nvml.is_error(pci) else nvml._bus_id_of(pci)
    rec["pcie_gen_current"] = ask(p.nvmlDeviceGetCurrPcieLinkGeneration)
    rec["pcie_gen_max"] = ask(p.nvmlDeviceGetMaxPcieLinkGeneration)
    rec["pcie_width_current"] = ask(p.nvmlDeviceGetCurrPcieLinkWidth)
    rec["pcie_width_max"] = ask(p.nvmlDeviceGetMaxPcieLinkWidth)
    rec["nvlink_states"] = _nvlink_states(p, h)
    mode = ask(p.nvmlDeviceGetEccMode)
    rec["ecc_mode"] = mode if nvml.is_error(mode) else int(mode[0])
    rec["ecc_uncorrected_volatile"] = ask(p.nvmlDeviceGetTotalEccErrors, p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                          p.NVML_VOLATILE_ECC)
    rec["ecc_corrected_volatile"] = ask(p.nvmlDeviceGetTotalEccErrors, p.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                        p.NVML_VOLATILE_ECC)
    rows = ask(p.nvmlDeviceGetRemappedRows)
    rec["remapped_rows"] = rows if nvml.is_error(rows) else dict(zip(_NESTED["remapped_rows"], map(int, rows),
                                                                     strict=True))
    rec["retired_pages"] = _retired_pages(p, ask)
    rec["pcie_replay"] = ask(p.nvmlDeviceGetPcieReplayCounter)
    # renamed from ...ThrottleReasons in NVML 12.2; older nvidia-ml-py has only the old name
    reasons = ask("nvmlDeviceGetCurrentClocksEventReasons")
    if nvml.is_error(reasons) and reasons["error"] == "FUNCTION_NOT_FOUND":
        reasons = ask("nvmlDeviceGetCurrentClocksThrottleReasons")
    rec["clock_event_reasons"] = reasons
    rec["temperature_c"] = ask(p.nvmlDeviceGetTemperature, p.NVML_TEMPERATURE_GPU)
    for key, constant in (("slowdown", "SLOWDOWN"), ("shutdown", "SHUTDOWN"), ("gpu_max", "GPU_MAX")):
        rec[f"{key}_temperature_c"] = ask(p.nvmlDeviceGetTemperatureThreshold,
                                          getattr(p, f"NVML_TEMPERATURE_THRESHOLD_{constant}"))
    rec["margin_temperature_c"] = ask("nvmlDeviceGetMarginTemperature")
    power = ask(p.nvmlDeviceGetPowerUsage)
    rec["power_w"] = power if nvml.is_error(power) else power / 1000
    rec["persistence_mode"] = ask(p.nvmlDeviceGetPersistenceMode)
    # the one live fabric read (fabric/gpu_fabric.py): state, status, clique id, cluster UUID, health mask
    rec["fabric"] = read_gpu_fabric(p, h, lambda fn, *args: _answer(p, fn, *args))
    rec["recovery_action"] = _recovery_action(p, h)
    states = rec["nvlink_states"]
    rec.update(read_extra(p, h, ask, len(states) if isinstance(states, list) else 0))


def _nvlink_states(p, h) -> list | dict:
    """Each link's state until NVML refuses the link index ([] for a GPU without NVLink)."""
    states: list[int] = []
    for link in range(nvml._enum(p, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _answer(p, p.nvmlDeviceGetNvLinkState, h, link)
        if nvml.is_error(state):
            if state["error"] in ("INVALID_ARGUMENT", "NOT_SUPPORTED"):
                break
            return state
        states.append(int(state))
    return states


def _retired_pages(p, ask) -> dict:
    """Pages retired for single-bit and double-bit errors and whether a retirement waits (before Ampere)."""
    pages = {}
    for key, cause in (("single_bit_ecc", 0), ("double_bit_ecc", 1)):  # nvmlPageRetirementCause_t
        answer = ask(p.nvmlDeviceGetRetiredPages, cause)
        if nvml.is_error(answer):
            return answer
        pages[key] = len(answer)
    pending = ask(p.nvmlDeviceGetRetiredPagesPendingStatus)
    if nvml.is_error(pending):
        return pending
    pages["pending"] = int(pending)
    return pages


def _recovery_action(p, h):
    """What the driver says the GPU needs (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset)."""
    field_id = getattr(p, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field_id is None:
        return nvml.recorded_error("FUNCTION_NOT_FOUND")
    try:
        answer = nvml.field_value(h, field_id)
    except p.NVMLError as exc:
        name = nvml.error_name(exc.value)
        if name == "GPU_IS_LOST":
            raise _Lost(name) from None
        return nvml.recorded_error(name)
    return answer if nvml.is_error(answer) else int(answer)


def read_kernel_xids(path: str = KMSG) -> dict:
    """Every Xid and NVSwitch SXid line in the kernel's ring buffer, with its age; ``error`` says why the log could
    not be read (/dev/kmsg needs root where kernel.dmesg_restrict is 1, and a container may have none)."""
    result: dict = {"source": path, "error": None, "xids": [], "sxids": []}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        result["error"] = f"{path}: {exc.strerror}"
        return result
    try:
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        while True:
            try:
                chunk = os.read(fd, 8192)  # one record per read
            except BlockingIOError:
                break  # the end of the buffer
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the record was overwritten while being read: the next one follows
                result["error"] = f"{path}: {exc.strerror}"
                break
            if not chunk:
                break
            text = chunk.decode("utf-8", errors="replace")
            xid = parse_kmsg_record(text, uptime_s)
            if xid is not None:
                result["xids"].append(xid)
            sxid = parse_kmsg_sxid(text, uptime_s)
            if sxid is not None:
                result["sxids"].append(sxid)
    except (OSError, ValueError, IndexError) as exc:
        result["error"] = f"{path}: {exc}"
    finally:
        os.close(fd)
    return result


def parse_kmsg_record(record: str, uptime_s: float) -> dict | None:
    """One /dev/kmsg record ("PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;MESSAGE"): its Xid, or None."""
    header, _, message = record.partition(";")
    match = XID_LINE.search(message)
    if match is None:
        return None
    since_boot_s = int(header.split(",")[2]) / 1e6
    return {"pci": match["pci"], "xid": int(match["xid"]), "age_s": round(max(uptime_s - since_boot_s, 0.0), 3),
            "text": message.splitlines()[0].strip()[:300]}


def parse_kmsg_sxid(record: str, uptime_s: float) -> dict | None:
    """One /dev/kmsg record: its NVSwitch SXid (sxid_lines.py), or None."""
    header, _, message = record.partition(";")
    if "SXid" not in message:
        return None
    return sxid_of_message(message, uptime_s - int(header.split(",")[2]) / 1e6)


def write_health_file(record: dict, directory: Path) -> Path:
    path = Path(directory) / HEALTH_FILE
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------------
# the typed reading


@dataclass
class GpuHealthRecord:
    """One GPU of a health record. ``values``: each reading, typed; ``not_applicable``: key -> NVML's answer for
    a reading this GPU does not have; ``unreadable``: key -> why it cannot be told (names the file and key)."""

    index: int
    serial: str | None = None
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    lost: str | None = None  # NVML's GPU_IS_LOST: fell off the bus
    values: dict = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    not_recorded: set[str] = field(default_factory=set)  # record_extra.py's keys a record older than them lacks
    #: the whole fabric reading (clique, cluster UUID, health), typed and judged by formats/gpu_fabric.py
    fabric: GpuFabricInfo | None = None

    @property
    def label(self) -> str:
        return f"GPU{self.index}"


@dataclass
class KernelLog:
    source: str | None
    error: str | None  # why it could not be read (None: read)
    xids: list[dict] = field(default_factory=list)  # {"pci", "xid", "age_s", "text"}
    sxids: list[dict] | None = None  # {"switch", "pci", "sxid", "age_s", "text"}; None: not recorded


@dataclass
class NodeHealthRecord:
    """A whole health record, typed: what the passive tier judges."""

    source: str  # "NVML" (live) or the health.json path
    recorded_at: str | None
    hostname: str | None
    driver_version: str | None
    gpu_count: int | None
    gpus: list[GpuHealthRecord]
    pci_gpus: list[str] | None
    kernel_log: KernelLog
    unreadable: dict[str, str] = field(default_factory=dict)  # node-level keys that cannot be told
    derived: str | None = None
    rdma: list | None = None  # fabric/rdma.py's RdmaDevices (None: not recorded); command.py reads them
    rdma_source: str | None = None
    #: fabric/platform_state.peer_memory_loaded's (loaded, evidence) and where it was read (None: not recorded)
    peer_memory: tuple[bool | None, str] | None = None
    peer_memory_source: str | None = None
    #: the boot clock's seconds at the read (seconds_since_boot); None: not recorded (a record written before it)
    uptime_s: float | None = None


class _Typed(Reader):
    def number(self, value: object, key: str, what: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._refuse(what, value, key, "a finite number")
        if not low <= value <= high:
            raise self._refuse(what, value, key, f"in the range {low:g} to {high:g}")
        return value


_TEMPERATURE = ("number", -100, 250)
#: each GPU reading: how it is typed ("whole" or "number" with its range, "states": a list of link states)
_GPU_FIELDS: dict[str, tuple] = {
    "pcie_gen_current": ("whole", 1, 7), "pcie_gen_max": ("whole", 1, 7),
    "pcie_width_current": ("whole", 0, 32), "pcie_width_max": ("whole", 1, 32),
    "nvlink_states": ("states",), "ecc_mode": ("whole", 0, 1),
    "ecc_uncorrected_volatile": ("whole", 0, _COUNT_MAX), "ecc_corrected_volatile": ("whole", 0, _COUNT_MAX),
    "remapped_rows.correctable": ("whole", 0, _COUNT_MAX), "remapped_rows.uncorrectable": ("whole", 0, _COUNT_MAX),
    "remapped_rows.pending": ("whole", 0, _COUNT_MAX), "remapped_rows.failure": ("whole", 0, _COUNT_MAX),
    "retired_pages.single_bit_ecc": ("whole", 0, _COUNT_MAX), "retired_pages.double_bit_ecc": ("whole", 0, _COUNT_MAX),
    "retired_pages.pending": ("whole", 0, _COUNT_MAX), "pcie_replay": ("whole", 0, _COUNT_MAX),
    "clock_event_reasons": ("whole", 0, _COUNT_MAX),
    "temperature_c": _TEMPERATURE, "slowdown_temperature_c": _TEMPERATURE, "shutdown_temperature_c": _TEMPERATURE,
    "gpu_max_temperature_c": _TEMPERATURE, "margin_temperature_c": _TEMPERATURE,
    "power_w": ("number", 0, 10000), "persistence_mode": ("whole", 0, 1),
    "fabric.state": ("whole", 0, 3), "fabric.status": ("whole", 0, 2**32 - 1),
    "recovery_action": ("whole", 0, 255),
}


def _flattened(gpu: dict) -> dict:
    """The GPU's readings by their flat key ("remapped_rows.pending"); a nested reading NVML refused as a whole
    gives each of its keys that answer."""
    flat = {}
    for key in _GPU_FIELDS:
        outer, _, inner = key.partition(".")
        if not inner:
            if key in gpu:
                flat[key] = gpu[key]
            continue
        if outer not in gpu:
            continue
        block = gpu[outer]
        if nvml.is_error(block):
            flat[key] = block
        elif isinstance(block, dict) and inner in block:
            flat[key] = block[inner]
        elif not isinstance(block, dict):
            flat[key] = block  # the typed reading says what it is instead
    return flat


def _nvml_answer(value: object) -> str | None:
    """The error name of a recorded NVML answer ({"error": "NOT_SUPPORTED"}), else None."""
    if nvml.is_error(value):
        return value["error"] if isinstance(value["error"], str) else show(value["error"])
    return None


def _read_gpu(gpu: dict, i: int, typed: _Typed) -> GpuHealthRecord:
    where = f"gpus[{i}]"
    index = typed.whole(gpu.get("index"), f"{where}.index", "the GPU index", 0, 1023)
    record = GpuHealthRecord(index=index)
    for key in ("serial", "uuid", "name"):
        value = gpu.get(key)
        if isinstance(value, str) and value.strip():
            setattr(record, key, clean_line(value.strip()))  # no terminal control byte (formats/clean.py)
        elif _nvml_answer(value) is not None:
            record.unreadable[key] = f"NVML answered {_nvml_answer(value)} [{typed.where}: {where}.{key}]"
        elif value is not None:
            record.unreadable[key] = str(typed._refuse(f"the {key}", value, f"{where}.{key}", "text"))
    if gpu.get("pci_bus_id") is not None and _nvml_answer(gpu.get("pci_bus_id")) is None:
        try:
            record.pci_bus_id = nvml.normalize_bus_id(typed.bus_id(gpu["pci_bus_id"], f"{where}.pci_bus_id",
                                                                   "the PCI bus id"))
        except Unreadable as exc:
            record.unreadable["pci_bus_id"] = str(exc)
    if "lost" in gpu:
        record.lost = typed.text(gpu["lost"], f"{where}.lost", "the NVML error the GPU answered")
        return record
    if "handle" in gpu:
        record.unreadable["handle"] = (f"NVML gave no handle for GPU{index}: it answered "
                                       f"{_nvml_answer(gpu['handle']) or show(gpu['handle'])} "
                                       f"[{typed.where}: {where}.handle]")
        return record
    flat = _flattened(gpu)
    record.fabric = fabric_info_from_record(gpu.get("fabric"), f"{typed.where}: {where}.fabric", f"GPU{index}")
    for key, kind in _GPU_FIELDS.items():
        path = f"{where}.{key}"
        if key not in flat:
            record.unreadable[key] = f"{typed.where}: {path} is not recorded"
            continue
        value = flat[key]
        answer = _nvml_answer(value)
        if answer is not None:
            if answer in DOES_NOT_APPLY:
                record.not_applicable[key] = answer
            else:
                record.unreadable[key] = f"NVML answered {answer} [{typed.where}: {path}]"
            continue
        try:
            record.values[key] = _typed_value(typed, kind, value, path, key)
        except Unreadable as exc:
            record.unreadable[key] = str(exc)
    type_extra(gpu, where, record, typed, DOES_NOT_APPLY)
    return record


def _typed_value(typed: _Typed, kind: tuple, value: object, path: str, key: str):
    what = key.replace("_", " ").replace(".", " ")
    if kind[0] == "whole":
        return typed.whole(value, path, what, kind[1], kind[2])
    if kind[0] == "number":
        return float(typed.number(value, path, what, kind[1], kind[2]))
    if not isinstance(value, list):
        raise typed._refuse("the NVLink states", value, path, "a list of link states (0 or 1)")
    return [typed.whole(state, f"{path}[{n}]", "an NVLink state", 0, 1) for n, state in enumerate(value)]


def _kernel_log(data: object, typed: _Typed) -> KernelLog:
    if data is None:
        return KernelLog(None, f"{typed.where}: kernel_log is not recorded")
    if not isinstance(data, dict) or not isinstance(data.get("xids"), list):
        raise typed._refuse("the kernel log", data, "kernel_log", "an object with an xids list")
    error = data.get("error")
    source = data.get("source") if isinstance(data.get("source"), str) else None
    if error is not None:
        return KernelLog(source, typed.text(error, "kernel_log.error", "the reason the log was not read"))
    xids = []
    for n, xid in enumerate(data["xids"]):
        key = f"kernel_log.xids[{n}]"
        if not isinstance(xid, dict):
            raise typed._refuse("an Xid line", xid, key, "an object")
        pci = typed.text(xid.get("pci"), f"{key}.pci", "the Xid's PCI address")
        if not re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}", pci):
            raise typed._refuse("the Xid's PCI address", pci, f"{key}.pci", "a PCI address (0000:b9:00)")
        xids.append({"pci": pci, "xid": typed.whole(xid.get("xid"), f"{key}.xid", "the Xid", 0, 65535),
                     "age_s": float(typed.number(xid.get("age_s"), f"{key}.age_s", "the Xid's age", 0, 1e10)),
                     "text": str(xid.get("text") or "")[:300]})
    return KernelLog(source, None, xids, type_sxids(data, typed, typed.number))


def health_from_record(data: object, where: str) -> NodeHealthRecord:
    """The typed record. A reading that is not what NVML gives (a negative count, NaN, 1e400, a word for a number)
    is kept in ``unreadable`` naming file, key and value, never judged; raises Unreadable when the file as a
    whole is not a health record (another format, no GPU list, a GPU twice)."""
    typed = _Typed(where)
    if not isinstance(data, dict):
        raise Unreadable(f"{where} is not a gpufabric health record (a JSON object was expected)")
    if data.get("format") != FORMAT:
        raise Unreadable(f"{where}: format is {show(data.get('format'))}, expected {FORMAT!r}")
    if not isinstance(data.get("gpus"), list) or not all(isinstance(g, dict) for g in data["gpus"]):
        raise Unreadable(f"{where}: gpus is {show(data.get('gpus'))[:80]}, not a list of GPU records")
    gpus = [_read_gpu(gpu, i, typed) for i, gpu in enumerate(data["gpus"])]
    indexes = [g.index for g in gpus]
    if len(set(indexes)) != len(indexes):
        raise Unreadable(f"{where}: a GPU index is recorded twice ({', '.join(map(str, indexes))})")
    node = NodeHealthRecord(source=where, recorded_at=_text_or_none(data.get("recorded_at")),
                            hostname=_text_or_none(data.get("hostname")), driver_version=None, gpu_count=None,
                            gpus=sorted(gpus, key=lambda g: g.index), pci_gpus=None,
                            kernel_log=_kernel_log(data.get("kernel_log"), typed),
                            derived=_text_or_none(data.get("derived")))
    for key, read in (("driver_version", lambda v: typed.version(v, "driver_version", "the driver version")),
                      ("gpu_count", lambda v: typed.whole(v, "gpu_count", "the GPU count", 0, 1024))):
        value = data.get(key)
        if value is None:
            node.unreadable[key] = f"{where}: {key} is not recorded"
        elif _nvml_answer(value) is not None:
            node.unreadable[key] = f"NVML answered {_nvml_answer(value)} [{where}: {key}]"
        else:
            try:
                setattr(node, key, read(value))
            except Unreadable as exc:
                node.unreadable[key] = str(exc)
    if data.get("uptime_s") is not None:
        try:
            node.uptime_s = float(typed.number(data["uptime_s"], "uptime_s", "the seconds since boot", 0, 1e10))
        except Unreadable as exc:  # the counters' rates fall back to the wall clock, said in a note (counters.py)
            node.unreadable["uptime_s"] = str(exc)
    pci = data.get("pci_gpus")
    if isinstance(pci, list):
        node.pci_gpus = [nvml.normalize_bus_id(typed.bus_id(b, f"pci_gpus[{n}]", "a PCI bus id"))
                         for n, b in enumerate(pci)]
    elif pci is not None:
        raise typed._refuse("the PCI GPU list", pci, "pci_gpus", "a list of PCI bus ids")
    return node


def _text_or_none(value: object) -> str | None:
    return clean_line(value.strip()) if isinstance(value, str) and value.strip() else None


def load_health_file(path: Path) -> NodeHealthRecord:
    """Read a bundle's health.json. Raises Unreadable naming the file when it cannot be read at all."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Unreadable(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = load_json(text)
    except (ValueError, RecursionError) as exc:
        raise Unreadable(f"{path}: not JSON ({exc})") from None
    return health_from_record(data, str(path))


def snapshot_health(directory: Path) -> dict:
    """`gpufabric snapshot`'s part: health.json written by the live check's own reader; the manifest entry."""
    try:
        record = read_live()
    except HardwareUnavailable as exc:
        return {HEALTH_FILE: {"error": exc.why}}
    write_health_file(record, directory)
    return {HEALTH_FILE: {"read_s": record["read_s"], "kernel_log": record["kernel_log"]["error"] or "read"}}
