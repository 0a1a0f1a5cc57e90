"""RunRecorder: collects each test's outcome from the test reports, the check records from their own channel
(records.py), and writes the results.

Outcomes come from reports, not from test items, because under pytest-xdist the tests run in worker processes and
only their reports reach the controller. The verdict rests on the check records alone: a report (its outcome, its
user properties) is what any hook can rewrite, so no check travels in one.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone

import pytest

from ..formats.clean import clean_line
from ..paths import SUITES_DIR
from ..promise import PROPERTY as PROMISE_PROPERTY  # the promise a test judges (promise.judge_promise)
from ..promise import promise_of
from ..records import JOURNAL_INPUT, ControllerJournal
from ..selection import ignored_suites, selection_options, why_not_judged
from ..verdict import EXIT_CODES, INCOMPLETE, user_claims, verdict_words
from .grouped import cause_lines, tally_line
from .integrity import INTEGRITY_KEY, integrity_block
from .provenance import display_path, evidence_record, operator, system_record
from .results import write_json
from .results_document import ReportedOutcomes, RunFacts, results_document
from .series import plot_series

RESULTS_FILE = "gpufabric-results.json"
#: the results so far go to disk after a test at most this often: a write costs about 10 ms (the document and its
#: fsync), more than a trivial test, and a run killed in between loses at most this much of its record
CHECKPOINT_EVERY_S = 1.0
#: why a run that a usage error stopped after its tests judged nothing
USAGE_STOP = "a usage error stopped the run"


class RunRecorder:
    def __init__(self, config: pytest.Config, fabric_session) -> None:
        self.config = config
        self.fabric_session = fabric_session
        self.outcomes: dict[str, str] = {}
        self.skip_reasons: dict[str, str] = {}  # node id -> why it was skipped
        self.durations: dict[str, float] = {}  # node id -> seconds, set-up + call + teardown
        self.promise_ids: dict[str, str] = {}  # node id -> the promise it judged
        self.messages: dict[str, str] = {}  # node id -> why it failed or broke, one line
        self.deselected: dict[str, str] = {}  # promise id -> why its test was deselected (-k, -m, --lf, ...)
        self.collection_errors: dict[str, str] = {}  # node id -> why it could not be collected
        self.stopped: str | None = None  # why the run ended before its last test (-x, --maxfail, Ctrl-C)
        self.is_worker = hasattr(config, "workerinput")
        self.results_path = None
        self.write_error: str | None = None  # the last failure to write the results
        self.verdict: str | None = None
        self.reason = ""
        self.scope = ""  # the part of the acceptance the operator left out ("without the burn-in ...")
        self.nothing_judged = False
        self.ctrl_c = False  # pytest saw a KeyboardInterrupt
        self.session_finished = False  # pytest_sessionfinish ran (not where Ctrl-C came before the session began)
        self.exit_status = 0
        self.promises: list[dict] = []
        self.document: dict | None = None  # the results document last built (written or not)
        self.sign_key = None if self.is_worker else fabric_session.options.sign_key
        self._evidence: dict | None = None  # the bundle's digest: read once
        self._written_at = float("-inf")  # when the results were last checkpointed (monotonic seconds)
        self.journal: ControllerJournal | None = None  # where pytest-xdist workers write their check records
        if not self.is_worker:  # after every burn-in chunk too: an hours-long burn-in runs inside one test
            fabric_session.follow_burn_in(lambda burn_in, record: self.checkpoint())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            outcome = "error" if report.failed and report.when != "call" else report.outcome
            if report.nodeid not in self.outcomes and self.fabric_session.metrics is not None:
                self.fabric_session.metrics.observe_test(report.nodeid, outcome)
            self.outcomes.setdefault(report.nodeid, outcome)
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + (report.duration or 0.0)
        if report.skipped:
            self.skip_reasons.setdefault(report.nodeid, skip_reason(report))
        elif report.failed:
            self.messages.setdefault(report.nodeid, failure_message(report))
        for name, value in report.user_properties:
            if name == PROMISE_PROPERTY:
                self.promise_ids[report.nodeid] = str(value)
        if report.when == "teardown" and not self.is_worker:
            self._read_journal()
            if time.monotonic() - self._written_at >= CHECKPOINT_EVERY_S:
                self.checkpoint()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """pytest-xdist's controller: each worker gets the folder it writes its check records to (records.py)."""
        if self.journal is None:
            self.journal = ControllerJournal()
        node.workerinput[JOURNAL_INPUT] = str(self.journal.folder)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        self._read_journal()

    def _read_journal(self) -> None:
        """The check records pytest-xdist workers appended since the last read, into the run's records."""
        if self.journal is not None:
            self.fabric_session.results.extend(self.journal.read_new())

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A file that could not be collected (also from pytest-xdist workers): never a verdict of ACCEPTED."""
        if report.failed:
            self.collection_errors.setdefault(report.nodeid or ".", collection_error(report))

    def checkpoint(self) -> None:
        """The results so far, on disk (after a test, at most every CHECKPOINT_EVERY_S, and after every burn-in
        chunk): a run killed later, or a machine that lost power, keeps them, with the verdict INCOMPLETE."""
        self._written_at = time.monotonic()
        self._write(self._document(0, finished=False))

    def _document(self, exitstatus: int, finished: bool = True) -> dict:
        """The results document so far (results_document.py) from the session's facts and the reports' outcomes,
        kept as ``document`` for the report's page."""
        if finished:
            self.fabric_session.settle_measurements()
        facts = self.fabric_session.run_facts()
        tests = ReportedOutcomes(outcomes=self.outcomes, skip_reasons=self.skip_reasons, durations=self.durations,
                             promise_ids=self.promise_ids, messages=self.messages, not_run=self._not_judged(finished),
                             collection_errors=self.collection_errors)
        finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds") if finished else None
        document = self._provenance(results_document(facts, tests, exitstatus, finished_at), facts)
        self.document = document
        return document

    def _not_judged(self, finished: bool) -> dict[str, str]:
        """Promise id -> why no test judged it, for every promise of the profile (selection.py)."""
        if self.fabric_session.profile is None:
            return {}
        judged = set(self.promise_ids.values())
        return why_not_judged([p for p in self.fabric_session.promises.promised if p.id not in judged],
                              deselected=self.deselected, collection_errors=self.collection_errors,
                              ignored=ignored_suites(self.config, SUITES_DIR), stopped=self.stopped,
                              options=selection_options(self.config), finished=finished)

    def _provenance(self, document: dict, facts: RunFacts) -> dict:
        """Who ran it, what the verdict rests on (live, or a bundle by name, with the date it was measured), the
        system's identity and the plots' numbers; a finished run's document gets its integrity block (signed with
        --gpu-sign-key)."""
        document["run"]["operator"] = operator(self.fabric_session.options.operator)
        if document.get("profile"):
            document["profile"]["path"] = display_path(document["profile"]["path"], self.config.invocation_params.dir)
        if self._evidence is None:
            self._evidence = evidence_record(self.fabric_session, document)
        document["evidence"] = {**self._evidence, "judged_at": document.get("finished_at")}
        document["system"] = system_record(self.fabric_session, document)
        if document["finished_at"] is None:
            return document

        document["series"] = plot_series(facts.measurements)
        profile = document.get("profile") or {}
        document[INTEGRITY_KEY] = integrity_block(document, profile.get("sha256"), self._evidence.get("bundle"),
                                                  self._evidence.get("bundle_sha256"), self.sign_key)
        return document

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """A promise whose test -k, -m, --lf or --deselect left out was never judged: the verdict cannot be
        ACCEPTED without it (under pytest-xdist the workers deselect: selection.py says why from the options)."""
        if self.fabric_session.profile is None:
            return
        options = ", ".join(selection_options(self.config)) or "-k/-m"
        for item in items:
            promise_id, _ = promise_of(item, SUITES_DIR)
            if self.fabric_session.promises.get(promise_id) is not None:
                self.deselected[promise_id] = f"deselected ({options}): not run"

    @pytest.hookimpl(tryfirst=True)  # before pytest's own, which can fail to show where the Ctrl-C came
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """Ctrl-C, noted before the terminal reporter formats it: where that fails (a TypeError in pytest's
        traceback display, after a Ctrl-C inside an import), pytest's sessionfinish is told 0, not "interrupted".
        pytest.exit() comes here too, with its own return code: that is not a Ctrl-C."""
        self.ctrl_c = isinstance(excinfo.value, KeyboardInterrupt)

    @pytest.hookimpl(tryfirst=True)  # before pytest's junitxml writes its file: the verdict goes into it
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        self.session_finished = True
        self._read_journal()
        refused = list(self.journal.refused) if self.journal is not None else []
        if self.fabric_session.profile is not None:
            listed = self.fabric_session.promises.ids()
            refused += [f"{test}: a test of your own recorded a check of a promise on the profile's list, which only "
                        "pytest-gpufabric's shipped suites (and a site plugin's own kinds) judge"
                        for test in user_claims(self.fabric_session.results, listed)]
        if refused:  # a usage error (a worker's, or a test of the user's own claiming a promise): nothing is judged
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            self.nothing_judged, self.stopped = True, USAGE_STOP
            print(f"ERROR: {refused[0]}", file=sys.stderr)
            return
        if self.ctrl_c and exitstatus != pytest.ExitCode.INTERRUPTED:
            exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED

        if self.fabric_session.profile is not None and not self.outcomes and not self.collection_errors:
            # a run of a profile that judged nothing (--collect-only, -k matching nothing, Ctrl-C before the first
            # test): the results and report of the last run stay as they are, and the run exits as pytest says
            self.nothing_judged = True
            self.stopped = _why_stopped(session, int(exitstatus))
            return
        self.stopped = _why_stopped(session, int(exitstatus))
        document = self._document(int(exitstatus))
        summary = document["summary"]
        self.verdict = summary["verdict"]
        self.reason = summary["verdict_reason"]
        self.scope = summary.get("scope") or ""
        self.promises = document["promises"]
        if self.verdict is not None and int(exitstatus) in (0, 1, 5):
            # the verdict's own exit code (verdict.py); an interrupted run (2), an internal error (3) or a usage
            # error (4) keeps pytest's
            session.exitstatus = EXIT_CODES[self.verdict]
        summary["exit_code"] = int(session.exitstatus) if self.verdict is not None else None
        self.results_path = self._write(document)
        if self.results_path is None:
            # a verdict on no disk is no verdict to sign: every artifact says it could not be written
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = EXIT_CODES[INCOMPLETE]
            summary = {"verdict": "NOT WRITTEN", "exit_code": int(session.exitstatus),
                       "verdict_reason": f"{self.write_error}: the run judged {self.verdict}, but no results file "
                                         "holds it"}
        self.exit_status = int(session.exitstatus)
        _junit_properties(self.config, summary)

    def _write(self, document: dict):
        """The results on disk, or None when they cannot be written (a disk that filled up mid-run): the run
        goes on, the last file written stays, and where the last write failed the terminal summary says so."""
        path = self.fabric_session.report_dir / RESULTS_FILE
        try:
            written = write_json(document, path)
        except OSError as exc:
            self.write_error = f"could not write {path}: {exc.strerror or exc}"
            return None
        self.write_error = None
        return written

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.journal is not None:
            self.journal.remove()
        if self.ctrl_c and not self.session_finished and not self.is_worker:
            # Ctrl-C while the session began (the machine or bundle being read): pytest ends it with no summary
            print(f"gpufabric: the run was interrupted before a test ran, nothing judged; the results and report of "
                  f"the last run, if any, are kept: {self.fabric_session.report_dir / RESULTS_FILE}", file=sys.stderr)
        elif self.verdict is not None and not self.is_worker:
            # the run's last line, after pytest's own tally and pytest-html's: the verdict and where it is written
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            where = f"results: {self.results_path}" if self.results_path is not None else "results not written"
            line = f"gpufabric: {verdict_words(self.verdict, self.scope)}; {where}"
            if reporter is not None:
                reporter.write_line(line, bold=True, red=self.verdict == "REJECTED", green=self.verdict == "ACCEPTED",
                                    yellow=self.verdict in ("INCOMPLETE", "NOT TESTED"))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.is_worker:
            return
        profile = self.fabric_session.profile
        fabric = self.fabric_session.fabric
        what = f"profile {profile.name}" if profile else "replay, no profile"
        source = clean_line(str(fabric.source)) if fabric else "no machine"  # a bundle's path: user's text
        if self.nothing_judged:
            happened = (self.stopped if self.stopped == USAGE_STOP else
                        f"{self.stopped} before a test ran" if self.stopped else "no test ran")
            terminalreporter.write_sep("=", f"gpufabric: {happened}, nothing judged ({what}, {source})", yellow=True)
            terminalreporter.write_line(f"the results and report of the last run, if any, are kept: "
                                        f"{self.fabric_session.report_dir / RESULTS_FILE}")
            return

        verdict = verdict_words(self.verdict, self.scope)
        if self.results_path is None and self.verdict is not None:
            verdict = f"no verdict written (the run judged {verdict}, but its results are on no disk)"
        terminalreporter.write_sep("=", f"gpufabric: {verdict} ({what}, {source})", bold=True,
                                   red=self.verdict == "REJECTED", green=self.verdict == "ACCEPTED",
                                   yellow=self.verdict in ("INCOMPLETE", "NOT TESTED"))
        if self.verdict is not None:
            terminalreporter.write_line(clean_line(f"{self.verdict}: {self.reason}"))
            # what failed first, then what could not be checked, one line per cause (grouped.py), then the tally
            causes, tally = cause_lines(self.promises), tally_line(self.promises)
            for line in causes[:20]:
                terminalreporter.write_line(clean_line(line))  # machine text: no terminal control bytes
            if len(causes) > 20:
                terminalreporter.write_line(f"  ... {len(causes) - 20} more causes in the results file")
            if tally:
                terminalreporter.write_line(tally)
        if self.results_path is not None:
            terminalreporter.write_line(f"results: {self.results_path}")
        if self.write_error is not None:
            unwritten = (f" (the run's own results are not on disk: exit status {self.exit_status})"
                         if self.results_path is None else "")
            terminalreporter.write_line(f"gpufabric: {self.write_error}{unwritten}", red=True, bold=True)


def _why_stopped(session: pytest.Session, exitstatus: int) -> str | None:
    """Why the run ended before its last test: interrupted, or stopped at a failure (-x, --maxfail)."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "the run was interrupted"
    if session.shouldfail:
        return f"the run stopped early ({session.shouldfail})"
    if session.shouldstop:
        return f"the run stopped early ({session.shouldstop})"
    return None


def _junit_properties(config: pytest.Config, summary: dict) -> None:
    """The verdict as properties of pytest's JUnit XML (--junitxml), for CI systems that read only that."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    xml.add_global_property("gpufabric_verdict", str(summary["verdict"]))
    xml.add_global_property("gpufabric_verdict_reason", str(summary["verdict_reason"]))
    xml.add_global_property("gpufabric_exit_code", str(summary["exit_code"]))


def failure_message(report: pytest.TestReport) -> str:
    """Why a test failed or broke, whole: pytest.fail()'s message, or the exception's (a matrix check names every
    cell that differs on the lines after its first)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    text = text.removeprefix("Failed: ").strip()
    return text or "no message"


def collection_error(report: pytest.CollectReport) -> str:
    """Why a file could not be collected, in one line: the error pytest's report ends with ("E   ModuleNotFoundError:
    No module named 'x'"), after what it was doing ("ImportError while importing test module ...")."""
    lines = [line.strip() for line in str(report.longrepr or "").splitlines() if line.strip()]
    errors = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
    first = lines[0] if lines else "no message"
    return f"{first} {errors[-1]}" if errors and errors[-1] not in first else first


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped report gives: pytest.skip()'s message (``longrepr`` is (path, lineno, reason); a
    report from a pytest-xdist worker may carry it as a list), or the xfail reason."""
    if hasattr(report, "wasxfail"):
        return f"expected to fail: {report.wasxfail}" if report.wasxfail else "expected to fail"
    longrepr = report.longrepr
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr or "")
    return reason.removeprefix("Skipped: ").strip()
