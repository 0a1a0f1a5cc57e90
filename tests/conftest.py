"""The repo's own test set-up, nothing the plugin needs.

It lives here, not at the repository's root: the shipped suites (pytest_gpufabric/suites/) live below the root, so
a conftest there is also loaded for a user's `gpufabric accept` run in a source checkout and for the runs pytester
starts. pytester is enabled with `-p pytester` in pyproject's addopts: `pytest_plugins` is only allowed in the
rootdir's conftest. pytest still loads this file for a run started at the root without paths (pyproject's
testpaths), `pytest --gpu-profile X` included: its hooks act only on a run that collects the tests below it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def bundles() -> Path:
    """Bundles recorded from real machines (also what the package ships)."""
    return DATA / "bundles"


@pytest.fixture
def captures() -> Path:
    """Tool outputs of real machines, as captured."""
    return DATA / "captures"


@pytest.fixture
def spares_left_cold():
    """For a test that measures live through a FabricSession of its own, outside a pytest run: that turns the spare
    interpreters on (session.py) and only a run's end turns them off, so this does, for the tests after it."""
    yield
    from pytest_gpufabric.workloads.runner import SPARES

    SPARES.disable()


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


# --- how many workers `-n auto` starts ------------------------------------------------------------------

#: past this many workers the longest tests set the run's time, and each more worker's start-up and memory are lost
MOST_WORKERS = 8
CGROUP = Path("/sys/fs/cgroup")


def cpu_quota(cgroup: Path = CGROUP) -> float | None:
    """The CPUs a container's CPU quota allows (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` over its period), or None
    without a quota. Such a container may still be scheduled on every core of its host."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()  # "max 100000" or "200000 100000"
    except (OSError, ValueError):
        try:
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()  # -1: none
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None  # "max"
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


@pytest.hookimpl(optionalhook=True)  # xdist is a test tool: a user's run in the checkout has none
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` for the repository's tests: a worker per core this run may use, a CPU quota counted (xdist counts
    the cores it may be scheduled on, or with psutil the host's), at most MOST_WORKERS. Timed tests (burn-in
    budgets, rate-limited links) need their core. PYTEST_XDIST_AUTO_NUM_WORKERS, or another run, is xdist's."""
    import math
    import os

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.getoption("gpu_profile", None) \
            or not _collects_these_tests(config):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota(CGROUP)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, min(cores, MOST_WORKERS))


# --- the tests write nothing into the repository ---------------------------------------------------------

TESTS = Path(__file__).parent
REPO = TESTS.parent
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
    """The repository's own test run: one that collects the tests below this file (not a user's acceptance run in
    the checkout, which writes reports/ on purpose; not a run pytester starts, not an xdist worker, not a screenshot
    run)."""
    import os

    return (config.rootpath == REPO and _collects_these_tests(config) and not hasattr(config, "workerinput")
            and os.environ.get("GPUFABRIC_WRITE_SCREENSHOTS") != "1")


def _collects_these_tests(config: pytest.Config) -> bool:
    """Whether one of the run's paths (after the plugin swapped in its suites for `--gpu-profile`) is in tests/."""
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == TESTS or TESTS in path.parents:
            return True
    return False
