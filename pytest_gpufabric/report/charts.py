"""Plots as plain data for the templates to draw as inline SVG (templates/macros.html.j2, ``chart``).

Why SVG and not a plotting library: a report is printed and signed, so its plots must be on every install (the
README's first command installs no matplotlib), crisp at any zoom and in print, searchable (the numbers on the axes
and the floors are text), and themselves data a signature can cover. A few kinds of chart (a line chart with a log
or linear x axis, horizontal bars, a distribution strip) are all the report needs; they are some hundred lines here,
with no dependency. Python computes the geometry (pixel coordinates, ticks, labels); the template lays it out and
escapes every label.
"""

from __future__ import annotations

import math

from ..units import is_number
from .phrases import number, size_text

#: colours in the order lines get them (colour-blind safe: Okabe-Ito)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
FLOOR = "#c0392b"
PEAK = "#6c757d"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (is_number(low) and is_number(high)) or high <= low:
        high = low + 1 if is_number(low) else 1.0
        low = low if is_number(low) else 0.0
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _tick_label(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:g}"


class _Frame:
    """The plotting area of a chart and its scales."""

    def __init__(self, width: int, height: int, left: int = 64, right: int = 16, top: int = 30, bottom: int = 42):
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = left, width - right, top, height - bottom

    def scale(self, low: float, high: float, start: float, end: float, log2: bool = False):
        if log2:
            low, high = math.log2(low), math.log2(high)
        span = (high - low) or 1.0

        def to_px(value: float) -> float:
            v = math.log2(value) if log2 else value
            return round(start + (v - low) / span * (end - start), 1)

        return to_px


def line_chart(title: str, x_label: str, y_label: str, series: list[dict], *, x_log2: bool = False,
               x_sizes: bool = False, rules: list[dict] | None = None, marks: list[dict] | None = None,
               y_min: float | None = 0.0, width: int = 720, height: int = 300, caption: str = "") -> dict | None:
    """A line chart: ``series`` [{name, points: [(x, y)], dash, band}] (band: a wide pale line beneath the others,
    so that a line equal to another still shows); ``rules`` [{y, label, kind: floor|peak|limit}] across the plot;
    ``marks`` [{x, y, label}] (a floor at one x: a red triangle). ``x_sizes``: x values are bytes, labelled 1 MiB.
    None when there is nothing to draw."""
    rules, marks = list(rules or []), list(marks or [])
    # a point whose y is None breaks its line there (no reads for a while: no line drawn across the gap)
    series = [dict(s, points=[(x, y) for x, y in s["points"] if is_number(x) and (x > 0 or not x_log2)
                              and (is_number(y) or y is None)]) for s in series]
    series = [s for s in series if any(y is not None for _, y in s["points"])]
    if not series:
        return None
    xs = [x for s in series for x, _ in s["points"]] + [m["x"] for m in marks if is_number(m.get("x"))]
    ys = [y for s in series for _, y in s["points"] if y is not None] + [r["y"] for r in rules if is_number(r.get("y"))]
    ys += [m["y"] for m in marks if is_number(m.get("y"))]
    legend_rows = 0 if len(series) + bool(marks) < 2 else 1
    frame = _Frame(width, height, top=30 + 16 * legend_rows)
    x_low, x_high = min(xs), max(xs)
    if x_log2:
        x_low, x_high = 2 ** math.floor(math.log2(x_low)), 2 ** math.ceil(math.log2(x_high))
        if x_low == x_high:
            x_high *= 2
        x_ticks = [2 ** p for p in range(int(math.log2(x_low)), int(math.log2(x_high)) + 1)]
        if len(x_ticks) > 9:
            x_ticks = x_ticks[:: math.ceil(len(x_ticks) / 9)]
    else:
        x_ticks = nice_ticks(x_low, x_high, 6)
        x_low, x_high = x_ticks[0], x_ticks[-1]
    low = min(ys) if y_min is None else min(y_min, min(ys))
    y_ticks = nice_ticks(low, max(ys) * 1.05 if max(ys) > 0 else max(ys) + 1, 5)
    to_x = frame.scale(x_low, x_high, frame.left, frame.right, x_log2)
    to_y = frame.scale(y_ticks[0], y_ticks[-1], frame.bottom, frame.top)
    lines, legend = [], []
    for i, s in enumerate(series):
        color = s.get("color") or PALETTE[i % len(PALETTE)]
        segments: list[list[str]] = [[]]
        for x, y in sorted(s["points"], key=lambda p: p[0]):
            if y is None:
                segments.append([])
            else:
                segments[-1].append(f"{to_x(x)},{to_y(y)}")
        band = bool(s.get("band"))
        style = {"color": color, "width": 6 if band else 1.8, "opacity": 0.35 if band else 1.0,
                 "dash": s.get("dash") or ""}
        drawn = [p for p in s["points"] if p[1] is not None]
        dots = [] if band or len(drawn) > 40 else [{"x": to_x(x), "y": to_y(y)} for x, y in drawn]
        for i, segment in enumerate(seg for seg in segments if seg):
            lines.append({"points": " ".join(segment), "dots": dots if i == 0 else [], **style})
        legend.append({"name": s["name"], **style})
    drawn_rules = []
    for rule in rules:
        if not is_number(rule.get("y")):
            continue
        kind = rule.get("kind", "floor")
        color = FLOOR if kind in ("floor", "limit") else PEAK
        drawn_rules.append({"y": to_y(rule["y"]), "label": rule["label"], "color": color,
                            "dash": "6 3" if kind != "peak" else "2 3"})
    drawn_marks = [{"x": to_x(m["x"]), "y": to_y(m["y"]), "label": m["label"], "color": FLOOR}
                   for m in marks if is_number(m.get("x")) and is_number(m.get("y")) and (m["x"] > 0 or not x_log2)]
    if drawn_marks:
        legend.append({"name": "floor at that size", "color": FLOOR, "width": 0, "opacity": 1.0, "dash": "",
                       "marker": True})
    x = frame.left
    for item in legend:  # one row under the title, left to right
        item["x"] = x
        x += 34 + 6 * len(item["name"])
    if not legend_rows:
        legend = []
    x_text = size_text if x_sizes else _tick_label
    return {"kind": "line", "title": title, "caption": caption, "width": width, "height": height,
            "frame": vars(frame), "x_label": x_label, "y_label": y_label,
            "x_ticks": [{"x": to_x(t), "label": x_text(t)} for t in x_ticks],
            "y_ticks": [{"y": to_y(t), "label": _tick_label(t)} for t in y_ticks],
            "lines": lines, "rules": drawn_rules, "marks": drawn_marks, "legend": legend}


def bar_chart(title: str, unit: str, bars: list[dict], width: int = 720, caption: str = "") -> dict | None:
    """Horizontal bars [{label, value, floor, passed}], each with its floor drawn across it in red."""
    bars = [b for b in bars if is_number(b.get("value"))]
    if not bars:
        return None
    row, top, bottom = 24, 30, 40
    height = top + bottom + row * len(bars)
    frame = _Frame(width, height, left=min(300, 40 + 6 * max(len(b["label"]) for b in bars)), right=200, top=top,
                   bottom=bottom)
    high = max([b["value"] for b in bars] + [b["floor"] for b in bars if is_number(b.get("floor"))])
    ticks = nice_ticks(0, high * 1.05, 5)
    to_x = frame.scale(0, ticks[-1], frame.left, frame.right)
    drawn = []
    for i, bar in enumerate(bars):
        y = top + i * row + 4
        floor = bar.get("floor")
        drawn.append({"label": bar["label"], "y": y, "h": row - 8, "x": frame.left, "w": round(to_x(bar["value"]) -
                      frame.left, 1), "value": number(round(bar["value"], 1), unit),
                      "color": "#198754" if bar.get("passed", True) else "#dc3545",
                      "floor_x": to_x(floor) if is_number(floor) else None,
                      "value_x": round(max(to_x(bar["value"]), to_x(floor) if is_number(floor) else 0) + 6, 1),
                      "floor": number(round(floor, 1), unit) if is_number(floor) else ""})
    return {"kind": "bars", "title": title, "caption": caption, "width": width, "height": height,
            "frame": vars(frame), "x_label": unit, "bars": drawn,
            "x_ticks": [{"x": to_x(t), "label": _tick_label(t)} for t in ticks]}


def distribution_chart(values: list[float] | None, low: float | None, high: float | None, median: float | None,
                       mad_limit: float | None, margin_limit: float | None, flagged: list[tuple[str, float]],
                       unit: str, histogram_above: int = 200, width: int = 400, height: int = 96) -> dict | None:
    """A fleet measurement across its nodes: the nodes' values (a strip of points, a histogram past
    ``histogram_above``, or the range bar where only min and max are known), the median, the two outlier limits and
    the flagged nodes (red diamonds)."""
    values = [v for v in values or [] if is_number(v)]
    extent = [v for v in (low, high, median, mad_limit, margin_limit, *values, *(v for _, v in flagged))
              if is_number(v)]
    if not extent:
        return None
    lo, hi = min(extent), max(extent)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.01 or 1.0
    ticks = nice_ticks(lo - pad, hi + pad, 4)
    frame = _Frame(width, height, left=10, right=10, top=8, bottom=26)
    to_x = frame.scale(ticks[0], ticks[-1], frame.left, frame.right)
    middle = (frame.top + frame.bottom) / 2
    points, bins, bar = [], [], None
    if len(values) > histogram_above:
        count = 40
        step = (ticks[-1] - ticks[0]) / count
        counts = [0] * count
        for v in values:
            counts[min(count - 1, max(0, int((v - ticks[0]) / step)))] += 1
        tallest = max(counts) or 1
        for i, c in enumerate(counts):
            if c:
                h = round((frame.bottom - frame.top) * c / tallest, 1)
                bins.append({"x": to_x(ticks[0] + i * step), "w": round(to_x(ticks[0] + step) - frame.left, 1),
                             "y": round(frame.bottom - h, 1), "h": h})
    elif values:
        spread = (frame.bottom - frame.top) * 0.7
        points = [{"x": to_x(v), "y": round(middle + (((i * 0.6180339887) % 1.0) - 0.5) * spread, 1)}
                  for i, v in enumerate(values)]
    elif is_number(low) and is_number(high):
        bar = {"x1": to_x(low), "x2": to_x(high), "y": middle}
    lines = [{"x": to_x(x), "color": color, "dash": dash, "label": label}
             for x, color, dash, label in ((median, "#212529", "", "median"), (mad_limit, FLOOR, "5 3", "MAD limit"),
                                           (margin_limit, "#fd7e14", "2 2", "practical-margin limit"))
             if is_number(x)]
    flags = [{"x": to_x(v), "y": round(middle + (((i * 0.3819660113) % 1.0) - 0.5) * 12, 1), "name": name,
              "value": number(v, unit or None)} for i, (name, v) in enumerate(flagged) if is_number(v)]
    return {"kind": "distribution", "width": width, "height": height, "frame": vars(frame), "unit": unit,
            "points": points, "bins": bins, "bar": bar, "lines": lines, "flags": flags,
            "x_ticks": [{"x": to_x(t), "label": _tick_label(t)} for t in ticks]}
