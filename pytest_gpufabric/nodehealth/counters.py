"""The passive tier's counter checks: NVLink and PCIe error counters by their rate since the last run, the row
remapper's banks nearly out of spare rows, corrected ECC errors, the InfoROM's validity.

The rate limits are DCGM's health-watch limits (NVIDIA/DCGM, dcgmlib's DcgmGpuHardwareLimits.h):
DCGM_LIMIT_MAX_PCIREPLAY_RATE 8 per minute ("the maximum recommended by RM"), DCGM_LIMIT_MAX_NVLINK_CRC_ERROR 100
per second ("RM has informed us that CRC errors only matter at rates of 100+ per second") and
DCGM_LIMIT_MAX_NVLINK_ERROR 1 for replays and recoveries. A counter is read by one reader (record.py) and judged
here only: its rise since the last run's reading (counter_history.py keeps it in the state folder), over the seconds
between the two. A counter that went down (a driver reload or reboot resets them) or a reading from another boot
gives no rate, and says so.
"""

from __future__ import annotations

import math

from ..remedy_classes import RERUN, RESEAT, RMA, SOFTWARE
from .finding import DRAIN, UNKNOWN, WARN, Finding
from .record import GpuHealthRecord, NodeHealthRecord
from .record_extra import REMAP_HISTOGRAM

_DCGM = "DCGM's health watch (DcgmGpuHardwareLimits.h)"
#: counter -> (check, words, limit per second, severity above it, remedy, where the limit comes from, per what unit)
RATE_LIMITS = {
    "pcie_replay": ("pcie-replay", "PCIe replays", 8 / 60, DRAIN, RESEAT,
                    f"{_DCGM}: DCGM_LIMIT_MAX_PCIREPLAY_RATE, 8 per minute", "min"),
    "nvlink_errors.crc_flit": ("nvlink-crc", "NVLink CRC flit errors", 100.0, DRAIN, RESEAT,
                               f"{_DCGM}: DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, 100 per second", "s"),
    "nvlink_errors.crc_data": ("nvlink-crc", "NVLink CRC data errors", 100.0, DRAIN, RESEAT,
                               f"{_DCGM}: DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, 100 per second", "s"),
    "nvlink_errors.replay": ("nvlink-replay", "NVLink replays", 0.0, WARN, None,
                             f"{_DCGM}: DCGM_LIMIT_MAX_NVLINK_ERROR 1: any", "min"),
    "nvlink_errors.recovery": ("nvlink-recovery", "NVLink recoveries", 0.0, WARN, None,
                               f"{_DCGM}: DCGM_LIMIT_MAX_NVLINK_ERROR 1: any", "min"),
}
#: corrected ECC errors since the driver loaded at or above which a GPU is shown (warn): a value of our own (DCGM's
#: DCGM_LIMIT_MAX_SBE_RATE is marked a placeholder there); corrected errors lose no data, their growth is the sign
CORRECTED_ECC_WARN = 1000
_WHY = {"pcie-replay": "PCIe packets replayed: the link's signal (the card, a riser or retimer not seated, a damaged "
                       "slot); reseat, and a board that keeps replaying goes back",
        "nvlink-crc": "NVLink flits or data with CRC errors: the link's signal (its bridge, cable or NVSwitch tray "
                      "not seated)",
        "nvlink-replay": "NVLink packets replayed after errors: shown (a link that keeps replaying is reseated)",
        "nvlink-recovery": "NVLink links that retrained after errors: shown (a link that keeps recovering is "
                           "reseated)"}


#: an RDMA port's PortCounters (sysfs counters/) whose any rise since the last run is shown (warn): the link went
#: down (flapped) or retrained; a limit of our own (DCGM has none for the NIC); the port's state is rdma_ports.py's
PORT_COUNTERS = {"link_downed": "went down", "link_error_recovery": "retrained"}
PORT_PREFIX = "port:"


def board_key(gpu: GpuHealthRecord) -> str:
    """The board a reading belongs to across runs: its serial, else its UUID, else its index."""
    return gpu.serial or gpu.uuid or f"GPU{gpu.index}"


def _answering(node: NodeHealthRecord) -> list[GpuHealthRecord]:
    return [g for g in node.gpus if g.lost is None and "handle" not in g.unreadable]


def _ports(node: NodeHealthRecord) -> dict[str, dict[str, int]]:
    """Each RDMA port's flap counters as read (``port:mlx5_0/1``), where the record has its counters."""
    return {f"{PORT_PREFIX}{port.device}/{port.port}": {k: port.counters[k] for k in PORT_COUNTERS
                                                       if isinstance(port.counters.get(k), int)}
            for device in node.rdma or [] for port in device.ports if port.counters}


def counter_readings(node: NodeHealthRecord) -> dict[str, dict[str, int]]:
    """Each board's (and RDMA port's) rate counters as read now (the next run's previous reading)."""
    return {**{board_key(g): {k: g.values[k] for k in RATE_LIMITS if k in g.values} for g in _answering(node)},
            **_ports(node)}


def _seconds_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def elapsed(last: dict, node: NodeHealthRecord, now: float, boot: str | None) -> tuple[float, bool]:
    """(seconds since the kept reading ``last`` of this boot, whether the boot clock timed them). Where both reads
    recorded the kernel's boot clock under a readable boot id, the shorter of its interval and the wall clock's
    (``now`` less the reading's ``at``) of those that are positive, so a stepped wall clock or a planted or stale
    boot clock can only overstate a rate; neither positive: not after it. Else the wall clock alone."""
    wall = now - last["at"]
    if boot is None or not (_seconds_number(node.uptime_s) and _seconds_number(last.get("uptime_s"))):
        return wall, False
    booted = node.uptime_s - last["uptime_s"]
    if booted > 0 and (wall <= 0 or booted <= wall):
        return booted, True
    if wall > 0:
        return wall, False
    return booted, True


def reading_ahead(last, node: NodeHealthRecord, now: float, boot: str | None) -> bool:
    """Whether a kept reading of this boot is no earlier than this one (the wall clock went back, two checks at
    once, an older record replayed): kept, not replaced."""
    return isinstance(last, dict) and last.get("boot_id") == boot and isinstance(last.get("at"), (int, float)) \
        and isinstance(last.get("counters"), dict) and elapsed(last, node, now, boot)[0] <= 0


def _port_flaps(node: NodeHealthRecord, history: dict, now: float, boot: str | None,
                behind: dict[bool, list[str]]) -> list[Finding]:
    findings = []
    for key, counters in _ports(node).items():
        last = history.get(key)
        if reading_ahead(last, node, now, boot):
            behind[elapsed(last, node, now, boot)[1]].append(key.removeprefix(PORT_PREFIX))
            continue
        if not isinstance(last, dict) or last.get("boot_id") != boot or not isinstance(last.get("at"), (int, float)) \
                or not isinstance(last.get("counters"), dict):
            continue
        rises = {k: v - last["counters"][k] for k, v in counters.items()
                 if isinstance(last["counters"].get(k), int) and v > last["counters"][k]}
        if rises:
            seconds, by_boot_clock = elapsed(last, node, now, boot)
            port = key.removeprefix(PORT_PREFIX)
            what = ", ".join(f"{PORT_COUNTERS[k]} {n}x" for k, n in rises.items())
            findings.append(Finding(
                "ib-port-flap", WARN, f"{port.replace('/', ' port ')} {what} in {seconds:.0f} s", None, None, None,
                {"port": port, "counts": rises, "seconds": round(seconds, 3), "timed_by": _timed_by(by_boot_clock),
                 "source": node.rdma_source},
                "the port's link went down or retrained since the last run (sysfs counters/link_downed, "
                "link_error_recovery): a cable, transceiver or switch port; shown, a port that keeps flapping is "
                "reseated"))
    return findings


def _timed_by(by_boot_clock: bool) -> str:
    return "boot clock (CLOCK_BOOTTIME)" if by_boot_clock else "wall clock"


def _per(rate_s: float, unit: str) -> str:
    return f"{rate_s * 60:.3g}/min" if unit == "min" else f"{rate_s:.3g}/s"


def rate_findings(node: NodeHealthRecord, history: dict | None, now: float, boot: str | None) \
        -> tuple[list[Finding], list[str]]:
    """The counters' rates since ``history`` ({board: {"at", "boot_id", "counters"}}: counter_history.py; None: no
    state folder keeps one)."""
    if history is None:
        return [], ["counter rates not judged: no state folder keeps the last reading (--state-dir)"]
    findings: list[Finding] = []
    first, rebooted, reset = [], [], []
    behind: dict[bool, list[str]] = {False: [], True: []}  # by whether the boot clock timed it
    for gpu in _answering(node):
        last = history.get(board_key(gpu))
        if not isinstance(last, dict) or not isinstance(last.get("counters"), dict) \
                or not isinstance(last.get("at"), (int, float)):
            first.append(gpu.label)
            continue
        if last.get("boot_id") != boot:
            rebooted.append(gpu.label)
            continue
        seconds, by_boot_clock = elapsed(last, node, now, boot)
        if seconds <= 0:  # not after the last reading: counter_history keeps its counters for the next check
            behind[by_boot_clock].append(gpu.label)
            continue
        for counter, (check, words, limit, severity, remedy, source, unit) in RATE_LIMITS.items():
            if counter in gpu.unreadable:
                findings.append(Finding(check, UNKNOWN, f"{words} not readable", gpu.index, gpu.serial, RERUN,
                                        {"key": counter, "why": gpu.unreadable[counter], "source": node.source},
                                        gpu.unreadable[counter]))
                continue
            value, before = gpu.values.get(counter), last["counters"].get(counter)
            if not isinstance(value, int) or not isinstance(before, int):
                continue
            if value < before:
                reset.append(f"{gpu.label} {counter}")
                continue
            rise = value - before
            rate = rise / seconds
            if rise and rate > limit:
                what = (f"{words} {_per(rate, unit)} over {seconds:.0f} s (limit {_per(limit, unit).split('/')[0]})"
                        if limit else f"{words}: {rise} in {seconds:.0f} s")
                findings.append(Finding(
                    check, severity, what, gpu.index, gpu.serial, remedy,
                    {"counter": counter, "count": rise, "seconds": round(seconds, 3),
                     "timed_by": _timed_by(by_boot_clock), "rate_per_s": rate, "limit_per_s": limit,
                     "limit_from": source, "reading": value, "previous": before,
                     "source": node.source},
                    f"{_WHY[check]}; the limit: {source}"))
    findings += _port_flaps(node, history, now, boot, behind)
    notes = []
    if first:
        notes.append(f"counter rates from the next run on: no earlier reading of {', '.join(first)}")
    if rebooted:
        notes.append(f"counter rates not judged for {', '.join(rebooted)}: the last reading is of another boot "
                     "(the counters restarted)")
    if behind[False]:
        notes.append(f"counter rates not judged for {', '.join(behind[False])}: the clock reads no later than the "
                     "last reading (it went back, or two checks at once); the last reading's counters are kept, dated "
                     "now, and the rise since them is judged at the next check")
    if behind[True]:
        notes.append(f"counter rates not judged for {', '.join(behind[True])}: neither the boot clock nor "
                     "the wall clock reads later than the last reading (two checks at once, or an older record "
                     "replayed); the last reading is kept, and the rise since it is judged at the next check")
    if "uptime_s" in node.unreadable:
        notes.append(f"counter rates timed by the wall clock: {node.unreadable['uptime_s']}")
    if reset:
        notes.append(f"counter rates not judged: {', '.join(reset)} went down since the last reading (a driver "
                     "reload resets it)")
    return findings, notes


def wear_findings(node: NodeHealthRecord) -> tuple[list[Finding], list[str]]:
    """The row remapper nearly full, corrected ECC above CORRECTED_ECC_WARN, an InfoROM that does not validate."""
    findings: list[Finding] = []
    notes: list[str] = []
    not_recorded: dict[str, list[str]] = {}

    def add(severity: str, check: str, what: str, gpu: GpuHealthRecord, remedy: str | None, detail: str,
            **evidence) -> None:
        findings.append(Finding(check, severity, what, gpu.index, gpu.serial, remedy,
                                {**evidence, "source": node.source}, detail))

    def unreadable(gpu: GpuHealthRecord, key: str, check: str) -> None:
        add(UNKNOWN, check, f"{key.replace('_', ' ')} not readable", gpu, RERUN, gpu.unreadable[key], key=key,
            why=gpu.unreadable[key])

    for gpu in _answering(node):
        for key in sorted(gpu.not_recorded):
            not_recorded.setdefault(key, []).append(gpu.label)
        if "remap_histogram.low" in gpu.values:
            banks = {k: gpu.values[f"remap_histogram.{k}"] for k in REMAP_HISTOGRAM}
            if banks["low"] or banks["none"]:
                rows = {k: gpu.values.get(f"remapped_rows.{k}") for k in ("correctable", "uncorrectable")}
                add(DRAIN, "remap-capacity", f"row remapper nearly full: {banks['low']} banks low, "
                                             f"{banks['none']} none left", gpu, RMA,
                    "NVML's row remapper histogram counts the memory banks by the spare rows they have left: a bank "
                    "with few or none cannot remap its next failing row (a remapping failure, Xid 64); the board "
                    "goes back to the vendor before that", remap_histogram=banks, remapped_rows=rows)
        elif "remap_histogram" in gpu.unreadable:
            unreadable(gpu, "remap_histogram", "remap-capacity")
        corrected = gpu.values.get("ecc_corrected_volatile")
        if isinstance(corrected, int) and corrected >= CORRECTED_ECC_WARN:
            add(WARN, "ecc-corrected", f"{corrected} corrected ECC errors", gpu, None,
                f"corrected ECC errors since the driver loaded, at or above {CORRECTED_ECC_WARN} (a limit of "
                "gpufabric's own): no data lost; memory wearing, watch the remapped rows",
                ecc_corrected_volatile=corrected, warn_at=CORRECTED_ECC_WARN)
        if gpu.values.get("inforom_valid") is False:
            add(DRAIN, "inforom", "InfoROM corrupted", gpu, SOFTWARE,
                "nvmlDeviceValidateInforom answers CORRUPTED_INFOROM: the board's InfoROM (its ECC, page-retirement "
                "and error records) does not validate; DCGM's remedy is to flash the InfoROM (the vendor's firmware "
                "update); one that is corrupt again goes back to the vendor", inforom="CORRUPTED_INFOROM")
        elif "inforom_valid" in gpu.unreadable:
            unreadable(gpu, "inforom_valid", "inforom")
    if not_recorded:
        labels = sorted({label for gpus in not_recorded.values() for label in gpus}, key=lambda x: int(x[3:]))
        notes.append(f"not recorded ({node.source} predates them), not judged: "
                     f"{', '.join(k.replace('_', ' ') for k in sorted(not_recorded))} of {', '.join(labels)}")
    return findings, notes
