"""The numbers the report's plots are drawn from, kept in the results document (``series``) so that the plots,
like every other figure of the report, come from the results a customer can check and that the signature covers.

Read from the run's measurements (live, or replayed from the bundle: the same recordings either way); a measurement
the run did not make is absent. Nothing here may fail the run: a shape this does not know is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checks.memory import predicted_peak_bytes
from ..errors import GpuFabricError
from ..units import is_number

_MAX_POINTS = 600  # per line: a plot of more is no clearer, and the results stay small


def _thin(points: list, limit: int = _MAX_POINTS) -> list:
    if len(points) <= limit:
        return points
    step = len(points) / limit
    return [points[int(i * step)] for i in range(limit - 1)] + [points[-1]]


def _collectives(bandwidth) -> dict:
    """op -> {source, points: [[size_bytes, busbw_gbps]]}: torch.distributed's sweep, else nccl-tests' (out of
    place, the last run of an op winning)."""
    out: dict[str, dict] = {}
    collectives = getattr(bandwidth, "collectives", None) or {}
    for op, rows in (collectives.get("ops") or {}).items():
        points = sorted([int(r["size"]), float(r["busbw"])] for r in rows or []
                        if isinstance(r, dict) and is_number(r.get("size")) and is_number(r.get("busbw")))
        if points:
            out[op] = {"source": f"torch.distributed ({collectives.get('backend') or '?'})", "points": points}
    for run in getattr(bandwidth, "nccl_tests", None) or []:
        op = run.get("op")
        if not op or op in out and not out[op]["source"].startswith("nccl-tests"):
            continue
        points = sorted([int(r["size"]), float(r["oop"]["busbw"])] for r in run.get("rows") or []
                        if is_number(r.get("size")) and is_number((r.get("oop") or {}).get("busbw")))
        if points:
            out[op] = {"source": "nccl-tests", "points": points}
    return out


def _nvlink(measurement) -> dict:
    """GPU -> [[t_s, tx_bytes_per_s, rx_bytes_per_s]], each GPU its own line (times from the first sample)."""
    traffic = getattr(measurement, "traffic", None)
    timeline = list(getattr(traffic, "timeline", None) or [])
    if not timeline:
        return {}
    t0 = timeline[0]["t_s"]
    gpus: dict[str, list] = {}
    for point in timeline:
        for gpu, rates in (point.get("gpus") or {}).items():
            tx, rx = rates.get("tx_bytes_per_s"), rates.get("rx_bytes_per_s")
            if is_number(tx) and is_number(rx):
                gpus.setdefault(str(gpu), []).append([round(point["t_s"] - t0, 6), tx, rx])
    return {gpu: _thin(points) for gpu, points in sorted(gpus.items(), key=lambda item: int(item[0])
                                                          if item[0].isdigit() else 0)}


def _memory(result) -> dict:
    """The measured peak per batch, the estimate at the same batches, the budget, and the oversized batch's peak
    under each offload setting."""
    if not isinstance(result, dict) or not is_number(result.get("budget_bytes")):
        return {}
    measured = []
    baseline = result.get("baseline") or {}
    if is_number(result.get("fit_batch")) and is_number(baseline.get("peak_bytes")):
        measured.append([int(result["fit_batch"]), int(baseline["peak_bytes"])])
    measured += [[int(p["batch"]), int(p["peak_bytes"])] for p in result.get("probes") or []
                 if is_number(p.get("batch")) and is_number(p.get("peak_bytes"))]
    predicted = []
    estimate = result.get("estimate")
    if isinstance(estimate, dict):
        batches = sorted({b for b, _ in measured} | {int((result.get("input") or [1])[0])})
        try:
            predicted = [[b, int(predicted_peak_bytes(estimate, b, result.get("mode") == "train"))] for b in batches]
        except (KeyError, TypeError, ValueError):
            predicted = []
    batch = int((result.get("input") or [0])[0] or 0)
    offloaded = [{"threshold_bytes": r.get("threshold_bytes"), "usage_fraction": r.get("usage_fraction"),
                  "batch": batch, "peak_bytes": r["peak_bytes"]}
                 for r in result.get("lms") or [] if is_number(r.get("peak_bytes"))]
    return {"budget_bytes": int(result["budget_bytes"]), "measured": sorted(measured), "predicted": predicted,
            "offloaded": offloaded, "model": result.get("model")}


def _power_hold(result) -> dict:
    """GPU index -> {power_limit_w, samples: [[t_s, power_w, sm_clock_mhz, temperature_c]]}."""
    out = {}
    rows = result.get("gpus") or [] if isinstance(result, dict) else []
    for row in rows:
        samples = [[s.get("t_s"), s.get("power_w"), s.get("sm_clock_mhz"), s.get("temperature_c")]
                   for s in row.get("samples") or [] if is_number(s.get("t_s"))]
        if samples:
            out[str(row.get("index"))] = {"power_limit_w": row.get("power_limit_w"), "serial": row.get("serial"),
                                          "samples": _thin(samples)}
    return out


def plot_series(measured: Mapping[str, Any]) -> dict:
    """The ``series`` part of the results document (empty where the run measured nothing to draw), from the run's
    measurements by name (what each measured, or the GpuFabricError that stopped it)."""
    out: dict[str, dict] = {}
    for key, name, extract in (("collectives", "bandwidth", _collectives), ("nvlink", "nvlink", _nvlink),
                               ("memory", "memory", _memory), ("power_hold", "power_hold", _power_hold)):
        value = measured.get(name)
        if value is None or isinstance(value, GpuFabricError):
            continue
        try:
            series = extract(value)
        except Exception:  # a report's plot must never break the run
            series = {}
        if series:
            out[key] = series
    return out
