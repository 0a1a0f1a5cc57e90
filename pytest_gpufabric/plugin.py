"""pytest hooks of pytest-gpufabric. Each hook is short and delegates to a named module: run_options.py reads the
options, session_factory.py builds the session from them, fixtures.py holds the fixtures, promise.py and markers.py
judge a test before it runs, report/recorder.py records the outcomes and writes the results.

Without --gpu-profile or --gpu-replay the plugin registers its markers and fixtures and does nothing else:
no NVML, no torch, no file I/O at start-up.
"""

from __future__ import annotations

import pytest

from . import hookspecs
from .markers import MARKERS
from .paths import SUITES_DIR
from .promise import MARKER_HELP as PROMISE_MARKER_HELP
from .promise import claimed_by_users, enter_call, judge_promise, require_markers
from .records import REFUSED, running
from .run_options import read_options
from .session_factory import fabric_session_of, open_session, watch_health
from .session_key import SESSION_KEY

pytest_plugins = ["pytest_gpufabric.fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpufabric", "GPU fabric acceptance (pytest-gpufabric)")
    options = (
        ("--gpu-profile", "gpu_profile", "NAME|PATH",
         "machine profile to accept against; runs the shipped acceptance suites"),
        ("--gpu-replay", "gpu_replay", "NAME|PATH",
         "judge a recorded bundle (directory or .tar.gz, or a shipped bundle's name) instead of this machine"),
        ("--gpu-report-dir", "gpu_report_dir", "DIR",
         "where gpufabric-results.json goes (default: reports/); {node}, {host}, {task} and {fleet} are filled in, "
         "so that every node of a fleet run writes its own folder: reports/fleet/{node}"),
        ("--gpu-fleet-id", "gpu_fleet_id", "ID",
         "the fleet run these results belong to (default: SLURM_JOB_ID)"),
        ("--gpu-customer", "gpu_customer", "NAME", "the customer named on the HTML report's cover"),
        ("--gpu-operator", "gpu_operator", "NAME", "who ran the acceptance, named on the cover (default: the user)"),
        ("--gpu-sign-key", "gpu_sign_key", "KEY.pem",
         "sign the results and the HTML report with this Ed25519 private key (openssl genpkey -algorithm ed25519); "
         "check them with `gpufabric verify FILE --key PUB.pem`"),
        ("--gpu-burn-in", "gpu_burn_in", "DURATION",
         "run the burn-in for DURATION (90s, 10m, 2h): GEMM on every GPU cross-checked, plus the profile's "
         "collectives and memory workloads; resumes an unfinished burn-in of the same profile"),
        ("--gpu-burn-in-plant-fault", "gpu_burn_in_plant_fault", "GPU",
         "corrupt one GEMM result on this GPU in every check: proves the burn-in catches a wrong result"),
        ("--gpu-plant-memory-fault", "gpu_plant_memory_fault", "GPU",
         "flip one bit in this GPU's memory in the memory pattern test: proves the test catches a bad bit"),
        ("--gpu-metrics-port", "gpu_metrics_port", "PORT",
         "serve the sampled counters (NVLink, RDMA, health) in Prometheus format on 127.0.0.1:PORT"),
    )
    for flag, ini, metavar, help_text in options:
        group.addoption(flag, dest=ini, metavar=metavar, default=None, help=help_text)
        parser.addini(ini, f"default for {flag}: {help_text}", default=None)
    waive_help = ("agree not to hold the machine to a promise: ID is a promise id as the report names it "
                  "(gpu-memory[GPU0]), the id without its parameters (gpu-memory) or a pattern; REASON says who agreed "
                  "and why. Repeatable; shown on the report's cover and in the results")
    group.addoption("--gpu-waive", dest="gpu_waive", metavar="ID=REASON", action="append", default=[],
                    help=waive_help)
    parser.addini("gpu_waive", f"waivers, one ID=REASON per line: {waive_help}", type="linelist", default=[])
    evidence_help = ("judge another tool's output with the rest: `dcgmi diag` (text or -j) or nvbandwidth (text or "
                     "-j); each result counts toward the promise it speaks to. Repeatable")
    group.addoption("--gpu-evidence", dest="gpu_evidence", metavar="FILE", action="append", default=[],
                    help=evidence_help)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks a site's plugin implements to add promises of its own (hookspecs.py)."""
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)  # the spares it starts import torch while the other plugins configure
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.addinivalue_line("markers", PROMISE_MARKER_HELP)
    options = read_options(config)
    if options is None:
        return
    refuse_blocked_parts(config)
    fabric_session = config.stash[SESSION_KEY] = open_session(config, options)
    from .records import worker_journal
    from .report.recorder import RunRecorder

    fabric_session.journal_records(worker_journal(config))

    # outcomes from the reports (pytest-xdist workers' too); check records by records.py's channel, never a report
    recorder = RunRecorder(config, fabric_session)
    config.pluginmanager.register(recorder, "gpufabric-recorder")
    if not hasattr(config, "workerinput"):
        from .report.finishing import FinishWhole

        if not any(isinstance(p, FinishWhole) for p in config.pluginmanager.get_plugins()):  # gpufabric accept's
            config.pluginmanager.register(FinishWhole(), "gpufabric-finish-whole")
    if options.profile is not None:
        _collect_shipped_suites(config)
        watch_health(config, fabric_session)
    if config.pluginmanager.hasplugin("html"):
        from .report.html import HtmlSections

        config.pluginmanager.register(HtmlSections(fabric_session, recorder), "gpufabric-html")
    if options.profile is not None and runs_workloads_here(config):
        # the first workload waits for its spare's torch import (3.5-5 s on an H100): start the spares as soon as the
        # profile is read, for every measurement it promises (collection narrows what may run beside another)
        fabric_session.prestart_workloads(every_measurement_fixture())


def runs_workloads_here(config: pytest.Config) -> bool:
    """Whether this process will run the tests: not a pytest-xdist controller (its workers do: a ``--dist`` mode
    with workers to send tests to; ``--dist`` alone runs them here), not --help, --collect-only, --fixtures or
    --markers (pytest answers --version before any plugin is configured)."""
    option = config.option
    if getattr(option, "dist", "no") != "no" and getattr(option, "tx", None) and not hasattr(config, "workerinput"):
        return False
    return not any(getattr(option, name, False) for name in ("help", "collectonly", "showfixtures", "markers"))


def pytest_unconfigure(config: pytest.Config) -> None:
    fabric_session = config.stash.get(SESSION_KEY, None)
    if fabric_session is not None and fabric_session.metrics is not None:
        fabric_session.metrics.stop()
    if fabric_session is not None and not fabric_session.replay:
        from .workloads.runner import SPARES

        SPARES.disable()  # the spares served this run; a pytest run inside the same process starts cold


def _collect_shipped_suites(config: pytest.Config) -> None:
    """`pytest --gpu-profile X` runs the acceptance suites; with paths, those paths and the suites."""
    suites = str(SUITES_DIR)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [suites]
    elif suites not in config.args:
        config.args.append(suites)


def pytest_sessionstart(session: pytest.Session) -> None:
    fabric_session = session.config.stash.get(SESSION_KEY, None)
    if fabric_session is None:
        return
    refuse_missing_parts(session.config)
    fabric_session.discover()
    from .report.html import add_environment

    add_environment(session.config, fabric_session)


#: the parts of the plugin an acceptance cannot run without (each registered under this name); pytest-html's own
#: ``-p no:html`` only leaves the report unwritten, and ``-p no:gpufabric`` leaves nothing of the plugin active
OWN_PARTS = ("gpufabric-recorder", "gpufabric-finish-whole", "gpufabric-html", "gpufabric-health",
             "pytest_gpufabric.fixtures")


def refuse_blocked_parts(config: pytest.Config) -> None:
    """A run given a profile or a bundle with a part of the plugin blocked (``-p no:gpufabric-recorder``, also
    from PYTEST_ADDOPTS or an ini's addopts) would judge nothing, or judge without its records: a usage error."""
    blocked = [name for name in OWN_PARTS if config.pluginmanager.is_blocked(name)]
    if blocked:
        raise pytest.UsageError(f"-p no:{blocked[0]} blocks a part of pytest-gpufabric that --gpu-profile and "
                                "--gpu-replay need; remove it (-p no:gpufabric turns the whole plugin off)")


def refuse_missing_parts(config: pytest.Config) -> None:
    """The same refusal for a part another plugin unregistered after it was registered (its pytest_configure)."""
    for name in ("gpufabric-recorder", "pytest_gpufabric.fixtures"):
        if config.pluginmanager.get_plugin(name) is None:
            raise pytest.UsageError(f"{name} was unregistered: a part of pytest-gpufabric that --gpu-profile and "
                                    "--gpu-replay need; remove the plugin that unregisters it")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test of the user's own that claims a promise only the shipped suites judge is refused (promise.py)."""
    fabric_session = config.stash.get(SESSION_KEY, None)
    refused = claimed_by_users(items, fabric_session) if fabric_session is not None else None
    if refused and fabric_session.records_journal is None:
        raise pytest.UsageError(refused)
    if refused:  # a pytest-xdist worker: it runs nothing, and its controller ends the run with the usage error
        fabric_session.records_journal.append({REFUSED: refused})
        items.clear()
        session.shouldstop = refused


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    """The platform suite is for profiles with a ``platform:`` section: under any other profile it is not collected
    (neither run nor counted as deselected), so the runs and results of profiles that promise no platform setting
    are unchanged and say nothing of it."""
    fabric_session = config.stash.get(SESSION_KEY, None)
    if fabric_session is None or fabric_session.profile is None:
        return None
    from .kinds import platform  # a profile is active: the kinds are loaded by now

    if fabric_session.profile.data.get(platform.SECTION):
        return None
    return True if collection_path == SUITES_DIR / platform.SUITE else None


def every_measurement_fixture() -> set[str]:
    """Every measurement's fixture (prestart_workloads starts spares only for those the profile promises)."""
    from .measurements import REGISTRY

    return {entry.fixture for entry in REGISTRY.values()}


def fixtures_asked(item: pytest.Item) -> set[str]:
    """The fixtures a test sets up: those it names, those its suite asks for by name (``ASKED_BY_NAME``) and the
    measurement a per-GPU diagnostic's case asks for by name (suites/test_diagnostics.py), so that each workload
    gets a spare interpreter."""
    names = set(getattr(item, "fixturenames", ())) | set(getattr(getattr(item, "module", None), "ASKED_BY_NAME", ()))
    for value in getattr(getattr(item, "callspec", None), "params", {}).values():
        measurement = getattr(value, "measurement", None)
        if measurement is not None:
            names.add(measurement.diagnostic.fixture)
    return names


def pytest_collection_finish(session: pytest.Session) -> None:
    fabric_session = session.config.stash.get(SESSION_KEY, None)
    if fabric_session is not None:
        fabric_session.prestart_workloads({name for item in session.items for name in fixtures_asked(item)},
                                          spares=runs_workloads_here(session.config))


def pytest_runtest_setup(item: pytest.Item) -> None:
    fabric_session = item.config.stash.get(SESSION_KEY, None)
    if fabric_session is not None and fabric_session.profile is not None:
        judge_promise(item, fabric_session)
    marks = [m for m in item.iter_markers() if m.name in MARKERS]
    if marks:
        require_markers(marks, item, fabric_session_of(item.config))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """While a test runs, the check records made by promise.not_checked and promise.fail_promise are its own."""
    with running(item):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    enter_call(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if SESSION_KEY not in item.config.stash or call.when != "call":
        return
    extras = item.config.stash[SESSION_KEY].extras.get(item.nodeid)
    if extras:
        report = outcome.get_result()
        report.extras = [*getattr(report, "extras", []), *extras]  # pytest-html shows these under the test
