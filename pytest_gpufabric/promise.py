"""The suites' words for promises: which promise a test judges, and "not checked".

- ``@promise("gpu-memory", "GPU memory size", lambda profile, params: profile.gpu_memory_bytes)`` marks a test as
  the judge of one promise. The plugin asks the condition before any fixture runs: where the profile does not
  promise it, the test is skipped as "not promised" (nothing is measured for it), so a missing recording can never
  be mistaken for a missing promise. The promise's id is the marker's name and the test's parameters
  (``gpu-memory[GPU0]``): what ``--gpu-waive`` and the report name.
- ``not_checked("the bundle records no GPUs")``: the profile promises it, but this evidence cannot show it. The
  test is skipped with "not checked: ...", and the run's verdict cannot be ACCEPTED while any promise is so.

Everything else a test does is a plain pass or fail; a plain ``pytest.skip`` means "not promised".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import pytest

from .verdict import NOT_CHECKED_PREFIX, WAIVED_PREFIX

MARKER = "gpufabric_promise"
MARKER_HELP = (f"{MARKER}(id, what=None, promised=None, asked=None): the promise this test judges; "
               "promised(profile, params) false: the profile does not promise it, and the test is skipped before its "
               "fixtures run; asked: a property of the run that must be true for it to be judged at all")

Condition = Callable[[Any, dict], Any]


def promise(promise_id: str | Callable[[dict], str], what: str | None = None, promised: Condition | None = None,
            asked: str | None = None) -> pytest.MarkDecorator:
    """``promise_id``: the id, to which the test's parameters are added, or a function of the parameters giving the
    whole id. ``asked``: the name of a FabricSession property that says whether this run judges the promise at all
    (``has_burn_in``: the burn-in is the operator's to ask for, with --gpu-burn-in or a bundle holding one)."""
    return getattr(pytest.mark, MARKER)(promise_id, what=what, promised=promised, asked=asked)


def not_checked(reason: str) -> NoReturn:
    """Skip the test as "promised, but not shown by this evidence", saying why."""
    pytest.skip(NOT_CHECKED_PREFIX + reason)


def waived(reason: str) -> NoReturn:
    pytest.skip(WAIVED_PREFIX + reason)


def promise_of(item: pytest.Item, suites_dir) -> tuple[str, str | None, Condition | None]:
    """(promise id, what it is in words, its condition on the profile) of a test item.

    A suite test's id is its marker's name (else its function's, without ``test_``) with the test's parameters;
    a test of the user's own is its node id: each is one promise the run must keep."""
    params = getattr(getattr(item, "callspec", None), "id", None)
    mark = item.get_closest_marker(MARKER)
    if mark is not None:
        base, what, condition = mark.args[0], mark.kwargs.get("what"), mark.kwargs.get("promised")
        if callable(base):  # the id comes from the parameters (another tool's result names the promise it speaks to)
            return base(dict(item.callspec.params)), what, condition
    elif getattr(item, "path", None) is not None and item.path.parent == suites_dir:
        base, what, condition = item.originalname.removeprefix("test_").replace("_", "-"), None, None
    else:
        return item.nodeid, None, None
    return (f"{base}[{params}]" if params else base), what, condition


def promised(condition: Condition | None, profile, item: pytest.Item) -> bool:
    if condition is None:
        return True
    params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
    return bool(condition(profile, params))


def not_asked(item: pytest.Item, run) -> str | None:
    """Why this run does not judge the test's promise at all (the marker's ``asked`` property is false), or None."""
    mark = item.get_closest_marker(MARKER)
    asked = mark.kwargs.get("asked") if mark is not None else None
    if asked is None:
        return None
    return None if getattr(run, asked) else getattr(run, f"{asked}_why", f"not asked for ({asked})")


PROPERTY = "gpufabric_promise"  # the user property a test's reports carry its promise id in (report/recorder.py)


def judge_promise(item: pytest.Item, run) -> None:
    """Before any fixture runs: which promise the test judges (carried in its reports, for the verdict), and
    whether the profile makes it at all and this run asks for it (else a plain skip) or it was waived (a skip
    saying so)."""
    from .paths import SUITES_DIR
    from .verdict import waiver_for

    promise_id, what, condition = promise_of(item, SUITES_DIR)
    item.user_properties.append((PROPERTY, promise_id))
    profile = run.profile
    if not promised(condition, profile, item):
        pytest.skip(f"profile {profile.name} promises no {what or promise_id}")
    why_not = not_asked(item, run)
    if why_not:
        pytest.skip(why_not)
    waiver = waiver_for(promise_id, run.waivers)
    if waiver is not None:
        waived(f"{waiver.reason} ({waiver.source})")
