"""The measurement registry: every measurement the suites judge, declared once.

An entry says what a measurement is made of: the fixture the suites ask for it by, the profile key that promises
it (no promise, no measurement: the fixture skips as "not promised"), how it is made live (a workload, in child
processes), the bundle file it records into and how a replay reads it back, and which check and suite judge it.
FabricSession.measurement() walks the registry instead of an if-chain, and fixtures.py makes one fixture per entry:
a per-GPU diagnostic's entry comes from its kind (kinds.diagnostics()), so a new one adds nothing here.

Live results are written to the report folder under the entry's ``record_file`` as they are made: with the
snapshot, that folder is a bundle a replay judges the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kinds import diagnostics
from .kinds.base import Measurement as DiagnosticMeasurement
from .kinds.memory import SECTION as MEMORY_SECTION
from .kinds.nvlink_traffic import SECTION as NVLINK_TRAFFIC_SECTION

__all__ = ["REGISTRY", "Measurement", "register"]


@dataclass(frozen=True)
class Measurement:
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


REGISTRY: dict[str, Measurement] = {}


def register(measurement: Measurement) -> Measurement:
    if measurement.name in REGISTRY or any(m.fixture == measurement.fixture for m in REGISTRY.values()):
        raise ValueError(f"measurement {measurement.name} (fixture {measurement.fixture}) is registered twice")
    REGISTRY[measurement.name] = measurement
    return measurement


def _section(key: str, what: str) -> Callable[[Any], str | None]:
    """Promised by a profile section (``key`` present)."""
    return lambda profile: None if key in profile.data else f"profile {profile.name} promises no {what}"


# --- the entries --------------------------------------------------------------------------------------------------
# each imports its workload or bundle reader when it runs: this module loads with the plugin (fixtures.py), in
# every pytest run


def _nvlink_live(fabric_session):
    from .workloads.training import measure_training_traffic

    section = fabric_session.profile.data.get(NVLINK_TRAFFIC_SECTION, {})
    return measure_training_traffic(fabric_session.boards(), section,
                                    on_sample=fabric_session.metrics.observe_nvlink if fabric_session.metrics else None)


def _nvlink_replay(directory: Path, fabric_session):
    from .fabric.bundle import load_nvlink_recording
    from .workloads.training import recorded_training_traffic

    return recorded_training_traffic(load_nvlink_recording(directory))


register(Measurement(
    name="nvlink", fixture="nvlink_training",
    doc="NVLink counters around the profile's data-parallel training step (live), or as the bundle recorded them.",
    why_not_promised=lambda profile: None,  # the suite's tests ask the matrix per GPU (its promise marker)
    live=_nvlink_live, replay=_nvlink_replay,
    nothing_recorded="the bundle holds no NVLink counter samples taken during training (nvlink-traffic.json or "
                     "nvidia-smi-nvlink-*.sample<N>.txt)",
    record_file="nvlink-traffic.json", to_json=lambda m: m.to_json(),
    check="checks/nvlink_traffic.py", suite="suites/test_nvlink_traffic.py", processes=lambda gpus: gpus))


def _bandwidth_live(fabric_session):
    from .workloads.bandwidth import measure_bandwidth

    return measure_bandwidth(fabric_session.profile, fabric_session.fabric, fabric_session.boards())


def _bandwidth_replay(directory: Path, fabric_session):
    from .fabric.bundle import load_bandwidth_recording

    return load_bandwidth_recording(directory)


register(Measurement(
    name="bandwidth", fixture="bandwidth",
    doc="The profile's bandwidth measurements (collectives, copies, nccl-tests): live, or as the bundle recorded "
        "them (bandwidth.json, nccl-tests*.txt).",
    why_not_promised=lambda profile: None if profile.bandwidth else f"profile {profile.name} promises no bandwidth",
    live=_bandwidth_live, replay=_bandwidth_replay,
    nothing_recorded="the bundle holds no bandwidth measurements (bandwidth.json or nccl-tests*.txt)",
    record_file="bandwidth.json", to_json=lambda m: m.to_json(),
    check="checks/bandwidth.py", suite="suites/test_bandwidth.py",
    processes=lambda gpus: gpus + 1 if gpus > 1 else 1))  # the collectives' ranks, then the copies


def _memory_live(fabric_session):
    from .workloads.environment import gpu_environment
    from .workloads.memory import measure_memory

    return measure_memory(fabric_session.profile.memory, gpu_environment(fabric_session.boards()))


def _record_replay(name: str, file_kind: tuple | None = None) -> Callable[[Path, Any], Any]:
    """The bundle's file of this kind, typed (formats/records.py): a Recording whose problems the checks say;
    ``file_kind``: (format tag, shape, what) where formats/records.py does not know the file itself."""
    def replay(directory: Path, fabric_session):
        from .formats.records import load_record

        return load_record(directory, name, file_kind)

    return replay


def _record_live(name: str, measure: Callable[[Any], dict]) -> Callable[[Any], Any]:
    """A live result as the suites take a recording (formats/records.Recording), written as the dict it is."""
    def live(fabric_session):
        from .formats.records import live_record

        return live_record(name, measure(fabric_session))

    return live


register(Measurement(
    name="memory", fixture="memory_behaviour",
    doc="The memory suite's measurement on GPU 0 (live), or the bundle's memory.json.",
    why_not_promised=_section(MEMORY_SECTION, "memory behaviour"),
    live=_record_live("memory.json", _memory_live), replay=_record_replay("memory.json"),
    nothing_recorded="the bundle holds no memory measurements (memory.json)", record_file="memory.json",
    check="checks/memory.py", suite="suites/test_memory.py",
    # workloads/memory.py's SPARE_IMPORTS (the model needs torchvision), written out: this module loads with the
    # plugin, and importing the workload package for one tuple would add to every pytest run's start-up
    spare_imports=("torch", "torchvision")))


def _rdma_live(fabric_session):
    from .workloads.rdma import live_rdma_devices

    devices = live_rdma_devices()
    if fabric_session.metrics is not None and devices:
        fabric_session.metrics.observe_rdma(devices)
    return devices


def _rdma_replay(directory: Path, fabric_session):
    from .fabric.bundle import load_rdma_devices

    devices = load_rdma_devices(directory)
    if fabric_session.metrics is not None and devices:
        fabric_session.metrics.observe_rdma(devices)
    return devices


register(Measurement(
    name="rdma", fixture="rdma_devices",
    doc="RDMA devices with their ports and counters (sysfs live; the bundle's sysfs copy or ibv_devinfo in "
        "replay). An empty list is a machine without RDMA devices.",
    why_not_promised=lambda profile: None, live=_rdma_live, replay=_rdma_replay,
    nothing_recorded="the bundle holds no RDMA devices (sysfs/ copy or ibv_devinfo-v.txt)",
    check="checks/rdma.py", suite="suites/test_rdma.py", needs_machine=False))


def _rdma_bw_live(fabric_session):
    from .workloads.rdma import measure_ib_write_bw

    return measure_ib_write_bw(fabric_session.profile.rdma)


def _rdma_bw_replay(directory: Path, fabric_session):
    from .fabric.bundle import load_rdma_bandwidth

    return load_rdma_bandwidth(directory)


register(Measurement(
    name="rdma_bw", fixture="ib_write_bw_result",
    doc="The run's ib_write_bw result and the port counters around it (live: the real binary; replay: the "
        "bundle's rdma-bw.json or ib_write_bw output).",
    why_not_promised=lambda profile: None if "ib_write_bw" in profile.rdma
    else f"profile {profile.name} promises no ib_write_bw bandwidth",
    live=_rdma_bw_live, replay=_rdma_bw_replay,
    nothing_recorded="the bundle holds no ib_write_bw output (ib_write_bw.txt or rdma-bw.json)",
    record_file="rdma-bw.json", check="checks/rdma.py", suite="suites/test_rdma.py", needs_machine=False))


def _burn_in_replay(directory: Path, fabric_session):
    from .formats.records import read_burn_in_log
    from .workloads.burn_in import LOG_FILE, BurnIn

    if not (directory / LOG_FILE).is_file():
        return None  # a burn-in asked of a bundle that holds none: not checked
    log = read_burn_in_log(directory / LOG_FILE)
    start = log.records[0] if log.records and log.records[0].get("type") == "start" else {}
    planned = start.get("duration_s")
    known = isinstance(planned, (int, float)) and not isinstance(planned, bool) and 0 < planned < float("inf")
    # the log as far as it could be read, with what stops it being judged (checks/burn_in.py says it); the results
    # carry it only where its plan is known (a duration above 0)
    burn_in = BurnIn(planned if known else 0.0, log.records, problems=log.problems)
    fabric_session.record_burn_in(burn_in if known else None)
    return burn_in


register(Measurement(
    name="burn_in", fixture="burn_in",
    doc="The burn-in of --gpu-burn-in (live), or the bundle's gpufabric-burnin.jsonl (replay).",
    why_not_promised=lambda profile: None,  # the operator asks for it (FabricSession.has_burn_in)
    live=lambda fabric_session: fabric_session.run_burn_in(), replay=_burn_in_replay,
    nothing_recorded="the bundle holds no burn-in log (gpufabric-burnin.jsonl)", asked="has_burn_in",
    check="checks/burn_in.py", suite="suites/test_burn_in.py"))


def _platform(fabric_session):
    from .fabric.platform import platform_for_session

    return platform_for_session(fabric_session)


register(Measurement(
    name="platform", fixture="platform_facts",
    doc="The host settings that decide GPU and RDMA performance (ACS, IOMMU, modules, persistence, governor, ...): "
        "read from this machine once per run (and written to platform.json), or from the bundle (platform.json, "
        "lspci-vvv.txt, lsmod.txt, ...).",
    why_not_promised=lambda profile: None,  # the platform suite runs only for a profile with a platform: section
    live=_platform, replay=lambda directory, fabric_session: _platform(fabric_session),
    nothing_recorded="the bundle records no platform settings (platform.json from gpufabric snapshot, "
                     "lspci-vvv.txt, lsmod.txt, proc-cmdline.txt or dmesg.txt)",
    check="checks/platform.py", suite="suites/test_platform.py", needs_machine=False))


def _arrival_live(fabric_session):
    from .nodehealth.arrival_record import read_arrival_live

    return read_arrival_live()


def _arrival_replay(directory: Path, fabric_session):
    from .nodehealth.arrival_record import read_arrival_bundle

    return read_arrival_bundle(directory)


register(Measurement(
    name="arrival", fixture="arrival_health",
    doc="The state the machine arrives in, by `gpufabric health`'s reader: NVML and the kernel log read once per run "
        "(and written to health.json), or the bundle's health.json, else its nvml.json with nvidia-smi-q.xml.",
    why_not_promised=lambda profile: None,  # every profile promises a machine that arrives healthy
    live=_arrival_live, replay=_arrival_replay,
    nothing_recorded="the bundle holds no health record (health.json from gpufabric snapshot) and no nvml.json with "
                     "nvidia-smi-q.xml to read the GPUs' counters from",
    record_file="health.json", to_json=lambda arrival: arrival.to_json(),
    check="nodehealth/arrival.py", suite="suites/test_arrival.py", spare_imports=(), processes=lambda gpus: 0))


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


def register_diagnostic(measurement: DiagnosticMeasurement) -> Measurement:
    """The registry's entry of a per-GPU diagnostic kind: its descriptor's fixture, section and recording."""
    d = measurement.diagnostic
    return register(Measurement(
        name=d.measurement, fixture=d.fixture, doc=d.doc, why_not_promised=_section(d.key, d.what),
        live=_record_live(d.record_file, _diagnostic_live(measurement)),
        replay=_record_replay(d.record_file, d.file_kind),
        nothing_recorded=f"the bundle holds no {d.one} ({d.record_file})",
        record_file=d.record_file, check=d.check, suite="suites/test_diagnostics.py",
        processes=(lambda gpus: gpus) if d.per_gpu else (lambda gpus: 1)))


for _kind in diagnostics():
    register_diagnostic(_kind.measurement)
