"""A measurement a family's suite judges, as its family declares it (``MEASUREMENTS``): the fixture the suites ask
for it by, the profile key that promises it, how it is made live (a workload, in child processes), the bundle file it
records into and how a replay reads it back. measurements.py gathers them into its registry, with one entry per
per-GPU diagnostic (kinds.base.Measurement).

Every function here and in the families' entries imports its workload or bundle reader when it runs: the families
load with the plugin, in every pytest run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SuiteMeasurement", "promised_by_section", "record_live", "record_replay"]


@dataclass(frozen=True)
class SuiteMeasurement:
    name: str  # the key FabricSession caches it by
    fixture: str  # the fixture the suites (and users' tests) ask for it by
    doc: str  # the fixture's docstring
    why_not_promised: Callable[[Any], str | None]  # profile -> what it does not promise, None when it does
    live: Callable[[Any], Any]  # FabricSession -> the measurement (may raise GpuFabricError, ToolMissing)
    replay: Callable[[Path, Any], Any]  # (bundle folder, FabricSession) -> the measurement, None when not recorded
    nothing_recorded: str  # what a bundle lacks when ``replay`` finds nothing: the promise is not checked
    record_file: str | None = None  # where a live measurement is written (report folder = bundle): its JSON
    to_json: Callable[[Any], Any] | None = None  # the measurement as that file holds it (default: itself)
    check: str = ""  # the check module that judges it (for whoever reads this)
    suite: str = ""  # the suite module whose tests judge it
    needs_machine: bool = True  # the fixture asks for the machine first (RDMA is read without NVML)
    asked: str | None = None  # a FabricSession property: the run measures it only when asked (the burn-in)
    # what its workload script imports that a spare interpreter can import ahead (workloads/runner.py)
    spare_imports: tuple[str, ...] = ("torch",)
    # GPUs promised -> how many workload processes it starts at once (a rank or a worker per GPU): the spare
    # interpreters started ahead for it
    processes: Callable[[int], int] = lambda gpus: 1
    #: the measurement this one starts alongside in a live run, where both are asked for (FabricSession)
    runs_beside: str | None = None
    #: FabricSession -> why it does not run alongside that one this time; None: it does
    beside_refused: Callable[[Any], str | None] = lambda fabric_session: None


def promised_by_section(key: str, what: str) -> Callable[[Any], str | None]:
    """Promised by a profile section (``key`` present)."""
    return lambda profile: None if key in profile.data else f"profile {profile.name} promises no {what}"


def record_replay(name: str, file_kind: tuple | None = None) -> Callable[[Path, Any], Any]:
    """The bundle's file of this kind, typed (formats/records.py): a Recording whose problems the checks say;
    ``file_kind``: (format tag, shape, what) where formats/records.py does not know the file itself."""
    def replay(directory: Path, fabric_session):
        from ..formats.records import load_record

        return load_record(directory, name, file_kind)

    return replay


def record_live(name: str, measure: Callable[[Any], dict]) -> Callable[[Any], Any]:
    """A live result as the suites take a recording (formats/records.Recording), written as the dict it is."""
    def live(fabric_session):
        from ..formats.records import live_record

        return live_record(name, measure(fabric_session))

    return live
