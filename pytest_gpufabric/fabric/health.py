"""GPU health through NVML: error counters judged by their change around a test, and a timeline of
temperature, power, clocks and clock-event (throttle) reasons.

What is read, per GPU (every call through nvml.query, so NOT_SUPPORTED is recorded, never raised):
- volatile ECC corrected / uncorrected counts (since the driver loaded);
- remapped rows (Ampere+: correctable, uncorrectable, pending, failure) or retired pages (older GPUs);
- the PCIe replay counter;
- per NVLink the DL error counters REPLAY, RECOVERY, CRC_FLIT, CRC_DATA, ECC_DATA;
- XID events, from an NVML event set read in the background (XID 79 is "fell off the bus");
- temperature, power, SM/memory clocks, and the clock-event reasons bit mask.

Counters are judged by how much they rose, never by their value: the H200 of
tests/data/captures/h200-nvswitch-x2 reads CRC_DATA 9 and ECC_DATA 14 on link 0 at idle.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..errors import HardwareUnavailable
from . import nvml

#: the counters a profile can forbid, with what a rise of each usually means
COUNTERS = {
    "xid": "XID errors from the driver (79: the GPU fell off the bus; 48/63/64: ECC; 74: NVLink)",
    "ecc_corrected": "corrected (single-bit) ECC errors: memory degrading",
    "ecc_uncorrected": "uncorrected (double-bit) ECC errors: data was lost",
    "remapped_rows_uncorrectable": "rows remapped after uncorrectable errors",
    "remapped_rows_pending": "a row remap waits for a GPU reset",
    "remapped_rows_failure": "a row could not be remapped: the GPU needs service",
    "retired_pages": "memory pages retired after ECC errors",
    "pcie_replay": "PCIe packets replayed: signal integrity (riser, slot, retimer)",
    "nvlink_replay": "NVLink packets replayed",
    "nvlink_recovery": "NVLink links that had to recover",
    "nvlink_crc_flit": "NVLink flits with CRC errors",
    "nvlink_crc_data": "NVLink data with CRC errors",
    "nvlink_ecc_data": "NVLink data with ECC errors",
}
#: what a profile forbids unless it says otherwise: errors that lost data, need service, or made a link retrain or
#: retransmit. Not the NVLink CRC_DATA / ECC_DATA counters: the link corrects those, and they rise on healthy
#: machines (docs/suites.md); they are recorded and shown, and a profile may forbid them.
DEFAULT_FORBIDDEN = ("xid", "ecc_uncorrected", "remapped_rows_uncorrectable", "remapped_rows_pending",
                     "remapped_rows_failure", "retired_pages", "nvlink_replay", "nvlink_recovery")
#: clock-event reasons a profile forbids unless it says otherwise: the GPU protecting itself, not its power policy
DEFAULT_FORBIDDEN_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")

#: clock-event reason bits (nvml.h nvmlClocksEventReason*) that mean the GPU slowed itself down
THROTTLE_REASONS = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                    0x80: "hw_power_brake_slowdown", 0x4: "sw_power_cap"}
_NVLINK_COUNTERS = {"nvlink_replay": 0, "nvlink_recovery": 1, "nvlink_crc_flit": 2, "nvlink_crc_data": 3,
                    "nvlink_ecc_data": 4}


@dataclass
class GpuHealth:
    """One read of one GPU. Counter values are ints, or None where NVML answered NOT_SUPPORTED."""

    index: int
    serial: str | None
    counters: dict[str, int | None] = field(default_factory=dict)  # name -> value (links: "nvlink_crc_data:3")
    temperature_c: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle: list[str] = field(default_factory=list)


def counter_deltas(before: GpuHealth, after: GpuHealth) -> dict[str, int]:
    """Every counter that rose, by how much (a counter that went down was reset: its new value counts)."""
    rose = {}
    for name, value in after.counters.items():
        old = before.counters.get(name)
        if value is None or old is None:
            continue
        delta = value - old if value >= old else value
        if delta > 0:
            rose[name] = delta
    return rose


def window_record(before: dict[int, GpuHealth], after: dict[int, GpuHealth], points: list[dict]) -> dict[str, dict]:
    """Per GPU (keyed by index as a string, as JSON keeps it): what a stretch of work did to its health.

    ``serial``; ``rose``: the counters that rose between the reads that open and close the window; ``temperature_c``,
    ``power_w``, ``throttle``: the closing read; ``peak_temperature_c``, ``peak_power_w``, ``throttle_seen``: the
    worst of the background ``points`` taken inside the window and the closing read. The closing read alone
    misses the load: on the H200s of tests/data/results/burn-in-10min-live-on-h200-x2.json the timeline shows
    67 C and 690 W at the software power cap during each GEMM chunk, the read a second after it 51 C and 390 W.
    """
    record = {}
    for index, now in after.items():
        samples = [_point_gpu(point, index) for point in points]
        samples = [s for s in samples if s] + [{"temperature_c": now.temperature_c, "power_w": now.power_w,
                                                "throttle": now.throttle}]
        temperatures = [s["temperature_c"] for s in samples if s.get("temperature_c") is not None]
        powers = [s["power_w"] for s in samples if s.get("power_w") is not None]
        then = before.get(index)
        record[str(index)] = {
            "serial": now.serial, "rose": counter_deltas(then, now) if then is not None else {},
            "temperature_c": now.temperature_c, "power_w": now.power_w, "throttle": now.throttle,
            "peak_temperature_c": max(temperatures) if temperatures else None,
            "peak_power_w": max(powers) if powers else None,
            "throttle_seen": sorted({reason for s in samples for reason in s.get("throttle") or []}),
        }
    return record


def _point_gpu(point: dict, index: int) -> dict | None:
    """One GPU of a timeline point (its keys are ints while running, strings once read back from JSON)."""
    gpus = point.get("gpus") or {}
    return gpus.get(index, gpus.get(str(index)))


def base_counter(name: str) -> str:
    """'nvlink_crc_data:3' -> 'nvlink_crc_data' (per-link counters carry their link after a colon)."""
    return name.split(":", 1)[0]


#: how long the XID thread waits for an event before it looks whether the run is over: close() waits for that wait
#: to end (a 500 ms wait cost every run 0.25 s on average at its end); an event that comes between waits is kept
#: by NVML's event set for the next one
EVENT_WAIT_MS = 100


class HealthReader:
    """Reads every GPU's health through NVML (one nvmlInit for the reader's lifetime)."""

    def __init__(self) -> None:
        self._nvml = nvml
        self._pynvml, why = nvml._init_nvml()
        if self._pynvml is None:
            raise HardwareUnavailable(f"{why}; GPU health cannot be read")
        pynvml = self._pynvml
        count = pynvml.nvmlDeviceGetCount()
        self.handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)}
        self.serials = {i: self._value(pynvml.nvmlDeviceGetSerial, h) for i, h in self.handles.items()}
        self.links = {i: self._links(h) for i, h in self.handles.items()}
        self.xid_events: list[dict] = []
        self._event_set = None
        self._stop = threading.Event()
        self._events_thread: threading.Thread | None = None

    def _value(self, fn, *args):
        answer = self._nvml.query(fn, *args)
        if self._nvml.is_error(answer):
            return None
        return answer.decode() if isinstance(answer, bytes) else answer

    def _links(self, handle) -> list[int]:
        links = []
        for link in range(self._nvml._enum(self._pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            state = self._nvml.query(self._pynvml.nvmlDeviceGetNvLinkState, handle, link)
            if self._nvml.is_error(state):
                break
            if state == 1:
                links.append(link)
        return links

    def read(self) -> dict[int, GpuHealth]:
        """Everything: the fast reads and every NVLink error counter (a burn-in chunk's bracket)."""
        reads = self.read_fast()
        for index, health in reads.items():
            health.counters.update(self.read_nvlink(index))
        return reads

    def read_fast(self) -> dict[int, GpuHealth]:
        """All but the NVLink error counters: microseconds a GPU (ECC, remapped rows, temperature, power, clocks,
        clock events; the PCIe replay counter about 0.2 ms), where each NVLink counter costs about 0.9 ms a link
        (measured on 2x H100 SXM, driver 580: tests/data/results/nvml-read-cost-h100-x2/)."""
        return {i: self._read_gpu(i, h) for i, h in self.handles.items()}

    def read_nvlink(self, index: int) -> dict[str, int | None]:
        """One GPU's NVLink DL error counters, per active link ("nvlink_replay:3"). NVML has no batched read of
        them on Hopper drivers (field values answer NOT_SUPPORTED, or cost as much per link): one call each."""
        h, p, v = self.handles[index], self._pynvml, self._value
        return {f"{name}:{link}": v(p.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
                for link in self.links[index] for name, counter in _NVLINK_COUNTERS.items()}

    def _read_gpu(self, index: int, h) -> GpuHealth:
        p, v = self._pynvml, self._value
        health = GpuHealth(index=index, serial=self.serials[index])
        c = health.counters
        c["ecc_corrected"] = v(p.nvmlDeviceGetTotalEccErrors, h, p.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                               p.NVML_VOLATILE_ECC)
        c["ecc_uncorrected"] = v(p.nvmlDeviceGetTotalEccErrors, h, p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                 p.NVML_VOLATILE_ECC)
        rows = v(p.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            _corr, unc, pending, failure = rows
            c.update(remapped_rows_uncorrectable=unc, remapped_rows_pending=pending, remapped_rows_failure=failure)
        else:  # before Ampere: retired pages
            pages = [v(p.nvmlDeviceGetRetiredPages, h, cause) for cause in (0, 1)]
            c["retired_pages"] = None if None in pages else sum(len(x) for x in pages)
        c["pcie_replay"] = v(p.nvmlDeviceGetPcieReplayCounter, h)
        c["xid"] = sum(1 for e in self.xid_events if e["gpu"] == index)
        health.temperature_c = v(p.nvmlDeviceGetTemperature, h, p.NVML_TEMPERATURE_GPU)
        power = v(p.nvmlDeviceGetPowerUsage, h)
        health.power_w = None if power is None else power / 1000
        health.sm_clock_mhz = v(p.nvmlDeviceGetClockInfo, h, p.NVML_CLOCK_SM)
        health.mem_clock_mhz = v(p.nvmlDeviceGetClockInfo, h, p.NVML_CLOCK_MEM)
        # renamed from ...ThrottleReasons in NVML 12.2; older nvidia-ml-py has only the old name
        event_reasons = getattr(p, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = v(event_reasons or p.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        if reasons is not None:
            health.throttle = [name for bit, name in THROTTLE_REASONS.items() if reasons & bit]
        return health

    def watch_xid(self) -> str | None:
        """Collect XID events in the background; the reason when NVML cannot deliver them (VMs often can't)."""
        p = self._pynvml
        try:
            self._event_set = p.nvmlEventSetCreate()
            for handle in self.handles.values():
                p.nvmlDeviceRegisterEvents(handle, p.nvmlEventTypeXidCriticalError, self._event_set)
        except p.NVMLError as exc:
            self._event_set = None
            return f"XID events not available: {exc}"
        self._events_thread = threading.Thread(target=self._wait_events, name="nvml-xid", daemon=True)
        self._events_thread.start()
        return None

    def _wait_events(self) -> None:
        p = self._pynvml
        while not self._stop.is_set():
            try:
                data = p.nvmlEventSetWait_v2(self._event_set, EVENT_WAIT_MS)
            except p.NVMLError:
                continue  # timeout: nothing happened meanwhile
            index = next((i for i, h in self.handles.items() if self._same_device(h, data.device)), None)
            self.xid_events.append({"gpu": index, "xid": int(data.eventData), "time": time.time()})

    def _same_device(self, a, b) -> bool:
        p = self._pynvml
        try:
            return p.nvmlDeviceGetIndex(a) == p.nvmlDeviceGetIndex(b)
        except p.NVMLError:
            return False

    def close(self) -> None:
        self._stop.set()
        if self._events_thread is not None:
            self._events_thread.join(timeout=2)
        if self._event_set is not None:
            try:
                self._pynvml.nvmlEventSetFree(self._event_set)
            except self._pynvml.NVMLError:
                pass
        self._pynvml.nvmlShutdown()


class HealthTimeline:
    """Background reads at an interval, for the report's health timeline and live metrics."""

    def __init__(self, reader: HealthReader, interval_s: float, on_read=None) -> None:
        self.reader, self.interval_s, self.on_read = reader, interval_s, on_read
        self.points: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-reads", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        read = getattr(self.reader, "read_fast", self.reader.read)  # the plot needs no NVLink counters
        while not self._stop.wait(self.interval_s):
            try:
                reads = read()
            except Exception:  # a failing read must not kill the run; the next test's reads will say why
                continue
            self.points.append({"t": time.time(), "gpus": {
                i: {"temperature_c": h.temperature_c, "power_w": h.power_w, "sm_clock_mhz": h.sm_clock_mhz,
                    "throttle": h.throttle} for i, h in reads.items()}})
            if self.on_read:
                self.on_read(reads)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 2)


@dataclass(frozen=True)
class LinkRise:
    """An NVLink error counter that rose between two reads: it rose at some moment in [since, until] (monotonic
    seconds: the start of the read before, the end of the read after)."""

    gpu: int
    serial: str | None
    counter: str  # "nvlink_replay:3"
    delta: int
    since: float
    until: float


class NvlinkSweeper:
    """Reads every GPU's NVLink error counters over and over, a thread per GPU, off the tests' critical path (a
    GPU with 18 links takes about 80 ms a sweep: more than a trivial test). Each rise is handed out with the two
    reads that bracket it, for the watchdog to attribute to the test it rose in, or to say it cannot."""

    def __init__(self, reader, pause_s: float = 0.05) -> None:
        self.reader, self.pause_s = reader, pause_s
        self.gpus = [index for index, links in reader.links.items() if links]
        self._last: dict[int, tuple[float, float, dict]] = {}  # gpu -> (start, end, values) of its last sweep
        self._rises: list[LinkRise] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(gpu,), name=f"nvlink-errors-{gpu}", daemon=True)
                         for gpu in self.gpus]

    def start(self, timeout_s: float = 30.0) -> None:
        """Start sweeping, and wait for the first sweep of every GPU: the values every rise is counted from."""
        started = time.monotonic()
        for thread in self._threads:
            thread.start()
        self.wait_past(started, timeout_s)

    def _run(self, gpu: int) -> None:
        while not self._stop.is_set():
            self._sweep(gpu)
            self._stop.wait(self.pause_s)

    def _sweep(self, gpu: int) -> None:
        began = time.monotonic()
        try:
            values = self.reader.read_nvlink(gpu)
        except Exception:  # a failing read must not end the watch; the next sweep tries again
            return
        ended = time.monotonic()
        with self._changed:
            last = self._last.get(gpu)
            if last is not None:
                for name, value in values.items():
                    old = last[2].get(name)
                    if value is None or old is None or value == old:
                        continue
                    delta = value - old if value > old else value  # went down: reset, its new value counts
                    if delta > 0:
                        self._rises.append(LinkRise(gpu, self.reader.serials.get(gpu), name, delta, last[0], ended))
            self._last[gpu] = (began, ended, values)
            self._changed.notify_all()

    def wait_past(self, moment: float, timeout_s: float) -> bool:
        """Wait until every GPU's last sweep began after ``moment`` (so that what rose before it is seen)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while any(self._last.get(gpu, (float("-inf"),))[0] < moment for gpu in self.gpus):
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._changed.wait(left)
        return True

    def oldest_sweep(self) -> float:
        """The start of the oldest GPU's last sweep: no rise found from now on can have begun before it."""
        with self._changed:
            return min((self._last[gpu][0] for gpu in self.gpus if gpu in self._last), default=float("-inf"))

    def take(self) -> list[LinkRise]:
        with self._changed:
            rises, self._rises = self._rises, []
        return rises

    def stop(self) -> list[LinkRise]:
        """Stop sweeping, then read every GPU once more: the rises since the last sweeps, and all not yet taken."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        for gpu in self.gpus:
            self._sweep(gpu)
        return self.take()
