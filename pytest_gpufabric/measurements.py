"""The measurement registry: every measurement the suites judge, by its name.

An entry (kinds.suite_measurement.SuiteMeasurement) says what a measurement is made of: the fixture the suites ask
for it by, the profile key that promises it (no promise, no measurement: the fixture skips as "not promised"), how it
is made live (a workload, in child processes), the bundle file it records into and how a replay reads it back, and
which check and suite judge it. Each family under kinds/ declares its own (``MEASUREMENTS``); a per-GPU diagnostic's
entry is made here from its kind (kinds.diagnostics()), so a new one adds nothing here. FabricSession.measurement()
walks the registry instead of an if-chain, and fixtures.py makes one fixture per entry.

Live results are written to the report folder under the entry's ``record_file`` as they are made: with the
snapshot, that folder is a bundle a replay judges the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .kinds import diagnostics, suite_measurements
from .kinds.base import Measurement as DiagnosticMeasurement
from .kinds.suite_measurement import SuiteMeasurement, promised_by_section, record_live, record_replay

__all__ = ["REGISTRY", "Measurement", "register"]

#: a registry entry (the families declare theirs with this type)
Measurement = SuiteMeasurement

REGISTRY: dict[str, Measurement] = {}


def register(measurement: Measurement) -> Measurement:
    if measurement.name in REGISTRY or any(m.fixture == measurement.fixture for m in REGISTRY.values()):
        raise ValueError(f"measurement {measurement.name} (fixture {measurement.fixture}) is registered twice")
    REGISTRY[measurement.name] = measurement
    return measurement


# --- per-GPU diagnostics of the depth `dcgmi diag` gives (suites/test_diagnostics.py): one entry per kind ------


def _gpu_env(fabric_session):
    from .workloads.environment import gpu_environment

    return gpu_environment(fabric_session.boards())


def _diagnostic_live(measurement: DiagnosticMeasurement) -> Callable[[Any], dict]:
    """The diagnostic measured on the run's promised boards, as its profile section asks (its launcher)."""
    def live(fabric_session) -> dict:
        section = fabric_session.profile.data[measurement.diagnostic.key]
        return measurement.launch(section, _gpu_env(fabric_session), fabric_session.boards(), fabric_session.fabric,
                                  plant_fault=fabric_session.options.plant_memory_fault)[0]

    return live


def _beside_refused(measurement: DiagnosticMeasurement) -> Callable[[Any], str | None]:
    """Why this diagnostic does not run alongside its partner in this run (its kind's rule on both sections)."""
    partner = next(m.diagnostic for m in (k.measurement for k in diagnostics())
                   if m.diagnostic.measurement == measurement.runs_beside)

    def refused(fabric_session) -> str | None:
        data = fabric_session.profile.data
        return measurement.beside_refused(data[measurement.diagnostic.key], data.get(partner.key, {}),
                                          fabric_session.fabric)

    return refused


def register_diagnostic(measurement: DiagnosticMeasurement) -> Measurement:
    """The registry's entry of a per-GPU diagnostic kind: its descriptor's fixture, section and recording."""
    d = measurement.diagnostic
    beside = {} if measurement.runs_beside is None else {
        "runs_beside": measurement.runs_beside, "beside_refused": _beside_refused(measurement)}
    return register(Measurement(
        name=d.measurement, fixture=d.fixture, doc=d.doc, why_not_promised=promised_by_section(d.key, d.what),
        live=record_live(d.record_file, _diagnostic_live(measurement)),
        replay=record_replay(d.record_file, d.file_kind),
        nothing_recorded=f"the bundle holds no {d.one} ({d.record_file})",
        record_file=d.record_file, check=d.check, suite="suites/test_diagnostics.py",
        processes=(lambda gpus: gpus) if d.per_gpu else (lambda gpus: 1), **beside))


for _entry in suite_measurements():
    register(_entry)
for _kind in diagnostics():
    register_diagnostic(_kind.measurement)
