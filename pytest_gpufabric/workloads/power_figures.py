"""The figures a power-hold verdict rests on, from its samples: one definition for the script that takes them
(power_hold.py writes them as each GPU's ``summary``) and the check that judges them (checks/power.py derives them
again from the samples, never trusting a recorded summary). Standard library only: power_hold.py imports it as a
sibling, the check without torch.
"""

from __future__ import annotations

import statistics

__all__ = ["AT_LIMIT", "power_figures"]

#: a sample counts as "at the power limit" from this fraction of it: the power controller holds the draw a few
#: watts under the limit, and the one-second average NVML gives swings around it
AT_LIMIT = 0.95


def _median(values: list) -> float | None:
    return statistics.median(values) if values else None


def power_figures(samples: list[dict], power_limit_w: float | None) -> dict:
    """Medians over the samples that read each value; fractions of clock event reasons over the samples whose
    reasons were read (``samples_with_reasons``); ``at_limit_fraction`` over the samples whose power was read (None
    without a limit or a power read)."""
    powers = [s["power_w"] for s in samples if s.get("power_w") is not None]
    clocks = [s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz") is not None]
    temperatures = [s["temperature_c"] for s in samples if s.get("temperature_c") is not None]
    margins = [s["margin_c"] for s in samples if s.get("margin_c") is not None]
    with_reasons = [s["reasons"] for s in samples if s.get("reasons") is not None]
    at_limit = ([s for s in samples if s.get("power_w") is not None and s["power_w"] >= AT_LIMIT * power_limit_w]
                if power_limit_w else [])
    seen: dict[str, int] = {}
    for reasons in with_reasons:
        for reason in reasons:
            seen[reason] = seen.get(reason, 0) + 1
    return {"samples": len(samples), "samples_with_reasons": len(with_reasons),
            "power_w_median": _median(powers), "power_w_max": max(powers) if powers else None,
            "sm_clock_mhz_median": _median(clocks),
            "sm_clock_mhz_median_at_limit": _median([s["sm_clock_mhz"] for s in at_limit
                                                     if s.get("sm_clock_mhz") is not None]),
            "temperature_c_max": max(temperatures) if temperatures else None,
            "margin_c_min": min(margins) if margins else None,
            "reasons_seen": {reason: count / len(with_reasons) for reason, count in sorted(seen.items())},
            "at_limit_fraction": len(at_limit) / len(powers) if powers and power_limit_w else None}
