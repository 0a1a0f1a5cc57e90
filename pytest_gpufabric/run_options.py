"""The run's options that shape a FabricSession: waivers, another tool's evidence, the burn-in and the planted
faults, the health watchdog and the metrics server. Each bad value is a pytest usage error naming its flag."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from . import __version__
from .errors import GpuFabricError


def option(config: pytest.Config, name: str) -> str | None:
    return config.getoption(name) or config.getini(name) or None


def read_waivers(config: pytest.Config, profile) -> list:
    """The profile's ``waive:`` list and the run's --gpu-waive ID=REASON (the ini's lines when none is given)."""
    from .verdict import parse_waiver

    given = config.getoption("gpu_waive") or config.getini("gpu_waive") or []
    try:
        waivers = [parse_waiver(text) for text in given]
    except ValueError as exc:
        raise pytest.UsageError(f"--gpu-waive {exc}") from None
    return (profile.waivers if profile is not None else []) + waivers


def load_evidence(config: pytest.Config, fabric_session) -> None:
    """--gpu-evidence files and the bundle's, read now (a file that is neither tool's output is a usage error);
    the given ones are copied into the report folder, so that it replays as a bundle with them."""
    import shutil

    from .evidence import BUNDLE_PATTERNS, bundle_evidence_files, read_evidence

    given = [Path(p) for p in config.getoption("gpu_evidence") or []]
    files = (bundle_evidence_files(fabric_session.bundle_dir) if fabric_session.bundle_dir else []) + given
    try:
        fabric_session.evidence = read_evidence(files)
    except GpuFabricError as exc:
        raise pytest.UsageError(f"--gpu-evidence {exc}") from None
    for path, item in zip(files[len(files) - len(given):], fabric_session.evidence[len(files) - len(given):],
                          strict=True):
        named = path.name if any(path.match(p) for p in BUNDLE_PATTERNS) else f"{item.kind.split('-')[0]}-{path.name}"
        shutil.copyfile(path, fabric_session.report_dir / named)


def burn_in_options(config: pytest.Config, fabric_session) -> None:
    duration = option(config, "gpu_burn_in")
    memory_fault = option(config, "gpu_plant_memory_fault")
    if memory_fault is not None:
        fabric_session.plant_memory_fault = plant_target(memory_fault, "--gpu-plant-memory-fault",
                                                          fabric_session.profile)
    fault = option(config, "gpu_burn_in_plant_fault")
    if fault is not None and not duration:
        raise pytest.UsageError("--gpu-burn-in-plant-fault: plants a fault in a burn-in; give --gpu-burn-in DURATION")
    if not duration:
        return
    from .workloads.burn_in import parse_duration

    try:
        parse_duration(duration)
    except ValueError as exc:
        raise pytest.UsageError(f"--gpu-burn-in: {exc}") from None
    if fault is not None:
        fabric_session.plant_fault = plant_target(fault, "--gpu-burn-in-plant-fault", fabric_session.profile)
    fabric_session.burn_in_duration = duration

    def progress(burn_in, record) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        from .workloads.burn_in import progress_line

        # the burn-in runs inside a test, whose output pytest captures: the line must reach the terminal now
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.write_line(progress_line(burn_in, record))

    fabric_session.progress = progress


def plant_target(text: str, flag: str, profile) -> int:
    gpu_count = profile.gpu_count if profile else None
    if not text.isdigit() or (gpu_count is not None and int(text) >= gpu_count):
        promised = f"0 to {gpu_count - 1}" if gpu_count else "a GPU index"
        raise pytest.UsageError(f"{flag} {text}: not a GPU of the profile (give {promised})")
    return int(text)


def watch_health(config: pytest.Config, fabric_session) -> None:
    """Live runs only: the watchdog around every test, and the metrics server when asked for."""
    port = option(config, "gpu_metrics_port")
    metrics = None
    if port:
        from .report.metrics import MetricsExporter

        try:
            metrics = MetricsExporter()
            metrics.start(int(port))
        except (ImportError, OSError, ValueError) as exc:
            raise pytest.UsageError(f"--gpu-metrics-port {port}: {exc}") from None
        metrics.set_info(fabric_session.profile.name, fabric_session.profile.sha256, __version__)
        fabric_session.metrics = metrics
    section = fabric_session.profile.data.get("health", {})
    if fabric_session.replay or not section.get("enabled", True):
        return
    from .watchdog import HealthWatch

    config.pluginmanager.register(HealthWatch(fabric_session, section, metrics), "gpufabric-health")
