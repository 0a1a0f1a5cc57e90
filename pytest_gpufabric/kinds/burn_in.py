"""The burn-in the operator asks for (``--gpu-burn-in``, judged by the profile's ``burn_in:`` section): each GPU's
GEMM burn cross-checked, the all_reduce between the chunks and the memory workload once (checks/burn_in.py judges
the log, the suite test_burn_in.py asks for it)."""

from __future__ import annotations

from ..checks.burn_in import collectives_limits, gpu_limits
from ..checks.limits import Limit
from ..remedy_classes import RERUN, RMA, SOFTWARE, Remedy
from ..remedy_rules import Context, _counters, _gpu_index, _heat
from ..report.phrases import GE, format_value, limit_rate, rate
from ..units import is_number
from .bandwidth import bandwidth_remedy
from .base import BURN_IN, CheckRule, Kind, gpus, once
from .memory import SECTION as MEMORY_SECTION
from .memory import oom_phrase, stack_remedy
from .suite_measurement import SuiteMeasurement

__all__ = ["BURN_IN_COLLECTIVES", "BURN_IN_GPU", "BURN_IN_LOG", "BURN_IN_MEMORY", "KINDS", "MEASUREMENTS",
           "SECTION"]

POSITION = 90
SUITE = "test_burn_in.py"
#: the profile section that says how a burn-in is judged (a profile without it promises none)
SECTION = "burn_in"
OWN_MODULES = ("checks/burn_in.py", "suites/test_burn_in.py", "workloads/burn_in.py", "workloads/gemm_burn.py")


# --- the remedies -----------------------------------------------------------------------------------------------


def _gpu_remedy(check: dict, ctx: Context) -> list[Remedy]:
    """Wrong results: RMA; counters (COUNTER_REMEDY), heat, clock events; slow without a cause: RERUN."""
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found")
    if not isinstance(found, dict):
        return [(SOFTWARE, f"{who}: took no part in the burn-in: the workload did not see the GPU (CUDA_VISIBLE_"
                           "DEVICES; a GPU off the bus shows in the GPU count)")]
    wrong = sum(found[k] for k in ("errors_self", "errors_cross") if is_number(found.get(k)))
    out = []
    if wrong:
        out.append((RMA, f"{who}: {wrong} wrong element(s) in {found.get('checks')} cross-checks of its GEMM results: "
                         "the board computes wrong results"))
    forbidden = set(expected.get("forbidden_counters") or ctx.forbidden)
    out += _counters(found.get("counters_rose") or {}, forbidden, who, ctx.xid_codes.get(_gpu_index(who)))
    out += _heat(found.get("max_temperature_c"), found.get("clock_events") or [], who, ctx)
    floor, tflops = expected.get("min_tflops"), found.get("tflops")
    if is_number(floor) and is_number(tflops) and tflops < floor and not out:
        if "sw_power_cap" in (found.get("clock_events") or []):
            out.append((SOFTWARE, f"{who}: {tflops:.0f} TFLOP/s, below the {floor:g} promised, held at its power cap: "
                                  "a power limit set lower than the profile assumes"))
        else:
            out.append((RERUN, f"{who}: {tflops:.0f} TFLOP/s, below the {floor:g} promised, with no clock event or "
                               "heat to explain it: burn it in once more"))
    if not out:
        out.append((RERUN, f"{who}: its figures hold no fault (the GEMM workload stopped?): burn it in once more"))
    return out


def _readable_limits(check: dict) -> list[Limit]:
    """The collectives' limits, [] for a record of a shape the reader cannot read (a hand-edited file)."""
    try:
        return collectives_limits(check)
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _collectives_remedy(check: dict, ctx: Context) -> Remedy:
    """As a collective's bandwidth (kinds/bandwidth.py), its shortfall read from this check's own limits."""
    return bandwidth_remedy(check, ctx, _readable_limits(check))


# --- the phrases ------------------------------------------------------------------------------------------------


def _gpu_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = [f"{expected.get('wrong_elements', 0)} wrong elements"]
    if is_number(expected.get("min_tflops")):
        want.append(f"{GE} {expected['min_tflops']} TFLOP/s")
    if expected.get("forbidden_counters"):
        want.append(f"none of {len(expected['forbidden_counters'])} error counters rising")
    if not isinstance(found, dict):
        return ", ".join(want), format_value(found)
    got = []
    if is_number(found.get("tflops")):
        got.append(f"{found['tflops']:.0f} TFLOP/s")
    wrong = sum(found.get(k) or 0 for k in ("errors_self", "errors_cross") if is_number(found.get(k)))
    if is_number(found.get("checks")):
        got.append(f"{wrong:,} wrong in {found['checks']:,} checks")
    if is_number(found.get("max_temperature_c")):
        got.append(f"{found['max_temperature_c']} °C at most")
    return ", ".join(want), "; ".join(got) or format_value(found)


def _collectives_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found") or {}
    op = str(check.get("subject") or "collective")
    want = f"{GE} {limit_rate(expected)} {op} busbw in every run" if is_number(expected) else format_value(expected)
    if not isinstance(found, dict) or not is_number(found.get("busbw_min")):
        return want, format_value(found)
    return want, (f"{rate(found['busbw_min'])} at worst in {found.get('runs')} run(s), "
                  f"{found.get('wrong', 0):,} wrong elements")


# --- the kinds --------------------------------------------------------------------------------------------------

BURN_IN_GPU = Kind("burn-in-gpu", "burn-in of this GPU", SUITE, gpus, asked=BURN_IN, sections=(SECTION,),
                   checks=(CheckRule("burn-in-gpu", _gpu_remedy, _gpu_phrase, gpu_limits),))
BURN_IN_COLLECTIVES = Kind(
    "burn-in-collectives", "all_reduce bandwidth to keep up during the burn-in", SUITE,
    once(lambda p: p.all_reduce_busbw_floors() and p.gpu_count >= 2), asked=BURN_IN, sections=(SECTION,),
    checks=(CheckRule("burn-in-collectives", _collectives_remedy, _collectives_phrase, collectives_limits),))
BURN_IN_MEMORY = Kind("burn-in-memory", "memory behaviour", SUITE, once(lambda p: MEMORY_SECTION in p.data),
                      asked=BURN_IN, sections=(SECTION, MEMORY_SECTION),
                      checks=(CheckRule("burn-in-memory", stack_remedy, oom_phrase),))

KINDS = (BURN_IN_GPU, BURN_IN_COLLECTIVES, BURN_IN_MEMORY)


# --- the measurement ----------------------------------------------------------------------------------------------


def _replay(directory, fabric_session):
    from ..formats.records import read_burn_in_log
    from ..workloads.burn_in import LOG_FILE, BurnIn

    if not (directory / LOG_FILE).is_file():
        return None  # a burn-in asked of a bundle that holds none: not checked
    log = read_burn_in_log(directory / LOG_FILE)
    start = log.records[0] if log.records and log.records[0].get("type") == "start" else {}
    planned = start.get("duration_s")
    known = isinstance(planned, (int, float)) and not isinstance(planned, bool) and 0 < planned < float("inf")
    # the log as far as it could be read, with what stops it being judged (checks/burn_in.py says it); the results
    # carry it only where its plan is known (a duration above 0)
    burn_in = BurnIn(planned if known else 0.0, log.records, problems=log.problems)
    fabric_session.record_burn_in(burn_in if known else None)
    return burn_in


BURN_IN_LOG = SuiteMeasurement(
    name="burn_in", fixture="burn_in",
    doc="The burn-in of --gpu-burn-in (live), or the bundle's gpufabric-burnin.jsonl (replay).",
    why_not_promised=lambda profile: None,  # the operator asks for it (FabricSession.has_burn_in)
    live=lambda fabric_session: fabric_session.run_burn_in(), replay=_replay,
    nothing_recorded="the bundle holds no burn-in log (gpufabric-burnin.jsonl)", asked="has_burn_in",
    check="checks/burn_in.py", suite="suites/test_burn_in.py")

MEASUREMENTS = (BURN_IN_LOG,)
