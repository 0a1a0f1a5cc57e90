"""The PCIe link under load, one promise per GPU where the profile has a ``pcie_load`` section: the link's
generation and width read during host<->device copies, the copies' rates and the replay counter's rise
(checks/pcie_load.py), run by workloads/pcie_load.py and recorded as pcie-load.json (its descriptor:
diagnostics/pcie_load.py)."""

from __future__ import annotations

from ...checks.pcie_load import check_pcie_under_load, measured_pcie, pcie_coverage, pcie_limits
from ...diagnostics.pcie_load import PCIE_LOAD
from ...remedy_classes import RERUN, RESEAT, Remedy
from ...remedy_rules import Context, _lead
from ...report.phrases import GE, LE, format_value, limit_rate, rate
from ...units import is_number
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


PCIE_UNDER_LOAD = diagnostic_kind(
    Measurement(PCIE_LOAD, launch_pcie_load, _judge, coverage=pcie_coverage, measure=measured_pcie),
    remedy=_remedy, phrase=_phrase, limits=pcie_limits, equivalents=(("dcgm", "pcie"),))

KINDS = (PCIE_UNDER_LOAD,)
