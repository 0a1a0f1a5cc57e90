"""A kind of promise as one declaration: which ids a profile makes of it, the profile sections that make it, the
suite that judges it, and how each of its check records reads (its phrase, its remedy and its limits).

Every layer that needs to know a kind asks the registry (``kinds/__init__.py``) for these objects; none keeps a
table of kind names of its own. A site's plugin returns the same objects from ``pytest_gpufabric_promise_kinds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BURN_IN", "CheckRule", "Kind", "diagnostic_kind", "Measurement", "each_gpu", "gpus", "once"]

#: the part of the acceptance that the operator asks for (``--gpu-burn-in``, or a bundle holding a burn-in)
BURN_IN = "burn_in"


@dataclass(frozen=True)
class CheckRule:
    """How the records of one check read: ``name`` is the record's ``name``, or a prefix ending in "-" that
    every check so named shares ("bandwidth-" reads bandwidth-all_reduce, ...)."""

    name: str
    remedy: Callable  # (record, remedy_rules.Context) -> Remedy | list[Remedy]: what a failure points to (required)
    phrase: Callable | None = None  # record -> (expected, found) in words; None: from its limits, else generic
    limits: Callable | None = None  # record -> [checks.limits.Limit]: its figures against their bounds

    def __post_init__(self) -> None:
        if not callable(self.remedy):  # a failed check with no remedy would point the operator nowhere
            raise TypeError(f"check rule {self.name!r}: its remedy must be a function (record, Context) -> Remedy")

    def matches(self, check_name: str) -> bool:
        return check_name == self.name or (self.name.endswith("-") and check_name.startswith(self.name))


@dataclass(frozen=True)
class Measurement:
    """What a per-GPU diagnostic measures (``diagnostic``: a diagnostics.Diagnostic, plain data the layers below
    kinds/ read) and the functions, above those layers, that run it, write its profile section and judge a GPU."""

    diagnostic: object  # diagnostics.Diagnostic: its section, fixture, record file, format tag and typed shape
    launch: Callable  # (section, env, boards, fabric, *, repeats=1, plant_fault=False) -> [result]: its workload
    judge: Callable  # (row, section, source, gpu) -> checks.result.CheckResult: one GPU's row of the recording
    coverage: Callable | None = None  # (recording, row, section) -> why it does not cover the promise, or None
    measure: Callable | None = None  # (measured, results, margin, where): what `profile init --measure` promises
    #: the diagnostic (its descriptor's measurement name) this one runs alongside in a live acceptance, where
    #: neither disturbs what the other judges (docs/acceptance-time.md says why per pair)
    runs_beside: str | None = None
    #: (own section, partner's section, fabric) -> why not alongside this time, None: it may
    beside_refused: Callable | None = None


@dataclass(frozen=True)
class Kind:
    """One kind of promise. ``ids(profile)`` gives the parameter ids of the promises a profile makes ([""] for
    one without parameters, [] for none); a promise id is ``name[param]``."""

    name: str  # the promise id without its parameters: gpu-memory
    what: str  # in words: "GPU memory size"
    suite: str  # the file name of the suite that judges it: "test_topology.py"
    ids: Callable[..., list[str]]  # profile -> the ids of this kind it promises
    asked: str | None = None  # the part of the acceptance the operator asks for (BURN_IN), else None
    sections: tuple[str, ...] = ()  # the profile sections that make it (a section no kind claims is refused)
    checks: tuple[CheckRule, ...] = ()  # how its check records read
    equivalents: tuple[tuple[str, str], ...] = ()  # (tool, test) of another tool judged as this promise
    added_in_format: int | None = None  # the results format that first held it (older files are not held to it)
    measurement: Measurement | None = None  # a per-GPU diagnostic's measurement (suites/test_diagnostics.py)
    #: a site kind's: section -> the JSON Schema that section of a profile must hold (checked before anything runs)
    section_schema: dict[str, dict] | None = field(default=None, compare=False, hash=False)


def diagnostic_kind(measurement: Measurement, *, remedy: Callable, phrase: Callable | None = None,
                    limits: Callable | None = None, equivalents: tuple[tuple[str, str], ...] = ()) -> Kind:
    """The kind of a per-GPU diagnostic, all from its descriptor (``measurement.diagnostic``): promised on each GPU
    where the profile holds its section, judged by the one diagnostics suite, its check named as the promise."""
    diagnostic = measurement.diagnostic
    return Kind(diagnostic.name, diagnostic.what, "test_diagnostics.py",
                each_gpu(lambda profile: diagnostic.key in profile.data), sections=(diagnostic.key,),
                checks=(CheckRule(diagnostic.name, remedy, phrase, limits),), equivalents=equivalents,
                measurement=measurement)


# --- the ids most kinds make ------------------------------------------------------------------------------------


def gpus(profile) -> list[str]:
    """GPU0 .. GPU<n-1> of the profile's GPU count."""
    return [f"GPU{i}" for i in range(profile.gpu_count)]


def each_gpu(condition: Callable[[object], object]) -> Callable[..., list[str]]:
    """One promise per GPU where ``condition(profile)`` holds."""
    return lambda profile: gpus(profile) if condition(profile) else []


def once(condition: Callable[[object], object]) -> Callable[..., list[str]]:
    """One promise without parameters where ``condition(profile)`` holds."""
    return lambda profile: [""] if condition(profile) else []
