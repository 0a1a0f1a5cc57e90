"""The PCIe link under load, one promise per GPU where the profile has a ``pcie_load`` section: the link's
generation and width read during host<->device copies, the copies' rates and the replay counter's rise
(checks/pcie_load.py), run by workloads/pcie_load.py and recorded as pcie-load.json (its descriptor:
diagnostics/pcie_load.py)."""

from __future__ import annotations

from ...checks.pcie_load import check_pcie_under_load, measured_pcie, pcie_coverage, pcie_limits
from ...diagnostics.memory_pattern import MEMORY_PATTERN
from ...diagnostics.pcie_load import PCIE_LOAD
from ...remedy_classes import RERUN, RESEAT, Remedy
from ...remedy_rules import Context, _lead
from ...report.phrases import GE, LE, format_value, limit_rate, rate
from ...units import format_bytes, is_number, parse_bytes
from ...workloads.power_pcie import launch_pcie_load
from ..base import Measurement, diagnostic_kind

POSITION = 64
OWN_MODULES = ("kinds/pcie_load/__init__.py", "diagnostics/pcie_load.py", "checks/pcie_load.py",
               "workloads/power_pcie.py", "workloads/pcie_load.py")


def _phrase(check: dict) -> tuple[str, str]:
    """'PCIe gen 5 x16 held under load, no replays added', 'gen 5 x16 at worst in 20 reads; 53 / 55 GB/s ...'."""
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = f"PCIe gen {expected.get('gen')} x{expected.get('width')} held under load"
    if is_number(expected.get("max_replay_rise")):
        rise = expected["max_replay_rise"]
        want += ", no replays added" if rise == 0 else f", {LE} {rise} replays added"
    if is_number(expected.get("min_gbps")):
        want += f", {GE} {limit_rate(expected['min_gbps'])} each way"
    got = []
    if found.get("gen_min") is not None:
        got.append(f"gen {found.get('gen_min')} x{found.get('width_min')} at worst in {found.get('reads')} reads")
    speeds = [rate(found[k]) for k in ("h2d_gbps", "d2h_gbps") if is_number(found.get(k))]
    if speeds:
        got.append(" / ".join(speeds) + " (to / from the GPU)")
    if found.get("replay_rise") is not None:
        got.append(f"{found['replay_rise']} replays added")
    return want, "; ".join(got) or format_value(found)


def _remedy(check: dict, ctx: Context) -> list[Remedy]:
    """Narrower, slower or replaying under load: RESEAT; else measure once more."""
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found") or {}
    out = []
    for part, unit in (("width", "x"), ("gen", "gen ")):
        low, want = found.get(f"{part}_min"), expected.get(part)
        if is_number(low) and is_number(want) and low < want:
            out.append((RESEAT, f"{who}: the link ran at {unit}{low} under load, below {unit}{want}: a card, riser, "
                                "cable or retimer that does not hold the link"))
    rise, allowed = found.get("replay_rise"), expected.get("max_replay_rise", 0)
    if is_number(rise) and is_number(allowed) and rise > allowed:
        out.append((RESEAT, f"{who}: the PCIe replay counter rose by {rise} during the copies: the link's signal is "
                            "marginal (riser, slot, retimer)"))
    if not out:
        out.append((RERUN, f"{_lead(check)}: copies below the floor on a link at full width and speed: measure once "
                           "more"))
    return out


def _judge(row: dict, section: dict, source: str, gpu) -> object:
    return check_pcie_under_load(row, section, source)


#: what the copies need on each GPU beside the memory pattern's allocation: a CUDA context and slack
_CONTEXT_AND_SLACK = 2 * 2**30


def _beside_refused(section: dict, pattern_section: dict, fabric) -> str | None:
    """The copies run alongside the memory pattern test: it judges wrong bits, they the link's generation, width
    and replays, neither a rate. Not where a copy-rate floor (``min``) is promised, nor where the pattern leaves a
    GPU too little memory for the copies' buffer."""
    if section.get("min") is not None:
        return "a copy-rate floor is judged on copies that run alone"
    need = parse_bytes(PCIE_LOAD.settings(section)["size"]) + _CONTEXT_AND_SLACK
    totals = [gpu.memory_bytes for gpu in fabric.gpus] if fabric is not None else []
    if not totals or not all(isinstance(total, int) for total in totals):
        return "the GPUs' memory sizes are not known"
    for total in totals:  # the pattern takes a fraction of what is free, at most that fraction of the total
        left = (total - parse_bytes(pattern_section["bytes"]) if pattern_section.get("bytes") is not None
                else total * (1 - float(MEMORY_PATTERN.settings(pattern_section)["fraction"])))
        if left < need:
            return f"the memory pattern leaves {format_bytes(left)} of a GPU, the copies need {format_bytes(need)}"
    return None


PCIE_UNDER_LOAD = diagnostic_kind(
    Measurement(PCIE_LOAD, launch_pcie_load, _judge, coverage=pcie_coverage, measure=measured_pcie,
                runs_beside=MEMORY_PATTERN.measurement, beside_refused=_beside_refused),
    remedy=_remedy, phrase=_phrase, limits=pcie_limits, equivalents=(("dcgm", "pcie"),))

KINDS = (PCIE_UNDER_LOAD,)
