"""A results document judged again from its own evidence: its tests, its checks and the profile's promise list.

The fleet report judges every node file this way, and ``gpufabric verify`` says whether a file's summary is what
its own promises give: the summary a file carries is never taken on its word.
"""

from __future__ import annotations

from .catalogue import CHECK_HERE, expected_promises
from .verdict import FAILED, HEALTH_WATCHDOG, NOT_CHECKED_PREFIX, Waiver, build_promises, counts, judge, record_rows

__all__ = ["derive_verdict"]


def derive_verdict(document: dict, embedded=CHECK_HERE) -> tuple[str, str, dict]:
    """(verdict, reason, promise counts) of a node from its tests and checks, by the rules of a node run: a test
    whose check failed is a failed promise whatever its outcome says, a check the evidence could not judge is not
    checked, a promise of the profile that no test judged is not checked (the profile's list, made again from the
    profile the file embeds where it does: catalogue.expected_promises), a run without its end is INCOMPLETE. The
    file's own summary is never read here. ``embedded``: the embedded profile, checked already
    (catalogue.expected_promises)."""
    if document.get("schema_version") == 4:
        return _derive_from_records(document, embedded)
    tests: dict = document["tests"]
    reasons: dict = document.get("skip_reasons") or {}
    promise_of = {test: p["id"] for p in document.get("promises") or [] for test in p["tests"]}
    failed_checks: dict[str, str] = {}
    unjudged: dict[str, str] = {}
    for check in document["checks"]:
        if check["verdict"] == FAILED:
            failed_checks.setdefault(check["test"], check["message"])
        elif check["verdict"] in ("not checked", "unknown"):
            unjudged.setdefault(check["test"], check["message"])
    rows = []
    for test, outcome in tests.items():
        reason = reasons.get(test, "")
        if test in failed_checks:
            outcome, reason = "failed", failed_checks[test]
        elif test in unjudged and outcome in ("passed", "skipped") and not reason.startswith(NOT_CHECKED_PREFIX):
            outcome, reason = "skipped", NOT_CHECKED_PREFIX + unjudged[test]
        rows.append((test, promise_of.get(test), outcome, reason))
    rows += [(test, promise_of.get(test), "failed", message) for test, message in failed_checks.items()
             if test not in tests]
    rows += [(nodeid, None, "error", f"could not be collected: {message}")
             for nodeid, message in (document.get("collection_errors") or {}).items()]
    expected, scope, lacking = expected_promises(document, embedded)
    return _judged(document, rows, expected, scope, lacking)


def _derive_from_records(document: dict, embedded) -> tuple[str, str, dict]:
    """A version-4 document, by the live run's own rules (verdict.record_rows): each promise of the profile's list
    from the check records bound to it, never from the tests' outcomes; waived only where a waiver of the file
    names it; the health watchdog's findings a failure of their own."""
    tests: dict = document["tests"]
    reasons: dict = document.get("skip_reasons") or {}
    promise_of = {test: p["id"] for p in document.get("promises") or [] for test in p["tests"]}
    rows = [(test, promise_of.get(test), outcome, reasons.get(test, "")) for test, outcome in tests.items()]
    rows += [(nodeid, None, "error", f"could not be collected: {message}")
             for nodeid, message in (document.get("collection_errors") or {}).items()]
    findings = (document.get("health") or {}).get("findings") or []
    if findings:
        rows.append((HEALTH_WATCHDOG, None, "failed", "health: " + "\n".join(map(str, findings))))
    expected, scope, lacking = expected_promises(document, embedded)
    waivers = [Waiver(str(w.get("promise")), str(w.get("reason")), str(w.get("source")))
               for w in document.get("waivers") or [] if isinstance(w, dict)]
    if expected is not None:
        rows = record_rows(rows, document["checks"], expected, waivers)
    return _judged(document, rows, expected, scope, lacking)


def _judged(document: dict, rows: list, expected: list[str] | None, scope: str, lacking: dict) -> tuple[str, str, dict]:
    """(verdict, reason, counts) of the rows, by either format's rules: the promises against the profile's list, a
    run without its end INCOMPLETE, the scope the operator left out said."""
    not_run = document.get("not_run") or {}
    promises = build_promises(rows, expected, {**not_run, **lacking})
    unfinished = None if document.get("finished_at") else "the run had not finished when these results were written"
    verdict, reason = judge(promises, document.get("machine_error"), unfinished,
                            not_run if expected is None else None)
    if scope:
        reason += f"; {scope}"
    return verdict, reason, counts(promises)
