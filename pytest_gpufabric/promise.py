"""The suites' words for promises: which promise a test judges, and "not checked".

- ``@promise("gpu-memory")`` marks a test as the judge of one kind of promise (catalogue.py declares each kind:
  what it is, and which of its ids a profile makes). The promise's id is the kind and the test's parameters
  (``gpu-memory[GPU0]``): what ``--gpu-waive`` and the report name. Before any fixture runs the plugin asks the
  run's promise list: a test whose id is not on it is skipped as "not promised" (nothing is measured for it), so
  a missing recording can never be mistaken for a missing promise.
- ``not_checked("the bundle records no GPUs")``: the profile promises it, but this evidence cannot show it. A
  "not checked" check record says so (records.py), the test is skipped with "not checked: ...", and the run's
  verdict cannot be ACCEPTED while any promise is so. ``fail_promise(reason)``: the evidence shows it broke, a
  failed check record and the test's failure.

A promise of the list is judged from its test's check records alone (verdict.record_rows). A test of the user's
own is a promise by its node id; one that claims a shipped kind is refused (claimed_by_users).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from .errors import GpuFabricError
from .kinds.rdma import RDMA_DEVICES
from .markers import decide, marker_arguments
from .paths import SUITES_DIR
from .verdict import NOT_CHECKED_PREFIX, WAIVED_PREFIX, waiver_for

MARKER = "gpufabric_promise"
MARKER_HELP = (f"{MARKER}(kind, what=None): the promise this test judges: a kind of catalogue.py (its id adds the "
               "test's parameters), or a function of the parameters giving the whole id (another tool's result "
               "names the promise it speaks to)")

IdOfParams = Callable[[dict], str]


def promise(kind: str | IdOfParams, what: str | None = None) -> pytest.MarkDecorator:
    """``kind``: a promise kind of catalogue.py, to which the test's parameters are added, or a function of the
    parameters giving the whole id (then ``what`` says what it is)."""
    return getattr(pytest.mark, MARKER)(kind, what=what)


def not_checked(reason: str) -> NoReturn:
    """Skip the test as "promised, but not shown by this evidence", saying why: a "not checked" check record of
    the running test (records.py) says so to the verdict, the skip's text only to the terminal."""
    _record_own("not checked", reason)
    pytest.skip(NOT_CHECKED_PREFIX + reason)


def fail_promise(reason: str) -> NoReturn:
    """Fail the test as "the evidence shows the promise broke": a failed check record of the running test says
    so to the verdict (a hook that turns the report into a pass changes nothing)."""
    _record_own("failed", reason)
    pytest.fail(reason, pytrace=False)


def _record_own(verdict: str, reason: str) -> None:
    from .checks.result import NO_MEASUREMENT, failed, unknown
    from .records import current_item, record

    item = current_item()
    if item is None:
        return
    promise_id, _ = promise_of(item, SUITES_DIR)
    result = (failed(NO_MEASUREMENT, promise_id, None, None, reason) if verdict == "failed" else
              unknown(NO_MEASUREMENT, promise_id, None, reason))
    record(item, promise_id, result.to_dict())


def waived(reason: str) -> NoReturn:
    """Skip a waived test; the verdict reads the waiver itself (FabricSession.waivers), never this text."""
    pytest.skip(WAIVED_PREFIX + reason)


def promise_of(item: pytest.Item, suites_dir) -> tuple[str, str | None]:
    """(promise id, what it is in words) of a test item.

    A suite test's id is its marker's kind (else its function's name, without ``test_``) with the test's
    parameters; a test of the user's own is its node id: each is one promise the run must keep."""
    from .catalogue import KINDS

    params = getattr(getattr(item, "callspec", None), "id", None)
    mark = item.get_closest_marker(MARKER)
    if mark is not None:
        base, what = mark.args[0], mark.kwargs.get("what")
        if callable(base):  # the id comes from the parameters (another tool's result names the promise it speaks to)
            return base(dict(item.callspec.params)), what
    elif is_suite_test(item, suites_dir):
        base, what = item.originalname.removeprefix("test_").replace("_", "-"), None
    else:
        return item.nodeid, None
    kind = KINDS.get(base)
    return (f"{base}[{params}]" if params else base), what or (kind.what if kind else None)


def is_suite_test(item: pytest.Item, suites_dir) -> bool:
    """A test written in a shipped suite's file (records.defining_file: its code, module and path agree)."""
    from .records import defining_file

    written_in = defining_file(item)
    return written_in is not None and written_in.parent == Path(suites_dir).resolve()


PROPERTY = "gpufabric_promise"  # the user property a test's reports carry its promise id in (report/recorder.py)


def judge_promise(item: pytest.Item, fabric_session) -> None:
    """Before any fixture runs: which promise the test judges (carried in its reports, for the verdict), and
    whether this run's promise list holds it (else a plain skip: not promised, or a part the operator did not ask
    for) or it was waived (a skip saying so). A shipped suite's test, or one marked with a kind of the list (a
    site's plugin adds kinds: hookspecs.py), is held to the list; a test of the user's own is its own promise."""
    promise_id, what = promise_of(item, SUITES_DIR)
    item.user_properties.append((PROPERTY, promise_id))
    mark = item.get_closest_marker(MARKER)
    promises = fabric_session.promises
    of_a_kind = mark is not None and isinstance(mark.args[0], str) and promises.makes_kind(mark.args[0])
    if (is_suite_test(item, SUITES_DIR) or of_a_kind) and promises.get(promise_id) is None:
        not_promised = f"profile {fabric_session.profile.name} promises no {what or promise_id}"
        pytest.skip(promises.not_asked(promise_id) or not_promised)
    waiver = waiver_for(promise_id, fabric_session.waivers)
    if waiver is not None:
        waived(f"{waiver.reason} ({waiver.source})")


def claimed_by_users(items: list[pytest.Item], fabric_session) -> str | None:
    """Only the shipped suites judge the shipped kinds of promise (and a site's plugin the kinds it registers:
    hookspecs.py): a test of the user's own marked as the judge of one (``@promise("collective-bandwidth")``), or
    of a promise on the run's list, would pass it on no evidence. The usage error naming the test and the kind,
    or None."""
    from .catalogue import KINDS

    site = {kind.name for kind in fabric_session.site_kinds}
    promises = fabric_session.promises if fabric_session.profile is not None else None
    for item in items:
        mark = item.get_closest_marker(MARKER)
        if mark is None or not mark.args or is_suite_test(item, SUITES_DIR):
            continue
        promise_id, _ = promise_of(item, SUITES_DIR)
        kind = promise_id.split("[", 1)[0]
        if kind in site:
            continue
        if kind in KINDS or (promises is not None and promises.get(promise_id) is not None):
            return (f"{item.nodeid}: a test of your own claims the promise kind {kind!r}, which only "
                    "pytest-gpufabric's shipped suites judge; remove its @promise marker (a site's kinds come from "
                    "its plugin: pytest_gpufabric_promise_kinds)")
    return None


_IN_CALL_KEY = pytest.StashKey[bool]()  # the test's own body is running
_BROKEN_KEY = pytest.StashKey[list[str]]()  # the promises its set-up found broken


def fail_in_call(item: pytest.Item, reason: str) -> None:
    """A promise the machine breaks is the test's failure, not a set-up error: fail when the test runs (at once
    when it runs already: a fixture the test asked for in its body, request.getfixturevalue)."""
    if item.stash.get(_IN_CALL_KEY, False):
        fail_promise(reason)
    item.stash.setdefault(_BROKEN_KEY, []).append(reason)


def enter_call(item: pytest.Item) -> None:
    """As the test's body starts: fail with the broken promises its set-up found; later ones fail at once."""
    reasons = item.stash.get(_BROKEN_KEY, None)
    if reasons:
        fail_promise("\n".join(reasons))
    item.stash[_IN_CALL_KEY] = True


def require_markers(marks: list[pytest.Mark], item: pytest.Item, fabric_session) -> None:
    """Before a test runs, what its gpu, nvlink and rdma markers ask of the machine (markers.py decides): run,
    skip, leave the promise not checked, or fail in its call."""
    error = fabric_session.discovery_error
    why_no_fabric = str(error) if error else ""
    for mark in marks:
        try:
            arguments = marker_arguments(mark.name, mark.args, mark.kwargs)
        except TypeError as exc:
            pytest.fail(str(exc), pytrace=False)
        rdma_devices = None
        if mark.name == "rdma":
            try:
                rdma_devices = fabric_session.measurement(RDMA_DEVICES.name)
            except GpuFabricError:
                rdma_devices = None
        decision = decide(mark.name, arguments, fabric_session.profile, fabric_session.fabric, why_no_fabric,
                          rdma_devices)
        if decision.action == "skip":
            pytest.skip(decision.reason)
        if decision.action == "not checked":
            not_checked(decision.reason)
        if decision.action == "fail":
            fail_in_call(item, decision.reason)
