"""The memory pattern test, one promise per GPU where the profile has a ``memory_pattern`` section: no word read
back other than written over the promised share of memory (checks/hbm.py), run by workloads/mem_pattern.py and
recorded as memory-pattern.json (its descriptor: diagnostics/memory_pattern.py)."""

from __future__ import annotations

from ...checks.hbm import check_mem_pattern, measured_pattern, pattern_limits
from ...diagnostics.memory_pattern import MEMORY_PATTERN
from ...remedy_classes import RERUN, RESET, RMA, Remedy
from ...remedy_rules import Context, _first, _lead
from ...report.phrases import GE, format_value
from ...units import is_number
from ...workloads.diagnostics import launch_mem_pattern
from ..base import Measurement, diagnostic_kind

POSITION = 62
OWN_MODULES = ("kinds/memory_pattern/__init__.py", "diagnostics/memory_pattern.py", "checks/hbm.py",
               "workloads/diagnostics.py", "workloads/mem_pattern.py")


def _phrase(check: dict) -> tuple[str, str]:
    """'0 mismatches over ≥ 90% of memory', '0 mismatches, 93.1% of memory'."""
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = f"{expected.get('mismatches', 0)} mismatches"
    if is_number(expected.get("min_coverage")):
        want += f" over {GE} {expected['min_coverage']:.0%} of memory"
    if not isinstance(found, dict) or found.get("mismatches") is None:
        return want, format_value(found)
    got = f"{found['mismatches']:,} mismatches"
    if is_number(found.get("coverage")):
        got += f", {found['coverage']:.1%} of memory"
    if is_number(found.get("passes")):
        got += f" in {found['passes']} passes"
    return want, got


def _remedy(check: dict, ctx: Context) -> Remedy:
    """A word read back wrong: RMA; a device error: RESET; too little tested: RERUN."""
    who, found = check.get("subject"), check.get("found") or {}
    planted = " (planted by --plant-fault: it proves the check, not the board)" if found.get("planted") else ""
    if is_number(found.get("mismatches")) and found["mismatches"] > 0:
        return RMA, f"{who}: {found['mismatches']} word(s) read back other than written: failing device memory{planted}"
    if found.get("error"):
        return RESET, (f"{who}: the memory test stopped with a device error ({_first(found['error'], 120)}): reset it "
                       f"and test again; a board that fails again goes back{planted}")
    return RERUN, f"{_lead(check)}: too little memory was free to test (another process held it): test it again"


def _judge(row: dict, section: dict, source: str, gpu) -> object:
    """No mismatch over the section's share of the GPU's memory (its size checks the row's own figures)."""
    return check_mem_pattern(row, section.get("min_coverage"), source, promised=section,
                             gpu_memory_bytes=gpu.memory_bytes if gpu is not None else None)


MEMORY_PATTERN_KIND = diagnostic_kind(
    Measurement(MEMORY_PATTERN, launch_mem_pattern, _judge, measure=measured_pattern),
    remedy=_remedy, phrase=_phrase, limits=pattern_limits, equivalents=(("dcgm", "memory"),))

KINDS = (MEMORY_PATTERN_KIND,)
