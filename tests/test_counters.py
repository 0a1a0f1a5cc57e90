"""NVLink counter arithmetic, the sampler, the traffic checks and the recordings, on real counter reads only.

Inputs: the six `nvidia-smi nvlink -g 0` reads of the TITAN RTX pair taken while training ran, the H200 pair's
`nvidia-smi nvlink -gt d` at idle and after traffic (tests/data/captures), and the NVML samples recorded on a real
2x H200 around 50 DDP steps, with and without NCCL_P2P_DISABLE=1 (tests/data/bundles/*/nvlink-traffic.json).
A reordering or subset of real samples (to make a counter reset, a missing link) is marked ``# DERIVED:``.
Literal numbers were read off the files by hand: KiB as nvidia-smi printed them, times 1024.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest

from pytest_gpufabric.checks.nvlink_traffic import check_allreduce_volume, check_links_carry_traffic
from pytest_gpufabric.checks.result import FAILED, NOT_CHECKED, PASSED
from pytest_gpufabric.errors import BundleError
from pytest_gpufabric.fabric.bundle import load_nvlink_recording
from pytest_gpufabric.fabric.nvlink_sampler import NvlinkTraffic
from pytest_gpufabric.formats.counters import (
    LEGACY,
    RAW,
    THROUGHPUT,
    CounterSample,
    LinkCount,
    LinkDelta,
    link_deltas,
    summed_deltas,
    timeline,
)
from pytest_gpufabric.formats.nvlink import parse_nvlink_counters
from pytest_gpufabric.formats.recordings import NVLINK_TRAFFIC_FORMAT
from pytest_gpufabric.units import KIB
from pytest_gpufabric.workloads.training import NvlinkMeasurement

DATA = Path(__file__).parent / "data"
TITAN = DATA / "captures" / "titan-rtx-nvlink"
H200 = DATA / "captures" / "h200-nvswitch-x2"
BUNDLES = DATA / "bundles"
TRAINING = BUNDLES / "h200-nvswitch-x2-training"
P2P_DISABLED = BUNDLES / "h200-nvswitch-x2-p2p-disabled"

#: FACTS.md of h200-nvswitch-x2: 18 links per GPU at 26.562 GB/s each, per direction
H200_LINKS = 18
H200_PEAK_BYTES_PER_S = H200_LINKS * 26.562e9


def titan_samples() -> list[CounterSample]:
    """The six TITAN RTX reads, t_s = their position (the reads carry no clock)."""
    return [parse_nvlink_counters((TITAN / f"nvidia-smi-nvlink-g0.sample{i}.txt").read_text(), t_s=float(i))
            for i in range(6)]


def h200_text(name: str, t_s: float = 0.0) -> CounterSample:
    return parse_nvlink_counters((H200 / name).read_text(), t_s=t_s)


def recorded(bundle: Path) -> dict:
    return json.loads((bundle / "nvlink-traffic.json").read_text())


def recorded_samples(bundle: Path) -> list[CounterSample]:
    return [CounterSample.from_json(s) for s in recorded(bundle)["samples"]]


def restamped(sample: CounterSample, t_s: float) -> CounterSample:
    return CounterSample(t_s=t_s, kind=sample.kind, gpus=sample.gpus, units=sample.units)


def total_tx(links: dict[int, LinkDelta]) -> int:
    return sum(d.tx_bytes for d in links.values())


def total_rx(links: dict[int, LinkDelta]) -> int:
    return sum(d.rx_bytes for d in links.values())


# ---------------------------------------------------------------------------------------------------------
# link_deltas on real reads
# ---------------------------------------------------------------------------------------------------------


def test_titan_first_to_last_read():
    samples = titan_samples()
    first, last = samples[0], samples[5]
    deltas = link_deltas(first, last)
    assert {gpu: sorted(links) for gpu, links in deltas.items()} == {0: [0, 1], 1: [0, 1]}
    for gpu, links in deltas.items():
        for link, delta in links.items():
            assert delta == LinkDelta(
                last.gpus[gpu][link].tx_bytes - first.gpus[gpu][link].tx_bytes,
                last.gpus[gpu][link].rx_bytes - first.gpus[gpu][link].rx_bytes,
                reset=False,
            )
    # GPU 0 link 0: Tx0 872359 -> 8837173 KBytes, Rx0 824999 -> 5145856 KBytes
    assert deltas[0][0] == LinkDelta((8837173 - 872359) * KIB, (5145856 - 824999) * KIB, False)
    assert deltas[0][0] == LinkDelta(8155969536, 4424557568, False)
    # GPU 0 link 1: Tx0 872369 -> 8837188, Rx0 824976 -> 5145642
    assert deltas[0][1] == LinkDelta(8155974656, 4424361984, False)
    # the bridge: what GPU 0 sent on a link, GPU 1 received on it
    assert deltas[1][0] == LinkDelta(4424557568, 8155969536, False)
    assert deltas[1][1] == LinkDelta(4424361984, 8155974656, False)


def test_titan_counters_only_grow_between_consecutive_reads():
    samples = titan_samples()
    for before, after in pairwise(samples):
        deltas = link_deltas(before, after)
        assert all(not d.reset and d.tx_bytes > 0 and d.rx_bytes > 0 for links in deltas.values()
                   for d in links.values())


def test_h200_idle_to_after_traffic():
    idle = h200_text("nvidia-smi-nvlink-gt-d.idle.txt")
    after = h200_text("nvidia-smi-nvlink-gt-d.after-traffic.txt", t_s=1.0)
    assert idle.kind == after.kind == THROUGHPUT
    deltas = link_deltas(idle, after)
    assert {gpu: sorted(links) for gpu, links in deltas.items()} == {0: list(range(18)), 1: list(range(18))}
    for gpu, links in deltas.items():
        for link, delta in links.items():
            assert idle.gpus[gpu][link] == LinkCount(0, 0)  # the idle read is all zeros
            assert delta == LinkDelta(after.gpus[gpu][link].tx_bytes, after.gpus[gpu][link].rx_bytes, False)
    assert deltas[0][0] == LinkDelta(12120504 * KIB, 8061511 * KIB, False)
    assert deltas[1][17] == LinkDelta(8290610176, 12428948480, False)  # Data Tx 8096299 KiB, Data Rx 12137645 KiB
    # what GPU 0 sent over all its links, GPU 1 received over all of its
    assert total_tx(deltas[0]) == total_rx(deltas[1]) == 223183239168
    assert total_rx(deltas[0]) == total_tx(deltas[1]) == 148558032896


def test_links_missing_from_either_sample_are_left_out():
    samples = titan_samples()
    # DERIVED: subsets of real reads: GPU 1 missing from the first, link 1 of GPU 0 missing from the second
    before = CounterSample(t_s=0.0, kind=LEGACY, gpus={0: dict(samples[0].gpus[0])})
    after = CounterSample(t_s=5.0, kind=LEGACY, gpus={0: {0: samples[5].gpus[0][0]}, 1: dict(samples[5].gpus[1])})
    assert link_deltas(before, after) == {0: {0: LinkDelta(8155969536, 4424557568, False)}}


# ---------------------------------------------------------------------------------------------------------
# counter resets
# ---------------------------------------------------------------------------------------------------------


def test_a_counter_that_went_down_was_reset_and_counts_from_zero():
    samples = titan_samples()
    # DERIVED: the last read first: every counter "went down", as after `nvidia-smi nvlink -r 0`
    deltas = link_deltas(samples[5], restamped(samples[0], 6.0))
    for gpu, links in deltas.items():
        for link, delta in links.items():
            count = samples[0].gpus[gpu][link]
            assert delta == LinkDelta(count.tx_bytes, count.rx_bytes, reset=True)
    assert deltas[0][0] == LinkDelta(872359 * KIB, 824999 * KIB, True)
    assert deltas[0][0] == LinkDelta(893295616, 844798976, True)


def test_reset_is_flagged_per_link():
    samples = titan_samples()
    # DERIVED: GPU 0 as in read 5, GPU 1 as in read 0: only GPU 1's counters went down
    mixed = CounterSample(t_s=6.0, kind=LEGACY, gpus={0: samples[5].gpus[0], 1: samples[0].gpus[1]})
    deltas = link_deltas(samples[4], mixed)
    assert not any(d.reset for d in deltas[0].values())
    assert all(d.reset for d in deltas[1].values())
    assert deltas[0] == link_deltas(samples[4], samples[5])[0]
    assert deltas[1][0] == LinkDelta(samples[0].gpus[1][0].tx_bytes, samples[0].gpus[1][0].rx_bytes, True)


def test_summed_deltas_over_a_reset_loses_only_what_came_before_it():
    s0, s1, _, _, _, s5 = titan_samples()
    # DERIVED: read 0, read 1, then a reset after which the counters read as read 0 did, then read 5
    series = [s0, s1, restamped(s0, 2.0), restamped(s5, 3.0)]
    total = summed_deltas(series)
    for gpu, links in total.items():
        for link, delta in links.items():
            a, b, c = s0.gpus[gpu][link], s1.gpus[gpu][link], s5.gpus[gpu][link]
            # (s1 - s0) before the reset, s0 counted from zero, then (s5 - s0)
            assert delta == LinkDelta((b.tx_bytes - a.tx_bytes) + a.tx_bytes + (c.tx_bytes - a.tx_bytes),
                                      (b.rx_bytes - a.rx_bytes) + a.rx_bytes + (c.rx_bytes - a.rx_bytes), True)
    # GPU 0 link 0 TX: 5131261952 + 9049265152 - 893295616
    assert total[0][0].tx_bytes == 13287231488 and total[0][0].reset
    # the same samples in time order: no reset, and the total is simply last minus first
    assert summed_deltas([s0, s1, s5]) == link_deltas(s0, s5)
    assert not any(d.reset for links in summed_deltas([s0, s1, s5]).values() for d in links.values())


def test_summed_deltas_without_reset_is_last_minus_first():
    samples = titan_samples()
    assert summed_deltas(samples) == link_deltas(samples[0], samples[-1])
    training = recorded_samples(TRAINING)
    assert summed_deltas(training) == link_deltas(training[0], training[-1])
    assert summed_deltas(training[:1]) == {} and summed_deltas([]) == {}


# ---------------------------------------------------------------------------------------------------------
# kinds
# ---------------------------------------------------------------------------------------------------------


def test_samples_of_different_kinds_cannot_be_subtracted():
    legacy = titan_samples()[0]
    throughput = h200_text("nvidia-smi-nvlink-gt-d.idle.txt", t_s=1.0)
    raw = h200_text("nvidia-smi-nvlink-gt-r.after-traffic.txt", t_s=2.0)
    assert (legacy.kind, throughput.kind, raw.kind) == (LEGACY, THROUGHPUT, RAW)
    with pytest.raises(ValueError, match="cannot subtract a legacy sample from a throughput sample"):
        link_deltas(legacy, throughput)
    with pytest.raises(ValueError, match="cannot subtract a throughput sample from a legacy sample"):
        link_deltas(throughput, legacy)
    with pytest.raises(ValueError, match="cannot subtract a throughput sample from a raw sample"):
        link_deltas(throughput, raw)
    with pytest.raises(ValueError):
        summed_deltas([legacy, throughput])
    with pytest.raises(ValueError):
        timeline([legacy, throughput])


# ---------------------------------------------------------------------------------------------------------
# timeline and volume of the recorded H200 training run
# ---------------------------------------------------------------------------------------------------------


def test_recorded_training_samples():
    samples = recorded_samples(TRAINING)
    assert len(samples) == 8
    assert all(s.kind == THROUGHPUT and s.units == "bytes" for s in samples)
    assert all(sorted(s.gpus) == [0, 1] and all(sorted(links) == list(range(18)) for links in s.gpus.values())
               for s in samples)
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    # NVML reads KiB: every count is a whole number of KiB
    assert all(c.tx_bytes % KIB == 0 and c.rx_bytes % KIB == 0
               for s in samples for links in s.gpus.values() for c in links.values())
    assert link_deltas(samples[0], samples[-1])[0][0] == LinkDelta(1588725760 - 90031104, 1550364672 - 59669504)


def test_timeline_of_the_training_run():
    samples = recorded_samples(TRAINING)
    points = timeline(samples)
    assert len(points) == len(samples) - 1
    midpoints = [p["t_s"] for p in points]
    assert all(a < b for a, b in pairwise(midpoints))
    for point, (before, after) in zip(points, pairwise(samples), strict=True):
        dt = after.t_s - before.t_s
        assert before.t_s < point["t_s"] < after.t_s
        assert point["t_s"] == pytest.approx((before.t_s + after.t_s) / 2)
        deltas = link_deltas(before, after)
        for gpu in (0, 1):
            assert point["gpus"][gpu]["tx_bytes_per_s"] == pytest.approx(total_tx(deltas[gpu]) / dt, rel=1e-12)
            assert point["gpus"][gpu]["rx_bytes_per_s"] == pytest.approx(total_rx(deltas[gpu]) / dt, rel=1e-12)
            for rate in point["gpus"][gpu].values():
                assert 0 <= rate < H200_PEAK_BYTES_PER_S  # FACTS.md: 478 GB/s per direction
    # the busiest interval ran at ~131 GB/s out of GPU 0 (bytes/s, not KiB/s or bits)
    peak = max(p["gpus"][0]["tx_bytes_per_s"] for p in points)
    assert 1.2e11 < peak < 1.4e11
    # rates x interval lengths add back up to the whole traffic
    for gpu in (0, 1):
        integrated = sum(p["gpus"][gpu]["tx_bytes_per_s"] * (b.t_s - a.t_s)
                         for p, (a, b) in zip(points, pairwise(samples), strict=True))
        assert integrated == pytest.approx(total_tx(summed_deltas(samples)[gpu]), rel=1e-9)


def test_training_run_moved_the_allreduce_volume_over_the_18_links():
    data = recorded(TRAINING)
    workload = data["workload"]
    expected = workload["allreduce_bytes_per_rank"]
    # 2(n-1)/n x gradient bytes x steps, as ddp_step.py computed it
    assert expected == 2 * (workload["world_size"] - 1) / workload["world_size"] * workload["gradient_bytes"] * 50
    assert expected == 26850099200.0
    total = summed_deltas(recorded_samples(TRAINING))
    for gpu in (0, 1):
        assert len(total[gpu]) == H200_LINKS
        assert total_tx(total[gpu]) == pytest.approx(expected, rel=1e-3)
        assert total_rx(total[gpu]) == pytest.approx(expected, rel=1e-3)
    assert total_tx(total[0]) == total_rx(total[1]) == 26851481600
    assert round(total_tx(total[0]) / expected, 5) == 1.00005


def test_timeline_skips_intervals_without_time():
    samples = titan_samples()
    # DERIVED: the same read twice (no time between them)
    assert timeline([samples[0], samples[0]]) == []
    points = timeline(samples)
    assert [p["t_s"] for p in points] == [0.5, 1.5, 2.5, 3.5, 4.5]
    # t_s is the read's position: the "rate" is bytes per read
    assert points[0]["gpus"][0]["tx_bytes_per_s"] == total_tx(link_deltas(samples[0], samples[1])[0])


# ---------------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bundle", [TRAINING, P2P_DISABLED], ids=lambda p: p.name)
def test_json_round_trip_of_the_recorded_samples(bundle):
    raw = recorded(bundle)["samples"]
    for data in raw:
        sample = CounterSample.from_json(data)
        assert sample.to_json() == data
        assert CounterSample.from_json(json.loads(json.dumps(sample.to_json()))) == sample


def test_json_round_trip_of_text_reads_and_default_units():
    for sample in titan_samples():
        assert CounterSample.from_json(json.loads(json.dumps(sample.to_json()))) == sample
    data = copy.deepcopy(recorded(TRAINING)["samples"][0])
    # DERIVED: a sample written without "units" (the key is optional): bytes
    del data["units"]
    assert CounterSample.from_json(data).units == "bytes"


# ---------------------------------------------------------------------------------------------------------
# NvlinkTraffic with a reader of real reads
# ---------------------------------------------------------------------------------------------------------


class TitanReader:
    """Hands back the real TITAN RTX reads one per ``read()``, in order, and notes which thread asked."""

    def __init__(self, samples: list[CounterSample]) -> None:
        self.samples = samples
        self.handed: list[CounterSample] = []
        self.threads: list[str] = []
        self._lock = threading.Lock()

    def read(self) -> CounterSample:
        with self._lock:
            # DERIVED: after the six reads, the last one again: a counter that has not moved since
            sample = self.samples[min(len(self.handed), len(self.samples) - 1)]
            self.handed.append(sample)
            self.threads.append(threading.current_thread().name)
            return sample

    def count(self) -> int:
        with self._lock:
            return len(self.handed)


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler thread did not read in time"
        time.sleep(0.001)


def test_sampler_reads_in_the_background():
    samples = titan_samples()
    reader = TitanReader(samples)
    traffic = NvlinkTraffic(reader, interval_s=0.001)
    with traffic as entered:
        assert entered is traffic
        assert traffic._thread is not None and traffic._thread.is_alive()
        assert traffic._thread.name == "nvlink-sampler" and traffic._thread.daemon
        _wait_until(lambda: reader.count() >= 6)
    assert not traffic._thread.is_alive()
    reads = reader.count()
    time.sleep(0.02)
    assert reader.count() == reads  # stopped: nothing reads after exit

    assert traffic.failed_reads == 0 and traffic.errors == []
    assert traffic.samples == reader.handed
    assert all(a is b for a, b in zip(traffic.samples, reader.handed, strict=True))
    assert all(a is b for a, b in zip(traffic.samples[:6], samples, strict=True))  # the six reads in order
    assert [s.t_s for s in traffic.samples] == sorted(s.t_s for s in traffic.samples)
    # enter and exit read on the caller's thread, everything between on the sampler's
    assert reader.threads[0] == reader.threads[-1] == threading.current_thread().name
    assert len(reader.threads) >= 7 and set(reader.threads[1:-1]) == {"nvlink-sampler"}

    assert traffic.kind == LEGACY
    assert traffic.deltas == summed_deltas(reader.handed) == link_deltas(samples[0], samples[5])
    assert traffic.deltas[0][0] == LinkDelta(8155969536, 4424557568, False)
    assert traffic.duration_s == 5.0
    assert traffic.rates[0][0] == (8155969536 / 5.0, 4424557568 / 5.0)
    assert traffic.rates == {gpu: {link: (d.tx_bytes / 5.0, d.rx_bytes / 5.0) for link, d in links.items()}
                             for gpu, links in traffic.deltas.items()}
    assert traffic.timeline == timeline(samples)
    dumped = traffic.to_json()
    assert dumped["interval_s"] == 0.001 and len(dumped["samples"]) == reads


def test_sampler_without_interval_reads_twice():
    samples = titan_samples()
    reader = TitanReader(samples)
    traffic = NvlinkTraffic(reader, interval_s=0)
    with traffic:
        time.sleep(0.05)
        assert traffic._thread is None
    assert reader.count() == 2
    assert reader.threads == [threading.current_thread().name] * 2
    assert traffic.samples == samples[:2]
    assert traffic.deltas == link_deltas(samples[0], samples[1])
    assert traffic.duration_s == 1.0
    assert traffic.rates[0][0] == (traffic.deltas[0][0].tx_bytes / 1.0, traffic.deltas[0][0].rx_bytes / 1.0)


class _FailsInTheBackground(TitanReader):
    def read(self) -> CounterSample:
        if threading.current_thread().name == "nvlink-sampler":
            raise RuntimeError("background read failed (raised by the test)")
        return super().read()


def test_a_failing_background_read_keeps_the_before_and_after_reads():
    samples = titan_samples()
    reader = _FailsInTheBackground(samples)
    traffic = NvlinkTraffic(reader, interval_s=0.001)
    with traffic:
        _wait_until(lambda: traffic.failed_reads >= 3)  # the sampler goes on after a failed read
    assert traffic.errors[0] == "counter read failed: background read failed (raised by the test)"
    assert len(traffic.errors) <= 5
    assert traffic.samples == samples[:2]
    assert traffic.deltas == link_deltas(samples[0], samples[1])
    assert traffic.to_json()["sampler"]["failed_reads"] == traffic.failed_reads


class _FailsOnce(TitanReader):
    """The recorded reads, the second background read raising once (an NVML call that failed under load)."""

    def read(self) -> CounterSample:
        if threading.current_thread().name == "nvlink-sampler" and len(self.handed) == 2 and not self.failed:
            self.failed = True
            raise RuntimeError("NVLink 3 throughput counter not readable (raised by the test)")
        return super().read()


def test_the_sampler_reads_on_after_a_failed_read_and_says_so():
    reader = _FailsOnce(titan_samples())
    reader.failed = False
    traffic = NvlinkTraffic(reader, interval_s=0.001)
    with traffic:
        _wait_until(lambda: reader.count() >= 5)
    assert traffic.failed_reads == 1 and len(traffic.samples) >= 5
    measurement = NvlinkMeasurement(traffic, None, "live: NVML throughput counters")
    assert measurement.describe().endswith(
        "; 1 background counter read(s) failed (counter read failed: NVLink 3 throughput counter not readable "
        "(raised by the test)): the timeline has gaps, the totals are the reads before and after")


def test_a_failing_observer_does_not_stop_the_sampler():
    samples = titan_samples()
    reader = TitanReader(samples)

    def observe(sample):
        raise ValueError("exporter broke (raised by the test)")

    traffic = NvlinkTraffic(reader, interval_s=0.001, on_sample=observe)
    with traffic:
        _wait_until(lambda: reader.count() >= 6)
    assert traffic.failed_reads == 0 and len(traffic.samples) >= 6
    assert traffic.errors[0] == "on_sample failed: ValueError('exporter broke (raised by the test)')"


def test_recorded_traffic_is_judged_by_the_same_code():
    samples = recorded_samples(TRAINING)
    traffic = NvlinkTraffic.recorded(samples, interval_s=0.01)
    assert traffic.reader is None and traffic.samples == samples and traffic.samples is not samples
    assert traffic.kind == THROUGHPUT
    assert traffic.duration_s == samples[-1].t_s - samples[0].t_s
    assert 0.2 < traffic.duration_s < 0.3
    assert traffic.deltas == summed_deltas(samples)
    duration = traffic.duration_s
    assert traffic.rates == {gpu: {link: (d.tx_bytes / duration, d.rx_bytes / duration) for link, d in links.items()}
                             for gpu, links in traffic.deltas.items()}
    assert traffic.timeline == timeline(samples)
    data = recorded(TRAINING)
    assert traffic.to_json() == {"interval_s": data["interval_s"], "samples": data["samples"]}


# ---------------------------------------------------------------------------------------------------------
# the checks on the recordings
# ---------------------------------------------------------------------------------------------------------


def measurement(bundle: Path) -> NvlinkMeasurement:
    recording = load_nvlink_recording(bundle)
    assert recording is not None
    traffic = NvlinkTraffic.recorded(recording.samples, recording.interval_s)
    return NvlinkMeasurement(traffic, recording.workload, recording.source)


@pytest.mark.parametrize("gpu", [0, 1])
def test_checks_pass_on_the_training_recording(gpu):
    m = measurement(TRAINING)
    links = m.traffic.deltas[gpu]
    result = check_links_carry_traffic(gpu, links, H200_LINKS, m.describe(), m.env)
    assert result.verdict == PASSED, result.message
    assert result.found == {"links_with_tx_and_rx": 18, "flat_links": []}
    assert result.message.startswith(f"GPU{gpu}: all 18 NVLinks carried traffic during 50 DDP steps on 2 ranks")

    result = check_allreduce_volume(gpu, links, m.expected_bytes, 0.9, m.describe(), m.env)
    assert result.verdict == PASSED, result.message
    assert m.expected_bytes == 26850099200.0
    assert result.found["tx_ratio"] == pytest.approx(1.00005, abs=1e-5)
    assert result.found["rx_ratio"] == pytest.approx(1.00005, abs=1e-5)
    assert "(1.000x)" in result.message


@pytest.mark.parametrize("gpu", [0, 1])
def test_checks_fail_when_nccl_p2p_is_disabled(gpu):
    m = measurement(P2P_DISABLED)
    assert m.env["NCCL_P2P_DISABLE"] == "1"
    links = m.traffic.deltas[gpu]
    assert len(links) == 18 and all(d == LinkDelta(0, 0, False) for d in links.values())

    result = check_links_carry_traffic(gpu, links, H200_LINKS, m.describe(), m.env)
    assert result.verdict == FAILED
    # the run's NCCL settings are kept as data: what to do next reads them (remedy.py)
    assert result.found == {"links_with_tx_and_rx": 0, "flat_links": list(range(18)),
                            "nccl_settings": {"NCCL_SHM_DISABLE": "0", "NCCL_P2P_DISABLE": "1"}}
    assert "all 18 links stayed flat (0 B TX, 0 B RX)" in result.message
    assert "NCCL_P2P_DISABLE=1" in result.message
    assert len(result.details) == 18

    result = check_allreduce_volume(gpu, links, m.expected_bytes, 0.9, m.describe(), m.env)
    assert result.verdict == FAILED
    assert result.found["tx_bytes"] == result.found["rx_bytes"] == 0
    assert "expected at least 90% of the all-reduce volume over NVLink" in result.message
    assert "NCCL_P2P_DISABLE=1" in result.message


def test_volume_is_unknown_without_a_workload_result():
    m = measurement(BUNDLES / "titan-rtx-nvlink")
    assert m.workload is None and m.expected_bytes is None and m.env == {}
    links = m.traffic.deltas[0]
    result = check_allreduce_volume(0, links, m.expected_bytes, 0.9, m.describe(), m.env)
    assert result.verdict == NOT_CHECKED and result.found is None
    assert "volume" in result.message
    # link growth is still judged: both bridge links moved
    assert check_links_carry_traffic(0, links, 2, m.describe(), m.env).verdict == PASSED


def test_links_check_fails_on_fewer_links_than_promised_and_on_none():
    m = measurement(BUNDLES / "titan-rtx-nvlink")
    result = check_links_carry_traffic(0, m.traffic.deltas[0], 4, m.describe(), m.env)
    assert result.verdict == FAILED and "expected TX and RX growth on 4 links" in result.message
    assert "per link: link 0: TX " in result.message
    result = check_links_carry_traffic(2, m.traffic.deltas.get(2, {}), None, m.describe(), m.env)
    assert result.verdict == FAILED and "no active NVLink was read on this GPU" in result.message


# ---------------------------------------------------------------------------------------------------------
# load_nvlink_recording
# ---------------------------------------------------------------------------------------------------------


def test_load_the_json_recording():
    recording = load_nvlink_recording(TRAINING)
    data = recorded(TRAINING)
    assert data["format"] == NVLINK_TRAFFIC_FORMAT
    assert recording.samples == recorded_samples(TRAINING) and len(recording.samples) == 8
    assert recording.workload == data["workload"]
    assert recording.workload["allreduce_bytes_per_rank"] == 26850099200.0
    assert recording.interval_s == 0.01
    assert recording.source == str(TRAINING / "nvlink-traffic.json")


def test_load_the_text_reads():
    recording = load_nvlink_recording(BUNDLES / "titan-rtx-nvlink")
    assert [s.t_s for s in recording.samples] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(s.kind == LEGACY for s in recording.samples)
    assert recording.samples == titan_samples()  # the bundle holds the captured reads
    assert recording.workload is None and recording.interval_s == 0.0
    assert recording.source.endswith("nvidia-smi-nvlink-g0.sample*.txt")


def test_text_reads_are_ordered_by_number_not_by_name(tmp_path):
    samples = titan_samples()
    # DERIVED: the six reads renamed 0, 1, 2, 3, 9, 10 ("sample10" sorts before "sample2" by name)
    for position, number in enumerate([0, 1, 2, 3, 9, 10]):
        shutil.copy(TITAN / f"nvidia-smi-nvlink-g0.sample{position}.txt",
                    tmp_path / f"nvidia-smi-nvlink-g0.sample{number}.txt")
    recording = load_nvlink_recording(tmp_path)
    assert [s.gpus for s in recording.samples] == [s.gpus for s in samples]
    assert not any(d.reset for links in summed_deltas(recording.samples).values() for d in links.values())


def test_no_recording_in_a_bundle_without_counters():
    assert load_nvlink_recording(BUNDLES / "rtx-2080ti-pcie") is None


def test_a_recording_of_another_format_is_refused(tmp_path):
    data = recorded(TRAINING)
    # DERIVED: the real recording with its format changed
    data["format"] = "gpufabric-nvlink-traffic/99"
    (tmp_path / "nvlink-traffic.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="format is 'gpufabric-nvlink-traffic/99'") as info:
        load_nvlink_recording(tmp_path)
    assert "not a gpufabric NVLink recording" in str(info.value)
    assert str(tmp_path / "nvlink-traffic.json") in str(info.value)


def test_a_truncated_recording_is_refused(tmp_path):
    text = (TRAINING / "nvlink-traffic.json").read_text()
    # DERIVED: the real file cut in half
    (tmp_path / "nvlink-traffic.json").write_text(text[: len(text) // 2])
    with pytest.raises(BundleError, match="not a gpufabric NVLink recording"):
        load_nvlink_recording(tmp_path)


def test_finite_rates_only():
    # the recorded training run's rates are real numbers, never NaN from a zero duration
    m = measurement(TRAINING)
    assert all(math.isfinite(v) for links in m.traffic.rates.values() for pair in links.values() for v in pair)
