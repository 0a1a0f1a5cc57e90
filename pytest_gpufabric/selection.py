"""Why a promise of the profile was not judged: what pytest's options, its collection or an early stop left out.

The promise list comes from the profile (catalogue.py), so a promise whose test did not run is *not checked*
whatever the reason; this module only says the reason, in the operator's words. It reads pytest's options, which
the pytest-xdist controller has too (its workers deselect, the controller sees only their reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

#: pytest options that select part of a run, as the operator typed them: (option dest, flag)
_SELECTING = (("keyword", "-k"), ("markexpr", "-m"), ("lf", "--lf"), ("stepwise", "--sw"),
              ("deselect", "--deselect"), ("ignore", "--ignore"), ("ignore_glob", "--ignore-glob"))


def selection_options(config: pytest.Config) -> list[str]:
    """The options of this run that leave tests out, as typed (``-k 'not ecc'``, ``--lf``)."""
    said = []
    for dest, flag in _SELECTING:
        value = getattr(config.option, dest, None)
        if not value:
            continue
        if value is True:
            said.append(flag)
        elif isinstance(value, (list, tuple)):
            said += [f"{flag} {item}" for item in value]
        else:
            said.append(f"{flag} {value!r}")
    return said


def ignored_suites(config: pytest.Config, suites_dir: Path) -> dict[str, str]:
    """Suite file name -> the --ignore / --ignore-glob that left it out."""
    import fnmatch

    left_out = {}
    suites = sorted(p.name for p in suites_dir.glob("test_*.py"))
    root = config.invocation_params.dir
    for given in getattr(config.option, "ignore", None) or []:
        path = (root / given).resolve()
        for name in suites:
            if path == (suites_dir / name).resolve() or path == suites_dir.resolve() or path in suites_dir.parents:
                left_out.setdefault(name, f"--ignore {given}")
    for pattern in getattr(config.option, "ignore_glob", None) or []:
        for name in suites:
            if fnmatch.fnmatch(str(suites_dir / name), str(root / pattern)) or fnmatch.fnmatch(name, pattern):
                left_out.setdefault(name, f"--ignore-glob {pattern}")
    return left_out


def why_not_judged(promised: Iterable, *, deselected: Mapping[str, str], collection_errors: Mapping[str, str],
                   ignored: Mapping[str, str], stopped: str | None, options: list[str],
                   finished: bool = True) -> dict[str, str]:
    """Promise id -> why no test judged it, for each promise of the list (catalogue.Promised) a run may lack.

    ``deselected``: promise id -> why (pytest_deselected, seen where the collection ran); ``collection_errors``:
    node id -> message; ``ignored``: suite file -> the option; ``stopped``: why the run ended early, if it did."""
    reasons = {}
    for promise in promised:
        suite_error = next((message for nodeid, message in collection_errors.items()
                            if nodeid.endswith(promise.suite)), None)
        if promise.id in deselected:
            why = deselected[promise.id]
        elif promise.suite in ignored:
            why = f"its suite {promise.suite} was left out ({ignored[promise.suite]})"
        elif suite_error is not None:
            why = f"its suite {promise.suite} could not be collected: {suite_error}"
        elif not finished:
            why = "not judged yet: the run had not reached its test"
        elif stopped:
            why = f"{stopped} before its test ran"
        elif options:
            why = f"its test did not run in this selection ({', '.join(options)})"
        else:
            why = "no test judged it: its test was not collected"
        reasons[promise.id] = why
    return reasons
