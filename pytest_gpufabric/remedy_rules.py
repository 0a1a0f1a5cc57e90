"""How each check's evidence points to a remedy class (remedy_classes.py): the run around a check (``Context``), one
rule per check name (``RULES``) reading the check's expected and found figures, never its message, and the rules
of the health windows. remedy.py maps a check or a promise through them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from .checks.power import REASON_MEANING
from .checks.result import is_measurement
from .fabric.health import COUNTERS, DEFAULT_FORBIDDEN, DEFAULT_FORBIDDEN_THROTTLE
from .remedy_classes import (
    CLASSES,
    COUNTER_REMEDY,
    RESEAT,
    RESET,
    THROTTLE_REMEDY,
    XID_REMEDY,
    Remedy,
)
from .report.phrases import number, short
from .units import is_number as _number

# --- what the run knows beside one check ------------------------------------------------------------------------


@dataclass
class Context:
    """The run around a check: its other records, health, platform findings and profile. Built from a results
    document (``Context.of``); an empty one judges a check record on its own."""

    checks: dict[str, list[dict]] = field(default_factory=dict)  # test node id -> its check records
    tests: dict[str, str] = field(default_factory=dict)  # test node id -> pytest outcome
    health: dict = field(default_factory=dict)  # the watchdog's record (live runs)
    section: dict = field(default_factory=dict)  # the profile's health: section
    collection_errors: dict[str, str] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)  # promise id -> the suite file that judges it
    machine_error: str | None = None
    findings_of: Callable[[], Sequence[str]] = list  # checks/platform.bandwidth_findings of the run, when asked
    site_kinds: tuple = ()  # the kinds (kinds.base.Kind) a site's plugin added to this run: their checks' rules

    @classmethod
    def of(cls, document: dict, findings_of: Callable[[], Sequence[str]] = list, site_kinds: tuple = ()) -> Context:
        checks: dict[str, list[dict]] = {}
        for check in document.get("checks") or []:
            if is_measurement(check):  # a record without a measurement: the promise's reason says it
                checks.setdefault(str(check.get("test")), []).append(check)
        promised = (document.get("promised") or {}).get("promised") or []
        return cls(checks, dict(document.get("tests") or {}), document.get("health") or {},
                   ((document.get("profile") or {}).get("data") or {}).get("health") or {},
                   dict(document.get("collection_errors") or {}),
                   {p["id"]: p.get("suite", "") for p in promised if isinstance(p, dict) and "id" in p},
                   document.get("machine_error"), findings_of, tuple(site_kinds))

    @cached_property
    def findings(self) -> list[str]:
        return list(self.findings_of())

    @cached_property
    def forbidden(self) -> set[str]:  # the counters the profile forbids to rise
        return set(self.section.get("forbid", DEFAULT_FORBIDDEN))

    @cached_property
    def forbidden_throttle(self) -> set[str]:  # the clock-event reasons it forbids
        return set(self.section.get("forbid_throttle", DEFAULT_FORBIDDEN_THROTTLE))

    @cached_property
    def xid_codes(self) -> dict[int, list[int]]:
        """GPU index -> the XID codes the driver reported during the run."""
        codes: dict[int, list[int]] = {}
        for event in self.health.get("xid_events") or []:
            if isinstance(event, dict) and isinstance(event.get("gpu"), int) and isinstance(event.get("xid"), int):
                codes.setdefault(event["gpu"], []).append(event["xid"])
        return codes

    @cached_property
    def link_errors(self) -> dict[int, str]:
        """GPU index -> the NVLink replay or recovery count that rose on it during the run (a link retrained)."""
        rises: dict[int, str] = {}
        for window in (w for w in (self.health.get("tests") or {}).values() if isinstance(w, dict)):
            for index, record in ((i, r) for i, r in window.items() if str(i).isdigit() and isinstance(r, dict)):
                for name, delta in (record.get("rose") or {}).items():
                    if _base(name) in ("nvlink_replay", "nvlink_recovery"):
                        rises.setdefault(int(index), f"{_base(name)} rose by {delta}")
        return rises


# --- the rules, one per check name ------------------------------------------------------------------------------

Rule = Callable[[dict, Context], Remedy]


def _fixed(cls: str, because: str) -> Rule:
    """A rule whose class is the same whatever the figures: the check's own first sentence, then ``because``."""
    return lambda check, ctx: (cls, f"{_lead(check)}: {because}")


# --- health -----------------------------------------------------------------------------------------------------


def _counters(rose: dict, forbidden: set[str], who: str, xids: list[int] | None = None) -> list[Remedy]:
    """One remedy per forbidden counter that rose (links summed); an XID by its code where the driver gave it."""
    totals: dict[str, int] = {}
    for name, delta in rose.items():
        if _base(name) in forbidden and _number(delta):
            totals[_base(name)] = totals.get(_base(name), 0) + delta
    out = []
    for counter, total in sorted(totals.items()):
        cls = COUNTER_REMEDY.get(counter, RESET)
        if counter == "xid" and xids:
            cls = max((XID_REMEDY.get(code, RESET) for code in xids), key=CLASSES.index)
            out.append((cls, f"{who}: the driver reported XID {', '.join(map(str, sorted(set(xids))))}"))
            continue
        out.append((cls, f"{who}: {counter} rose by {total} ({COUNTERS.get(counter, counter)})"))
    return out


def _heat(hottest: object, seen: Sequence[str], who: str, ctx: Context) -> list[Remedy]:
    """The temperature above the profile's limit, and the clock-event reasons it forbids that were seen."""
    out = []
    limit = ctx.section.get("max_temperature_c")
    if _number(hottest) and _number(limit) and hottest > limit:
        out.append((RESEAT, f"{who}: reached {hottest} C, above the {limit} C allowed: its cooling (airflow, fans, a "
                            "seated heat sink)"))
    out += [(THROTTLE_REMEDY.get(r, RESEAT), f"{who}: clocks held back by {r} ({REASON_MEANING.get(r, r)})")
            for r in sorted(set(seen) & ctx.forbidden_throttle)]
    return out


def _window(window: dict, ctx: Context) -> list[Remedy]:
    """What a test's health window (fabric.health.window_record) shows that the profile forbids."""
    out = []
    for index, record in sorted((i, r) for i, r in window.items() if isinstance(r, dict)):
        who = f"GPU{index} (serial {record.get('serial') or 'unknown'})"
        gpu = int(index) if str(index).isdigit() else None
        out += _counters(record.get("rose") or {}, ctx.forbidden, who, ctx.xid_codes.get(gpu))
        out += _heat(record.get("peak_temperature_c", record.get("temperature_c")),
                     record.get("throttle_seen", record.get("throttle") or []), who, ctx)
    return out


def _watchdog(ctx: Context) -> list[Remedy]:
    """The forbidden counters the watchdog saw rise outside every test's window (its NVLink sweeps)."""
    return [remedy for rise in ctx.health.get("nvlink_rises") or [] if isinstance(rise, dict)
            for remedy in _counters({str(rise.get("counter")): rise.get("delta")}, ctx.forbidden,
                                    f"GPU{rise.get('gpu')} (serial {rise.get('serial') or 'unknown'})")]


# --- small helpers ----------------------------------------------------------------------------------------------


def _base(counter: str) -> str:
    return str(counter).split(":", 1)[0]


def _gpu_index(subject: object) -> int | None:
    """'GPU3 (serial 1654...)' -> 3: the label every per-GPU check's subject starts with."""
    match = re.match(r"GPU(\d+)\b", str(subject or ""))
    return int(match.group(1)) if match else None


def _first(text: object, limit: int = 240) -> str:
    """The first line of a reason, at most ``limit`` characters (ended at a word, with '…' where it was longer)."""
    return short(next((part.strip() for part in str(text or "").splitlines() if part.strip()), ""), limit)


def _lead(check: dict) -> str:
    """A check's first sentence (expected and found, before its usual causes), for a why."""
    message = next((part.strip() for part in str(check.get("message") or "").splitlines() if part.strip()), "")
    return _first(re.split(r"\.\s+(?=[A-Z])", message, maxsplit=1)[0].rstrip(".:"), 200)


def _shortfall(check: dict, limits: Sequence) -> tuple[float | None, str]:
    """(the worst figure as a share of its limit, 'busbw 297.4 GB/s below its 400 GB/s floor'), from ``limits``, the
    limits the record states (checks/limits.Limit); (None, 'short of its promise') where it states none."""
    worst = None
    for limit in limits:
        bound, value = limit.bound, limit.value
        if not (_number(bound) and _number(value)) or bound <= 0 or value <= 0:
            continue
        share = value / bound if limit.higher_is_better else bound / value
        if share < 1 and (worst is None or share < worst[0]):
            words = "below its" if limit.higher_is_better else "above its"
            worst = (share, f"{number(value, limit.unit)} {words} {number(bound, limit.unit)} "
                            f"{'floor' if limit.higher_is_better else 'limit'}")
    return worst if worst is not None else (None, "short of its promise")
