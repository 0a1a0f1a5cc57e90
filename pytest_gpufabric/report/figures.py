"""The report's plots, from the results document alone (its checks, ``series``, health and burn-in): each a chart
(charts.py) with a caption, grouped as the report shows them. Every bandwidth plot carries its floor: the
collective sweeps a red triangle at each promised size, the bars a red line across each bar, the NVLink traffic the
mean rate its promised volume needs over the window measured."""

from __future__ import annotations

import math
import re

from ..diagnostics.power_hold import POWER_HOLD
from ..kinds import record_limits
from ..kinds.nvlink_traffic import NVLINK_TRAFFIC_VOLUME
from ..units import GIB, format_bytes, is_number, parse_gbps, parse_seconds
from .charts import bar_chart, line_chart
from .phrases import rate, size_text

_BANDWIDTH_CHECK = re.compile(r"^(?:bandwidth|nccl-tests)-(.+)$")


def _gpu_of(subject: object) -> str | None:
    match = re.match(r"GPU(\d+)", str(subject or ""))
    return match.group(1) if match else None


def collective_floor(check: dict) -> tuple[float, str] | None:
    """(busbw floor in GB/s, how it was set) at the check's size: its min_busbw, its fraction of the link peak, or
    its time ceiling as the busbw it means at that size (busbw is inversely proportional to the time at one size).
    Read from what the profile promises at that size, so that a size measured badly or not at all keeps its mark
    (the limits of a record whose numbers could not be read are none)."""
    expected, found = check.get("expected") or {}, check.get("found") or {}
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return None
    floors = []
    try:
        if "min_busbw" in expected:
            floors.append((parse_gbps(expected["min_busbw"]), f"min {expected['min_busbw']}"))
        if is_number(expected.get("min_fraction_of_peak")) and is_number(found.get("peak_gbps")):
            floors.append((expected["min_fraction_of_peak"] * found["peak_gbps"],
                           f"{expected['min_fraction_of_peak']:.0%} of peak"))
        if "max_time" in expected and is_number(found.get("time_us")) and is_number(found.get("busbw_gbps")):
            ceiling_us = parse_seconds(expected["max_time"]) * 1e6
            floors.append((found["busbw_gbps"] * found["time_us"] / ceiling_us, f"max {expected['max_time']}"))
    except (ValueError, TypeError):
        return None
    return max(floors) if floors else None


def _collectives(document: dict) -> list[dict]:
    checks = [c for c in document.get("checks") or [] if _BANDWIDTH_CHECK.match(str(c.get("name", "")))]
    series = (document.get("series") or {}).get("collectives") or {}
    ops = list(dict.fromkeys([*series, *(str(c.get("subject", "")).split(" ")[0] for c in checks)]))
    charts = []
    for op in ops:
        mine = [c for c in checks if str(c.get("subject", "")).split(" ")[0] == op]
        points = (series.get(op) or {}).get("points") or [
            [c["expected"]["size_bytes"], c["found"]["busbw_gbps"]] for c in mine
            if isinstance(c.get("found"), dict) and is_number(c["found"].get("busbw_gbps"))
            and isinstance(c.get("expected"), dict) and is_number(c["expected"].get("size_bytes"))]
        marks, peak = [], None
        for check in mine:
            floor = collective_floor(check)
            size = (check.get("expected") or {}).get("size_bytes")
            if floor is not None and is_number(size):
                marks.append({"x": size, "y": floor[0], "label": f"{size_text(size)}: {rate(floor[0])} ({floor[1]})"})
            found = check.get("found") or {}
            if isinstance(found, dict) and is_number(found.get("peak_gbps")):
                peak = (found["peak_gbps"], str(found.get("peak") or "link"))
        rules = [{"y": peak[0], "label": f"{peak[1]} peak {rate(peak[0])}", "kind": "peak"}] if peak else []
        source = (series.get(op) or {}).get("source") or "the checks"
        chart = line_chart(f"{op}: bus bandwidth against message size", "message size", "busbw (GB/s)",
                           [{"name": f"{op} busbw ({source})", "points": points}], x_log2=True, x_sizes=True,
                           marks=marks, rules=rules,
                           caption=f"{op} busbw measured at each size ({source}); red triangles: the floor at each "
                                   "size the profile promises" + ("; dotted: the link's peak" if peak else "") + ".")
        if chart is not None:
            chart["floors"] = [m["label"] for m in marks]
            charts.append(chart)
    return charts


def _bars(document: dict) -> list[dict]:
    """Every limit a check draws as a bar against its floor (checks/limits.py: its ``chart``), one chart per kind
    (copies, HBM, PCIe under load, the burn-in's collectives, ib_write_bw), so that 55 GB/s and 3,300 GB/s are not
    drawn to one scale; a bar held to several floors is drawn against the highest."""
    by_kind: dict[tuple[str, str], list[dict]] = {}
    for check in document.get("checks") or []:
        passed = check.get("verdict") != "failed"
        drawn: dict[tuple[str, str, str], dict] = {}
        for limit in record_limits(check):
            if not limit.chart or limit.bound is None:
                continue
            bar = drawn.get((limit.chart, limit.unit, limit.bar))
            if bar is None:
                drawn[(limit.chart, limit.unit, limit.bar)] = bar = {"label": limit.bar, "value": limit.value,
                                                                     "floor": limit.bound, "passed": passed}
                by_kind.setdefault((limit.chart, limit.unit), []).append(bar)
            bar["floor"] = max(bar["floor"], limit.bound)
    charts = []
    for (kind, unit), bars in by_kind.items():
        chart = bar_chart(f"{kind}: bandwidth against its floor ({unit})", unit, bars,
                          caption="Each bar a measured bandwidth (green: passed, red: failed); the red line across "
                                  "it, its floor.")
        if chart is not None:
            charts.append(chart)
    return charts


def _nvlink(document: dict) -> list[dict]:
    """One chart per GPU, from its own samples: TX and RX summed over its links; RX a pale band beneath TX, so that
    equal lines (an all-reduce moves as much each way) both show."""
    per_gpu = (document.get("series") or {}).get("nvlink") or {}
    volume = {_gpu_of(c.get("subject")): c for c in document.get("checks") or []
              if c.get("name") == NVLINK_TRAFFIC_VOLUME.name}  # its check is named after the kind
    speeds = {str(g.get("index")): g for g in (document.get("machine") or {}).get("gpus") or []}
    charts = []
    for gpu, points in per_gpu.items():
        if not points:
            continue
        rules = []
        board = speeds.get(gpu) or {}
        if is_number(board.get("nvlink_speed_gbps")) and is_number(board.get("nvlinks_active")):
            peak = board["nvlink_speed_gbps"] * board["nvlinks_active"]
            rules.append({"y": peak, "label": f"{board['nvlinks_active']} links x {board['nvlink_speed_gbps']:g} GB/s "
                                              f"peak {rate(peak)}", "kind": "peak"})
        check = volume.get(gpu)
        window = points[-1][0] - points[0][0]
        expected = (check or {}).get("expected") or {}
        if isinstance(expected, dict) and is_number(expected.get("min_bytes")) and window > 0:
            # the samples are interval midpoints: the window they cover is one interval longer than their span
            span = window * len(points) / max(1, len(points) - 1)
            mean = expected["min_bytes"] / span / 1e9
            rules.append({"y": mean, "label": f"floor: {format_bytes(expected['min_bytes'])} in {span:.2f} s = "
                                              f"{rate(mean)} mean", "kind": "floor"})
        chart = line_chart(
            f"GPU{gpu}: NVLink throughput during the training step", "seconds since the first sample",
            "GB/s, all links",
            [{"name": f"GPU{gpu} RX", "points": [(t, rx / 1e9) for t, _, rx in points], "band": True},
             {"name": f"GPU{gpu} TX", "points": [(t, tx / 1e9) for t, tx, _ in points]}],
            rules=rules, caption=f"GPU{gpu}'s own NVLink counters, summed over its links (TX line, RX pale band "
                                 "beneath it). The promise is the volume moved; the red line is the mean rate that "
                                 "volume needs over the window measured.")
        if chart is not None:
            charts.append(chart)
    return charts


def _memory(document: dict) -> list[dict]:
    memory = (document.get("series") or {}).get("memory") or {}
    if not memory:
        return []
    series = [{"name": "measured peak", "points": [(b, v / GIB) for b, v in memory.get("measured") or []]},
              {"name": "estimate", "points": [(b, v / GIB) for b, v in memory.get("predicted") or []], "dash": "5 4"}]
    marks = [{"x": o["batch"], "y": o["peak_bytes"] / GIB,
              "label": f"offload >= {format_bytes(o['threshold_bytes'])}: {format_bytes(o['peak_bytes'])}"}
             for o in memory.get("offloaded") or [] if is_number(o.get("threshold_bytes"))]
    chart = line_chart(f"GPU memory against the batch ({memory.get('model') or 'model'})", "batch size", "GiB",
                       series, rules=[{"y": memory["budget_bytes"] / GIB, "kind": "limit",
                                       "label": f"budget {format_bytes(memory['budget_bytes'])}"}],
                       caption="Peak memory measured without offload and the estimate at the same batches, against "
                               "the budget (red)." + (" The oversized batch's peak under each offload setting is "
                                                       "listed below." if marks else ""))
    if chart is not None and marks:
        chart["notes"] = [m["label"] for m in marks]
    return [chart] if chart is not None else []


def _power(document: dict) -> list[dict]:
    holds = (document.get("series") or {}).get("power_hold") or {}
    floors = {_gpu_of(c.get("subject")): (c.get("expected") or {}).get("min_sm_clock_mhz")
              for c in document.get("checks") or [] if c.get("name") == POWER_HOLD.name
              and isinstance(c.get("expected"), dict)}
    charts = []
    for gpu, hold in holds.items():
        samples = hold.get("samples") or []
        limit = hold.get("power_limit_w")
        power = line_chart(f"GPU{gpu}: power through the hold", "seconds", "W",
                           [{"name": "power", "points": [(s[0], s[1]) for s in samples]}],
                           rules=[{"y": limit, "label": f"power limit {limit:.0f} W", "kind": "peak"}]
                           if is_number(limit) else [], width=350, height=220)
        floor = floors.get(gpu)
        clock = line_chart(f"GPU{gpu}: SM clock through the hold", "seconds", "MHz",
                           [{"name": "SM clock", "points": [(s[0], s[2]) for s in samples]}],
                           rules=[{"y": floor, "label": f"floor {floor} MHz", "kind": "floor"}]
                           if is_number(floor) else [], width=350, height=220)
        temps = [s[3] for s in samples if is_number(s[3])]
        caption = f"GPU{gpu} (serial {hold.get('serial') or 'not recorded'}) held at its power limit" + (
            f"; {max(temps)} °C at most." if temps else ".")
        for chart in (power, clock):
            if chart is not None:
                chart["caption"] = caption
                charts.append(chart)
    return charts


def health_charts(points: list[dict], what: str) -> list[dict]:
    """Temperature and power per GPU through a run or a burn-in, from background reads ({t, gpus: {gpu: {...}}}); a
    gap three times the usual interval breaks the line."""
    points = [p for p in points if is_number(p.get("t")) and isinstance(p.get("gpus"), dict)]
    if len(points) < 2:
        return []
    t0 = points[0]["t"]
    gpus = sorted({str(g) for p in points for g in p["gpus"]}, key=lambda g: int(g) if g.isdigit() else 0)
    charts = []
    for key, unit, title in (("temperature_c", "°C", "temperature"), ("power_w", "W", "power")):
        series = []
        for gpu in gpus:
            reads = [(p["t"] - t0, (p["gpus"].get(gpu) or p["gpus"].get(int(gpu)) or {}).get(key))
                     for p in points if gpu in p["gpus"] or (gpu.isdigit() and int(gpu) in p["gpus"])]
            reads = [(t, v) for t, v in reads if is_number(v)]
            if reads:
                series.append({"name": f"GPU{gpu}", "points": _with_gaps(_thin(reads))})
        chart = line_chart(f"{what}: {title}", "seconds since the first read", unit, series, width=350, height=220,
                           y_min=None)
        if chart is not None:
            chart["caption"] = f"Each GPU's {title} through {what.lower()}, from background reads."
            charts.append(chart)
    return charts


def _with_gaps(points: list) -> list:
    """(t, None) where reads stop for more than three times their usual interval: the line breaks there."""
    if len(points) < 3:
        return points
    steps = sorted(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
    gap = 3 * steps[len(steps) // 2]
    out = [points[0]]
    for before, after in zip(points, points[1:], strict=False):
        if gap > 0 and after[0] - before[0] > gap:
            out.append(((before[0] + after[0]) / 2, None))
        out.append(after)
    return out


def _thin(points: list, limit: int = 500) -> list:
    if len(points) <= limit:
        return points
    step = math.ceil(len(points) / limit)
    return points[::step] + ([points[-1]] if (len(points) - 1) % step else [])


def report_figures(document: dict) -> list[dict]:
    """The report's plot groups: [{id, title, charts}] in the order they are shown; empty groups left out."""
    groups = [("bandwidth", "Collective bandwidth", _collectives(document)),
              ("floors", "Bandwidth against its floor", _bars(document)),
              ("nvlink", "NVLink traffic, one plot per GPU", _nvlink(document)),
              ("memory", "Memory", _memory(document)),
              ("power", "Power hold", _power(document)),
              ("health", "Health", health_charts((document.get("health") or {}).get("timeline") or [], "The run"))]
    return [{"id": key, "title": title, "charts": charts} for key, title, charts in groups if charts]
