"""Promises and the verdict a customer signs.

A *promise* is one thing the profile says the machine has or does: "GPU0 has 141 GB", "all_reduce reaches 312
GB/s busbw at 1 GiB". Every shipped suite test judges one promise (its id: the name the test's
``gpufabric_promise`` marker gives, and the test's parameters, so the torch.distributed and the nccl-tests
measurement of one floor judge the same promise). A promise ends in one of four outcomes:

- **passed**: the evidence shows it held;
- **failed**: the evidence shows it broke;
- **not checked**: the profile promises it, but this evidence cannot show it (a bundle that did not record it,
  a tool that is missing, a setting the machine hides, a number that is not finite, a test that broke);
- **waived**: the customer and the vendor agreed in writing not to hold the machine to it.

A promise of the profile's list is judged from the check records its shipped test made (record_rows), never
from what pytest reports of the test; a skip of a test whose promise is not on the list means *the profile does not
promise it*: not a promise at all.

The run's verdict follows from the promises alone, never from pytest's pass/skip tally:

- **ACCEPTED** (exit 0): every promise passed or was waived;
- **REJECTED** (exit 1): at least one promise failed;
- **INCOMPLETE** (exit 6): none failed, some were not checked (each named with why), or the run did not finish;
- **NOT TESTED** (exit 7): the machine could not be examined at all (no driver, NVML absent), or no promise could
  be checked.

Pure functions of plain data: the plugin, the fleet report (which judges each node's results file again) and the
tests all use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

PASSED, FAILED, NOT_CHECKED, WAIVED = "passed", "failed", "not checked", "waived"
OUTCOMES = (PASSED, FAILED, NOT_CHECKED, WAIVED)

ACCEPTED, REJECTED, INCOMPLETE, NOT_TESTED = "ACCEPTED", "REJECTED", "INCOMPLETE", "NOT TESTED"
VERDICTS = (ACCEPTED, REJECTED, INCOMPLETE, NOT_TESTED)
#: pytest's own codes are 0-5 (1: tests failed, as a rejection is); INCOMPLETE and NOT TESTED take codes pytest
#: never uses, so that a pipeline can tell them apart from an interrupted run (2) or a usage error (4)
EXIT_CODES = {ACCEPTED: 0, REJECTED: 1, INCOMPLETE: 6, NOT_TESTED: 7}

#: how a skip says "promised, but not shown by this evidence" and "waived" (a skip reason travels from
#: pytest-xdist workers, and the terminal shows it as it is)
NOT_CHECKED_PREFIX = "not checked: "
WAIVED_PREFIX = "waived: "

#: how many promise ids a verdict's reason names before it says "and N more"
_NAMED = 6


@dataclass
class Promise:
    """One promise of the profile and what this run's evidence showed of it."""

    id: str
    outcome: str  # PASSED, FAILED, NOT_CHECKED or WAIVED
    reason: str = ""  # why it failed, was not checked or was waived; "" when it passed
    tests: list[str] = field(default_factory=list)  # the test node ids that judged it

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Waiver:
    """A promise the customer and the vendor agreed not to hold the machine to (``--gpu-waive ID=REASON`` or a
    profile's ``waive:`` list). ``promise`` is a promise id, the id without its parameters (``gpu-memory`` waives
    ``gpu-memory[GPU0]`` and ``gpu-memory[GPU1]``), or a pattern whose ``*`` stands for any text."""

    promise: str
    reason: str
    source: str  # "--gpu-waive" or "profile <name>"

    def matches(self, promise_id: str) -> bool:
        if promise_id == self.promise or promise_id.split("[", 1)[0] == self.promise:
            return True
        # '*' is the one wildcard: promise ids hold brackets, which fnmatch would read as character sets
        pattern = ".*".join(re.escape(part) for part in self.promise.split("*"))
        return "*" in self.promise and re.fullmatch(pattern, promise_id) is not None


def parse_waiver(text: str, source: str = "--gpu-waive") -> Waiver:
    """``ID=REASON`` -> Waiver; ValueError (a usage error) when either half is missing: a waiver is agreed in
    writing, and one without its reason is no agreement."""
    promise, sep, reason = text.partition("=")
    if not sep or not promise.strip() or not reason.strip():
        raise ValueError(f"{text!r}: give PROMISE=REASON, e.g. 'nccl-tests-bandwidth=nccl-tests not installed, "
                         "agreed with ACME on 2026-11-20'")
    return Waiver(promise.strip(), reason.strip(), source)


def waiver_for(promise_id: str, waivers: Iterable[Waiver]) -> Waiver | None:
    return next((w for w in waivers if w.matches(promise_id)), None)


def promise_outcome(pytest_outcome: str, reason: str = "") -> str | None:
    """One test's pytest outcome -> its promise's outcome; None for a skip that means "not promised".

    An error (a fixture or the plugin broke, not a check) is "not checked": the promise was not judged, and a
    broken test must neither pass a machine nor accuse it."""
    if pytest_outcome == "passed":
        return PASSED
    if pytest_outcome == "failed":
        return FAILED
    if pytest_outcome == "error":
        return NOT_CHECKED
    if reason.startswith(NOT_CHECKED_PREFIX):
        return NOT_CHECKED
    if reason.startswith(WAIVED_PREFIX):
        return WAIVED
    return None


def _strip(reason: str) -> str:
    for prefix in (NOT_CHECKED_PREFIX, WAIVED_PREFIX):
        if reason.startswith(prefix):
            return reason[len(prefix):]
    return reason


_RANK = {FAILED: 0, PASSED: 1, WAIVED: 2, NOT_CHECKED: 3}


def build_promises(tests: Iterable[tuple[str, str | None, str, str]],
                   expected: Sequence[str] | None = None,
                   not_judged: Mapping[str, str] | None = None) -> list[Promise]:
    """(node id, promise id or None, pytest outcome, reason) per test -> the promises.

    A promise judged by several tests fails if any of them failed; else it passed if any passed (one measurement
    that shows it is enough: nccl-tests missing leaves a floor that torch.distributed measured checked); else it
    is waived or not checked. A test without a promise id counts under its node id.

    ``expected``: the promises of the profile (catalogue.py), in their order, then the run's own (a user's tests,
    another tool's results) as first seen. An expected promise that no test judged is not checked, saying why
    (``not_judged``: promise id -> why, else that no test judged it); one whose test skipped it as not promised
    is not checked too, with the skip's reason: only the profile says what is promised."""
    expected_ids = set(expected or ())
    promises: dict[str, Promise] = {}
    skipped: dict[str, tuple[str, str]] = {}  # an expected promise's test that skipped it as not promised
    for nodeid, promise_id, pytest_outcome, reason in tests:
        key = promise_id or nodeid
        outcome = promise_outcome(pytest_outcome, reason)
        if outcome is None:
            if key in expected_ids:
                skipped.setdefault(key, (nodeid, reason))
            continue
        reason = "" if outcome == PASSED else _strip(reason).strip()
        promise = promises.get(key)
        if promise is None:
            promises[key] = Promise(key, outcome, reason, [nodeid])
            continue
        promise.tests.append(nodeid)
        if _RANK[outcome] < _RANK[promise.outcome]:
            promise.outcome, promise.reason = outcome, reason
        elif outcome == promise.outcome == NOT_CHECKED and reason and reason not in promise.reason:
            promise.reason = f"{promise.reason}; {reason}" if promise.reason else reason
    if expected is None:
        return list(promises.values())
    for key, (nodeid, reason) in skipped.items():  # no other test judged it: the skip leaves it not checked
        if key not in promises:
            promises[key] = Promise(key, NOT_CHECKED, f"its test skipped it: {reason}", [nodeid])
    not_judged = dict(not_judged or {})
    ordered = [promises.get(pid) or Promise(pid, NOT_CHECKED, not_judged.get(pid, NO_TEST_JUDGED_IT))
               for pid in dict.fromkeys(expected)]
    return ordered + [p for pid, p in promises.items() if pid not in expected_ids]


#: why a promise of the profile has no outcome when its test ran and recorded nothing
NO_RECORD = "its test recorded no check"
#: the verdicts a check record says "not checked" with ("unknown": results before schema version 2)
_RECORD_NOT_CHECKED = ("not checked", "unknown")


def _by_records(records: list[dict]) -> tuple[str, str]:
    """(pytest-like outcome, reason) of one test from its check records: failed if any failed, else not checked if
    any could not judge, else passed."""
    for verdicts, outcome, prefix in (((FAILED,), "failed", ""),
                                      (_RECORD_NOT_CHECKED, "skipped", NOT_CHECKED_PREFIX)):
        hit = next((r for r in records if r.get("verdict") in verdicts), None)
        if hit is not None:
            return outcome, prefix + str(hit.get("message") or "")
    return "passed", ""


def judges_listed(record: dict) -> bool:
    """Whether a check record may judge a promise of the profile's list: made by a shipped suite's test or by the
    test of a kind a site's plugin registered, never by a test of the user's own (records.judge_of). A record
    without the field was written before it existed, when the run refused such tests at collection."""
    return record.get("judge", "suite") in ("suite", "site")


def user_claims(records: Iterable[dict], listed: Iterable[str]) -> list[str]:
    """The tests of the user's own that recorded a check of a promise of the profile's list: refused."""
    listed = set(listed)
    return sorted({str(r.get("test")) for r in records
                   if r.get("promise") in listed and not judges_listed(r)})


def record_rows(tests: Iterable[tuple[str, str | None, str, str]], records: Iterable[dict],
                judged_by_records: Iterable[str], waivers: Iterable[Waiver] = ()
                ) -> list[tuple[str, str | None, str, str]]:
    """build_promises' rows, each test's outcome taken from its check records, never from pytest's report.

    ``tests``: (node id, promise id or None, pytest outcome, reason) as pytest reported them; ``records``: the
    run's check records (``test``, ``promise``, ``verdict``, ``message``); ``judged_by_records``: the promises
    only a record can judge (the profile's list). A test with records counts as they say, under the promise they
    are bound to, whatever pytest reported (passed, xfailed, skipped). A test of a listed promise without a record
    is not checked (pytest's report only words why: the test broke, its skip's reason), or waived where a waiver
    (``waivers``: --gpu-waive and the profile's, never a skip's text) names its promise. A test of the user's own
    without records, a file that could not be collected and the health watchdog count as reported. A record
    whose test sent no report (a hook swallowed it) still counts."""
    listed, waivers = set(judged_by_records), list(waivers)
    by_test: dict[str, list[dict]] = {}
    for entry in records:
        # a record of a listed promise counts only from its shipped suite's test or a site kind's (records.py)
        if entry.get("promise") is not None and (entry["promise"] not in listed or judges_listed(entry)):
            by_test.setdefault(str(entry.get("test")), []).append(entry)
    rows: list[tuple[str, str | None, str, str]] = []
    for nodeid, promise_id, outcome, reason in tests:
        mine = by_test.pop(nodeid, None)
        if mine:
            rows.append((nodeid, str(mine[0]["promise"]), *_by_records(mine)))
            continue
        waiver = waiver_for(promise_id or nodeid, waivers)
        if outcome == "skipped" and reason.startswith(WAIVED_PREFIX) and waiver is None:
            reason = f"no waiver names it; its skip said: {reason}"  # a plain skip: no agreement, no waiver
        if promise_id is None or promise_id not in listed:
            rows.append((nodeid, promise_id, outcome, reason))
            continue
        if waiver is not None:
            outcome, reason = "skipped", f"{WAIVED_PREFIX}{waiver.reason} ({waiver.source})"
        elif outcome in ("passed", "failed"):
            said = "" if outcome == "passed" else f" (pytest says it failed: {_strip(reason)})"
            outcome, reason = "skipped", f"{NOT_CHECKED_PREFIX}{NO_RECORD}{said}"
        rows.append((nodeid, promise_id, outcome, reason))
    rows += [(nodeid, str(mine[0]["promise"]), *_by_records(mine)) for nodeid, mine in by_test.items()]
    return rows


#: why a promise of the profile has no outcome when nothing more is known
NO_TEST_JUDGED_IT = "no test judged it (its test did not run)"

#: the run's own promise that no forbidden counter rose outside every test's window (watchdog.py)
HEALTH_WATCHDOG = "gpufabric-health-watchdog"


def counts(promises: Iterable[Promise]) -> dict[str, int]:
    tally = {outcome: 0 for outcome in OUTCOMES}
    for promise in promises:
        tally[promise.outcome] += 1
    return {"passed": tally[PASSED], "failed": tally[FAILED], "not_checked": tally[NOT_CHECKED],
            "waived": tally[WAIVED]}


def _named(promises: list[Promise]) -> str:
    """The ids of the first few promises (each promise's own reason is in the list beside the verdict)."""
    more = f" and {len(promises) - _NAMED} more" if len(promises) > _NAMED else ""
    return ", ".join(p.id for p in promises[:_NAMED]) + more


def judge(promises: list[Promise], machine_error: str | None = None, unfinished: str | None = None,
          not_run: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(verdict, reason in one sentence) from the promises of a run.

    ``machine_error``: why the machine could not be read at all (no driver); ``unfinished``: why the run has no
    end (it goes on, or was cut short: Ctrl-C, an internal error); ``not_run``: promise id -> why a promise was
    never judged (its test deselected with -k/-m)."""
    not_run = dict(not_run or {})
    failed = [p for p in promises if p.outcome == FAILED]
    unchecked = [p for p in promises if p.outcome == NOT_CHECKED]
    unchecked += [Promise(pid, NOT_CHECKED, why) for pid, why in not_run.items()
                  if pid not in {p.id for p in promises}]
    examined = [p for p in promises if p.outcome in (PASSED, FAILED)]
    if failed:
        return REJECTED, f"{len(failed)} promise(s) failed: {_named(failed)}"
    if unfinished:
        return INCOMPLETE, (f"{unfinished} ({len(examined)} promise(s) judged, none failed)"
                            + (f"; not checked: {_named(unchecked)}" if unchecked else ""))
    if machine_error and not examined:
        return NOT_TESTED, f"the machine could not be examined: {machine_error}"
    if not examined:
        if unchecked:
            return NOT_TESTED, f"no promise could be checked: {_named(unchecked)}"
        if any(p.outcome == WAIVED for p in promises):
            return NOT_TESTED, "every promise was waived: nothing was checked"
        return NOT_TESTED, "no promise was judged"
    if unchecked:
        return INCOMPLETE, f"{len(unchecked)} promise(s) not checked: {_named(unchecked)}"
    waived = [p for p in promises if p.outcome == WAIVED]
    return ACCEPTED, (f"all {len(examined)} promise(s) checked passed"
                      + (f", {len(waived)} waived: {_named(waived)}" if waived else ""))


def verdict_words(verdict: str | None, scope: str = "") -> str:
    """The verdict as the terminal, the cover and the fleet say it: ``ACCEPTED without the burn-in the profile
    promises`` when the operator left a promised part out (catalogue.PromiseList.scope)."""
    if verdict is None:
        return "no verdict (nothing promised)"
    return f"{verdict} {scope}" if scope else verdict
