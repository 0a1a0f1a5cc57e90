"""Bandwidth checks: a measured number at a fixed size against the profile's threshold, and against the link's
peak, so that "is this number expected?" has an answer on the page.

A number is judged only when the evidence covers exactly what the profile promises and reads as a measurement:
every promised GPU or pair has its row (one row, or rows that agree), the collective ran on the promised number of
ranks, times are above 0, bandwidths finite and no higher than the link can carry, wrong-element counts are counts
and were taken at all. Anything else leaves the promise not checked, saying which run, row and value. Wrong
elements fail it whatever the bandwidth."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..fabric.model import Fabric
from ..formats.nccl_tests import row_groups, row_problems, wrong_count
from ..units import (
    GIB,
    MIB,
    format_bytes,
    is_na,
    is_number,
    non_finite,
    parse_bytes,
    parse_gbps,
    parse_seconds,
    pcie_peak_gbps,
)
from .limits import HIGHER, LOWER, Limit, figure
from .result import CheckResult, failed, passed, unknown

_COLLECTIVE_CAUSES = (
    "Usual causes: NCCL took a slower path (NCCL_P2P_DISABLE/NCCL_P2P_LEVEL, NVLink down, or IB/TCP instead of "
    "the fabric: run with NCCL_DEBUG=INFO), another job on the GPUs, clocks throttled (power or temperature: "
    "nvidia-smi -q -d PERFORMANCE), or NCCL_ALGO/NCCL_PROTO forced."
)
_COPY_CAUSES = (
    "Usual causes: peer access not enabled (ACS/IOMMU, a VM without P2P), a link trained down (PCIe gen or width, "
    "NVLinks inactive), or the host copy bound to the far socket."
)


def size_label(size: int) -> str:
    for unit, value in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if size >= value and size % value == 0:
            return f"{size // value}{unit}"
    return f"{size}B"


def link_peak(fabric: Fabric, gpu_indices: list[int]) -> tuple[float | None, str]:
    """Peak bandwidth per direction of the path between these GPUs: NVLink when every pair is NVLink-joined
    (the slowest GPU's active links x speed), else the narrowest PCIe link (gen x width)."""
    gpus = [fabric.gpu(i) for i in gpu_indices]
    if any(g is None for g in gpus):
        return None, "unknown (GPU missing)"
    nvlinked = len(gpus) > 1 and all(
        (fabric.label(a.label, b.label) or "").startswith("NV") for a in gpus for b in gpus if a is not b)
    if nvlinked:
        peaks = []
        for gpu in gpus:
            active = gpu.active_nvlinks() or []
            speeds = [lk.speed_gbps for lk in active if isinstance(lk.speed_gbps, float)]
            if not active or len(speeds) != len(active):
                return None, "NVLink (link speeds not recorded)"
            peaks.append((sum(speeds), f"NVLink {len(active)} x {min(speeds):g} GB/s"))
        return min(peaks)
    return pcie_peak(gpus)


def pcie_peak(gpus: list) -> tuple[float | None, str]:
    known = [(g.pcie_gen_max, g.pcie_width_max) for g in gpus
             if isinstance(g.pcie_gen_max, int) and isinstance(g.pcie_width_max, int)
             and not is_na(g.pcie_gen_max) and not is_na(g.pcie_width_max)]
    if len(known) != len(gpus) or not known:
        return None, "PCIe (generation and width not recorded)"
    gen, width = min(known, key=lambda gw: pcie_peak_gbps(*gw))
    return pcie_peak_gbps(gen, width), f"PCIe gen {gen} x{width}"


def _of_peak(value: float, peak: float | None, what: str) -> str:
    return f" ({value / peak:.0%} of the {peak:.1f} GB/s {what} peak)" if peak else ""


def _above_peak(value: float, peak: float | None, what: str, busbw: bool = False) -> str | None:
    """Why a figure above the link's peak is no measurement to judge (None: it is not above)."""
    if peak is None or value <= peak:
        return None
    return (f"{value:.1f} GB/s is above the {peak:.1f} GB/s {what} peak: more than the links can carry, an impossible "
            "reading" + (" (or NCCL's in-switch reduction, NVLS, which busbw does not count)" if busbw else ""))


def in_network_reduction(gpu_names: list, op: str) -> str | None:
    """Why a busbw of `op` above the link peak is possible on these GPUs, or None: NVLink SHARP on a GB200/GB300
    NVL72 (reference_normal.IN_NETWORK_REDUCTION) reduces, so only a reducing collective, and only where every GPU
    is one of those."""
    from ..reference import find_reference
    from ..reference_normal import IN_NETWORK_REDUCTION, IN_NETWORK_WORDS, REDUCING_OPS

    refs = [find_reference(str(name)) if name else None for name in gpu_names]
    models = {ref.model if ref is not None else None for ref in refs}
    if op not in REDUCING_OPS or not models or not models <= IN_NETWORK_REDUCTION:
        return None
    return f"{'/'.join(sorted(models))}: {IN_NETWORK_WORDS}"


def _floors(threshold: dict, absolute_key: str, peak: float | None, peak_what: str) -> tuple[list, str]:
    """(floor GB/s, how to say it) for each floor the threshold sets, and what could not be judged: a fraction
    of a peak the evidence does not give. Whatever else is judged still counts (a wrong result still fails)."""
    floors = []
    if absolute_key in threshold:
        floors.append((parse_gbps(threshold[absolute_key]), threshold[absolute_key]))
    unjudged = ""
    if "min_fraction_of_peak" in threshold:
        fraction = threshold["min_fraction_of_peak"]
        if peak is None:
            unjudged = f"the link peak is unknown ({peak_what}): {fraction:.0%} of it cannot be judged"
        else:
            floors.append((fraction * peak, f"{fraction:.0%} of the {peak:.1f} GB/s {peak_what} peak"))
    return floors, unjudged


# --- collectives --------------------------------------------------------------------------------------------------


@dataclass
class CollectiveRun:
    """One measurement of a collective as its evidence says: its rows, how many ranks ran it, and, set by the
    caller, why it is no evidence of this promise on this machine (another machine's boards, several hosts, a rank
    count that is no count): its wrong elements are then not held against this machine either."""

    rows: list[dict]
    ranks: int | None  # None: the output does not say (no `#  Rank` lines)
    label: str = ""  # "run 2 of nccl-tests.txt" where a log holds several; "" for a measurement of one run
    not_evidence: str | None = None  # why it is no evidence of the promise here (another machine's boards, ...)
    notes: list[str] = field(default_factory=list)  # rows the text cut short: said when the size has no row
    #: why the run is not whole (formats/nccl_died.py: a rank died, or no trailer): its rows are evidence against a
    #: floor, never for it
    unfinished: str | None = None


def _bus_key(pci: object) -> tuple | None:
    """A PCI address as nccl-tests and NVML print it, comparable: (domain, bus, device) from "0000:00:06" or
    "00000000:00:06.0", (bus,) from the old releases' "0x36"."""
    text = str(pci or "").strip()
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", text)
    if m:
        return tuple(int(g, 16) for g in m.groups())
    m = re.match(r"^0x([0-9a-fA-F]+)$", text)
    return (int(m.group(1), 16),) if m else None


def _unbound_by_bus(devices: list[dict], machine: list) -> str | None:
    """Why a rank whose bus id cannot be read is not on this machine's GPUs: it names no GPU either, or a GPU name
    no GPU of the machine has (None where the machine's GPUs were not recorded)."""
    names = sorted({str(g.name) for g in machine if g.name})
    if not machine:
        return None
    for device in devices:
        if _bus_key(device.get("pci_bus_id")) is not None:
            continue
        rank, pci, name = device.get("rank"), device.get("pci_bus_id"), device.get("name")
        if not name:
            return f"rank {rank}'s device line names neither a bus id it can be found at ([{pci}]) nor a GPU"
        if names and str(name) not in names:
            return f"rank {rank} ran on [{pci}] {name}; this machine has {', '.join(names)}"
    return None


def nccl_tests_boards(devices: list[dict], fabric: Fabric | None, gpu_count: int) -> str | None:
    """Why the boards an nccl-tests run names (its `#  Rank r ... device d [bus] NAME` lines) are not the promised
    GPUs of this machine, or None when they are or the machine's bus ids were not recorded: ranks on several hosts,
    a bus id this machine has no GPU at, another GPU name there, a GPU the profile does not promise, two ranks on one
    GPU."""
    hosts = sorted({str(d["host"]) for d in devices if d.get("host")})
    if len(hosts) > 1:
        return f"its ranks ran on {len(hosts)} hosts ({', '.join(hosts)}), not on this machine alone"
    machine = fabric.gpus if fabric is not None and fabric.gpus_recorded else []
    if (unbound := _unbound_by_bus(devices, machine)) is not None:
        return unbound
    gpus = [g for g in machine if _bus_key(g.pci_bus_id)]
    if not gpus:
        return None
    used: dict[int, int] = {}
    for device in devices:
        rank, key = device.get("rank"), _bus_key(device.get("pci_bus_id"))
        if key is None:
            continue  # bound by its name (_unbound_by_bus)
        gpu = next((g for g in gpus if (_bus_key(g.pci_bus_id) if len(key) == 3
                                        else _bus_key(g.pci_bus_id)[1:2]) == key), None)
        named = f"[{device.get('pci_bus_id')}] {device.get('name') or ''}".strip()
        if gpu is None:
            return (f"rank {rank} ran on {named}, a board this machine does not have (its GPUs are at "
                    f"{', '.join(str(g.pci_bus_id) for g in gpus)})")
        if device.get("name") and gpu.name and device["name"] != gpu.name:
            return f"rank {rank} ran on {named}; this machine's GPU{gpu.index} there is {gpu.name}"
        if len(devices) == gpu_count and gpu.index >= gpu_count:
            return f"rank {rank} ran on GPU{gpu.index} ({named}), which the profile does not promise"
        if gpu.index in used:
            return f"ranks {used[gpu.index]} and {rank} both ran on GPU{gpu.index}"
        used[gpu.index] = rank
    return None


def row_at(rows: list[dict], size: int) -> tuple[dict | None, str | None]:
    """(the measured row for a threshold's size, why it is ambiguous). Sizes are rounded down to whole elements per
    rank; two rows for that size are one measurement only when they agree (nccl-tests prints a repeated line)."""
    candidates = [r for r in rows if isinstance(r.get("size"), int) and r["size"] <= size and size - r["size"] < 4096]
    if not candidates:
        return None, None
    best = max(r["size"] for r in candidates)
    at = [r for r in candidates if r["size"] == best]
    if any(r != at[0] for r in at[1:]):
        return None, f"{len(at)} rows for {best} B that disagree: which one was measured is ambiguous"
    return at[0], None


def _headline(row: dict) -> dict:
    """The group nccl-tests quotes: out-of-place, in-place where a row has only that; the row itself for the
    torch.distributed harness."""
    return row_groups(row)[0][1] if row_groups(row) else {}


@dataclass
class _Reading:
    """One run at the threshold's size, read."""

    run: CollectiveRun
    row: dict | None = None
    aside: str | None = None  # not evidence of this promise: said only when no run is
    problems: list[str] = field(default_factory=list)  # not a measurement: the promise is not checked
    wrong: list[str] = field(default_factory=list)  # wrong elements: the promise fails

    @property
    def who(self) -> str:
        return f"{self.run.label}: " if self.run.label else ""


def _read_run(op: str, size: int, run: CollectiveRun, promised_ranks: int | None, source: str) -> _Reading:
    reading = _Reading(run)
    if run.not_evidence:
        reading.aside = run.not_evidence
        return reading
    if run.ranks is None:
        reading.aside = "the output does not say how many ranks ran (no '#  Rank' lines)"
    elif promised_ranks is not None and run.ranks != promised_ranks:
        reading.aside = f"measured on {run.ranks} ranks; the profile promises {promised_ranks}"
    row, ambiguous = row_at(run.rows, size)
    if ambiguous:
        reading.problems.append(ambiguous)
        return reading
    if row is None:
        cut = f" ({run.unfinished or run.notes[0]})" if run.unfinished or run.notes else ""
        reading.aside = reading.aside or f"{source} has no {op} result at {format_bytes(size)}{cut}"
        return reading
    reading.row = row
    for label, group in row_groups(row):
        count = wrong_count(group)
        if count:
            where = (f" at {format_bytes(size)}" if run.label else "") + (f" ({label})" if label else "")
            reading.wrong.append(f"{reading.who}{count} wrong element(s){where}")
    head = _headline(row)
    bad = non_finite({"busbw_gbps": head.get("busbw"), "time_us": head.get("time_us")})
    if bad:
        reading.problems.append(f"not a finite number ({'; '.join(bad)})")
    reading.problems += [p for p in row_problems(row, op, run.ranks)
                         if not (bad and ("not a time above 0" in p or "not a bandwidth" in p))]
    if not reading.problems and not any(wrong_count(g) is not None for _, g in row_groups(row)):
        reading.problems.append("its data was not checked for correctness (#wrong is N/A or null, or the old "
                                "releases' largest deviation, not a count)")
    return reading


def _summary(op: str, size: int, readings: list[_Reading], peak: float | None, peak_what: str) -> str:
    """'all_reduce at 1.00 GiB on 2 ranks: busbw 324.7 GB/s, 3307.1 us (68% of ...)', per run where several."""
    shown = [r for r in readings if r.row is not None and not r.problems]
    ranks = sorted({r.run.ranks for r in shown if r.run.ranks is not None})
    on = f" on {'/'.join(map(str, ranks))} ranks" if ranks else ""
    parts = []
    for r in shown:
        head = _headline(r.row)
        parts.append(f"{r.who}busbw {head['busbw']:.1f} GB/s, {head['time_us']:.1f} us"
                     + _of_peak(head["busbw"], peak, peak_what))
    return f"{op} at {format_bytes(size)}{on}: " + "; ".join(parts)


def _found(readings: list[_Reading], peak: float | None, peak_what: str) -> dict:
    """The figures of the run that binds (the lowest busbw), and every run's where there are several."""
    shown = [r for r in readings if r.row is not None and not r.problems] or [r for r in readings if r.row]
    binding = min(shown, key=lambda r: _headline(r.row).get("busbw") if is_number(_headline(r.row).get("busbw"))
                  else math.inf) if shown else None
    head = _headline(binding.row) if binding else {}
    found = {"busbw_gbps": head.get("busbw"), "algbw_gbps": head.get("algbw"), "time_us": head.get("time_us"),
             "wrong": head.get("wrong"), "peak_gbps": peak, "peak": peak_what,
             "ranks": binding.run.ranks if binding else None}
    if len(readings) > 1:
        found["runs"] = [{"run": r.run.label, "ranks": r.run.ranks,
                          **({"busbw_gbps": _headline(r.row).get("busbw"), "time_us": _headline(r.row).get("time_us"),
                              "wrong": _headline(r.row).get("wrong")} if r.row else {"not_judged": r.aside})}
                         for r in readings]
    return found


def check_collective_runs(op: str, threshold: dict, runs: list[CollectiveRun], promised_ranks: int | None,
                          peak: float | None, peak_what: str, source: str, in_network: str | None = None,
                          ) -> CheckResult:
    """One op at one size over every run the evidence holds: wrong elements in any run of this machine fail;
    otherwise each run that covers the promise is judged (busbw against the floors, time against its limit), and
    the promise passes when every such run passes, fails when every one fails, and is not checked when they
    disagree or when a run is no measurement (a bad number, two rows that differ, data never checked)."""
    size = parse_bytes(threshold["size"])
    name, subject = f"bandwidth-{op}", f"{op} {size_label(size)}"
    expected = {k: v for k, v in threshold.items() if k != "size"} | {"size_bytes": size}
    readings = [_read_run(op, size, run, promised_ranks, source) for run in runs]
    if not readings:
        return unknown(name, subject, expected, f"{source} holds no {op} run")
    found = _found(readings, peak, peak_what)
    at = f"{op} at {format_bytes(size)}"
    wrong = [w for r in readings if r.run.not_evidence is None and r.run.ranks is not None for w in r.wrong]
    if wrong:
        summary = _summary(op, size, readings, peak, peak_what)
        problems = [f"{w}: the collective computed wrong results" for w in wrong]
        return failed(name, subject, expected, found, f"{summary} [{source}]: " + "; ".join(problems) + ". "
                      + _COLLECTIVE_CAUSES, unit="GB/s", details=problems)
    broken = [r for r in readings if r.problems and r.aside is None]
    if broken:
        return unknown(name, subject, expected, f"{at}: " + "; ".join(
            f"{r.who}{'; '.join(r.problems)}" for r in broken) + f" [{source}]")
    judged = [r for r in readings if r.aside is None and r.row is not None]
    if not judged:
        if len(readings) == 1 and readings[0].aside.startswith(f"{source} has no"):
            return unknown(name, subject, expected, readings[0].aside)
        return unknown(name, subject, expected, f"{at}: " + "; ".join(
            f"{r.who}{r.aside or '; '.join(r.problems)}" for r in readings) + f" [{source}]")
    summary = _summary(op, size, judged, peak, peak_what)
    above = [f"{r.who}{why}" for r in judged
             if (why := _above_peak(_headline(r.row)["busbw"], peak, peak_what, busbw=True))]
    if above and in_network:  # ``in_network``: in_network_reduction's words, the figure is judged as measured
        summary += f" (above the link peak: {in_network})"
    elif above:
        return unknown(name, subject, expected, f"{summary} [{source}]; not judged: " + "; ".join(above))
    floors, unjudged = _floors(threshold, "min_busbw", peak, peak_what)
    per_run = []
    for r in judged:
        head = _headline(r.row)
        problems = [f"{r.who}busbw {head['busbw']:.1f} GB/s < {text}" for floor, text in floors
                    if head["busbw"] < floor]
        if "max_time" in threshold and head["time_us"] * 1e-6 > parse_seconds(threshold["max_time"]):
            problems.append(f"{r.who}{head['time_us']:.1f} us per operation > {threshold['max_time']}")
        per_run.append(problems)
    problems = [p for run_problems in per_run for p in run_problems]
    if problems and not all(per_run):
        below = ", ".join(r.run.label for r, p in zip(judged, per_run, strict=True) if p)
        return unknown(name, subject, expected, f"{summary} [{source}]: the runs disagree ({below} below the "
                       "threshold, the others not): " + "; ".join(problems) + "; run it again")
    if not problems and unjudged:
        return unknown(name, subject, expected, f"{summary} [{source}]; {unjudged}")
    died = [f"{r.who}{r.run.unfinished}" for r in judged if r.run.unfinished]
    if not problems and died:
        return unknown(name, subject, expected, f"{summary} [{source}]; not passed on a run that did not finish: "
                       + "; ".join(died))
    if not problems:
        return passed(name, subject, expected, found, summary + f" [{source}]", unit="GB/s")
    then = f" ({'; '.join(died)}: a row it measured is already below the floor)" if died else ""
    return failed(name, subject, expected, found, f"{summary} [{source}]: " + "; ".join(problems) + then + ". "
                  + _COLLECTIVE_CAUSES, unit="GB/s", details=problems)


def collective_limits(record: dict) -> list[Limit]:
    """busbw against ``min_busbw`` and the fraction of the link peak, the time against ``max_time``; the fleet
    compares both figures of our own collectives (not of nccl-tests output a customer brings)."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return []
    fleet = str(record.get("name")).startswith("bandwidth-")
    busbw, peak, time_us = found.get("busbw_gbps"), found.get("peak_gbps"), found.get("time_us")
    limits = []
    if is_number(busbw):
        bounds = []
        if "min_busbw" in expected:
            bounds.append((parse_gbps(expected["min_busbw"]), f"min {expected['min_busbw']}"))
        fraction = expected.get("min_fraction_of_peak")
        if is_number(peak) and is_number(fraction):
            bounds.append((fraction * peak, f"{fraction:.0%} of peak"))
        limits += figure("busbw_gbps", busbw, bounds, "GB/s", HIGHER, fleet=fleet)
    if is_number(time_us):
        bounds = [(parse_seconds(expected["max_time"]) * 1e6, f"max {expected['max_time']}")] \
            if "max_time" in expected else []
        limits += figure("time_us", time_us, bounds, "µs", LOWER, fleet=fleet)
    return limits


def check_collective(op: str, threshold: dict, row: dict | None, world_size: int, peak: float | None,
                     peak_what: str, source: str) -> CheckResult:
    """One op at one size from one measured row (or None): busbw (or time) against the threshold; wrong results
    always fail. The row is taken to cover the promise (check_collective_runs judges coverage)."""
    return check_collective_runs(op, threshold, [CollectiveRun([row] if row is not None else [], world_size)],
                                 world_size, peak, peak_what, source)


# --- copies -------------------------------------------------------------------------------------------------------


def copy_key(kind: str, row: dict) -> object:
    """What a copy row measured: the GPU (host<->device), the ordered pair, or the unordered pair (both ways)."""
    if kind in ("host_to_device", "device_to_host"):
        return row.get("gpu")
    if kind == "gpu_to_gpu":
        return (row.get("src"), row.get("dst"))
    gpus = row.get("gpus") or []
    return tuple(sorted(gpus)) if len(gpus) == 2 else None


def promised_copies(kind: str, gpu_count: int) -> dict[object, str]:
    """Every GPU or pair a copy kind promises on ``gpu_count`` GPUs, with its label."""
    if kind in ("host_to_device", "device_to_host"):
        return {i: f"GPU{i}" for i in range(gpu_count)}
    if kind == "gpu_to_gpu":
        return {(a, b): f"GPU{a}->GPU{b}" for a in range(gpu_count) for b in range(gpu_count) if a != b}
    return {(a, b): f"GPU{a}<->GPU{b}" for a in range(gpu_count) for b in range(a + 1, gpu_count)}


def _copy_coverage(kind: str, rows: list[dict], gpu_count: int) -> tuple[list[dict], list[str]]:
    """(the rows of the promised GPUs or pairs, one each, why they do not cover the promise)."""
    promised = promised_copies(kind, gpu_count)
    by_key: dict[object, list[dict]] = {}
    for row in rows:
        key = copy_key(kind, row)
        by_key.setdefault(key if isinstance(key, (int, tuple, type(None))) else repr(key), []).append(row)
    missing = [label for key, label in promised.items() if key not in by_key]
    problems = []
    if missing:
        problems.append(f"no row for {', '.join(missing)} ({len(promised) - len(missing)} of the {len(promised)} "
                        f"the profile's {gpu_count} GPUs promise were measured)")
    for key, label in promised.items():
        same = by_key.get(key, [])
        if len({row.get("gbps") for row in same}) > 1:
            figures = ", ".join(repr(row.get("gbps")) for row in same)
            problems.append(f"{label}: {len(same)} rows that disagree ({figures} GB/s)")
    return [by_key[key][0] for key in promised if key in by_key], problems


def _copy_row_problems(row: dict) -> list[str]:
    """A copy row is a bandwidth above 0, and its time and bytes, where recorded, give that bandwidth (1 %)."""
    gbps, time_us, size = row.get("gbps"), row.get("time_us"), row.get("bytes")
    problems = []
    if not isinstance(gbps, (int, float)) or isinstance(gbps, bool) or not gbps > 0:
        problems.append(f"{row['label']}: {gbps!r} GB/s is not a bandwidth above 0")
    for key, value in (("time_us", time_us), ("bytes", size)):
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not math.isfinite(value) or value <= 0):
            problems.append(f"{row['label']}: {key} {value!r} is not above 0")
    if not problems and time_us is not None and size is not None:
        rate = size / time_us / 1e3
        if abs(rate - gbps) > 0.01 * rate + 0.01:
            problems.append(f"{row['label']}: {gbps:g} GB/s disagrees with its time: {size} B in {time_us:g} us "
                            f"is {rate:.1f} GB/s")
    return problems


def check_copy(kind: str, threshold: dict, rows: list[dict], peak_of, source: str,
               gpu_count: int | None = None) -> CheckResult:
    """Every pair (or GPU) of one copy kind against the threshold; ``peak_of(row) -> (peak, what)``. With
    ``gpu_count``, the rows must cover every GPU or pair the profile promises (rows of other GPUs are not judged)."""
    name = f"copy-{kind}"
    expected = dict(threshold)
    if not rows:
        return unknown(name, kind, expected, f"{source} has no {kind} copy result")
    bad = non_finite({row["label"]: row.get("gbps") for row in rows}, "GB/s")
    if bad:
        return unknown(name, kind, expected, f"{kind}: not a finite number ({'; '.join(bad)}) [{source}]")
    if gpu_count is not None:
        rows, uncovered = _copy_coverage(kind, rows, gpu_count)
        if uncovered:
            return unknown(name, kind, expected, f"{kind}: " + "; ".join(uncovered) + f" [{source}]")
    unreadable = [p for row in rows for p in _copy_row_problems(row)]
    if unreadable:
        return unknown(name, kind, expected, f"{kind}: " + "; ".join(unreadable) + f" [{source}]")
    lines, problems, unjudged, above = [], [], [], []
    for row in rows:
        gbps = row["gbps"]
        peak, what = peak_of(row)
        if why := _above_peak(gbps, peak, what):
            above.append(f"{row['label']}: {why}")
        floors, cannot = _floors(threshold, "min", peak, what)
        if cannot:
            unjudged.append(f"{row['label']}: {cannot}")
        line = f"{row['label']}: {gbps:.1f} GB/s" + _of_peak(gbps, peak, what)
        lines.append(line)
        for floor, text in floors:
            if gbps < floor:
                problems.append(f"{line} < {text}")
        if row.get("correct") is False:
            problems.append(f"{row['label']}: the copied data was wrong")
    found = {row["label"]: row["gbps"] for row in rows}
    wrong_data = [p for p in problems if p.endswith("the copied data was wrong")]
    if above and not wrong_data:
        return unknown(name, kind, expected, f"{kind} [{source}]: not judged: " + "; ".join(above))
    if not problems and unjudged:
        return unknown(name, kind, expected, f"{kind}: " + "; ".join(lines) + f" [{source}]; " + "; ".join(unjudged))
    if not problems:
        return passed(name, kind, expected, found, f"{kind}: " + "; ".join(lines) + f" [{source}]", unit="GB/s",
                      details=lines)
    return failed(name, kind, expected, found, f"{kind} [{source}]: " + "; ".join(problems) + ". " + _COPY_CAUSES,
                  unit="GB/s", details=lines)


def copy_limits(record: dict) -> list[Limit]:
    """Each GPU's or pair's rate against ``min``, drawn as the report's copy bars; the fleet compares each."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return []
    kind = str(record.get("name")).removeprefix("copy-").replace("_", " ")
    floor = [(parse_gbps(expected["min"]), f"min {expected['min']}")] if "min" in expected else []
    return [limit for label, gbps in found.items() if is_number(gbps)
            for limit in figure(str(label), gbps, floor, "GB/s", HIGHER, chart="Copies", bar=f"{kind} {label}",
                                fleet=True)]
