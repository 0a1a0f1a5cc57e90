"""Device-memory (HBM) bandwidth, one promise per GPU where the profile has a ``memory_bandwidth`` section: the
best of copy, read and write against the profile's floor and NVML's peak (checks/hbm.py), measured by
workloads/hbm.py and recorded as hbm.json (its descriptor: diagnostics/hbm.py)."""

from __future__ import annotations

from ...checks.hbm import check_hbm_bandwidth, hbm_coverage, hbm_limits, measured_hbm
from ...diagnostics.hbm import HBM
from ...reference import hbm_fraction_floor
from ...remedy_classes import RESET
from ...remedy_rules import _fixed
from ...report.phrases import GE, format_value, limit_rate, rate
from ...units import is_number, parse_gbps
from ...workloads.diagnostics import launch_hbm
from ..base import Measurement, diagnostic_kind

POSITION = 61
OWN_MODULES = ("kinds/hbm/__init__.py", "diagnostics/hbm.py", "checks/hbm.py", "workloads/diagnostics.py",
               "workloads/hbm.py")


def _phrase(check: dict) -> tuple[str, str]:
    """'≥ 2,800 GB/s HBM bandwidth (88% of the 3,352 GB/s peak)', '3,010 GB/s (write, 89.8% of peak)'."""
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = []
    if expected.get("min"):
        want.append(f"{GE} {limit_rate(parse_gbps(expected['min']))} HBM bandwidth")
    if is_number(expected.get("min_fraction_of_peak")):
        peak = found.get("peak_gbps")
        of = f" of the {rate(peak)} peak" if is_number(peak) else " of the peak"
        want.append(f"({expected['min_fraction_of_peak']:.0%}{of})")
    best = found.get("best_gbps")
    if not is_number(best):
        return " ".join(want) or format_value(expected), format_value(found)
    kind = next((k.removesuffix("_gbps") for k in ("copy_gbps", "read_gbps", "write_gbps")
                 if found.get(k) == best), "best")
    share = f", {found['fraction_of_peak']:.1%} of peak" if is_number(found.get("fraction_of_peak")) else ""
    return " ".join(want) or format_value(expected), f"{rate(best)} ({kind}{share})"


def _judge(row: dict, section: dict, source: str, gpu) -> object:
    """The GPU's best rate against the section's floors, and the model's share of peak where it states none."""
    floor = {key: section[key] for key in ("min", "min_fraction_of_peak") if key in section}
    return check_hbm_bandwidth(row, floor, hbm_fraction_floor(row.get("name")), source)


HBM_BANDWIDTH = diagnostic_kind(
    Measurement(HBM, launch_hbm, _judge, coverage=hbm_coverage, measure=measured_hbm),
    remedy=_fixed(RESET, "a memory clock held low or rows pending remapping clear on a reset; still low after it, the "
                         "HBM stack is degraded and the board goes back"),
    phrase=_phrase, limits=hbm_limits, equivalents=(("dcgm", "memory_bandwidth"),))

KINDS = (HBM_BANDWIDTH,)
