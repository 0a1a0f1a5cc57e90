"""Sustained power and thermal verdicts on one GPU's power-hold row (workloads/power_hold.py): the clock event
reasons seen under load, the SM clock the GPU held at its power limit, its temperature and its GEMM rate.

Judged from the row's samples, never its summary, so that a recorded row is judged by its evidence. What is
normal under a full GEMM load: the GPU draws its power limit and the driver's power cap holds the SM clock below
its maximum (an H100 80GB HBM3 SXM, 2026-11-25: 20 s of bf16 8192^3 products at 676 TFLOP/s,
median 698 W of its 700 W limit, SM clock 1245-1365 MHz of 1980, 'sw_power_cap' in every sample, 60-70 C). What
is not: the hardware slowing itself down (a failing power supply or sensor, the board too hot, a power brake
signal from the chassis), which no setting explains.
"""

from __future__ import annotations

import math

from ..diagnostics.power_hold import POWER_HOLD
from ..units import is_number, non_finite
from ..workloads.power_figures import power_figures
from .limits import HIGHER, LOWER, Limit, figure
from .result import CheckResult, failed, passed, unknown

#: the reasons that fail a GPU wherever they are seen: the GPU protecting itself, not its power policy
HARDWARE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
#: every reason a spec may name in ``forbid_throttle`` (power_hold.REASONS), with what it usually means
REASON_MEANING = {
    "hw_slowdown": "the hardware halved its clocks or more: a power-supply or board fault, an overheating board "
                   "or a failed sensor",
    "hw_thermal_slowdown": "the GPU or its memory reached its hardware temperature limit: cooling (airflow, fans, "
                           "a blocked heat sink, liquid loop)",
    "hw_power_brake_slowdown": "the chassis asserted the power brake: the power supplies cannot carry the load",
    "sw_thermal_slowdown": "the driver held the clocks down for temperature: the GPU runs hot",
    "sw_power_cap": "the driver held the clocks at the power limit (normal under a full load)",
    "gpu_idle": "the GPU had nothing to run",
    "applications_clocks_setting": "application clocks are set below the maximum",
    "sync_boost": "held to the slowest GPU of a sync-boost group",
    "display_clocks_setting": "display clock setting",
}


#: a hold covers its promised seconds when its samples span this share of them and number this share of one per
#: interval: each NVML read takes time (6 s at 0.25 s read 24 samples on an H100 SXM, t = 0 to 5.75 s)
MIN_SPAN_SHARE = 0.9
MIN_SAMPLE_SHARE = 0.8


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def power_coverage(record: dict, gpu_row: dict, spec: dict) -> str | None:
    """Why a power-hold record does not cover the hold the profile's ``power`` section promises, or None: a window
    shorter than its ``seconds``, samples that span less of it or fewer than one per ``interval_s`` (80 %), or
    samples out of time order (an edited record)."""
    s = POWER_HOLD.settings(spec)
    promised, interval = float(s["seconds"]), float(s["interval_s"])
    samples = [x for x in gpu_row.get("samples") or [] if isinstance(x, dict)]
    times = [x.get("t_s") for x in samples]
    who = f"power-hold.json: {_label(gpu_row)}"
    if not all(_finite(t) for t in times):
        return f"{who}: a sample without a finite time (t_s): the hold's coverage is unknown"
    if any(later <= earlier for earlier, later in zip(times, times[1:], strict=False)):
        shown = ", ".join(f"{t:g}" for t in times[:8])
        return f"{who}: the samples are not in time order (t_s {shown}, ...): an edited record"
    step = record.get("interval_s") if _finite(record.get("interval_s")) else interval
    span = times[-1] - times[0] + step if times else 0.0
    window = record.get("seconds")
    need = max(2, int(MIN_SAMPLE_SHARE * promised / interval))
    if (len(samples) >= need and span >= MIN_SPAN_SHARE * promised and _finite(window)
            and window >= MIN_SPAN_SHARE * promised):
        return None
    return (f"{who}: the hold covers {span:.2f} s with {len(samples)} sample(s) (its window: {window!r} s) of the "
            f"{promised:g} s promised, which needs at least {need} samples, one every {interval:g} s: too little of "
            "the hold to judge the GPU on")


def _label(row: dict) -> str:
    return f"GPU{row.get('index')} (serial {row.get('serial') or 'unknown'})"


def _forbidden(spec: dict) -> list[str]:
    extra = list(spec.get("forbid_throttle", ()))
    unknown_names = sorted(set(extra) - set(REASON_MEANING))
    if unknown_names:
        raise ValueError(f"forbid_throttle names {', '.join(unknown_names)}: no such clock event reason (known: "
                         f"{', '.join(sorted(REASON_MEANING))})")
    return sorted(set(HARDWARE_REASONS) | set(extra))


def _fmt(value, unit: str, digits: int = 0) -> str:
    return "?" if value is None else f"{value:.{digits}f} {unit}"


def power_limits(record: dict) -> list[Limit]:
    """The median SM clock at the power limit (over all samples where the GPU never reached it) against
    ``min_sm_clock_mhz``; the hottest reading, which the fleet compares."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return []
    limits = []
    label = "sm_clock_mhz_median_at_limit" if "sm_clock_mhz_median_at_limit" in found else "sm_clock_mhz_median"
    floor = expected.get("min_sm_clock_mhz")
    if is_number(found.get(label)):
        bounds = [(floor, f"min {floor:g} MHz")] if is_number(floor) else []
        limits += figure(label, found[label], bounds, "MHz", HIGHER)
    if is_number(found.get("temperature_c_max")):
        limits.append(Limit("temperature_c_max", found["temperature_c_max"], None, "C", LOWER, fleet=True))
    return limits


def measured_power(measured, results: list[dict], margin: float, where: str) -> None:
    """`profile init --measure`: the clock floor at ``margin`` times the lowest median SM clock a GPU held at its
    power limit (none where a GPU never reached it)."""
    clocks = [g["summary"]["sm_clock_mhz_median_at_limit"] for g in results[0]["gpus"]]
    key = POWER_HOLD.key
    section = dict(POWER_HOLD.measure_section)
    if clocks and all(isinstance(c, (int, float)) for c in clocks):
        section["min_sm_clock_mhz"] = int(margin * min(clocks))
        measured.note(key, f"{key}: median SM clock at the power limit per GPU, {where}: "
                           f"{', '.join(f'{c:.0f}' for c in clocks)} MHz; floor {margin:g} x the lowest")
    else:
        measured.note(key, f"{key}: the GPUs did not reach their power limit in the hold ({where}): no clock floor")
    measured.sections[key] = section


def check_power_hold(gpu_row: dict, spec: dict, source: str) -> CheckResult:
    """One GPU of a ``gpufabric-power-hold/1`` result against the profile's ``spec``:

    - always forbidden: hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown in any sample (named, with
      the fraction of samples); ``forbid_throttle``: further reasons to forbid (e.g. ``["sw_thermal_slowdown"]``);
      sw_power_cap is normal under load: reported, not failed, unless listed there;
    - ``min_sm_clock_mhz``: the median SM clock over the samples at the power limit (>= 95 % of it); a GPU that
      never reached its limit is judged on the median over all samples, and the message says so;
    - ``max_temperature_c`` and ``min_tflops``: optional ceilings and floors.

    Not checked when NVML gave no samples (a CPU run, a machine without NVML) or a figure is not finite.
    Raises ValueError for a reason name that does not exist (a profile typo must not disable the check)."""
    who = _label(gpu_row)
    forbidden = _forbidden(spec)
    floor_clock = spec.get("min_sm_clock_mhz")
    expected = {"forbidden_reasons": forbidden, "min_sm_clock_mhz": floor_clock,
                "max_temperature_c": spec.get("max_temperature_c"), "min_tflops": spec.get("min_tflops")}
    samples = gpu_row.get("samples") or []
    read = [s for s in samples if s.get("power_w") is not None or s.get("reasons") is not None]
    if not read:
        unread = gpu_row.get("unread") or {}
        why = (f"NVML answered {', '.join(f'{k}: {v}' for k, v in sorted(unread.items()))}" if unread
               else "the run read no NVML (a CPU run or a machine without the driver)")
        return unknown(POWER_HOLD.name, who, expected, f"{who}: no power or clock-event sample under load "
                       f"({len(samples)} samples, none read; {why}) [{source}]: power and thermal cannot be judged")
    limit = gpu_row.get("power_limit_w")
    figures = power_figures(samples, limit)
    found = {**figures, "power_limit_w": limit, "max_sm_clock_mhz": gpu_row.get("max_sm_clock_mhz"),
             "tflops": gpu_row.get("tflops"), "thresholds_c": gpu_row.get("thresholds_c")}
    bad = non_finite(found)
    if bad:
        return unknown(POWER_HOLD.name, who, expected, f"{who}: not a finite number ({'; '.join(bad)}) [{source}]: "
                       "power and thermal cannot be judged")

    reasons = figures["reasons_seen"]
    n = figures["samples_with_reasons"]
    at_limit_clock = figures["sm_clock_mhz_median_at_limit"]
    shown_clock = at_limit_clock if at_limit_clock is not None else figures["sm_clock_mhz_median"]
    thresholds = gpu_row.get("thresholds_c") or {}
    summary = (f"{who} {gpu_row.get('name') or ''}: {found['tflops'] or 0:.0f} TFLOP/s; power median "
               f"{_fmt(figures['power_w_median'], 'W')} (max {_fmt(figures['power_w_max'], 'W')}) of a "
               f"{_fmt(limit, 'W')} limit"
               + (f", at the limit in {figures['at_limit_fraction']:.0%} of {len(samples)} samples"
                  if figures["at_limit_fraction"] is not None else "")
               + f"; SM clock median {_fmt(shown_clock, 'MHz')}"
               + (" at the limit" if at_limit_clock is not None else "")
               + f" (max {_fmt(gpu_row.get('max_sm_clock_mhz'), 'MHz')}); hottest "
               + _fmt(figures["temperature_c_max"], "C")
               + (f" (slowdown at {thresholds['slowdown']} C)" if thresholds.get("slowdown") is not None else "")
               + (f", at least {figures['margin_c_min']} C below its temperature limit (T.Limit margin)"
                  if figures["margin_c_min"] is not None else "")
               + "; clock events: " + (", ".join(f"{r} {f:.0%}" for r, f in reasons.items()) or "none"))

    problems = [f"{reason} in {reasons[reason]:.0%} of {n} samples ({REASON_MEANING[reason]})"
                for reason in forbidden if reasons.get(reason)]
    if floor_clock is not None:
        if at_limit_clock is not None:
            if at_limit_clock < floor_clock:
                problems.append(f"SM clock median {at_limit_clock:.0f} MHz at the power limit, below the "
                                f"{floor_clock:g} MHz promised (a GPU that needs more power for the same clock: a "
                                "hot or leaky chip, or a lower power limit than the profile assumes)")
        elif figures["sm_clock_mhz_median"] is None:
            return unknown(POWER_HOLD.name, who, expected, f"{summary} [{source}]: no SM clock was read, the "
                           f"{floor_clock:g} MHz floor cannot be judged")
        elif figures["sm_clock_mhz_median"] < floor_clock:
            # below its power limit nothing should hold the clock back: a low clock there is the hardware's doing
            where = "its power limit not read" if not limit else "never at its power limit"
            problems.append(f"{where}, SM clock median {figures['sm_clock_mhz_median']:.0f} MHz over all samples, "
                            f"below the {floor_clock:g} MHz promised")
    ceiling = spec.get("max_temperature_c")
    if ceiling is not None and figures["temperature_c_max"] is not None and figures["temperature_c_max"] > ceiling:
        problems.append(f"reached {figures['temperature_c_max']} C, above the {ceiling} C allowed (cooling)")
    floor_tflops = spec.get("min_tflops")
    if floor_tflops is not None and (found["tflops"] is None or found["tflops"] < floor_tflops):
        problems.append(f"{found['tflops'] or 0:.0f} TFLOP/s under sustained load, below the {floor_tflops:g} "
                        "promised")
    if problems:
        return failed(POWER_HOLD.name, who, expected, found, f"{summary} [{source}]: " + "; ".join(problems) + ".",
                      details=problems)
    return passed(POWER_HOLD.name, who, expected, found, f"{summary} [{source}]")
