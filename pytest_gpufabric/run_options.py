"""The run's options, read once: every --gpu-* flag (or its ini value) parsed and checked into a frozen RunOptions,
each bad value a pytest usage error naming its flag; and the FabricSession built once from them, kept in the
config's stash where hooks, fixtures and suites find it."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .errors import GpuFabricError
from .fleet.launch import expand_report_dir, fleet_id
from .formats.clean import clean_line, has_control
from .parametrize import SESSION_KEY
from .profile.model import Profile
from .report.results import check_writable_dir
from .verdict import Waiver, parse_waiver

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from .session import FabricSession
    from .workloads.burn_in import BurnIn

@dataclass(frozen=True)
class RunOptions:
    """What the operator asked of this run. The defaults are a plain run's: no profile, nothing asked."""

    profile: Profile | None = None  # --gpu-profile NAME|PATH, loaded and validated
    replay: str | None = None  # --gpu-replay: a bundle's folder, archive or shipped name
    report_dir: Path = Path("reports")  # --gpu-report-dir, its placeholders filled and checked writable
    fleet_id: str | None = None  # --gpu-fleet-id, else SLURM_JOB_ID
    customer: str | None = None  # --gpu-customer: named on the report's cover
    operator: str | None = None  # --gpu-operator (None: the user the run runs as)
    sign_key: Ed25519PrivateKey | None = None  # --gpu-sign-key, loaded
    burn_in_s: float | None = None  # --gpu-burn-in DURATION, in seconds
    plant_fault: int | None = None  # --gpu-burn-in-plant-fault: a GPU of the profile
    plant_memory_fault: int | None = None  # --gpu-plant-memory-fault: a CUDA index
    metrics_port: int | None = None  # --gpu-metrics-port (a profile's run only)
    waivers: tuple[Waiver, ...] = ()  # --gpu-waive ID=REASON (the ini's lines when none is given)
    evidence_files: tuple[Path, ...] = ()  # --gpu-evidence FILE: dcgmi diag or nvbandwidth output


def option(config: pytest.Config, name: str) -> str | None:
    return config.getoption(name) or config.getini(name) or None


def read_options(config: pytest.Config) -> RunOptions | None:
    """The run's options, each checked now (before anything runs); None when neither --gpu-profile nor
    --gpu-replay is given: the plugin then does nothing at start-up."""
    profile_spec, replay = option(config, "gpu_profile"), option(config, "gpu_replay")
    if not profile_spec and not replay:
        return None
    _refuse_control_characters(config)
    port = _port(option(config, "gpu_metrics_port"))  # checked whether or not a server will serve it
    profile = _load_profile(profile_spec, config.invocation_params.dir) if profile_spec else None
    given_fleet_id = option(config, "gpu_fleet_id")
    report_dir = _report_dir(config, given_fleet_id)
    waivers = _waivers(config)
    burn_in_s, plant_fault, plant_memory_fault = _burn_in(config, profile)
    return RunOptions(
        profile=profile, replay=replay, report_dir=report_dir, fleet_id=_fleet_id(given_fleet_id),
        customer=option(config, "gpu_customer"), operator=option(config, "gpu_operator"),
        sign_key=_sign_key(option(config, "gpu_sign_key")), burn_in_s=burn_in_s, plant_fault=plant_fault,
        plant_memory_fault=plant_memory_fault,
        # the metrics server serves a profile's run (its watchdog's counters); a replay alone starts none
        metrics_port=port if profile is not None else None,
        waivers=waivers, evidence_files=_evidence_files(config))


#: the options whose text is written on the report's cover, into the results and onto the terminal
_TEXT_OPTIONS = {"gpu_customer": "--gpu-customer", "gpu_operator": "--gpu-operator", "gpu_fleet_id": "--gpu-fleet-id",
                 "gpu_profile": "--gpu-profile", "gpu_replay": "--gpu-replay", "gpu_report_dir": "--gpu-report-dir"}


def _refuse_control_characters(config: pytest.Config) -> None:
    """A control character (a newline, an escape sequence) in a name that the report, the results and the terminal
    show would forge a line there: refused, the value shown with it written out."""
    given = [(flag, option(config, name)) for name, flag in _TEXT_OPTIONS.items()]
    given += [("--gpu-waive", text) for text in config.getoption("gpu_waive") or config.getini("gpu_waive") or []]
    given += [("--gpu-evidence", text) for text in config.getoption("gpu_evidence") or []]
    for flag, value in given:
        if isinstance(value, str) and has_control(value):
            raise pytest.UsageError(f"{flag} '{clean_line(value)}': holds a control character (a newline or an "
                                    "escape sequence); give plain text")


def _refuse_shadowing(site_kinds) -> None:
    """A site's kind named as a shipped kind would let the site's own test judge a shipped promise: refused."""
    from .catalogue import KINDS
    from .kinds.base import Kind

    for kind in site_kinds:
        if not isinstance(kind, Kind):
            raise pytest.UsageError(f"pytest_gpufabric_promise_kinds: returned {type(kind).__name__} "
                                    f"{clean_line(repr(kind))[:80]}; return pytest_gpufabric.kinds.base.Kind objects")
        if getattr(kind, "name", None) in KINDS:
            raise pytest.UsageError(f"pytest_gpufabric_promise_kinds: the site kind {kind.name!r} has the name of a "
                                    "kind pytest-gpufabric's shipped suites judge; give the site's kind a name of its "
                                    "own (site-...)")


def _refuse_unclaimed_sections(config: pytest.Config, profile: Profile, site_kinds) -> None:
    """A profile section left to a site's plugin that no loaded kind claims (``site:`` without the site's plugin),
    or one a site kind's schema refuses: a usage error before anything runs, not a promise silently not made."""
    from .kinds import section_schema_problems, unclaimed_sections

    where = profile.path or profile.name
    unclaimed = unclaimed_sections(profile.data, site_kinds)
    if unclaimed:
        plugins = sorted({impl.plugin_name for impl in config.hook.pytest_gpufabric_promise_kinds.get_hookimpls()})
        raise pytest.UsageError(f"--gpu-profile: {where} at $.{unclaimed[0]}: no promise kind of a loaded plugin "
                                "claims this section, so no test would judge it; load the site's plugin that judges it "
                                "(-p NAME, or its pytest11 entry point) or remove the section (plugins with promise "
                                f"kinds loaded: {', '.join(plugins) or 'none'})")
    problems = section_schema_problems(profile.data, site_kinds)
    if problems:
        json_path, problem = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise pytest.UsageError(f"--gpu-profile: {where} at {json_path}: {clean_line(problem)}{more}")


def _evidence_files(config: pytest.Config) -> tuple[Path, ...]:
    """--gpu-evidence FILE: each an existing file, checked now (its content is read when the session opens)."""
    files = tuple(Path(p) for p in config.getoption("gpu_evidence") or [])
    for path in files:
        if not path.is_file():
            why = "a directory" if path.is_dir() else "no such file"
            raise pytest.UsageError(f"--gpu-evidence {path}: {why}; give the saved output of dcgmi diag or "
                                    "nvbandwidth")
    return files


def _load_profile(spec: str, start_dir: Path) -> Profile:
    from .profile.loader import load_profile

    try:
        return load_profile(spec, start_dir)  # ./profiles where pytest was started, never its rootdir
    except GpuFabricError as exc:
        raise pytest.UsageError(f"--gpu-profile: {exc}") from None


def _report_dir(config: pytest.Config, given_fleet_id: str | None) -> Path:
    """Where pytest was started, as --html=reports/... is: not the rootdir, which pytest may take from the folder
    of the --gpu-profile PATH it was given. Checked writable now, not after the first test has run."""
    try:
        report_dir = Path(expand_report_dir(option(config, "gpu_report_dir") or "", dict(os.environ),
                                            given_fleet_id) or config.invocation_params.dir / "reports")
        check_writable_dir(report_dir)
    except (GpuFabricError, ValueError) as exc:
        raise pytest.UsageError(f"--gpu-report-dir: {exc}") from None
    return report_dir


def _fleet_id(given: str | None) -> str | None:
    return fleet_id(given, dict(os.environ))


def _waivers(config: pytest.Config) -> tuple[Waiver, ...]:
    given = config.getoption("gpu_waive") or config.getini("gpu_waive") or []
    try:
        return tuple(parse_waiver(text) for text in given)
    except ValueError as exc:
        raise pytest.UsageError(f"--gpu-waive {exc}") from None


def _burn_in(config: pytest.Config, profile: Profile | None) -> tuple[float | None, int | None, int | None]:
    """(the burn-in's seconds, its planted fault's GPU, the memory pattern's planted fault's GPU)."""
    duration = option(config, "gpu_burn_in")
    memory_fault = option(config, "gpu_plant_memory_fault")
    plant_memory_fault = (_plant_target(memory_fault, "--gpu-plant-memory-fault", profile)
                          if memory_fault is not None else None)
    fault = option(config, "gpu_burn_in_plant_fault")
    if fault is not None and not duration:
        raise pytest.UsageError("--gpu-burn-in-plant-fault: plants a fault in a burn-in; give --gpu-burn-in DURATION")
    if not duration:
        return None, None, plant_memory_fault
    from .workloads.burn_in import parse_duration

    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise pytest.UsageError(f"--gpu-burn-in: {exc}") from None
    plant_fault = _plant_target(fault, "--gpu-burn-in-plant-fault", profile) if fault is not None else None
    return seconds, plant_fault, plant_memory_fault


def _plant_target(text: str, flag: str, profile: Profile | None) -> int:
    gpu_count = profile.gpu_count if profile else None
    text = text.strip()
    # ASCII digits only: str.isdigit() also holds for "²", which int() refuses
    if not re.fullmatch(r"[0-9]{1,4}", text) or (gpu_count is not None and int(text) >= gpu_count):
        promised = f"0 to {gpu_count - 1}" if gpu_count else "a GPU index"
        raise pytest.UsageError(f"{flag} {text}: not a GPU of the profile (give {promised})")
    return int(text)


def _sign_key(path: str | None) -> Ed25519PrivateKey | None:
    """The Ed25519 private key of --gpu-sign-key, read now: a bad one is a usage error before anything runs."""
    if not path:
        return None
    from .report.signing import SigningError, load_private_key

    try:
        return load_private_key(path)
    except SigningError as exc:
        raise pytest.UsageError(f"--gpu-sign-key: {exc}") from None


def _port(text: str | None) -> int | None:
    """--gpu-metrics-port: a TCP port, 1 to 65535 (0 would let the system pick one no scraper knows)."""
    if not text:
        return None
    if not re.fullmatch(r"[0-9]{1,5}", text.strip()) or not 1 <= int(text) <= 65535:
        raise pytest.UsageError(f"--gpu-metrics-port '{clean_line(text)}': not a TCP port; give a number from 1 to "
                                "65535")
    return int(text)


# --- the session built from them -------------------------------------------------------------------------------


def open_session(config: pytest.Config, options: RunOptions) -> FabricSession:
    """The run's FabricSession, with what a site's plugin adds to the promises (hookspecs.py). A replayed bundle
    and the evidence files are the user's input: read now, so that a bad one is a usage error before anything
    runs; the evidence files given are copied into the report folder, so that it replays as a bundle with them."""
    from .session import FabricSession

    profile = options.profile
    site_kinds = tuple(kind for kinds in config.hook.pytest_gpufabric_promise_kinds(profile=profile)
                       for kind in kinds or ()) if profile is not None else ()
    _refuse_shadowing(site_kinds)
    if profile is not None:
        _refuse_unclaimed_sections(config, profile, site_kinds)
    fabric_session = FabricSession(options, site_kinds=site_kinds,
                                   burn_in_listeners=[_terminal_progress(config)] if options.burn_in_s else [])
    if options.replay:
        fabric_session.discover()
        if fabric_session.discovery_error is not None:
            raise pytest.UsageError(f"--gpu-replay: {fabric_session.discovery_error}")
    try:
        fabric_session.read_evidence()
    except GpuFabricError as exc:
        raise pytest.UsageError(f"--gpu-evidence {exc}") from None
    return fabric_session


def fabric_session_of(config: pytest.Config) -> FabricSession:
    """The run's FabricSession; a plain run (no options) gets one lazily when a test first needs the machine."""
    if SESSION_KEY not in config.stash:
        from .session import FabricSession

        config.stash[SESSION_KEY] = FabricSession(RunOptions())
    return config.stash[SESSION_KEY]


def _terminal_progress(config: pytest.Config) -> Callable[[BurnIn, dict | None], None]:
    """The burn-in's progress line on the terminal, at its start and after each chunk."""

    def progress(burn_in: BurnIn, record: dict | None) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        from .workloads.burn_in import progress_line

        # the burn-in runs inside a test, whose output pytest captures: the line must reach the terminal now
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.write_line(progress_line(burn_in, record))

    return progress


def watch_health(config: pytest.Config, fabric_session: FabricSession) -> None:
    """A profile's run: the metrics server when asked for; live runs also get the watchdog around every test."""
    try:
        fabric_session.serve_metrics()
    except (ImportError, OSError, ValueError) as exc:
        raise pytest.UsageError(f"--gpu-metrics-port {fabric_session.options.metrics_port}: {exc}") from None
    section = fabric_session.profile.data.get("health", {})
    if fabric_session.replay or not section.get("enabled", True):
        return
    from .watchdog import HealthWatch

    config.pluginmanager.register(HealthWatch(fabric_session, section, fabric_session.metrics), "gpufabric-health")
