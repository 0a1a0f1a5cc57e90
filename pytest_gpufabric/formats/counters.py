"""NVLink traffic counters: samples of cumulative per-link byte counts, and the deltas between them.

Where the numbers come from (one interface, three sources):
- Hopper and newer: NVML field values NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (138/139, payload) and
  RAW_TX/RX (140/141, with protocol overhead), in KiB, read per link with scopeId = link index. A bare field
  id reads scopeId 0, which is link 0 only (tests/data/captures/h200-nvswitch-x2/FACTS.md);
- Pascal to Ampere: nvmlDeviceGetNvLinkUtilizationCounter on counter set 0 or 1, in the units its control
  says (set by an administrator with `nvidia-smi nvlink -sc 0bz`: bytes); NOT_SUPPORTED on Hopper;
- text: `nvidia-smi nvlink -g 0` ("Link 0: Rx0: 49020 KBytes, Tx0: 202616 KBytes") and `nvidia-smi nvlink
  -gt d|r` ("Link 0: Data Tx: 12120504 KiB"), parsed by formats/nvlink.py.

Counters are cumulative and never zeroed by this plugin (zeroing needs root and changes the machine): every
measurement is a difference of two samples. A counter that went down between two samples was reset (or
wrapped); the traffic after the reset is its new value, and the delta says it saw a reset.

What a series must be before it is judged (``sample_problems``, the one place that says so, for live reads and
recordings alike): at least two samples, in time order, of one kind, counting bytes, whole non-negative counts,
every link in every sample, and each counter monotonic unless the sample says its counters were reset (``reset``,
as ``nvidia-smi nvlink -r`` between two reads would). A counter that goes down with no reset recorded is a
recording out of order or a hand-edited file, never traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: sample kinds: what the counters count
THROUGHPUT = "throughput"  # payload bytes (NVML DATA fields, `nvlink -gt d`)
RAW = "raw"  # bytes with protocol overhead (NVML RAW fields, `nvlink -gt r`)
LEGACY = "legacy"  # utilization counter set (`nvlink -g 0`), in the units its control was set to
KINDS = (THROUGHPUT, RAW, LEGACY)
#: the only unit the traffic checks compare with bytes of all-reduce volume
BYTES = "bytes"


@dataclass
class LinkCount:
    tx_bytes: int
    rx_bytes: int


@dataclass
class CounterSample:
    """Every link's cumulative counters at one moment; ``t_s`` is seconds on one clock per recording."""

    t_s: float
    kind: str
    gpus: dict[int, dict[int, LinkCount]] = field(default_factory=dict)
    units: str = "bytes"  # what the legacy counter counted: "bytes", or "cycles"/"packets" (not bytes)
    reset: bool = False  # the counters were reset between the previous sample and this one (recorded as such)
    #: values the recording held that are not byte counts (NaN, negative, 1.5, text): (gpu, what), never judged
    problems: list[tuple[int | None, str]] = field(default_factory=list, compare=False, repr=False)

    def to_json(self) -> dict:
        document = {
            "t_s": self.t_s,
            "kind": self.kind,
            "units": self.units,
            "gpus": {
                str(gpu): {"links": {str(link): {"tx_bytes": c.tx_bytes, "rx_bytes": c.rx_bytes}
                                     for link, c in links.items()}}
                for gpu, links in self.gpus.items()
            },
        }
        if self.reset:
            document["reset"] = True
        return document

    @classmethod
    def from_json(cls, data: dict) -> CounterSample:
        """A recorded sample; a count that is not a whole number of bytes is kept out of the arithmetic (0) and
        listed in ``problems``. Raises ValueError/KeyError/TypeError for a sample without the recording's shape."""
        problems: list[tuple[int | None, str]] = []
        t_s = data["t_s"]
        if not _is_number(t_s):
            raise ValueError(f"t_s {t_s!r} is not a number")
        gpus: dict[int, dict[int, LinkCount]] = {}
        for gpu_key, entry in data["gpus"].items():
            gpu = int(gpu_key)
            gpus[gpu] = {}
            for link_key, count in entry["links"].items():
                link = int(link_key)
                values = []
                for key in ("tx_bytes", "rx_bytes"):
                    value = count[key]
                    if not _is_count(value):
                        problems.append((gpu, f"GPU{gpu} link {link} {key} = {value!r} is not a byte count"))
                        value = 0
                    values.append(int(value))
                gpus[gpu][link] = LinkCount(*values)
        return cls(t_s=float(t_s), kind=data["kind"], units=data.get("units", BYTES), gpus=gpus,
                   reset=data.get("reset") is True, problems=problems)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    """A whole, finite, non-negative number (JSON may write 1024 as 1024.0)."""
    return _is_number(value) and math.isfinite(value) and value >= 0 and value == int(value)


@dataclass
class LinkDelta:
    tx_bytes: int
    rx_bytes: int
    reset: bool = False  # a counter went down between the samples: counted from zero after it


def _counter_delta(before: int, after: int) -> tuple[int, bool]:
    if after >= before:
        return after - before, False
    return after, True


def sample_problems(samples: list[CounterSample], gpu: int | None = None) -> list[str]:
    """Why a series of samples cannot be judged, one line each (empty: it can): about the series, and about
    ``gpu`` when given (else every GPU). Each line names the sample (its position and time) and the link."""
    found: list[tuple[int | None, str]] = []
    if len(samples) < 2:
        found.append((None, f"{len(samples)} counter sample(s): traffic is the difference of two"))
    kinds = sorted({s.kind for s in samples})
    if len(kinds) > 1:
        found.append((None, f"samples of different kinds ({', '.join(kinds)}) cannot be subtracted"))
    for n, sample in enumerate(samples):
        where = f"sample {n} (t = {sample.t_s:g} s)"
        if sample.kind not in KINDS:
            found.append((None, f"{where}: counter kind {sample.kind!r} is not one of {', '.join(KINDS)}"))
        if sample.units != BYTES:
            found.append((None, f"{where}: the counters count {sample.units!r}, not bytes: the traffic in bytes "
                                "is unknown"))
        if not math.isfinite(sample.t_s):
            found.append((None, f"{where}: its time is not a finite number"))
        found += [(g, f"{where}: {text}") for g, text in sample.problems]
    for n, (before, after) in enumerate(zip(samples, samples[1:], strict=False), start=1):
        where = f"sample {n} (t = {after.t_s:g} s)"
        if not after.t_s > before.t_s:
            found.append((None, f"{where} is not later than sample {n - 1} (t = {before.t_s:g} s): the samples "
                                "are not in time order"))
        for g in sorted(set(before.gpus) | set(after.gpus)):
            links_before, links_after = before.gpus.get(g, {}), after.gpus.get(g, {})
            for link in sorted(set(links_before) ^ set(links_after)):
                held = n - 1 if link in links_before else n
                found.append((g, f"GPU{g} link {link} is in sample {held} only: its traffic between the two "
                                 "is unknown"))
            if after.reset:
                continue
            for link in sorted(set(links_before) & set(links_after)):
                a, b = links_before[link], links_after[link]
                for name, old, new in (("TX", a.tx_bytes, b.tx_bytes), ("RX", a.rx_bytes, b.rx_bytes)):
                    if new < old:
                        found.append((g, f"{where}: GPU{g} link {link} {name} went down from {old} to {new} "
                                         f"bytes with no counter reset recorded"))
    return [text for g, text in found if gpu is None or g is None or g == gpu]


def link_deltas(before: CounterSample, after: CounterSample) -> dict[int, dict[int, LinkDelta]]:
    """Per GPU, per link: what moved between two samples. Links missing from either sample are left out."""
    if before.kind != after.kind:
        raise ValueError(f"cannot subtract a {before.kind} sample from a {after.kind} sample")
    deltas: dict[int, dict[int, LinkDelta]] = {}
    for gpu, links in after.gpus.items():
        for link, count in links.items():
            previous = before.gpus.get(gpu, {}).get(link)
            if previous is None:
                continue
            tx, tx_reset = _counter_delta(previous.tx_bytes, count.tx_bytes)
            rx, rx_reset = _counter_delta(previous.rx_bytes, count.rx_bytes)
            deltas.setdefault(gpu, {})[link] = LinkDelta(tx, rx, tx_reset or rx_reset)
    return deltas


def summed_deltas(samples: list[CounterSample]) -> dict[int, dict[int, LinkDelta]]:
    """The traffic over a series of samples: consecutive deltas added up, so a reset in the middle loses
    only the traffic between the last read before it and the reset itself."""
    total: dict[int, dict[int, LinkDelta]] = {}
    for before, after in zip(samples, samples[1:], strict=False):
        for gpu, links in link_deltas(before, after).items():
            for link, delta in links.items():
                acc = total.setdefault(gpu, {}).setdefault(link, LinkDelta(0, 0))
                acc.tx_bytes += delta.tx_bytes
                acc.rx_bytes += delta.rx_bytes
                acc.reset = acc.reset or delta.reset
    return total


def timeline(samples: list[CounterSample]) -> list[dict]:
    """Per interval between consecutive samples: its midpoint and each GPU's summed TX/RX rate in bytes/s."""
    points = []
    for before, after in zip(samples, samples[1:], strict=False):
        dt = after.t_s - before.t_s
        if dt <= 0:
            continue
        rates = {}
        for gpu, links in link_deltas(before, after).items():
            rates[gpu] = {
                "tx_bytes_per_s": sum(d.tx_bytes for d in links.values()) / dt,
                "rx_bytes_per_s": sum(d.rx_bytes for d in links.values()) / dt,
            }
        points.append({"t_s": (before.t_s + after.t_s) / 2, "gpus": rates})
    return points
