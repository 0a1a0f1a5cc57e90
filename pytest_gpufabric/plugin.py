"""pytest hooks and fixtures of pytest-gpufabric. Each hook is short and delegates to a named module.

Without --gpu-profile or --gpu-replay the plugin registers its markers and fixtures and does nothing else:
no NVML, no torch, no file I/O at start-up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .errors import GpuFabricError
from .markers import MARKERS, decide, marker_arguments
from .promise import MARKER_HELP as PROMISE_MARKER_HELP
from .promise import judge_promise, not_checked
from .run_options import burn_in_options, load_evidence, option, read_waivers, watch_health

SESSION_KEY = pytest.StashKey["FabricSession"]()
IN_CALL_KEY = pytest.StashKey[bool]()  # the test's own body is running
BROKEN_PROMISES_KEY = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpufabric", "GPU fabric acceptance (pytest-gpufabric)")
    options = (
        ("--gpu-profile", "gpu_profile", "NAME|PATH",
         "machine profile to accept against; runs the shipped acceptance suites"),
        ("--gpu-replay", "gpu_replay", "NAME|PATH",
         "judge a recorded bundle (directory or .tar.gz, or a shipped bundle's name) instead of this machine"),
        ("--gpu-report-dir", "gpu_report_dir", "DIR",
         "where gpufabric-results.json goes (default: reports/); {host}, {task} and {fleet} are filled in, so that "
         "every node of a fleet run writes its own folder: reports/fleet/{host}"),
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
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.addinivalue_line("markers", PROMISE_MARKER_HELP)
    profile_spec, replay = option(config, "gpu_profile"), option(config, "gpu_replay")
    if not profile_spec and not replay:
        return
    from .session import FabricSession

    profile = None
    if profile_spec:
        from .profile.loader import load_profile

        try:
            profile = load_profile(profile_spec, config.rootpath)
        except GpuFabricError as exc:
            raise pytest.UsageError(f"--gpu-profile: {exc}") from None
    # where pytest was started, as --html=reports/... is: not the rootdir, which pytest may take from the folder of
    # the --gpu-profile PATH it was given
    import os

    from .fleet.launch import expand_report_dir, fleet_id
    from .report.results import check_writable_dir

    given_fleet_id = option(config, "gpu_fleet_id")
    try:
        report_dir = Path(expand_report_dir(option(config, "gpu_report_dir") or "", dict(os.environ),
                                            given_fleet_id) or config.invocation_params.dir / "reports")
        check_writable_dir(report_dir)  # now, not after the first test has run
    except (GpuFabricError, ValueError) as exc:
        raise pytest.UsageError(f"--gpu-report-dir: {exc}") from None
    site_kinds = tuple(kind for kinds in config.hook.pytest_gpufabric_promise_kinds(profile=profile)
                       for kind in kinds or ()) if profile is not None else ()
    fabric_session = FabricSession(profile=profile, replay=replay, report_dir=report_dir,
                                   fleet_id=fleet_id(given_fleet_id, dict(os.environ)),
                                   waivers=read_waivers(config, profile), site_kinds=site_kinds)
    if replay:
        # A bundle is the user's input: read it now, so a bad one is a usage error before anything runs.
        fabric_session.discover()
        if fabric_session.discovery_error is not None:
            raise pytest.UsageError(f"--gpu-replay: {fabric_session.discovery_error}")
    config.stash[SESSION_KEY] = fabric_session
    load_evidence(config, fabric_session)
    burn_in_options(config, fabric_session)
    from .report.recorder import RunRecorder

    # records outcomes and checks from the reports, so it also sees the runs of pytest-xdist workers
    config.pluginmanager.register(RunRecorder(config, fabric_session), "gpufabric-recorder")
    if profile is not None:
        _collect_shipped_suites(config)
        watch_health(config, fabric_session)
    if config.pluginmanager.hasplugin("html"):
        from .report.html import HtmlSections

        config.pluginmanager.register(HtmlSections(config.stash[SESSION_KEY]), "gpufabric-html")


def pytest_unconfigure(config: pytest.Config) -> None:
    fabric_session = config.stash.get(SESSION_KEY, None)
    if fabric_session is not None and fabric_session.metrics is not None:
        fabric_session.metrics.stop()
    if fabric_session is not None and not fabric_session.replay:
        from .workloads.runner import SPARES

        SPARES.disable()  # the spares served this run; a pytest run inside the same process starts cold


def _collect_shipped_suites(config: pytest.Config) -> None:
    """`pytest --gpu-profile X` runs the acceptance suites; with paths, those paths and the suites."""
    from .paths import SUITES_DIR

    suites = str(SUITES_DIR)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [suites]
    elif suites not in config.args:
        config.args.append(suites)


def _session(config: pytest.Config):
    """The run's FabricSession; a plain run (no options) gets one lazily when a marked test needs the machine."""
    if SESSION_KEY not in config.stash:
        from .session import FabricSession

        config.stash[SESSION_KEY] = FabricSession(profile=None, replay=None, report_dir=Path("reports"))
    return config.stash[SESSION_KEY]


def pytest_sessionstart(session: pytest.Session) -> None:
    if SESSION_KEY not in session.config.stash:
        return
    fabric_session = session.config.stash[SESSION_KEY]
    fabric_session.discover()
    from .report.html import add_environment

    add_environment(session.config, fabric_session)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    profile = _session(metafunc.config).profile if SESSION_KEY in metafunc.config.stash else None
    if "gpu_pair" in metafunc.fixturenames:
        pairs = profile.pairs if profile else _machine_pairs(metafunc.config)
        # none: one case that skips saying why, not pytest's "got empty parameter set"
        metafunc.parametrize("gpu_pair", pairs or [None], ids=[f"GPU{a}-GPU{b}" for a, b in pairs] or ["none"],
                             indirect=True)
    if "promised_gpu" in metafunc.fixturenames:
        indices = range(profile.gpu_count) if profile else []
        metafunc.parametrize("promised_gpu", indices, ids=[f"GPU{i}" for i in indices], indirect=True)
    if "gpu_index" in metafunc.fixturenames:
        indices = list(range(profile.gpu_count)) if profile else []
        metafunc.parametrize("gpu_index", indices, ids=[f"GPU{i}" for i in indices])
    if "collective_threshold" in metafunc.fixturenames:
        from .checks.bandwidth import size_label
        from .units import parse_bytes

        thresholds = profile.collective_thresholds() if profile else []
        # nothing promised: one case that skips with the reason, rather than pytest's "empty parameter set"
        metafunc.parametrize("collective_threshold", thresholds or [None],
                             ids=[f"{op}-{size_label(parse_bytes(t['size']))}" for op, t in thresholds] or ["none"])
    if "rdma_promise" in metafunc.fixturenames:
        promised = profile.rdma_devices if profile else []
        metafunc.parametrize("rdma_promise", promised or [None],
                             ids=[f"{d['name']}:{d.get('port', 1)}" for d in promised] or ["none"])
    if "lms_spec" in metafunc.fixturenames:
        specs = profile.data.get("memory", {}).get("lms", []) if profile else []
        metafunc.parametrize("lms_spec", specs or [None],
                             ids=[f"{s['threshold'].replace(' ', '')}-{s.get('usage_fraction', 0):g}" for s in specs]
                             or ["none"])
    if "platform_device" in metafunc.fixturenames:
        # the GPUs and the RDMA devices the profile promises, for the platform suite's per-device settings
        devices = ([f"GPU{i}" for i in range(profile.gpu_count)] + [d["name"] for d in profile.rdma_devices]
                   if profile else [])
        metafunc.parametrize("platform_device", devices or [None], ids=devices or ["none"])
    if "dcgm_result" in metafunc.fixturenames or "nvbandwidth_copy" in metafunc.fixturenames:
        from .evidence import dcgm_results, nvbandwidth_copies

        evidence = _session(metafunc.config).evidence if profile else []
        gpu_count = profile.gpu_count if profile else 0
        for name, rows, ids in (("dcgm_result", dcgm_results(evidence, gpu_count),
                                 lambda r: f"{r['source']}:{r['promise']}"),
                                ("nvbandwidth_copy", nvbandwidth_copies(evidence),
                                 lambda r: f"{r['source']}:{r['testcase']}")):
            if name in metafunc.fixturenames:
                metafunc.parametrize(name, rows or [None], ids=[ids(r) for r in rows] or ["none"])
    if "copy_kind" in metafunc.fixturenames:
        kinds = list(profile.copy_thresholds()) if profile else []
        metafunc.parametrize("copy_kind", kinds or [None], ids=kinds or ["none"])


def _machine_pairs(config: pytest.Config) -> list[tuple[int, int]]:
    """Without a profile: every pair of GPUs the machine (live, or --gpu-replay's bundle) joins by NVLink."""
    import itertools

    from .fabric.model import nvlink_count_of_label

    fabric = _session(config).fabric if SESSION_KEY in config.stash else None
    if fabric is None:
        return []
    return [(a.index, b.index) for a, b in itertools.combinations(fabric.gpus, 2)
            if nvlink_count_of_label(fabric.label(a.label, b.label) or "") > 0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The platform suite is for profiles with a ``platform:`` section: under any other profile its tests are
    deselected (not skipped), so the runs and results of profiles that promise no platform setting are unchanged."""
    fabric_session = config.stash.get(SESSION_KEY, None)
    if fabric_session is None or (fabric_session.profile and fabric_session.profile.data.get("platform")):
        return
    from .paths import SUITES_DIR

    suite = SUITES_DIR / "test_platform.py"
    dropped = [item for item in items if item.path == suite]
    for item in dropped:
        item.gpufabric_not_promised = True  # not "deselected by the user": RunRecorder counts no promise for it
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.path != suite]


def pytest_collection_finish(session: pytest.Session) -> None:
    fabric_session = session.config.stash.get(SESSION_KEY, None)
    if fabric_session is not None:
        fabric_session.prestart_workloads({name for item in session.items
                                           for name in getattr(item, "fixturenames", ())})


def pytest_runtest_setup(item: pytest.Item) -> None:
    fabric_session = item.config.stash.get(SESSION_KEY, None)
    if fabric_session is not None and fabric_session.profile is not None:
        judge_promise(item, fabric_session)
    marks = [m for m in item.iter_markers() if m.name in MARKERS]
    if not marks:
        return
    fabric_session = _session(item.config)
    error = fabric_session.discovery_error
    why_no_fabric = str(error) if error else ""
    for mark in marks:
        try:
            arguments = marker_arguments(mark.name, mark.args, mark.kwargs)
        except TypeError as exc:
            pytest.fail(str(exc), pytrace=False)
        rdma_devices = None
        if mark.name == "rdma":
            try:
                rdma_devices = fabric_session.measurement("rdma")
            except GpuFabricError:
                rdma_devices = None
        decision = decide(mark.name, arguments, fabric_session.profile, fabric_session.fabric, why_no_fabric,
                          rdma_devices)
        if decision.action == "skip":
            pytest.skip(decision.reason)
        if decision.action == "not checked":
            not_checked(decision.reason)
        if decision.action == "fail":
            _fail_in_call(item, decision.reason)


def _fail_in_call(item: pytest.Item, reason: str) -> None:
    """A promise the machine breaks is the test's failure, not a set-up error: fail when the test runs (at once
    when it runs already: a fixture the test asked for in its body, request.getfixturevalue)."""
    if item.stash.get(IN_CALL_KEY, False):
        pytest.fail(reason, pytrace=False)
    item.stash.setdefault(BROKEN_PROMISES_KEY, []).append(reason)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    reasons = item.stash.get(BROKEN_PROMISES_KEY, None)
    if reasons:
        pytest.fail("\n".join(reasons), pytrace=False)
    item.stash[IN_CALL_KEY] = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if SESSION_KEY not in item.config.stash or call.when != "call":
        return
    extras = item.config.stash[SESSION_KEY].extras.get(item.nodeid)
    if extras:
        report = outcome.get_result()
        report.extras = [*getattr(report, "extras", []), *extras]  # pytest-html shows these under the test


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gpu_profile(request: pytest.FixtureRequest):
    """The machine profile given with --gpu-profile (skips the test when none was given)."""
    profile = _session(request.config).profile
    if profile is None:
        pytest.skip("no --gpu-profile given: nothing is promised")
    return profile


@pytest.fixture(scope="session")
def fabric(request: pytest.FixtureRequest):
    """The machine as discovered (live NVML or --gpu-replay bundle)."""
    fabric_session = _session(request.config)
    error = fabric_session.discovery_error
    if error is not None:
        if fabric_session.profile is None:
            pytest.skip(f"no machine to test and nothing promised: {error}")
        # the machine could not be read: nothing that needs it was checked (NOT TESTED, never a rejection), and
        # what can be read without it (RDMA, from sysfs) is still judged
        not_checked(str(error))
    return fabric_session.fabric


@pytest.fixture(scope="session")
def gpus(gpu_profile, fabric):
    """The GPUs the profile promises, as found; fails naming the promised GPUs that are missing."""
    _skip_without_gpu_evidence(fabric)
    missing = [f"GPU{i}" for i in range(gpu_profile.gpu_count) if fabric.gpu(i) is None]
    if missing:
        pytest.fail(
            f"profile {gpu_profile.name} promises {gpu_profile.gpu_count} GPUs; missing: {', '.join(missing)} "
            f"(the machine has {len(fabric.gpus)})", pytrace=False,
        )
    return [fabric.gpu(i) for i in range(gpu_profile.gpu_count)]


def _skip_without_gpu_evidence(fabric) -> None:
    if not fabric.gpus_recorded:
        not_checked(f"{fabric.source} records no GPUs (nvidia-smi-topo-m.txt, nvidia-smi-q.xml or nvml.json)")


def _promised_gpu(request: pytest.FixtureRequest, profile, fabric, index: int):
    """The GPU, or None with the test set to fail (in its call, as a broken promise) when it is missing."""
    _skip_without_gpu_evidence(fabric)
    gpu = fabric.gpu(index)
    if gpu is None:
        _fail_in_call(request.node, f"GPU{index} is promised by profile {profile.name} but missing: the "
                                    f"machine has {len(fabric.gpus)} GPU(s)")
    return gpu


@pytest.fixture
def promised_gpu(request: pytest.FixtureRequest, gpu_profile, fabric):
    """One GPU the profile promises (parametrized over all of them)."""
    return _promised_gpu(request, gpu_profile, fabric, request.param)


@pytest.fixture
def gpu_pair(request: pytest.FixtureRequest, fabric):
    """A pair of GPUs the profile names (parametrized: `pairs:`, else every NVLink-joined pair; without a profile,
    every pair the machine joins by NVLink)."""
    profile = _session(request.config).profile
    if request.param is None:
        pytest.skip(f"profile {profile.name} promises no GPU pair (pairs:, or NVLinks in its matrix)" if profile
                    else f"no two GPUs joined by NVLink in {fabric.source}")
    a, b = request.param
    if profile is None:
        return fabric.gpu(a), fabric.gpu(b)
    return _promised_gpu(request, profile, fabric, a), _promised_gpu(request, profile, fabric, b)


@pytest.fixture
def nvlink_links(gpu_profile, gpus, fabric):
    """(gpu, link) for every active NVLink of the promised GPUs; skips when the profile promises none."""
    if not gpu_profile.nvlink.get("links_per_gpu") and not gpu_profile.pairs:
        pytest.skip(f"profile {gpu_profile.name} promises no NVLinks")
    links = [(gpu, link) for gpu in gpus for link in (gpu.active_nvlinks() or [])]
    if not links:
        pytest.fail(f"profile {gpu_profile.name} promises NVLinks; none is active on the promised GPUs",
                    pytrace=False)
    return links


@pytest.fixture
def nvlink_traffic(request: pytest.FixtureRequest):
    """A factory of NVLink traffic measurements on this machine: ``with nvlink_traffic() as traffic: work()``,
    then ``traffic.deltas`` / ``rates`` / ``timeline`` per GPU and link (bytes, bytes/s)."""
    from .fabric.nvlink_sampler import NvlinkTraffic, NvmlCounterReader

    fabric_session = _session(request.config)
    if fabric_session.replay:
        pytest.skip("--gpu-replay: there are no live NVLink counters to sample (see the nvlink_training fixture)")
    metrics = fabric_session.metrics
    readers = []

    def make(gpu_indices: list[int] | None = None, interval_s: float = 0.1) -> NvlinkTraffic:
        try:
            readers.append(NvmlCounterReader(gpu_indices))
        except GpuFabricError as exc:
            pytest.fail(str(exc), pytrace=False)
        return NvlinkTraffic(readers[-1], interval_s=interval_s,
                             on_sample=metrics.observe_nvlink if metrics is not None else None)

    yield make
    for reader in readers:
        reader.close()


def _measured(request: pytest.FixtureRequest, name: str):
    """A registered measurement for this test (measurements.py): made once per run (FabricSession caches it, and
    its failure). Not promised by the profile, or not asked for, is a plain skip; a measurement that failed is the
    test's failure, one line, reported when the test runs (not a set-up error); a tool that is not installed, or a
    bundle that recorded nothing for it, leaves the promise not checked."""
    from .errors import BundleError, ToolMissing
    from .measurements import REGISTRY

    entry = REGISTRY[name]
    fabric_session = _session(request.config)
    if entry.needs_machine:
        request.getfixturevalue("gpu_profile")
        request.getfixturevalue("fabric")
    not_promised = entry.why_not_promised(fabric_session.profile) if fabric_session.profile is not None else None
    if not_promised:
        pytest.skip(not_promised)
    if entry.asked and not getattr(fabric_session, entry.asked):
        pytest.skip(getattr(fabric_session, f"{entry.asked}_why"))
    try:
        measurement = fabric_session.measurement(name)
    except ToolMissing as exc:  # the tool is not installed here: nothing of the machine was measured
        not_checked(str(exc))
    except BundleError as exc:  # a recording that cannot be read shows nothing: never an accusation
        if not fabric_session.replay:
            raise
        not_checked(f"the bundle's recording cannot be read: {exc}")
    except GpuFabricError as exc:
        failure = str(exc)
    else:
        failure = None
    if failure is not None:  # outside the except: a failure now is one line, not a chained traceback
        _fail_in_call(request.node, failure)
        return None
    if measurement is None:
        not_checked(entry.nothing_recorded)
    return measurement


def _measurement_fixture(entry):
    def fixture(request: pytest.FixtureRequest):
        return _measured(request, entry.name)

    fixture.__name__ = fixture.__qualname__ = entry.fixture
    fixture.__doc__ = entry.doc
    return pytest.fixture(name=entry.fixture)(fixture)


def _register_measurement_fixtures() -> None:
    """One fixture per registered measurement (nvlink_training, bandwidth, memory_behaviour, rdma_devices,
    ib_write_bw_result, burn_in, ...), made here so that pytest finds them in this plugin module."""
    from .measurements import REGISTRY

    for entry in REGISTRY.values():
        globals()[f"_fixture_{entry.name}"] = _measurement_fixture(entry)


_register_measurement_fixtures()


@pytest.fixture(scope="session")
def gpufabric_run(request: pytest.FixtureRequest):
    """The run's FabricSession: profile, replay bundle, measurements (for suites; users want the fixtures above)."""
    return _session(request.config)


@pytest.fixture
def rdma_port(request: pytest.FixtureRequest, gpu_profile):
    """One RDMA port the profile promises (parametrized over `rdma.devices`); a missing one fails the test."""
    from .checks.rdma import find_port

    promise = request.getfixturevalue("rdma_promise")
    if promise is None:
        pytest.skip(f"profile {gpu_profile.name} promises no RDMA devices")
    rdma_devices = request.getfixturevalue("rdma_devices")
    if rdma_devices is None:
        return None  # the devices could not be read: the test fails on that when it runs
    _, port = find_port(rdma_devices, promise["name"], promise.get("port", 1))
    if port is None:
        _fail_in_call(request.node, f"RDMA port {promise['name']}:{promise.get('port', 1)} is promised by profile "
                                    f"{gpu_profile.name} but missing (found: "
                                    f"{', '.join(d.name for d in rdma_devices) or 'no RDMA device'})")
    return port


@pytest.fixture
def platform_findings(request: pytest.FixtureRequest) -> list[str]:
    """The platform settings that cost bandwidth here (ACS redirect, IOMMU translation, no peer-memory module, ...),
    one line each, whatever the profile promises; [] when none, or none recorded. For failing bandwidth checks."""
    try:
        facts = _session(request.config).measurement("platform")
    except GpuFabricError:
        return []
    if facts is None:
        return []
    from .checks.platform import bandwidth_findings

    return bandwidth_findings(facts)


@pytest.fixture
def gpufabric_extra(request: pytest.FixtureRequest):
    """Attach tables to this test's row in pytest-html's results table: ``add(tables=[{"caption", "header",
    "rows"}], name=...)``, rendered by report/templates/extra.html.j2 (autoescaped: a value is never markup). The
    report's plots are drawn from the results document instead (report/figures.py), so that a test attaches no image."""
    fabric_session = _session(request.config)

    def add(*, tables: list[dict], name: str = "") -> None:
        from .report.render import render

        # the dict pytest_html.extras.html() builds, without importing pytest-html where it is off
        extra = {"format_type": "html", "mime_type": None, "extension": "html",
                 "content": render("extra.html.j2", tables=tables)}
        fabric_session.add_extra(request.node.nodeid, {"name": name, **extra})

    return add


@pytest.fixture
def gpufabric_check(request: pytest.FixtureRequest):
    """Record a CheckResult in the run's results and turn its verdict into the test's outcome."""
    from .checks.result import FAILED, NOT_CHECKED, finite_only
    from .report.recorder import CHECK_PROPERTY

    def check(result):
        result = finite_only(result, replay=bool(_session(request.config).replay))
        # carried in the report (user_properties travel from pytest-xdist workers too), recorded by RunRecorder
        request.node.user_properties.append((CHECK_PROPERTY, result.to_dict()))
        if result.verdict == NOT_CHECKED:
            not_checked(result.message)
        if result.verdict == FAILED:
            pytest.fail(result.message, pytrace=False)
        return result

    return check

