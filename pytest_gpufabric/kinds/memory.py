"""Memory behaviour at the profile's budget (its ``memory:`` section): the estimate predicts fit or out-of-memory and
the peak, an oversized batch fails cleanly and the device recovers, large-model support completes it at a known
cost and changes no result (checks/memory.py judges memory.json, the suite test_memory.py asks for it)."""

from __future__ import annotations

from ..checks.memory import estimate_limits, lms_limits
from ..remedy_classes import RERUN, SOFTWARE, Remedy
from ..remedy_rules import Context, _lead
from ..report.phrases import LE, format_value, settings_phrase
from ..units import is_number
from .base import CheckRule, Kind, once
from .suite_measurement import SuiteMeasurement, promised_by_section, record_live, record_replay

__all__ = ["KINDS", "LARGE_MODEL_SUPPORT", "MEMORY_ESTIMATE", "OFFLOAD_CHANGES_NO_RESULT", "OVERSIZED_BATCH",
           "MEASUREMENTS", "MEMORY_BEHAVIOUR", "SECTION", "lms_ids", "oom_phrase", "stack_remedy"]

POSITION = 50
SUITE = "test_memory.py"
#: the profile section that makes these promises (and the burn-in's memory workload)
SECTION = "memory"
OWN_MODULES = ("checks/memory.py", "suites/test_memory.py", "workloads/memory.py", "workloads/memory_step.py",
               "workloads/lms.py")


# --- the ids ----------------------------------------------------------------------------------------------------


def _has_section(profile) -> bool:
    return SECTION in profile.data


def lms_ids(specs: list[dict]) -> list[str]:
    """One id per ``memory.lms`` entry: its threshold (no spaces) and usage fraction, '64MiB-0.5'."""
    return [f"{s['threshold'].replace(' ', '')}-{s.get('usage_fraction', 0):g}" for s in specs]


def _lms(profile) -> list[str]:
    return lms_ids(profile.data.get(SECTION, {}).get("lms", []))


def _offload_promised(profile) -> bool:
    section = profile.data.get(SECTION, {})
    return bool(section.get("lms")) and section.get("mode", "train") == "train"


# --- the remedy -------------------------------------------------------------------------------------------------


def stack_remedy(check: dict, ctx: Context) -> Remedy:
    """The memory behaviour is the software stack's; a completed offload that was only slow is run again."""
    found = check.get("found")
    if check.get("name") == "memory-lms" and isinstance(found, dict) and found.get("outcome") == "completed":
        return RERUN, (f"{_lead(check)}: the offload completed, slower than allowed: the ratio moves from run to run "
                       "(docs/margins.md); measure it once more")
    return SOFTWARE, f"{_lead(check)}: the memory behaviour is the CUDA, PyTorch and driver stack's: the image"


# --- the phrases ------------------------------------------------------------------------------------------------


def _estimate_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found") or {}
    want = (f"the estimate within {expected:.0%} of the measured peak" if is_number(expected)
            else format_value(expected))
    rows = [r for r in found.get("rows") or [] if isinstance(r, dict)] if isinstance(found, dict) else []
    errors = [abs(r["error"]) for r in rows if is_number(r.get("error"))]
    if not errors:
        return want, format_value(found)
    return want, f"{max(errors):.1%} off at worst, over {len(errors)} measured batch(es)"


def oom_phrase(check: dict) -> tuple[str, str]:
    """The oversized batch: a clean out-of-memory error, and whether memory came back."""
    found = check.get("found") or {}
    if isinstance(found, dict) and "oversized" in found:
        found = found["oversized"] or {}
    want = "a clean out-of-memory error, memory given back" if check.get("expected") == "oom" else \
        format_value(check.get("expected"))
    if not isinstance(found, dict):
        return want, format_value(found)
    outcome = {"oom": "out-of-memory error", None: "no outcome recorded"}.get(found.get("outcome"),
                                                                              str(found.get("outcome")))
    if found.get("recovered") is None:
        return want, outcome  # whether memory came back was not read: nothing is said of it
    recovered = "memory given back" if found["recovered"] else "memory NOT given back"
    return want, f"{outcome}, {recovered}"


def _lms_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = "completes"
    if is_number(expected.get("max_slowdown")):
        want += f", {LE} {expected['max_slowdown']:g}x the time without offload"
    got = format_value(found.get("outcome")) if isinstance(found, dict) else format_value(found)
    if isinstance(found, dict) and is_number(found.get("ratio_vs_baseline")):
        got += f", {found['ratio_vs_baseline']:.2f}x the time"
    return want, got


def _lms_equality_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = "the same loss" + (f", gradients within {expected['grad_rtol']:g}" if "grad_rtol" in expected else "")
    if not isinstance(found, dict):
        return want, format_value(found)
    same = "the same loss" if found.get("loss_equal") else "a different loss"
    diff = found.get("max_grad_abs_diff")
    return want, same + (f", gradients {diff:g} apart at most" if is_number(diff) else "")


# --- the kinds --------------------------------------------------------------------------------------------------

MEMORY_ESTIMATE = Kind("memory-estimate", "memory behaviour", SUITE, once(_has_section), sections=(SECTION,),
                       checks=(CheckRule("memory-estimate", stack_remedy, _estimate_phrase, estimate_limits),))
OVERSIZED_BATCH = Kind("oversized-batch", "memory behaviour", SUITE, once(_has_section), sections=(SECTION,),
                       checks=(CheckRule("memory-oom", stack_remedy, oom_phrase),))
LARGE_MODEL_SUPPORT = Kind("large-model-support", "large-model support", SUITE, _lms, sections=(SECTION,),
                           checks=(CheckRule("memory-lms", stack_remedy, _lms_phrase, lms_limits),))
OFFLOAD_CHANGES_NO_RESULT = Kind("offload-changes-no-result", "offload in training", SUITE, once(_offload_promised),
                                 sections=(SECTION,),
                                 checks=(CheckRule("memory-lms-equality", stack_remedy, _lms_equality_phrase),))

KINDS = (MEMORY_ESTIMATE, OVERSIZED_BATCH, LARGE_MODEL_SUPPORT, OFFLOAD_CHANGES_NO_RESULT)

#: any other check named memory-... is the stack's as well
CHECKS = (CheckRule("memory-", stack_remedy, settings_phrase),)  # any other memory check: its values, as they read


# --- the measurement ----------------------------------------------------------------------------------------------


def _live(fabric_session) -> dict:
    from ..workloads.environment import gpu_environment
    from ..workloads.memory import measure_memory

    return measure_memory(fabric_session.profile.memory, gpu_environment(fabric_session.boards()))


MEMORY_BEHAVIOUR = SuiteMeasurement(
    name="memory", fixture="memory_behaviour",
    doc="The memory suite's measurement on GPU 0 (live), or the bundle's memory.json.",
    why_not_promised=promised_by_section(SECTION, "memory behaviour"),
    live=record_live("memory.json", _live), replay=record_replay("memory.json"),
    nothing_recorded="the bundle holds no memory measurements (memory.json)", record_file="memory.json",
    check="checks/memory.py", suite="suites/test_memory.py",
    # workloads/memory.py's SPARE_IMPORTS (the model needs torchvision), written out: this module loads with the
    # plugin, and importing the workload package for one tuple would add to every pytest run's start-up
    spare_imports=("torch", "torchvision"))

MEASUREMENTS = (MEMORY_BEHAVIOUR,)
