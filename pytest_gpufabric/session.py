"""FabricSession: the profile, the machine and the results of one pytest run.

The plugin builds one per run from its options (session_factory.py, from run_options.py's RunOptions: only when
--gpu-profile or --gpu-replay is given, or when a test first asks for the machine); fixtures and suites ask it, it
never asks them. What it knows goes into the results document as RunFacts (report/results_document.py).
"""

from __future__ import annotations

import getpass
import platform
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from . import __version__
from .catalogue import BURN_IN, PromiseKind, PromiseList, promise_list
from .errors import GpuFabricError
from .evidence import BUNDLE_PATTERNS, ToolEvidence, bundle_evidence_files, dcgm_results, read_evidence
from .fabric.bundle import bundle_directory, load_bundle
from .fabric.health import HealthReader
from .fabric.model import Fabric
from .fabric.nvml import collect_fabric
from .kinds import equivalents
from .measurements import REGISTRY
from .profile.model import Profile
from .report.metrics import MetricsExporter
from .report.results import write_json
from .report.results_document import RunFacts
from .verdict import Waiver
from .workloads import environment
from .workloads.burn_in import LOG_FILE, BurnIn, run_burn_in
from .workloads.environment import gpu_environment, promised_boards, require_torch, workload_environment
from .workloads.runner import SPARES, spare_count

if TYPE_CHECKING:
    from .run_options import RunOptions

#: (the burn-in as far as it got, the chunk's record or None at the start) -> None
BurnInListener = Callable[["BurnIn", "dict | None"], None]


@dataclass
class FabricSession:
    """Built once from the run's options; what it finds and measures afterwards is written by its own methods."""

    options: RunOptions  # what the operator asked (run_options.py); RunOptions() for a plain run
    site_kinds: tuple[PromiseKind, ...] = ()  # what a site's plugin adds to the promises (hookspecs.py)
    #: called in order at the start of the burn-in and after each chunk: the terminal's progress line, the
    #: results' checkpoint (follow_burn_in)
    burn_in_listeners: list[BurnInListener] = field(default_factory=list)
    started_at: str = field(init=False,
                            default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    #: names this run in its results and its report, under their signatures (gpufabric verify pairs them by it)
    run_id: str = field(init=False, default_factory=lambda: uuid.uuid4().hex)
    results: list[dict] = field(init=False, default_factory=list)  # the check records (records.record)
    #: a pytest-xdist worker's journal its check records also go to (records.py); None elsewhere
    records_journal: Any = field(init=False, default=None)
    extras: dict[str, list[dict]] = field(init=False, default_factory=dict)  # node id -> pytest-html extras
    #: the health watchdog's records: per test the counters that rose, the timeline, XID events
    health: dict[str, Any] = field(init=False, default_factory=lambda: {"tests": {}, "timeline": [], "xid_events": []})
    evidence: list[ToolEvidence] = field(init=False, default_factory=list)  # dcgmi diag / nvbandwidth outputs
    metrics: MetricsExporter | None = field(init=False, default=None)  # with --gpu-metrics-port (serve_metrics)
    burn_in: BurnIn | None = field(init=False, default=None)  # as far as it got (live), or the bundle's
    bundle_dir: Path | None = field(init=False, default=None)
    _fabric: Fabric | None = field(init=False, default=None)
    _discovery_error: GpuFabricError | None = field(init=False, default=None)
    _discovered: bool = field(init=False, default=False)
    #: suite measurements by name (measurements.py), or the GpuFabricError that stopped them
    _measured: dict[str, Any] = field(init=False, default_factory=dict)
    #: the fixtures the collected tests ask for (prestart_workloads): what may start alongside another measurement
    _asked: set[str] = field(init=False, default_factory=set)
    _beside: ThreadPoolExecutor | None = field(init=False, default=None)
    _promises: PromiseList | None = field(init=False, default=None)

    @property
    def profile(self) -> Profile | None:
        return self.options.profile

    @property
    def replay(self) -> str | None:
        return self.options.replay

    @property
    def report_dir(self) -> Path:
        return self.options.report_dir

    @property
    def waivers(self) -> list[Waiver]:
        """The profile's ``waive:`` list and the run's --gpu-waive."""
        return [*(self.profile.waivers if self.profile is not None else []), *self.options.waivers]

    @property
    def mode(self) -> str:
        return "replay" if self.replay else "live"

    @property
    def has_burn_in(self) -> bool:
        """Whether this run judges a burn-in: one asked for (--gpu-burn-in), or one the replayed bundle holds."""
        if self.options.burn_in_s is not None:
            return True

        return bool(self.replay) and self.bundle_dir is not None and (self.bundle_dir / LOG_FILE).is_file()

    @property
    def has_burn_in_why(self) -> str:
        return ("no burn-in was asked for (--gpu-burn-in DURATION)" if not self.replay else
                "the bundle holds no burn-in (gpufabric-burnin.jsonl), and none was asked for (--gpu-burn-in)")

    @property
    def promises(self) -> PromiseList:
        """The promises this run must judge (catalogue.PromiseList): from the profile, the parts the operator asked
        for (the burn-in) and the evidence of other tools given with the run. Made on first use, after the options
        are read (on the pytest-xdist controller too, where no test runs)."""
        if self._promises is None:
            rows = dcgm_results(self.evidence, self.profile.gpu_count, promises=equivalents("dcgm"))
            self._promises = promise_list(
                self.profile, asked={BURN_IN} if self.has_burn_in else set(),
                left_out_why={BURN_IN: self.has_burn_in_why},
                evidence_promises=[(row["promise"], "dcgmi diag results") for row in rows],
                site_kinds=self.site_kinds)
        return self._promises

    def read_evidence(self) -> None:
        """The bundle's evidence files and --gpu-evidence's, read now (raises EvidenceError for a file that is
        neither tool's output); the given ones are copied into the report folder, so that it replays as a bundle
        with them."""
        given = list(self.options.evidence_files)
        files = (bundle_evidence_files(self.bundle_dir) if self.bundle_dir else []) + given
        self.evidence = read_evidence(files)
        for path, item in zip(given, self.evidence[len(files) - len(given):], strict=True):
            bundled = any(path.match(p) for p in BUNDLE_PATTERNS)
            named = path.name if bundled else f"{item.kind.split('-')[0]}-{path.name}"
            shutil.copyfile(path, self.report_dir / named)

    def serve_metrics(self) -> None:
        """Start the Prometheus endpoint of --gpu-metrics-port (raises ImportError, OSError or ValueError)."""
        if self.options.metrics_port is None:
            return

        metrics = MetricsExporter()
        metrics.start(self.options.metrics_port)
        metrics.set_info(self.profile.name, self.profile.sha256, __version__)
        self.metrics = metrics

    def follow_burn_in(self, listener: BurnInListener) -> None:
        """Call ``listener`` at the start of the burn-in and after each chunk, after those already following."""
        self.burn_in_listeners.append(listener)

    def journal_records(self, journal) -> None:
        """A pytest-xdist worker's records also go to its journal (records.py), for its controller to read."""
        self.records_journal = journal

    def record_burn_in(self, burn_in: BurnIn | None) -> None:
        """The burn-in the results carry: a replayed log whose plan is known (None: none to carry)."""
        self.burn_in = burn_in

    def discover(self) -> None:
        """Read the machine once (NVML, or the bundle). A failure is kept and reported by every test that
        needs the machine, as one sentence, instead of a traceback at start-up."""
        if self._discovered:
            return
        self._discovered = True
        try:
            if self.replay:
                self.bundle_dir = bundle_directory(self.replay)
                self._fabric = load_bundle(self.bundle_dir)
            else:
                self._fabric = collect_fabric()
        except GpuFabricError as exc:
            self._discovery_error = exc

    @property
    def fabric(self) -> Fabric | None:
        self.discover()
        return self._fabric

    @property
    def discovery_error(self) -> GpuFabricError | None:
        self.discover()
        return self._discovery_error

    def measurement(self, name: str):
        """A registered measurement (measurements.py), made once per run: live (and written to the report folder
        under its bundle file), or read from the bundle.

        Returns the measurement, None when a bundle recorded nothing for it, or raises the GpuFabricError that
        stopped it (the same one for every test that asks)."""
        if name not in self._measured:
            self._measured[name] = _settled(lambda: self._measure(name))
        result = self._measured[name]
        if isinstance(result, Future):  # started alongside another measurement: its thread's result
            result = self._measured[name] = _settled(result.result)
        if isinstance(result, GpuFabricError):
            raise result
        return result

    def _measure(self, name: str):
        entry = REGISTRY[name]
        if self.replay:
            return entry.replay(self.bundle_dir, self)

        SPARES.enable()  # the next workload script's interpreter starts while this one runs (runner.py)
        beside = self._start_beside(name)
        try:
            return self._measure_live(entry)
        finally:  # the pair ends together: no later measurement runs beside either
            wait(beside)

    def _measure_live(self, entry, beside: str | None = None):
        result = entry.live(self)
        if beside is not None and isinstance(result, dict) and isinstance(result.get("runner"), dict):
            result["runner"]["beside"] = beside  # the record says what ran at the same time
        if entry.record_file:
            write_json(entry.to_json(result) if entry.to_json else result, self.report_dir / entry.record_file)
        return result

    def _start_beside(self, name: str) -> list[Future]:
        """The measurements this run asks for that run alongside ``name`` (Measurement.runs_beside) start now, each
        in a thread; the test that asks for one later takes its result."""
        started = []
        if self.records_journal is not None:  # a pytest-xdist worker: another worker may run the partner's test
            return started
        for entry in REGISTRY.values():
            if (entry.runs_beside == name and entry.name not in self._measured and entry.fixture in self._asked
                    and not entry.why_not_promised(self.profile) and not entry.beside_refused(self)):
                if self._beside is None:
                    self._beside = ThreadPoolExecutor(thread_name_prefix="gpufabric-beside")
                self._measured[entry.name] = self._beside.submit(self._measure_live, entry, name)
                started.append(self._measured[entry.name])
        return started

    def settle_measurements(self, wait: bool = True) -> None:
        """The results of the measurements started alongside others, kept as any other's; ``wait``: also of those
        still running (the run's end: the results document holds each one's result, never a run in progress)."""
        for name, result in list(self._measured.items()):
            if isinstance(result, Future) and (wait or result.done()):
                self._measured[name] = _settled(result.result)

    def prestart_workloads(self, fixtures: set[str], spares: bool = True) -> None:
        """A live run of a profile: an interpreter for each workload process of the measurements the selected tests
        ask for (``fixtures``: theirs, kept for the measurements that may run beside another) starts now, before
        the first measurement (runner.SpareInterpreters): a measurement that starts a rank or a worker per GPU gets
        one for each of the GPUs the profile promises. No NVML read is waited for: the spares start in the
        workloads' environment but for which GPUs CUDA shows, set when each is handed its script
        (runner.HAND_OVER_VARIABLES). ``spares`` False: a process that runs no workload (plugin.runs_workloads_here)."""
        self._asked = set(fixtures)
        if not spares or self.replay or self.profile is None or not environment.nvidia_driver_loaded():
            return
        wanted = [entry for entry in REGISTRY.values() if entry.fixture in fixtures and entry.needs_machine
                  and not entry.why_not_promised(self.profile) and (entry.asked is None or getattr(self, entry.asked))]
        gpus = self.profile.gpu_count
        imports = [entry.spare_imports for entry in wanted for _ in range(entry.processes(gpus))]
        if imports:
            SPARES.prestart(workload_environment(), imports[:spare_count(len(imports))])

    def boards(self) -> list[dict]:
        """The GPUs the profile promises, in the order the workloads' CUDA numbers them (CUDA_VISIBLE_DEVICES
        honoured). Raises HiddenGpu, naming them, when it hides a promised GPU: every workload test fails so."""
        if self.fabric is None:
            raise self.discovery_error
        return promised_boards(self.fabric, self.profile.gpu_count, self.profile.name)

    def run_burn_in(self):
        """The burn-in, live (kinds/burn_in.py's measurement): its log and progress are its own."""
        require_torch("the burn-in")
        on_cpus = self.profile.burn_in.get("device", "cuda") == "cpu"  # the tests' CPU workers
        boards = None if on_cpus else self.boards()
        try:
            health = HealthReader()
        except GpuFabricError:
            health = None  # the burn-in runs; its verdicts say the counters were not read
        try:
            self.burn_in = run_burn_in(self.profile, self.options.burn_in_s, self.report_dir / LOG_FILE,
                                       plant_fault=self.options.plant_fault, health=health,
                                       progress=self._burn_in_progress, sha256=self.profile.sha256,
                                       env=None if on_cpus else gpu_environment(boards), boards=boards)
            return self.burn_in
        finally:
            if health is not None:
                health.close()

    def _burn_in_progress(self, burn_in: BurnIn, record: dict | None) -> None:
        """At the start of the burn-in and after each chunk: the listeners (the terminal's progress line, and the
        results JSON rewritten with the chunks so far: an hours-long burn-in runs inside one test, and the JSON is
        otherwise rewritten per test)."""
        self.burn_in = burn_in
        for listener in self.burn_in_listeners:
            listener(burn_in, record)

    def add_extra(self, nodeid: str, extra: dict) -> None:
        self.extras.setdefault(nodeid, []).append(extra)

    def run_facts(self) -> RunFacts:
        """What the session knows now, for the results document (report/results_document.py builds it)."""
        self.settle_measurements(wait=False)  # a checkpoint does not wait for one still running
        measured = {name: result for name, result in self._measured.items() if not isinstance(result, Future)}
        return RunFacts(
            run_id=self.run_id, started_at=self.started_at, mode=self.mode, replay=self.replay,
            host=platform.node(), user=_user(), fleet_id=self.options.fleet_id, profile=self.profile,
            promises=self.promises if self.profile is not None else None, waivers=self.waivers,
            fabric=self._fabric, machine_error=None if self._discovery_error is None else str(self._discovery_error),
            measurements=MappingProxyType(measured), checks=self.results, health=self.health,
            burn_in=self._burn_in_summary() if self.burn_in is not None else None, site_kinds=self.site_kinds)

    def _burn_in_summary(self) -> dict:
        log = (self.bundle_dir if self.replay else self.report_dir) / LOG_FILE
        return self.burn_in.summary(log)


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _settled(measure: Callable[[], Any]) -> Any:
    """A measurement's result, or the GpuFabricError that stopped it (kept: every test that asks says it)."""
    try:
        return measure()
    except GpuFabricError as exc:
        return exc
