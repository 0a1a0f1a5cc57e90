"""RunRecorder: collects each test's outcome and checks from the test reports, and writes the results.

It works from reports, not from test items, because under pytest-xdist the tests run in worker processes and
only their reports reach the controller; workers record nothing themselves.
"""

from __future__ import annotations

import pytest

from .results import write_json

RESULTS_FILE = "gpufabric-results.json"
CHECK_PROPERTY = "gpufabric_check"


class RunRecorder:
    def __init__(self, config: pytest.Config, fabric_session) -> None:
        self.config = config
        self.fabric_session = fabric_session
        self.outcomes: dict[str, str] = {}
        self.skip_reasons: dict[str, str] = {}  # node id -> why it was skipped
        self.durations: dict[str, float] = {}  # node id -> seconds, set-up + call + teardown
        self.is_worker = hasattr(config, "workerinput")
        self.results_path = None
        self.write_error: str | None = None  # the last failure to write the results
        self.verdict: str | None = None
        if not self.is_worker:
            fabric_session.checkpoint = self.checkpoint

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            outcome = "error" if report.failed and report.when != "call" else report.outcome
            if report.nodeid not in self.outcomes and self.fabric_session.metrics is not None:
                self.fabric_session.metrics.observe_test(report.nodeid, outcome)
            self.outcomes.setdefault(report.nodeid, outcome)
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + (report.duration or 0.0)
        if report.skipped:
            self.skip_reasons.setdefault(report.nodeid, skip_reason(report))
        if report.when == "teardown":
            for name, value in report.user_properties:
                if name == CHECK_PROPERTY:
                    self.fabric_session.results.append({"test": report.nodeid, **value})
            if not self.is_worker:
                self.checkpoint()

    def checkpoint(self) -> None:
        """The results so far, on disk (after every test, and every burn-in chunk): a run killed later, or a
        machine that lost power, keeps them, with the verdict INCOMPLETE."""
        self._write(self.fabric_session.results_document(
            self.outcomes, 0, skip_reasons=self.skip_reasons, durations=self.durations, finished=False))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        document = self.fabric_session.results_document(self.outcomes, int(exitstatus),
                                                        skip_reasons=self.skip_reasons, durations=self.durations)
        self.verdict = self.fabric_session.verdict = document["summary"]["verdict"]
        self.results_path = self._write(document)
        if self.results_path is None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a verdict not on disk is no verdict to sign

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

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.is_worker:
            return
        profile = self.fabric_session.profile
        fabric = self.fabric_session.fabric
        what = f"profile {profile.name}" if profile else "replay, no profile"
        source = fabric.source if fabric else "no machine"
        verdict = self.verdict or "no verdict (nothing promised)"
        terminalreporter.write_sep("=", f"gpufabric: {verdict} ({what}, {source})", bold=True,
                                   red=self.verdict == "REJECTED", green=self.verdict == "ACCEPTED")
        if self.results_path is not None:
            terminalreporter.write_line(f"results: {self.results_path}")
        if self.write_error is not None:
            unwritten = " (the run's own results are not on disk: exit status 1)" if self.results_path is None else ""
            terminalreporter.write_line(f"gpufabric: {self.write_error}{unwritten}", red=True, bold=True)


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
