"""Bandwidth between GPUs and to the host: each collective at each size the profile gives a floor for, and each copy
kind (host to device, device to host, GPU to GPU), judged by checks/bandwidth.py against the profile's
``bandwidth`` section. nccl-tests output and nvbandwidth copies a customer brings are judged as the same promises.

``bandwidth_rule`` is the remedy of any check whose figures fall short of a bandwidth floor (the RDMA and burn-in
families bind it with their own limits readers).
"""

from __future__ import annotations

from collections.abc import Callable

from ..checks.bandwidth import collective_limits, copy_limits, size_label
from ..remedy_classes import RERUN, SOFTWARE, Remedy
from ..remedy_rules import Context, _shortfall
from ..report.phrases import GE, LE, format_value, limit_rate, number, rate, settings_phrase, size_text
from ..units import is_number, parse_bytes, parse_gbps, parse_seconds
from .base import CheckRule, Kind
from .suite_measurement import SuiteMeasurement

POSITION = 30
SUITE = "test_bandwidth.py"
#: the profile section that makes these promises
SECTION = "bandwidth"
OWN_MODULES = ("checks/bandwidth.py", "suites/test_bandwidth.py", "workloads/bandwidth.py",
               "workloads/collectives.py", "workloads/copy_bw.py", "workloads/nccl_tests.py")

#: a bandwidth below this share of its floor is no noise: something steers the traffic onto a slower path
FAR_BELOW = 0.5


# --- the ids ------------------------------------------------------------------------------------------------------


def _collectives(profile) -> list[str]:
    return [f"{op}-{size_label(parse_bytes(t['size']))}" for op, t in profile.collective_thresholds()]


def _copies(profile) -> list[str]:
    return [kind for kind in profile.copy_thresholds()
            if profile.gpu_count >= 2 or not kind.startswith("gpu_to_gpu")]


# --- the remedy ---------------------------------------------------------------------------------------------------


def _wrong_elements(found: object) -> int:
    """Wrong elements a collective's record holds (its binding run's, or any run's)."""
    if not isinstance(found, dict):
        return 0
    runs = found.get("runs") if isinstance(found.get("runs"), list) else []  # burn-in-collectives: a count
    counts = [found.get("wrong")] + [run.get("wrong") for run in runs if isinstance(run, dict)]
    return int(max((c for c in counts if is_number(c)), default=0))


def bandwidth_remedy(check: dict, ctx: Context, limits: list) -> Remedy:
    """A bandwidth short of its floor (``limits``: the record's, checks/limits.Limit): the platform findings or a
    figure far below point to the software; wrong elements to the NCCL and driver versions; else one more run."""
    who, found = check.get("subject"), check.get("found")
    wrong = _wrong_elements(found)
    if wrong:
        # a wrong collective names no board: the NCCL and driver versions are ruled out first, and the burn-in's
        # per-GPU cross-check names a board that computes wrong (its own promise then points to the vendor)
        return SOFTWARE, (f"{who}: {wrong} wrong element(s), which name no board: the NCCL and driver versions are "
                          "suspected first; the burn-in's cross-check names a board that computes wrong")
    share, short = _shortfall(check, limits)
    if ctx.findings:
        more = f" (and {len(ctx.findings) - 1} more)" if len(ctx.findings) > 1 else ""
        return SOFTWARE, f"{who}: {short}, and the platform explains it: {ctx.findings[0]}{more}"
    if share is not None and share < FAR_BELOW:
        return SOFTWARE, (f"{who}: {short}, {share:.0%} of it: too far for noise, and no platform setting recorded "
                          "explains it: the transport's settings (NCCL_P2P_*, NCCL_IB_*, MTU, PFC) come first")
    return RERUN, (f"{who}: {short}" + (f", {share:.0%} of it" if share is not None else "")
                   + ", and no platform setting recorded explains it: one measurement can miss by noise; measure it "
                   "once more")


def bandwidth_rule(reader: Callable[[dict], list]) -> Callable[[dict, Context], Remedy]:
    """The remedy rule (record, context) of a bandwidth check whose limits ``reader`` reads: bandwidth_remedy."""

    def rule(check: dict, ctx: Context) -> Remedy:
        try:
            limits = reader(check)
        except (ValueError, TypeError, KeyError, AttributeError):  # a record of a shape its reader cannot read
            limits = []
        return bandwidth_remedy(check, ctx, limits)

    return rule


# --- the phrases --------------------------------------------------------------------------------------------------


def _op_and_size(check: dict) -> tuple[str, str]:
    subject = str(check.get("subject") or "")
    op = subject.split(" ", 1)[0] or str(check.get("name", "")).removeprefix("bandwidth-")
    expected = check.get("expected") or {}
    size = expected.get("size_bytes") if isinstance(expected, dict) else None
    return op, size_text(size) if size is not None else subject.partition(" ")[2]


def _collective(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    op, size = _op_and_size(check)
    wants, finds = [], []
    if "min_busbw" in expected:
        wants.append(f"{GE} {limit_rate(parse_gbps(expected['min_busbw']))} {op} busbw at {size}")
    if is_number(expected.get("min_fraction_of_peak")):
        peak = found.get("peak_gbps")
        fraction = f"{expected['min_fraction_of_peak']:.0%}"
        if is_number(peak):
            what = str(found.get("peak") or "link").split(" ", 1)[0]
            wants.append(f"{GE} {rate(expected['min_fraction_of_peak'] * peak)} {op} busbw at {size} ({fraction} of "
                         f"the {rate(peak)} {what} peak)")
        else:
            wants.append(f"{GE} {fraction} of the link peak, {op} busbw at {size}")
    if "max_time" in expected:
        wants.append(f"{LE} {number(parse_seconds(expected['max_time']) * 1e6, 'µs')} per {op} of {size}")
    if is_number(found.get("busbw_gbps")) and ("min_busbw" in expected or "min_fraction_of_peak" in expected):
        finds.append(f"{rate(found['busbw_gbps'])} busbw")
    if is_number(found.get("time_us")) and "max_time" in expected:
        finds.append(number(round(found["time_us"], 1), "µs"))
    if not finds and is_number(found.get("busbw_gbps")):
        finds.append(f"{rate(found['busbw_gbps'])} busbw")
    if is_number(found.get("wrong")) and found["wrong"]:
        finds.append(f"{found['wrong']:,} wrong elements")
    return "; ".join(wants) or format_value(expected), ", ".join(finds) or format_value(found, "GB/s")


_COPY = {"host_to_device": "host-to-device copy", "device_to_host": "device-to-host copy",
         "gpu_to_gpu": "GPU-to-GPU copy", "gpu_to_gpu_bidirectional": "GPU-to-GPU copy, both ways at once"}


def _worst_of(found: dict, unit: str = "GB/s") -> str:
    values = {k: v for k, v in found.items() if is_number(v)}
    if not values:
        return format_value(found, unit)
    if len(values) == 1:
        return rate(next(iter(values.values())), unit)
    worst = min(values, key=values.get)
    return f"{rate(values[worst], unit)} at worst ({worst})"


def _copy(check: dict) -> tuple[str, str]:
    """A copy of a kind the profile names ("copy-host_to_device"); a record of another copy name in generic words."""
    if str(check.get("name") or "").removeprefix("copy-") not in _COPY:
        return settings_phrase(check)
    expected, found = check.get("expected") or {}, check.get("found")
    kind = str(check.get("subject") or check.get("name", "").removeprefix("copy-"))
    what = _COPY.get(kind, kind.replace("_", " "))
    want = f"{GE} {limit_rate(parse_gbps(expected['min']))} {what}" if "min" in expected else format_value(expected)
    each = " on every GPU" if "host" in kind else " of every pair" if "gpu_to_gpu" in kind else ""
    return want + each, _worst_of(found) if isinstance(found, dict) else format_value(found, "GB/s")


# --- the kinds ----------------------------------------------------------------------------------------------------

_COLLECTIVE_REMEDY = bandwidth_rule(collective_limits)
#: the collectives a profile can promise (profile.schema.json), each judged from nccl-tests' <op>_perf as well
_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv")

COLLECTIVE_BANDWIDTH = Kind(
    "collective-bandwidth", "collective bandwidth", SUITE, _collectives, sections=(SECTION,),
    checks=(CheckRule("bandwidth-", _COLLECTIVE_REMEDY, _collective, collective_limits),
            CheckRule("nccl-tests-", _COLLECTIVE_REMEDY, _collective, collective_limits)),
    equivalents=tuple(("nccl-tests", f"{op}_perf") for op in _OPS))
COPY_BANDWIDTH = Kind(
    "copy-bandwidth", "copy bandwidth", SUITE, _copies, sections=(SECTION,),
    checks=(CheckRule("copy-", bandwidth_rule(copy_limits), _copy, copy_limits),),
    equivalents=tuple(("nvbandwidth", f"{way}_{how}") for way in ("host_to_device_memcpy", "device_to_host_memcpy",
                      "device_to_device_memcpy_read", "device_to_device_memcpy_write") for how in ("ce", "sm")))

KINDS = (COLLECTIVE_BANDWIDTH, COPY_BANDWIDTH)


# --- the measurement ----------------------------------------------------------------------------------------------


def _live(fabric_session):
    from ..workloads.bandwidth import measure_bandwidth

    return measure_bandwidth(fabric_session.profile, fabric_session.fabric, fabric_session.boards())


def _replay(directory, fabric_session):
    from ..fabric.bundle import load_bandwidth_recording

    return load_bandwidth_recording(directory)


BANDWIDTH = SuiteMeasurement(
    name="bandwidth", fixture="bandwidth",
    doc="The profile's bandwidth measurements (collectives, copies, nccl-tests): live, or as the bundle recorded "
        "them (bandwidth.json, nccl-tests*.txt).",
    why_not_promised=lambda profile: None if profile.bandwidth else f"profile {profile.name} promises no bandwidth",
    live=_live, replay=_replay,
    nothing_recorded="the bundle holds no bandwidth measurements (bandwidth.json or nccl-tests*.txt)",
    record_file="bandwidth.json", to_json=lambda m: m.to_json(),
    check="checks/bandwidth.py", suite="suites/test_bandwidth.py",
    # the collectives' ranks, then the copies; one GPU's copies need no torch and start cold
    # (workloads.bandwidth.copies_need_torch)
    processes=lambda gpus: gpus + 1 if gpus > 1 else 0)

MEASUREMENTS = (BANDWIDTH,)
