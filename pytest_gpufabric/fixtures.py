"""The plugin's fixtures (registered with it: plugin.py's ``pytest_plugins``), and the parametrization of the
public ``gpu_pair`` and ``promised_gpu``, which users' own tests ask for too. A shipped suite's other parameters
(per GPU, per collective, per RDMA port, ...) are its own: its module's ``pytest_generate_tests``."""

from __future__ import annotations

import itertools

import pytest

from .errors import BundleError, GpuFabricError, ToolMissing
from .fabric.model import nvlink_count_of_label
from .kinds.platform import PLATFORM_FACTS
from .measurements import REGISTRY
from .parametrize import over, per_gpu, promised_profile
from .paths import SUITES_DIR
from .promise import fail_in_call, not_checked, promise_of
from .report.render import render
from .session_factory import built_session, fabric_session_of


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu_pair" in metafunc.fixturenames:
        profile = promised_profile(metafunc.config)
        pairs = profile.pairs if profile else _machine_pairs(metafunc.config)
        over(metafunc, "gpu_pair", pairs, [f"GPU{a}-GPU{b}" for a, b in pairs], indirect=True)
    if "promised_gpu" in metafunc.fixturenames:
        per_gpu(metafunc, "promised_gpu", indirect=True)


def _machine_pairs(config: pytest.Config) -> list[tuple[int, int]]:
    """Without a profile: every pair of GPUs the machine (live, or --gpu-replay's bundle) joins by NVLink."""
    fabric_session = built_session(config)
    fabric = fabric_session.fabric if fabric_session is not None else None
    if fabric is None:
        return []
    return [(a.index, b.index) for a, b in itertools.combinations(fabric.gpus, 2)
            if nvlink_count_of_label(fabric.label(a.label, b.label) or "") > 0]


@pytest.fixture(scope="session")
def gpu_profile(request: pytest.FixtureRequest):
    """The machine profile given with --gpu-profile (skips the test when none was given)."""
    profile = fabric_session_of(request.config).profile
    if profile is None:
        pytest.skip("no --gpu-profile given: nothing is promised")
    return profile


@pytest.fixture(scope="session")
def fabric(request: pytest.FixtureRequest):
    """The machine as discovered (live NVML or --gpu-replay bundle)."""
    fabric_session = fabric_session_of(request.config)
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
    unknown = [fabric.undescribed[label] for label in missing if label in fabric.undescribed]
    if unknown:  # announced by the record, not described: unknown, not missing (formats/coverage.py)
        not_checked(unknown[0])
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
    if gpu is None and f"GPU{index}" in fabric.undescribed:  # announced, not described: unknown, not missing
        not_checked(fabric.undescribed[f"GPU{index}"])
    if gpu is None:
        fail_in_call(request.node, f"GPU{index} is promised by profile {profile.name} but missing: the "
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
    profile = fabric_session_of(request.config).profile
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

    fabric_session = fabric_session_of(request.config)
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
    entry = REGISTRY[name]
    fabric_session = fabric_session_of(request.config)
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
        fail_in_call(request.node, failure)
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
    ib_write_bw_result, burn_in, ...), made here so that pytest finds them in this module."""
    for entry in REGISTRY.values():
        globals()[f"_fixture_{entry.name}"] = _measurement_fixture(entry)


_register_measurement_fixtures()


@pytest.fixture(scope="session")
def gpufabric_run(request: pytest.FixtureRequest):
    """The run's FabricSession: profile, replay bundle, measurements (for suites; users want the fixtures above)."""
    return fabric_session_of(request.config)


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
        fail_in_call(request.node, f"RDMA port {promise['name']}:{promise.get('port', 1)} is promised by profile "
                                   f"{gpu_profile.name} but missing (found: "
                                   f"{', '.join(d.name for d in rdma_devices) or 'no RDMA device'})")
    return port


@pytest.fixture
def platform_findings(request: pytest.FixtureRequest) -> list[str]:
    """The platform settings that cost bandwidth here (ACS redirect, IOMMU translation, no peer-memory module, ...),
    one line each, whatever the profile promises; [] when none, or none recorded. For failing bandwidth checks."""
    try:
        facts = fabric_session_of(request.config).measurement(PLATFORM_FACTS.name)
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
    fabric_session = fabric_session_of(request.config)

    def add(*, tables: list[dict], name: str = "") -> None:
        # the dict pytest_html.extras.html() builds, without importing pytest-html where it is off
        extra = {"format_type": "html", "mime_type": None, "extension": "html",
                 "content": render("extra.html.j2", tables=tables)}
        fabric_session.add_extra(request.node.nodeid, {"name": name, **extra})

    return add


@pytest.fixture
def gpufabric_check(request: pytest.FixtureRequest):
    """Record a CheckResult in the run's results and turn its verdict into the test's outcome."""
    from .checks.result import FAILED, NOT_CHECKED, finite_only
    from .records import record
    from .verdict import NOT_CHECKED_PREFIX

    def check(result):
        result = finite_only(result, replay=bool(fabric_session_of(request.config).replay))
        # the record, not the test's outcome, judges the promise (records.py: never through the report stream)
        record(request.node, promise_of(request.node, SUITES_DIR)[0], result.to_dict())
        if result.verdict == NOT_CHECKED:
            pytest.skip(NOT_CHECKED_PREFIX + result.message)
        if result.verdict == FAILED:
            pytest.fail(result.message, pytrace=False)
        return result

    return check

