"""Plots for the HTML report, as PNG bytes (matplotlib, imported only when a plot is drawn)."""

from __future__ import annotations

import io
import math


def _axes(height: float):
    """(figure, axes), or None without matplotlib: the report then shows its tables only."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt.subplots(figsize=(8, height), dpi=100)


def _png(fig, ax, title: str, xlabel: str, ylabel: str) -> bytes:
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def nvlink_timeline_png(timeline: list[dict], title: str) -> bytes | None:
    """Each GPU's NVLink TX and RX rate (summed over its links) over time; None without matplotlib or data."""
    drawing = _axes(3.2) if timeline else None
    if drawing is None:
        return None
    fig, ax = drawing
    t0 = timeline[0]["t_s"]
    gpus = sorted({gpu for point in timeline for gpu in point["gpus"]})
    for gpu in gpus:
        times = [p["t_s"] - t0 for p in timeline if gpu in p["gpus"]]
        for key, style in (("tx_bytes_per_s", "-"), ("rx_bytes_per_s", "--")):
            rates = [p["gpus"][gpu][key] / 1e9 for p in timeline if gpu in p["gpus"]]
            ax.plot(times, rates, style, marker=".", label=f"GPU{gpu} {key[:2].upper()}")
    return _png(fig, ax, title, "time since the first sample (s)", "NVLink GB/s (all links)")


def busbw_sweep_png(op: str, series: dict[str, list[tuple[int, float]]], thresholds: list[tuple[int, float]],
                    peak: float | None, peak_what: str) -> bytes | None:
    """busbw against message size (log scale) per source, the thresholds marked, the link peak drawn. Points that
    are not finite positive numbers are left out (a log axis has no place for them; the checks say why)."""
    series = {name: [(size, busbw) for size, busbw in points if math.isfinite(busbw) and busbw > 0]
              for name, points in series.items()}
    drawing = _axes(3.6) if any(series.values()) else None
    if drawing is None:
        return None
    fig, ax = drawing
    for name, points in series.items():
        if points:
            sizes, busbw = zip(*sorted(points), strict=True)
            ax.plot(sizes, busbw, marker="o", label=name)
    for size, floor in thresholds:
        ax.scatter([size], [floor], marker="v", s=80, color="red", zorder=5)
        ax.annotate(f"min {floor:g}", (size, floor), textcoords="offset points", xytext=(4, -12), fontsize=8,
                    color="red")
    if peak:
        ax.axhline(peak, linestyle=":", color="gray", label=f"{peak_what} peak {peak:.0f} GB/s")
    ax.set_xscale("log", base=2)
    return _png(fig, ax, f"{op}: bus bandwidth vs size", "message size (bytes)", "busbw (GB/s)")


def memory_png(measured: list[tuple[int, int]], predicted: list[tuple[int, int]],
               offloaded: list[tuple[str, int, int]], budget: int, title: str) -> bytes | None:
    """Peak memory against the batch: measured without offload, the estimate, the budget line, and the
    oversized batch's peak under each offload setting."""
    drawing = _axes(3.6) if measured or predicted else None
    if drawing is None:
        return None
    fig, ax = drawing
    gib = 1024**3
    if measured:
        ax.plot(*zip(*[(b, v / gib) for b, v in measured], strict=True), marker="o", label="measured peak")
    if predicted:
        ax.plot(*zip(*[(b, v / gib) for b, v in predicted], strict=True), linestyle="--", marker="x",
                label="estimate")
    for label, batch, peak in offloaded:
        ax.scatter([batch], [peak / gib], marker="s", zorder=5, label=f"{label}: peak")
    ax.axhline(budget / gib, color="red", linestyle=":", label=f"budget {budget / gib:g} GiB")
    return _png(fig, ax, f"GPU memory vs batch ({title})", "batch size", "GiB")


def health_timeline_png(points: list[dict], title: str = "GPU health during the run") -> bytes | None:
    """Each GPU's temperature and power over time, from background reads (the watchdog's, or a burn-in's)."""
    drawing = _axes(3.2) if len(points) > 1 else None
    if drawing is None:
        return None
    fig, ax = drawing
    t0 = points[0]["t"]
    gpus = sorted({gpu for p in points for gpu in p["gpus"]}, key=str)
    steps = sorted(b["t"] - a["t"] for a, b in zip(points, points[1:], strict=False))
    gap_s = 3 * steps[len(steps) // 2]  # no reads for longer (a burn-in between its chunks): no line across
    power_ax = ax.twinx()
    for gpu in gpus:
        times, temperatures, powers = [], [], []
        for point in (p for p in points if gpu in p["gpus"]):
            if times and point["t"] - t0 - times[-1] > gap_s:
                times.append(times[-1])
                temperatures.append(float("nan"))
                powers.append(float("nan"))
            read = point["gpus"][gpu]
            times.append(point["t"] - t0)
            temperatures.append(_or_nan(read["temperature_c"]))
            powers.append(_or_nan(read["power_w"]))
        ax.plot(times, temperatures, label=f"GPU{gpu} C")
        power_ax.plot(times, powers, linestyle=":", label=f"GPU{gpu} W")
    power_ax.set_ylabel("power (W), dotted")
    return _png(fig, ax, title, "seconds since the first read", "temperature (C)")


def _or_nan(value: float | None) -> float:
    """A read NVML could not take (None) is a gap in the line, not a crash in the report."""
    return float("nan") if value is None else float(value)


def power_hold_png(row: dict) -> bytes | None:
    """One GPU's power (W), SM clock (MHz) and temperature (C) through the power hold, its power limit drawn; None
    without matplotlib or samples."""
    samples = [s for s in row.get("samples") or [] if isinstance(s.get("t_s"), (int, float))]
    drawing = _axes(3.2) if samples else None
    if drawing is None:
        return None
    fig, ax = drawing
    times = [s["t_s"] for s in samples]
    for key, label in (("power_w", "power (W)"), ("sm_clock_mhz", "SM clock (MHz)"),
                       ("temperature_c", "temperature (C)")):
        values = [s.get(key) for s in samples]
        if any(isinstance(v, (int, float)) for v in values):
            ax.plot(times, [v if isinstance(v, (int, float)) else float("nan") for v in values], label=label)
    if isinstance(row.get("power_limit_w"), (int, float)):
        ax.axhline(row["power_limit_w"], linestyle="--", color="grey",
                   label=f"power limit {row['power_limit_w']:.0f} W")
    return _png(fig, ax, f"GPU{row.get('index')} held at its power limit", "seconds", "W / MHz / C")
