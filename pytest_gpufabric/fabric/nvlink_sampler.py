"""Read NVLink counters live through NVML, and measure the traffic of a piece of work.

``NvlinkTraffic`` is what the ``nvlink_traffic`` fixture hands out: a context manager that samples every link
before and after the work, and in a background thread at a fixed interval for a timeline. NVML reads run in
the pytest process; they create no CUDA context and do not touch the GPUs' work.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import HardwareUnavailable
from ..formats.counters import LEGACY, RAW, THROUGHPUT, CounterSample, LinkCount, LinkDelta, summed_deltas, timeline
from . import nvml

# NVML field ids (nvml.h): cumulative KiB per link, Hopper and newer
FI_THROUGHPUT_DATA_TX, FI_THROUGHPUT_DATA_RX = 138, 139
FI_THROUGHPUT_RAW_TX, FI_THROUGHPUT_RAW_RX = 140, 141
_FIELDS = {
    THROUGHPUT: (FI_THROUGHPUT_DATA_TX, FI_THROUGHPUT_DATA_RX),
    RAW: (FI_THROUGHPUT_RAW_TX, FI_THROUGHPUT_RAW_RX),
}

#: nvmlNvLinkUtilizationCountUnits_t
_LEGACY_UNITS = {0: "cycles", 1: "packets", 2: "bytes"}


class NvmlCounterReader:
    """Reads every active NVLink of the given GPUs; chooses the throughput fields where the GPU has them
    (Hopper+), else the legacy utilization counter set ``legacy_counter`` (0 or 1)."""

    def __init__(self, gpu_indices: list[int] | None = None, *, kind: str = THROUGHPUT, legacy_counter: int = 0):
        self._pynvml, why = nvml._init_nvml()
        if self._pynvml is None:
            raise HardwareUnavailable(f"{why}; NVLink counters cannot be read")
        pynvml = self._pynvml
        count = pynvml.nvmlDeviceGetCount()
        indices = list(range(count)) if gpu_indices is None else gpu_indices
        self.handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        self.links = {i: self._active_links(h) for i, h in self.handles.items()}
        self.legacy_counter = legacy_counter
        self.kind = kind if self._throughput_works() else LEGACY
        self.units = "bytes" if self.kind != LEGACY else self._legacy_units()

    def close(self) -> None:
        self._pynvml.nvmlShutdown()

    def _active_links(self, handle) -> list[int]:
        links = []
        for link in range(nvml._enum(self._pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            state = nvml.query(self._pynvml.nvmlDeviceGetNvLinkState, handle, link)
            if nvml.is_error(state):
                break
            if state == 1:
                links.append(link)
        return links

    def _throughput_works(self) -> bool:
        for index, handle in self.handles.items():
            if self.links[index]:
                answer = nvml.field_value(handle, FI_THROUGHPUT_DATA_TX, self.links[index][0])
                return not nvml.is_error(answer)
        return True  # no links at all: nothing to read either way

    def _legacy_units(self) -> str:
        for index, handle in self.handles.items():
            for link in self.links[index]:
                control = nvml.query(self._pynvml.nvmlDeviceGetNvLinkUtilizationControl, handle, link,
                                     self.legacy_counter)
                if nvml.is_error(control):
                    return f"unknown ({control['error']})"
                return _LEGACY_UNITS.get(control.units, f"unit {control.units}")
        return "bytes"

    def read(self) -> CounterSample:
        t = time.monotonic()
        sample = CounterSample(t_s=t, kind=self.kind, units=self.units)
        for index, handle in self.handles.items():
            sample.gpus[index] = self._read_gpu(handle, self.links[index])
        return sample

    def _read_gpu(self, handle, links: list[int]) -> dict[int, LinkCount]:
        if not links:
            return {}
        if self.kind == LEGACY:
            counts = {}
            for link in links:
                rx, tx = self._pynvml.nvmlDeviceGetNvLinkUtilizationCounter(handle, link, self.legacy_counter)
                counts[link] = LinkCount(tx_bytes=int(tx), rx_bytes=int(rx))
            return counts
        tx_field, rx_field = _FIELDS[self.kind]
        # one NVML call for every link of the GPU; scopeId = link index (a bare field id reads link 0 only)
        pairs = [(fid, link) for link in links for fid in (tx_field, rx_field)]
        values = nvml.field_values(handle, pairs)
        counts = {}
        for n, link in enumerate(links):
            tx_kib, rx_kib = values[2 * n], values[2 * n + 1]
            if nvml.is_error(tx_kib) or nvml.is_error(rx_kib):
                raise HardwareUnavailable(f"NVLink {link} throughput counter not readable: {tx_kib} {rx_kib}")
            counts[link] = LinkCount(tx_bytes=int(tx_kib) * 1024, rx_bytes=int(rx_kib) * 1024)
        return counts


@dataclass
class NvlinkTraffic:
    """Counters around a piece of work: ``with traffic: work()``; then ``deltas``, ``rates``, ``timeline``.

    ``reader`` is anything with ``read() -> CounterSample`` (live NVML, or a recorded series in replay);
    ``on_sample`` is told of every sample as it is taken (the live metrics endpoint shows the link rates while
    the work runs, not after it).
    """

    reader: object
    interval_s: float = 0.1
    on_sample: Callable[[CounterSample], None] | None = None
    samples: list[CounterSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    failed_reads: int = 0  # background reads that raised; the sampler goes on (the timeline has a gap there)
    errors: list[str] = field(default_factory=list)  # the first few of those, and of on_sample's failures

    def __enter__(self) -> NvlinkTraffic:
        self.samples = []
        self._keep(self.reader.read())
        if self.interval_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample_in_background, name="nvlink-sampler", daemon=True)
            self._thread.start()
        return self

    def _sample_in_background(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sample = self.reader.read()
            except Exception as exc:  # one failed read is a gap in the timeline; the before/after reads judge
                self.failed_reads += 1
                self._note(f"counter read failed: {exc}")
                continue
            self._keep(sample)

    def _keep(self, sample: CounterSample) -> None:
        with self._lock:
            self.samples.append(sample)
        if self.on_sample is not None:
            try:
                self.on_sample(sample)
            except Exception as exc:  # the live metrics must never stop the measurement
                self._note(f"on_sample failed: {exc!r}")

    def _note(self, error: str) -> None:
        if len(self.errors) < 5:
            self.errors.append(error)

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._keep(self.reader.read())

    @property
    def kind(self) -> str:
        return self.samples[0].kind

    @property
    def duration_s(self) -> float:
        return self.samples[-1].t_s - self.samples[0].t_s

    @property
    def deltas(self) -> dict[int, dict[int, LinkDelta]]:
        """Per GPU, per link: bytes over the whole window (consecutive deltas summed: resets lose little)."""
        return summed_deltas(self.samples)

    @property
    def rates(self) -> dict[int, dict[int, tuple[float, float]]]:
        """Per GPU, per link: (tx, rx) bytes/s averaged over the window."""
        duration = self.duration_s or float("nan")
        return {gpu: {link: (d.tx_bytes / duration, d.rx_bytes / duration) for link, d in links.items()}
                for gpu, links in self.deltas.items()}

    @property
    def timeline(self) -> list[dict]:
        return timeline(self.samples)

    def to_json(self) -> dict:
        document = {"interval_s": self.interval_s, "samples": [s.to_json() for s in self.samples]}
        if self.failed_reads or self.errors:
            document["sampler"] = {"failed_reads": self.failed_reads, "errors": self.errors}
        return document

    @classmethod
    def recorded(cls, samples: list[CounterSample], interval_s: float = 0.0) -> NvlinkTraffic:
        """A finished measurement from recorded samples (a replay bundle), judged by the same code."""
        return cls(reader=None, interval_s=interval_s, samples=list(samples))
