"""The health watchdog: NVML error counters read when every test starts its set-up and when its call ends (and
in the background for a timeline); a test during which a forbidden counter rose, the GPU ran hotter than allowed
or a forbidden clock-event reason was active fails, naming GPU, serial, link and counter.

The window opens at set-up because that is where session fixtures do their work: the burn-in's ten minutes of
GEMMs run in the set-up of the first burn-in test. Active when a profile is given and the machine is read live
(a replay has no live counters). Registered by the plugin as a pytest plugin object of its own.
"""

from __future__ import annotations

import pytest

from .checks.health import health_problems
from .errors import HardwareUnavailable
from .fabric.health import window_record

#: per test: the read that opened its window, and how many timeline points existed then
_WINDOW_KEY = pytest.StashKey[tuple]()


class HealthWatch:
    """pytest hooks: bracket every test with health reads; keep a timeline; record per-test deltas."""

    def __init__(self, fabric_session, section: dict, metrics=None) -> None:
        self.fabric_session = fabric_session
        self.section = section
        self.metrics = metrics
        self.reader = None
        self.timeline = None
        self.unavailable: str | None = None

    def pytest_sessionstart(self, session) -> None:
        from .fabric.health import HealthReader, HealthTimeline

        try:
            self.reader = HealthReader()
        except HardwareUnavailable as exc:
            self.unavailable = str(exc)  # the suites say so; the watchdog stays out of the way
            return
        xid = self.reader.watch_xid()
        self.fabric_session.health["xid_watch"] = xid or "on"
        self.timeline = HealthTimeline(self.reader, self.section.get("interval_s", 2.0), self._observe)
        self.timeline.start()

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
        item.stash[_WINDOW_KEY] = (self.reader.read(), len(self.timeline.points))
        try:
            return (yield)
        except pytest.skip.Exception:
            del item.stash[_WINDOW_KEY]  # skipped: nothing of the test ran
            raise
        except BaseException:
            self._close_window(item)  # the set-up failed by itself; what it did to the GPUs is still recorded
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if _WINDOW_KEY not in item.stash:
            return (yield)
        try:
            result = yield
        finally:  # a test that failed by itself still has its health recorded
            window = self._close_window(item)
        problems = health_problems(window, self.section)
        if problems:
            pytest.fail("health: " + "\n".join(problems), pytrace=False)
        return result

    def _close_window(self, item) -> dict:
        before, first_point = item.stash[_WINDOW_KEY]
        del item.stash[_WINDOW_KEY]
        window = window_record(before, self.reader.read(), self.timeline.points[first_point:])
        self.fabric_session.health["tests"][item.nodeid] = window
        return window

    @pytest.hookimpl(tryfirst=True)  # before the results are written
    def pytest_sessionfinish(self, session) -> None:
        if self.timeline is not None:
            self.timeline.stop()
            self.fabric_session.health["timeline"] = self.timeline.points
        if self.reader is not None:
            self.fabric_session.health["xid_events"] = list(self.reader.xid_events)
            self.reader.close()
