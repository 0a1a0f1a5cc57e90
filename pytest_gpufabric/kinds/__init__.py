"""The registry of promise kinds: every module of this package that declares ``KINDS`` (a tuple of kinds.base.Kind)
or ``CHECKS`` (check rules no single kind owns) is a family of kinds, placed in the promise list by its ``POSITION``.

The tables the other layers read are views of it: the promise catalogue (``promise_kinds``), the check rules that
phrase a record, point a failure to its remedy and read its limits (``check_rule``, ``record_limits``), the
profile sections the kinds claim (``claimed_sections``), the per-GPU diagnostics (``diagnostics``) and the other
measurements the suites judge (``suite_measurements``: each family's ``MEASUREMENTS``).
docs/adding-a-diagnostic.md says how to add a kind.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType

from .base import CheckRule, Kind, Measurement

__all__ = ["PLUGIN_SECTIONS", "CheckRule", "Kind", "Measurement", "check_rule", "claimed_sections", "diagnostics",
           "equivalents", "families", "promise_kinds", "record_limits", "section_schema_problems",
           "suite_measurements", "unclaimed_sections"]


@functools.cache
def families() -> tuple[ModuleType, ...]:
    """The family modules of this package, in promise order (their ``POSITION``)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "KINDS") or hasattr(module, "CHECKS"):
            found.append(module)
    return tuple(sorted(found, key=lambda module: (getattr(module, "POSITION", 1000), module.__name__)))


@functools.cache
def _shipped() -> tuple[Kind, ...]:
    kinds = tuple(kind for module in families() for kind in getattr(module, "KINDS", ()))
    names = [kind.name for kind in kinds]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"promise kinds declared twice: {', '.join(twice)}")
    return kinds


def promise_kinds() -> dict[str, Kind]:
    """Every shipped kind by name, in promise order."""
    return {kind.name: kind for kind in _shipped()}


def diagnostics() -> tuple[Kind, ...]:
    """The per-GPU diagnostics: the shipped kinds that carry a measurement (kinds.base.Measurement), in promise
    order; the measurement registry, its fixtures, ``--measure`` and suites/test_diagnostics.py loop over these."""
    return tuple(kind for kind in _shipped() if kind.measurement is not None)


def suite_measurements() -> tuple:
    """The measurements the families declare (``MEASUREMENTS``: kinds.suite_measurement.SuiteMeasurement), in
    promise order; the per-GPU diagnostics' come from their kinds (``diagnostics``)."""
    return tuple(entry for module in families() for entry in getattr(module, "MEASUREMENTS", ()))


@functools.cache
def _rules() -> tuple[CheckRule, ...]:
    rules = [rule for kind in _shipped() for rule in kind.checks]
    rules += [rule for module in families() for rule in getattr(module, "CHECKS", ())]
    return tuple(rules)


def check_rule(check_name: str, site_kinds: tuple[Kind, ...] = ()) -> CheckRule | None:
    """The rule that reads records of ``check_name``: an exact name before the longest prefix, among the shipped
    rules first; a site's kinds (``site_kinds``) only for a check no shipped rule reads, so that a site cannot
    reword or re-remedy a shipped check."""
    return _matching(check_name, _rules()) or _matching(
        check_name, tuple(rule for kind in site_kinds for rule in kind.checks))


def _matching(check_name: str, rules: tuple[CheckRule, ...]) -> CheckRule | None:
    exact = next((rule for rule in rules if rule.name == check_name), None)
    if exact is not None:
        return exact
    prefixed = [rule for rule in rules if rule.name.endswith("-") and check_name.startswith(rule.name)]
    return max(prefixed, key=lambda rule: len(rule.name), default=None)


def record_limits(record: dict, site_kinds: tuple[Kind, ...] = ()) -> list:
    """The limits a check record states (checks/limits.Limit), in its check's order; [] for a record whose check
    declares none, or one of a shape its reader cannot read (a hand-edited file)."""
    rule = check_rule(str(record.get("name") or ""), site_kinds)
    reader = rule.limits if rule is not None else None
    if reader is None:
        return []
    try:
        return reader(record)
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def equivalents(tool: str) -> dict[str, str]:
    """Another tool's test -> the shipped kind it speaks to (each kind's ``equivalents``): evidence.dcgm_results
    judges ``dcgmi diag``'s memory_bandwidth as hbm-bandwidth."""
    return {test: kind.name for kind in _shipped() for of, test in kind.equivalents if of == tool}


def claimed_sections(site_kinds: tuple[Kind, ...] = ()) -> dict[str, tuple[str, ...]]:
    """Profile section -> the kinds that section makes (the shipped ones, then ``site_kinds``)."""
    claimed: dict[str, list[str]] = {}
    for kind in (*_shipped(), *site_kinds):
        for section in kind.sections:
            claimed.setdefault(section, []).append(kind.name)
    return {section: tuple(names) for section, names in claimed.items()}


#: the profile sections the profile schema leaves free for a site's plugin: a profile holding one that no loaded kind
#: claims would promise nothing and say nothing of it (every other section is the schema's own, checked at load)
PLUGIN_SECTIONS = ("site",)


def unclaimed_sections(data: dict, site_kinds: tuple[Kind, ...] = ()) -> list[str]:
    """The sections of a profile (``data``, resolved) left to a plugin that no kind loaded (shipped or
    ``site_kinds``) claims."""
    claimed = claimed_sections(site_kinds)
    return [key for key in data if key in PLUGIN_SECTIONS and key not in claimed]


def section_schema_problems(data: dict, site_kinds: tuple[Kind, ...] = ()) -> list[tuple[str, str]]:
    """(JSON path, problem) of each section a site kind claims whose value fails the JSON Schema that kind brings
    (``Kind.section_schema``), or whose schema is none."""
    from jsonschema import Draft202012Validator, SchemaError

    problems = []
    for kind in site_kinds:
        for section, schema in (kind.section_schema or {}).items():
            if section not in data:
                continue
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                problems.append((f"$.{section}", f"the site kind {kind.name}'s section_schema is not a JSON Schema: "
                                                 f"{exc.message}"))
                continue
            for error in sorted(Draft202012Validator(schema).iter_errors(data[section]), key=lambda e: list(e.path)):
                where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
                problems.append((f"$.{section}{where}", f"{error.message} (the site kind {kind.name}'s schema)"))
    return problems
