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
        self.is_worker = hasattr(config, "workerinput")
        self.results_path = None
        self.verdict: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            outcome = "error" if report.failed and report.when != "call" else report.outcome
            self.outcomes.setdefault(report.nodeid, outcome)
        if report.when == "teardown":
            for name, value in report.user_properties:
                if name == CHECK_PROPERTY:
                    self.fabric_session.results.append({"test": report.nodeid, **value})

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        document = self.fabric_session.results_document(self.outcomes, int(exitstatus))
        self.verdict = self.fabric_session.verdict = document["summary"]["verdict"]
        self.results_path = write_json(document, self.fabric_session.report_dir / RESULTS_FILE)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.results_path is None:
            return
        profile = self.fabric_session.profile
        fabric = self.fabric_session.fabric
        what = f"profile {profile.name}" if profile else "replay, no profile"
        source = fabric.source if fabric else "no machine"
        verdict = self.verdict or "no verdict (nothing promised)"
        terminalreporter.write_sep("=", f"gpufabric: {verdict} ({what}, {source})", bold=True,
                                   red=self.verdict == "REJECTED", green=self.verdict == "ACCEPTED")
        terminalreporter.write_line(f"results: {self.results_path}")
