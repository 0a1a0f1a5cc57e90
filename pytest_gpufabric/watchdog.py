"""The health watchdog: NVML error counters read when every test starts its set-up and when its call ends (and
in the background for a timeline); a test during which a forbidden counter rose, the GPU ran hotter than allowed
or a forbidden clock-event reason was active fails, naming GPU, serial, link and counter.

The window opens at set-up because that is where session fixtures do their work: the burn-in's ten minutes of
GEMMs run in the set-up of the first burn-in test. Active when a profile is given and the machine is read live
(a replay has no live counters). Registered by the plugin as a pytest plugin object of its own.

The NVLink error counters cost about 0.9 ms a link and counter to read (5 counters, 18 links: 80 ms a GPU), more
than a trivial test takes. Where reading them all costs more than ``SYNC_BUDGET_S``, a sweeper reads them in the
background, a thread per GPU (fabric.health.NvlinkSweeper), and each rise is attributed to the test whose window
holds both reads that bracket it; a rise whose reads span several tests is said to be so, naming them, and fails
the test in which it is seen when the profile forbids it: an event is never lost. A test longer than
``LONG_TEST_S`` waits for a sweep after its end, so the suites' workloads are judged on their own windows.
"""

from __future__ import annotations

import time
from collections import deque

import pytest

from .checks.health import counter_problems, health_problems
from .errors import HardwareUnavailable
from .fabric import health as fabric_health
from .fabric.health import HealthTimeline, NvlinkSweeper, window_record
from .promise import fail_promise

#: per test: the read that opened its window, how many timeline points existed then, and when it opened
_WINDOW_KEY = pytest.StashKey[tuple]()
#: reading every NVLink counter at each test's edges costs at most this (all GPUs), else they are swept apart
SYNC_BUDGET_S = 0.003
#: a test at least this long waits for a sweep begun after its end: its rises are then its own, known at its end
LONG_TEST_S = 1.0


def attribute(since: float, until: float, windows) -> tuple[str | None, list[str]]:
    """(the test whose window holds all of [since, until], or None; every test whose window overlaps it).

    ``windows``: (node id, opened, closed) in monotonic seconds; a window still open has ``closed`` +inf."""
    overlapping = [nodeid for nodeid, opened, closed in windows if opened < until and closed > since]
    owner = next((nodeid for nodeid, opened, closed in windows if opened <= since and until <= closed), None)
    return owner, overlapping


class HealthWatch:
    """pytest hooks: bracket every test with health reads; keep a timeline; record per-test deltas."""

    def __init__(self, fabric_session, section: dict, metrics=None) -> None:
        self.fabric_session = fabric_session
        self.section = section
        self.metrics = metrics
        self.reader = None
        self.timeline = None
        self.sweeper = None  # fabric.health.NvlinkSweeper where reading the NVLink counters at the edges costs
        self.unavailable: str | None = None
        self.windows: deque = deque()  # (node id, opened, closed) of the tests a pending rise may belong to

    def pytest_sessionstart(self, session) -> None:
        try:
            self.reader = fabric_health.HealthReader()  # looked up now: tests stand a recorded reader in for NVML
        except HardwareUnavailable as exc:
            self.unavailable = str(exc)  # the suites say so; the watchdog stays out of the way
            return
        xid = self.reader.watch_xid()
        self.fabric_session.health["xid_watch"] = xid or "on"
        self._choose_nvlink_reading()
        self.timeline = HealthTimeline(self.reader, self.section.get("interval_s", 2.0), self._observe)
        self.timeline.start()

    def _choose_nvlink_reading(self) -> None:
        """At the tests' edges where that is cheap; else swept in the background. One GPU's read, timed at the
        start, times the GPUs with links: what a read of all of them would cost (on 8 GPUs of 18 links, reading
        them all to find out would add half a second to every run)."""
        if not hasattr(self.reader, "read_nvlink"):
            return
        linked = [index for index, links in self.reader.links.items() if links]
        started = time.monotonic()
        if linked:
            self.reader.read_nvlink(linked[0])
        cost = (time.monotonic() - started) * len(linked)
        self.fabric_session.health["nvlink_reading"] = {"full_read_s": round(cost, 4),
                                                        "mode": "at each test" if cost <= SYNC_BUDGET_S
                                                        else "swept in the background"}
        if cost > SYNC_BUDGET_S:
            self.sweeper = NvlinkSweeper(self.reader)
            self.sweeper.start()

    def _read(self):
        return self.reader.read_fast() if self.sweeper is not None else self.reader.read()

    def _observe(self, reads) -> None:
        if self.metrics is not None:
            for index, health in reads.items():
                self.metrics.observe_health(index, health.serial or "", {
                    "temperature_c": health.temperature_c, "power_w": health.power_w,
                    "sm_clock_mhz": health.sm_clock_mhz, **{k: v for k, v in health.counters.items()}})

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the window includes the fixtures' set-up
    def pytest_runtest_setup(self, item):
        if self.reader is None:
            return (yield)
        item.stash[_WINDOW_KEY] = (self._read(), len(self.timeline.points), time.monotonic())
        try:
            return (yield)
        except pytest.skip.Exception:
            del item.stash[_WINDOW_KEY]  # skipped: nothing of the test ran
            raise
        except BaseException:
            # the set-up failed by itself; what it did to the GPUs is still recorded, and what was seen late kept
            _, late = self._close_window(item)
            self.fabric_session.health.setdefault("findings", []).extend(late)
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if _WINDOW_KEY not in item.stash:
            return (yield)
        try:
            result = yield
        finally:  # a test that failed by itself still has its health recorded
            window, seen_late = self._close_window(item)
        problems = health_problems(window, self.section) + seen_late
        if problems:
            fail_promise("health: " + "\n".join(problems))
        return result

    def _close_window(self, item) -> tuple[dict, list[str]]:
        before, first_point, opened = item.stash[_WINDOW_KEY]
        del item.stash[_WINDOW_KEY]
        window = window_record(before, self._read(), self.timeline.points[first_point:])
        closed = time.monotonic()
        self.fabric_session.health["tests"][item.nodeid] = window
        seen_late: list[str] = []
        if self.sweeper is not None:
            if closed - opened >= LONG_TEST_S:
                self.sweeper.wait_past(closed, timeout_s=5.0)
            self.windows.append((item.nodeid, opened, closed))
            seen_late = self._attribute(self.sweeper.take(), current=item.nodeid)
            oldest = self.sweeper.oldest_sweep()
            while self.windows and self.windows[0][2] < oldest:  # no rise to come can fall in these any more
                self.windows.popleft()
        return window, seen_late

    def _attribute(self, rises, current: str | None) -> list[str]:
        """Each rise into the window record of the test it rose in; what the profile forbids and the current test
        did not itself do (seen only now, or across several tests) as a sentence for the current test to fail
        with. Every rise is also kept in the health record's ``nvlink_rises``, with the tests it spans."""
        late: list[str] = []
        tests = self.fabric_session.health["tests"]
        for rise in rises:
            owner, spanned = attribute(rise.since, rise.until, self.windows)
            self.fabric_session.health.setdefault("nvlink_rises", []).append(
                {"gpu": rise.gpu, "serial": rise.serial, "counter": rise.counter, "delta": rise.delta,
                 "test": owner, "while": spanned[:20], "tests_while": len(spanned)})
            if owner is not None and owner in tests:
                record = tests[owner].setdefault(str(rise.gpu), {"serial": rise.serial, "rose": {}})
                rose = record.setdefault("rose", {})
                rose[rise.counter] = rose.get(rise.counter, 0) + rise.delta
            forbidden = counter_problems({rise.counter: rise.delta}, self.section)
            if not forbidden or (owner is not None and owner == current):
                continue  # the current test's own: its window record says it
            who = f"GPU{rise.gpu} (serial {rise.serial or 'unknown'})"
            if owner is not None:
                where = f"during test {owner} (seen after it ended)"
            elif spanned:
                where = (f"while {len(spanned)} test(s) ran ({', '.join(spanned[:3])}"
                         + (" ..." if len(spanned) > 3 else "") + "): the reads around it cannot tell which")
            else:
                where = "between tests"
            late.append(f"{who} {where}: {'; '.join(forbidden)}")
        return late

    @pytest.hookimpl(tryfirst=True)  # before the results are written
    def pytest_sessionfinish(self, session) -> None:
        if self.timeline is not None:
            self.timeline.stop()
            self.fabric_session.health["timeline"] = self.timeline.points
        if self.sweeper is not None:
            # rises after the last test's window closed, or not yet attributed: in the record, never lost; the
            # forbidden ones are a finding of the run (report/recorder.py makes them a promise of their own)
            late = self._attribute(self.sweeper.stop(), current=None)
            if late:
                self.fabric_session.health.setdefault("findings", []).extend(late)
        if self.reader is not None:
            self.fabric_session.health["xid_events"] = list(self.reader.xid_events)
            self.reader.close()
