"""The health watchdog: NVML error counters read before and after every test (and in the background for a
timeline); a test during which a forbidden counter rose fails, naming GPU, serial, link and counter.

Active when a profile is given and the machine is read live (a replay has no live counters). Registered by the
plugin as a pytest plugin object of its own.
"""

from __future__ import annotations

import pytest

from .errors import HardwareUnavailable
from .fabric.health import COUNTERS, DEFAULT_FORBIDDEN, base_counter, counter_deltas


def health_problems(before: dict, after: dict, section: dict) -> list[str]:
    """What a test did to the GPUs' health that the profile forbids: one sentence each."""
    forbidden = set(section.get("forbid", DEFAULT_FORBIDDEN))
    max_temperature = section.get("max_temperature_c")
    forbidden_throttle = set(section.get("forbid_throttle", ["hw_slowdown", "hw_thermal_slowdown",
                                                             "hw_power_brake_slowdown"]))
    problems = []
    for index, now in after.items():
        then = before.get(index)
        if then is None:
            continue
        who = f"GPU{index} (serial {now.serial or 'unknown'})"
        for name, delta in counter_deltas(then, now).items():
            counter = base_counter(name)
            if counter in forbidden:
                link = f" link {name.split(':', 1)[1]}" if ":" in name else ""
                problems.append(f"{who}{link}: {counter} rose by {delta} during this test ({COUNTERS[counter]})")
        if max_temperature is not None and now.temperature_c is not None and now.temperature_c > max_temperature:
            problems.append(f"{who}: {now.temperature_c} C after this test, above the {max_temperature} C allowed")
        slowed = sorted(set(now.throttle) & forbidden_throttle)
        if slowed:
            problems.append(f"{who}: clocks held back by {', '.join(slowed)} at the end of this test")
    return problems


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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if self.reader is None:
            return (yield)
        before = self.reader.read()
        try:
            result = yield
        finally:  # a test that failed by itself still has its health recorded
            after = self.reader.read()
            self.fabric_session.health["tests"][item.nodeid] = {
                str(i): {"rose": counter_deltas(before[i], after[i]), "temperature_c": after[i].temperature_c,
                         "power_w": after[i].power_w, "throttle": after[i].throttle} for i in after}
        problems = health_problems(before, after, self.section)
        if problems:
            pytest.fail("health: " + "; ".join(problems), pytrace=False)
        return result

    @pytest.hookimpl(tryfirst=True)  # before the results are written
    def pytest_sessionfinish(self, session) -> None:
        if self.timeline is not None:
            self.timeline.stop()
            self.fabric_session.health["timeline"] = self.timeline.points
        if self.reader is not None:
            self.fabric_session.health["xid_events"] = list(self.reader.xid_events)
            self.reader.close()
