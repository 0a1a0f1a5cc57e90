"""The run's FabricSession, built from its options (run_options.py) and kept in pytest's config stash
(session_key.py), where hooks, fixtures and suites find it; and what watches the machine while it runs.

Above both the options and the session: the options never import the session they build.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from .errors import GpuFabricError
from .formats.clean import clean_line
from .run_options import RunOptions
from .session_key import SESSION_KEY

if TYPE_CHECKING:
    from .session import FabricSession
    from .workloads.burn_in import BurnIn


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


def _refuse_unclaimed_sections(config: pytest.Config, profile, site_kinds) -> None:
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
    return config.stash[SESSION_KEY]  # type: ignore[return-value]  # only a FabricSession is put there


def built_session(config: pytest.Config) -> FabricSession | None:
    """The run's FabricSession where --gpu-profile or --gpu-replay built it at start-up; None in a plain run."""
    return config.stash.get(SESSION_KEY, None)  # type: ignore[return-value]


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
