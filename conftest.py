"""The repo's own test set-up, nothing the plugin needs.

pytester is enabled with `-p pytester` in pyproject's addopts rather than `pytest_plugins` here: in a source
checkout the shipped suites live below this file, so pytest also loads it for the runs pytester starts, and
`pytest_plugins` is only allowed in the rootdir's conftest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "tests" / "data"


@pytest.fixture
def bundles() -> Path:
    """Bundles recorded from real machines (also what the package ships)."""
    return DATA / "bundles"


@pytest.fixture
def captures() -> Path:
    """Tool outputs of real machines, as captured."""
    return DATA / "captures"


@pytest.fixture
def judged():
    """assert_judged(result, passed=, failed=): exactly these outcomes, no errors, every other test skipped.
    Later suites add skipped tests (not promised, not recorded); they must not add passes or failures."""

    def assert_judged(result, passed: int, failed: int = 0) -> None:
        outcomes = result.parseoutcomes()
        assert outcomes.get("passed", 0) == passed, outcomes
        assert outcomes.get("failed", 0) == failed, outcomes
        assert not outcomes.get("errors") and not outcomes.get("error"), outcomes

    return assert_judged


# --- the tests write nothing into the repository ---------------------------------------------------------

REPO = Path(__file__).parent
#: what a test run may leave in the checkout: caches of the tools themselves
_TOOL_CACHES = (".pytest_cache/", ".hypothesis/", ".ruff_cache/", "__pycache__/", ".whl/", ".egg-info/")


def _files_git_does_not_track() -> set[str] | None:
    """Untracked and ignored files of the checkout (git's view), tool caches left out; None outside a git checkout."""
    import subprocess

    try:
        done = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "-z"], cwd=REPO,
                              capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    paths = {entry[3:] for entry in done.stdout.decode(errors="replace").split("\0") if entry[:2] in ("??", "!!")}
    return {p for p in paths if not any(cache in f"/{p}" or p.startswith(cache) for cache in _TOOL_CACHES)}


def pytest_sessionstart(session: pytest.Session) -> None:
    if _checks_the_checkout(session.config):
        session.config._files_before = _files_git_does_not_track()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that writes into the checkout (a screenshot into reports/, a bundle beside the data) fails the run:
    the tests must leave the repository as they found it (GPUFABRIC_WRITE_SCREENSHOTS=1 writes docs/ on purpose)."""
    before = getattr(session.config, "_files_before", None)
    if before is None:
        return
    after = _files_git_does_not_track() or set()
    written = sorted(after - before)
    if written:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"the tests wrote {len(written)} file(s) into the repository: "
                                + ", ".join(written[:20]), red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _checks_the_checkout(config: pytest.Config) -> bool:
    """The repository's own test run (not a run pytester starts, not an xdist worker, not a screenshot run)."""
    import os

    return (config.rootpath == REPO and not hasattr(config, "workerinput")
            and os.environ.get("GPUFABRIC_WRITE_SCREENSHOTS") != "1")
