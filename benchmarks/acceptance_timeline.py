"""A pytest plugin for benchmarks/acceptance_time.py: when each part of an acceptance ran, in seconds since the
pytest process was started (GPUFABRIC_BENCH_T0, the wall clock the benchmark read just before starting it).

Writes GPUFABRIC_BENCH_TIMELINE (a JSON file) at the process's exit: ``events`` (name, seconds) for the import of
the ``-p`` plugins (this one), pytest_configure (before any plugin's), the session's start, collection's end, each
test's start and end, the session's finish (before and after every plugin's pytest_sessionfinish: the verdict and
the reports, with every plugin's terminal summary inside it), pytest_unconfigure and the interpreter's exit;
``spares``: when each spare interpreter was started and what it imported."""

from __future__ import annotations

import atexit
import json
import os
import time

import pytest

T0 = float(os.environ.get("GPUFABRIC_BENCH_T0") or time.time())
EVENTS: list[tuple[str, float]] = []
SPARES: list[dict] = []


def mark(name: str) -> None:
    EVENTS.append((name, round(time.time() - T0, 3)))


mark("plugins imported")


def _write() -> None:
    mark("interpreter exit")
    path = os.environ.get("GPUFABRIC_BENCH_TIMELINE")
    if path:
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"events": EVENTS, "spares": SPARES}, out, indent=1)


atexit.register(_write)


def _watch_spares() -> None:
    """Note each spare interpreter's start (runner.SpareInterpreters._spawn), without changing what it does."""
    from pytest_gpufabric.workloads import runner

    spawn = runner.SpareInterpreters._spawn

    def spawn_noted(self, env, imports):
        SPARES.append({"started_s": round(time.time() - T0, 3), "imports": list(imports)})
        return spawn(self, env, imports)

    runner.SpareInterpreters._spawn = spawn_noted


_watch_spares()  # now: the plugin starts its spares in its own pytest_configure


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config) -> None:
    # just before every plugin's pytest_configure (a historic hook: it takes no wrapper)
    mark("pytest_configure")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    mark("session start")


def pytest_collection_finish(session) -> None:
    mark("collected")


def pytest_runtest_logstart(nodeid, location) -> None:
    mark(f"start {nodeid.rsplit('/', 1)[-1]}")


def pytest_runtest_logfinish(nodeid, location) -> None:
    mark(f"end {nodeid.rsplit('/', 1)[-1]}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    mark("session finish")
    yield
    mark("session finished (verdict and reports written)")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    mark("terminal summary")  # every plugin's summary: a third-party one may import its package here
    yield
    mark("terminal summary written")


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config) -> None:
    mark("pytest_unconfigure")
