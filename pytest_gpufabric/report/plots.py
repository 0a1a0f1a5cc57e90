"""Plots for the HTML report, as PNG bytes (matplotlib, imported only when a plot is drawn)."""

from __future__ import annotations

import io


def nvlink_timeline_png(timeline: list[dict], title: str) -> bytes | None:
    """Each GPU's NVLink TX and RX rate (summed over its links) over time; None without matplotlib or data."""
    if len(timeline) < 1:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t0 = timeline[0]["t_s"]
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    gpus = sorted({gpu for point in timeline for gpu in point["gpus"]})
    for gpu in gpus:
        times = [p["t_s"] - t0 for p in timeline if gpu in p["gpus"]]
        for key, style in (("tx_bytes_per_s", "-"), ("rx_bytes_per_s", "--")):
            rates = [p["gpus"][gpu][key] / 1e9 for p in timeline if gpu in p["gpus"]]
            ax.plot(times, rates, style, marker=".", label=f"GPU{gpu} {key[:2].upper()}")
    ax.set_xlabel("time since the first sample (s)")
    ax.set_ylabel("NVLink GB/s (all links)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
