"""A check's numbers as data: each figure it judged, with the bound it held it to, as ReFrame's ``reference``
tuple holds a performance variable (value, thresholds, unit).

Each check module declares, beside its check, how its record's numbers read as limits::

    @limits_of("hbm-bandwidth")
    def _limits(record: dict) -> list[Limit]: ...

and the layers that show numbers loop over ``record_limits(record)``: the report's margin column and its bars
against a floor, the remedies' shortfall and the fleet's compared metrics. None of them keeps a table per check.
The record is the results document's (``expected``, ``found``, ``unit``), so a results file written before reads
the same way and the results JSON carries nothing new; ``CheckResult.limits`` reads its own record so.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from .. import checks

__all__ = ["Limit", "figure", "limits_of", "record_limits", "short_subject"]

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


_READERS: dict[str, Callable[[dict], list[Limit]]] = {}


def limits_of(*names: str) -> Callable:
    """Declare the decorated function as the reader of the records of these check names (a name ending in "-" is
    a prefix: "bandwidth-" reads bandwidth-all_reduce, ...). A site's plugin declares its own checks' likewise."""
    def register(reader: Callable[[dict], list[Limit]]) -> Callable[[dict], list[Limit]]:
        for name in names:
            known = _READERS.get(name)
            # the same function imported again (pytester re-imports the plugin's modules) replaces itself
            if known is not None and (known.__module__, known.__qualname__) != (reader.__module__,
                                                                                 reader.__qualname__):
                raise ValueError(f"the limits of check {name!r} are declared twice: {known.__module__}."
                                 f"{known.__qualname__} and {reader.__module__}.{reader.__qualname__}")
            _READERS[name] = reader
        return reader

    return register


_LOADED = False


def _load_checks() -> None:
    """Import every module of this package once: each declares its readers where it defines its checks."""
    global _LOADED
    if not _LOADED:
        for module in pkgutil.iter_modules(checks.__path__):
            importlib.import_module(f"{checks.__name__}.{module.name}")
        _LOADED = True


def _reader(name: str) -> Callable[[dict], list[Limit]] | None:
    if name in _READERS:
        return _READERS[name]
    return next((reader for key, reader in _READERS.items() if key.endswith("-") and name.startswith(key)), None)


def record_limits(record: dict) -> list[Limit]:
    """The limits a check record states, in its check's order; [] for a record whose check declares none, or one of
    a shape its reader cannot read (a hand-edited file)."""
    _load_checks()
    reader = _reader(str(record.get("name") or ""))
    if reader is None:
        return []
    try:
        return reader(record)
    except (ValueError, TypeError, KeyError, AttributeError):
        return []
