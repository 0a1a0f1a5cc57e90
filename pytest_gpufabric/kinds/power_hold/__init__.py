"""The power hold, one promise per GPU where the profile has a ``power`` section: the GPU held at its power limit
under load keeps its SM clock, its temperature and no forbidden clock event (checks/power.py), run by
workloads/power_hold.py and recorded as power-hold.json (its descriptor: diagnostics/power_hold.py)."""

from __future__ import annotations

from ...checks.power import REASON_MEANING, check_power_hold, measured_power, power_coverage, power_limits
from ...diagnostics.power_hold import POWER_HOLD
from ...remedy_classes import RERUN, RESEAT, RESET, SOFTWARE, THROTTLE_REMEDY, Remedy
from ...remedy_rules import Context, _lead
from ...report.phrases import GE, LE, format_value
from ...units import is_number
from ...workloads.power_pcie import launch_power_hold
from ..base import Measurement, diagnostic_kind

POSITION = 63
OWN_MODULES = ("kinds/power_hold/__init__.py", "diagnostics/power_hold.py", "checks/power.py",
               "workloads/power_pcie.py", "workloads/power_hold.py", "workloads/power_figures.py")


def _phrase(check: dict) -> tuple[str, str]:
    """'SM clock ≥ 1755 MHz at the power limit; ≤ 87 °C', '1980 MHz; 699 W of 700 W; 71 °C at most; ...'."""
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = []
    if is_number(expected.get("min_sm_clock_mhz")):
        want.append(f"SM clock {GE} {expected['min_sm_clock_mhz']} MHz at the power limit")
    if is_number(expected.get("max_temperature_c")):
        want.append(f"{LE} {expected['max_temperature_c']} °C")
    if is_number(expected.get("min_tflops")):
        want.append(f"{GE} {expected['min_tflops']} TFLOP/s")
    if expected.get("forbidden_reasons"):
        want.append("no " + ", ".join(expected["forbidden_reasons"]))
    got = []
    clock = found.get("sm_clock_mhz_median_at_limit", found.get("sm_clock_mhz_median"))
    if is_number(clock):
        got.append(f"{clock:.0f} MHz")
    if is_number(found.get("power_w_median")):
        limit = found.get("power_limit_w")
        got.append(f"{found['power_w_median']:.0f} W" + (f" of {limit:.0f} W" if is_number(limit) else ""))
    if is_number(found.get("temperature_c_max")):
        got.append(f"{found['temperature_c_max']} °C at most")
    if is_number(found.get("tflops")):
        got.append(f"{found['tflops']:.0f} TFLOP/s")
    reasons = found.get("reasons_seen")
    if isinstance(reasons, dict):
        got.append(", ".join(reasons) or "no clock event")
    return "; ".join(want) or format_value(expected), "; ".join(got) or format_value(found)


def _remedy(check: dict, ctx: Context) -> list[Remedy]:
    """By the clock-event reasons (THROTTLE_REMEDY), the heat and the clock at the power limit."""
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found") or {}
    reasons = found.get("reasons_seen") or {}
    out = [(THROTTLE_REMEDY.get(r, RESEAT), f"{who}: {r} in {reasons[r]:.0%} of the samples under load "
            f"({REASON_MEANING.get(r, r)})") for r in expected.get("forbidden_reasons") or []
           if is_number(reasons.get(r)) and reasons[r] > 0]
    hottest, ceiling = found.get("temperature_c_max"), expected.get("max_temperature_c")
    if is_number(hottest) and is_number(ceiling) and hottest > ceiling:
        out.append((RESEAT, f"{who}: reached {hottest} C under load, above the {ceiling} C allowed: its cooling "
                            "(airflow, fans, a seated heat sink)"))
    floor = expected.get("min_sm_clock_mhz")
    at_limit, median = found.get("sm_clock_mhz_median_at_limit"), found.get("sm_clock_mhz_median")
    if is_number(floor) and is_number(at_limit) and at_limit < floor:
        out.append((SOFTWARE, f"{who}: SM clock {at_limit:.0f} MHz at its {found.get('power_limit_w')} W power limit, "
                              f"below the {floor:g} MHz promised: a power limit set lower than the profile assumes"))
    elif is_number(floor) and at_limit is None and is_number(median) and median < floor:
        out.append((RESET, f"{who}: SM clock {median:.0f} MHz without reaching its power limit, below the {floor:g} "
                           "MHz promised: the board holds its clocks itself; reset it, and return it if it stays"))
    if not out:
        out.append((RERUN, f"{_lead(check)}: slower under sustained load with no clock event or heat to explain it: "
                           "measure it once more"))
    return out


def _judge(row: dict, section: dict, source: str, gpu) -> object:
    return check_power_hold(row, section, source)


POWER_HOLD_KIND = diagnostic_kind(
    Measurement(POWER_HOLD, launch_power_hold, _judge, coverage=power_coverage, measure=measured_power),
    remedy=_remedy, phrase=_phrase, limits=power_limits,
    equivalents=(("dcgm", "targeted_power"), ("dcgm", "targeted_stress"), ("dcgm", "pulse_test")))

KINDS = (POWER_HOLD_KIND,)
