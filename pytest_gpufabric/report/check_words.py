"""A check record's Expected, Found and Margin columns, by the rule its kind declares (kinds/): the kind's phrase
where it has one, else its limits in words, else the record's own values (report/phrases.py says them)."""

from __future__ import annotations

from ..kinds import check_rule, record_limits
from ..units import format_bytes
from .phrases import GE, LE, _figure_words, format_value, number, settings_phrase

__all__ = ["margin", "phrase"]


def phrase(check: dict, site_kinds: tuple = ()) -> tuple[str, str]:
    """(Expected, Found) of a check record in words and units; nothing found (a check not measured): "not recorded".
    ``site_kinds``: the kinds a site's plugin added to the run, whose rules phrase its checks."""
    want, got = _phrase(check, site_kinds)
    return want, "not recorded" if check.get("found") is None else got


def _phrase(check: dict, site_kinds: tuple) -> tuple[str, str]:
    name = str(check.get("name") or "")
    rule = check_rule(name, site_kinds)
    try:
        if rule is not None and rule.phrase is not None:
            return rule.phrase(check)
        if rule is not None and rule.limits is not None and record_limits(check, site_kinds):  # no phrase of its own
            return _from_limits(check, site_kinds)
        return settings_phrase(check)
    except (TypeError, ValueError, KeyError, AttributeError):  # a record of a shape this does not know
        return format_value(check.get("expected"), check.get("unit")), format_value(check.get("found"),
                                                                                    check.get("unit"))


def _from_limits(check: dict, site_kinds: tuple) -> tuple[str, str]:
    """A record in words from its limits (checks/limits.py): each bound as '≥ 50 GB/s h2d', each figure as
    'h2d: 54.2 GB/s'."""
    limits = record_limits(check, site_kinds)
    want = [f"{GE if limit.higher_is_better else LE} {_quantity(limit.bound, limit.unit)} "
            f"{_figure_words(limit.label)}" for limit in limits if limit.bound is not None]
    got = [f"{_figure_words(limit.label)}: {_quantity(limit.value, limit.unit)}" for limit in limits]
    return ("; ".join(dict.fromkeys(want)) or format_value(check.get("expected")),
            "; ".join(dict.fromkeys(got)))


def margin(check: dict, site_kinds: tuple = ()) -> tuple[str, str, bool] | None:
    """(margin text, how it was computed, within the limit) for the tightest limit a check record states
    (checks/limits.py), or None where it states none."""
    best = None
    for limit in record_limits(check, site_kinds):
        if limit.bound is None:
            continue
        room = (limit.value - limit.bound) * limit.better
        relative = room / abs(limit.bound) if limit.bound else None
        key = relative if relative is not None else room
        if best is None or key < best[0]:
            bound = "min" if limit.higher_is_better else "max"
            what = f"worst {_quantity(limit.value, limit.unit)} vs {bound} {_quantity(limit.bound, limit.unit)}"
            text = _signed(room, limit.unit)
            if relative is not None and limit.unit not in ("%", "% of memory"):
                text += f" ({'+' if relative >= 0 else '−'}{abs(relative):.1%})"
            best = (key, text, what, room >= 0)
    return None if best is None else best[1:]


def _quantity(value: float, unit: str) -> str:
    if unit in ("%", "% of memory"):
        return f"{value:.1f} {unit}"
    return number(value, unit)


def _signed(value: float, unit: str) -> str:
    sign = "+" if value >= 0 else "−"
    if unit == "bytes":
        return f"{sign}{format_bytes(int(abs(value)))}"
    if unit in ("%", "% of memory"):
        return f"{sign}{abs(value):.1f} points"
    digits = 2 if unit in ("Gb/s", "x") else 0 if unit in ("MHz",) else 1
    return f"{sign}{abs(value):.{digits}f} {unit}"
