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
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: sample kinds: what the counters count
THROUGHPUT = "throughput"  # payload bytes (NVML DATA fields, `nvlink -gt d`)
RAW = "raw"  # bytes with protocol overhead (NVML RAW fields, `nvlink -gt r`)
LEGACY = "legacy"  # utilization counter set (`nvlink -g 0`), in the units its control was set to


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

    def to_json(self) -> dict:
        return {
            "t_s": self.t_s,
            "kind": self.kind,
            "units": self.units,
            "gpus": {
                str(gpu): {"links": {str(link): {"tx_bytes": c.tx_bytes, "rx_bytes": c.rx_bytes}
                                     for link, c in links.items()}}
                for gpu, links in self.gpus.items()
            },
        }

    @classmethod
    def from_json(cls, data: dict) -> CounterSample:
        return cls(
            t_s=float(data["t_s"]),
            kind=data["kind"],
            units=data.get("units", "bytes"),
            gpus={
                int(gpu): {int(link): LinkCount(int(c["tx_bytes"]), int(c["rx_bytes"]))
                           for link, c in entry["links"].items()}
                for gpu, entry in data["gpus"].items()
            },
        )


@dataclass
class LinkDelta:
    tx_bytes: int
    rx_bytes: int
    reset: bool = False  # a counter went down between the samples: counted from zero after it


def _counter_delta(before: int, after: int) -> tuple[int, bool]:
    if after >= before:
        return after - before, False
    return after, True


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
