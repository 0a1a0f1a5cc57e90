"""A check's numbers as data: each figure it judged, with the bound it held it to, as ReFrame's ``reference``
tuple holds a performance variable (value, thresholds, unit).

Each check module defines, beside its check, how its record's numbers read as limits (a plain function, record ->
[Limit]); its kind binds it (``CheckRule(..., limits=...)``, kinds/), and the layers that show numbers loop over
``kinds.record_limits(record)``: the report's margin column and its bars against a floor, the remedies' shortfall
and the fleet's compared metrics. None of them keeps a table per check.
The record is the results document's (``expected``, ``found``, ``unit``), so a results file written before reads
the same way and the results JSON carries nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limit", "figure", "short_subject"]

HIGHER, LOWER = +1, -1


@dataclass(frozen=True)
class Limit:
    label: str  # the figure as the record's ``found`` names it: "busbw_gbps", "GPU0->GPU1 (p2p)"
    value: float  # what was found
    bound: float | None  # what it is held to; None: measured, not bounded (the fleet may still compare it)
    unit: str  # "GB/s", "µs", "MHz", "% of memory", ...
    better: int  # HIGHER (+1): a floor, more is better; LOWER (-1): a ceiling, less is better
    of: str = ""  # what a ratio is of ("batch 1": unit "x" reads "x batch 1")
    stated: str = ""  # the bound as the profile states it ("min 312 GB/s", "88% of peak")
    chart: str = ""  # the report's bar chart that draws it against its bound ("HBM"); "": none
    bar: str = ""  # its bar's label in that chart ("HBM GPU0")
    fleet: bool = False  # compared across a fleet's nodes (fleet/nodes.py)

    @property
    def higher_is_better(self) -> bool:
        return self.better > 0


def figure(label: str, value: float, bounds: list[tuple[float, str]], unit: str, better: int,
           **kw) -> list[Limit]:
    """One figure as limits: one per (bound, how the profile states it), or one unbounded where there is none."""
    if not bounds:
        return [Limit(label, value, None, unit, better, **kw)]
    return [Limit(label, value, bound, unit, better, stated=stated, **kw) for bound, stated in bounds]


def short_subject(record: dict) -> str:
    """'GPU0 (serial 1654...)' -> 'GPU0': the subject as a chart labels it."""
    return str(record.get("subject") or "").split(" (serial", 1)[0]
