"""Measurements that run alongside another in a live acceptance (Measurement.runs_beside): the PCIe copies beside
the memory pattern test, each judging what the other does not disturb, and how the session runs such a pair."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from pytest_gpufabric.measurements import REGISTRY, Measurement
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.run_options import RunOptions
from pytest_gpufabric.session import FabricSession
from pytest_gpufabric.workloads.runner import SPARES

BUNDLE = Path(__file__).parent / "data" / "bundles" / "h100-sxm-x1-acceptance"  # 1x H100 SXM 80GB, recorded


@pytest.fixture(autouse=True)
def _spares_off_after():
    """A live measurement turns the spare interpreters on (session.py); other tests expect them off."""
    yield
    SPARES.disable()


def _session(tmp_path: Path, profile_yaml: str = "", base: str = "h100-sxm-x1", bundle: Path = BUNDLE) -> FabricSession:
    profile = base
    if profile_yaml:
        (tmp_path / "site.yaml").write_text(f"name: site\nextends: {base}\n{profile_yaml}")
        profile = str(tmp_path / "site.yaml")
    session = FabricSession(RunOptions(profile=load_profile(profile), replay=str(bundle), report_dir=tmp_path))
    session.discover()
    return session


def test_the_pcie_copies_run_beside_the_memory_pattern_on_an_80_gb_board(tmp_path):
    pcie = REGISTRY["pcie_load"]
    assert pcie.runs_beside == "memory_pattern"
    session = _session(tmp_path)
    assert session.fabric.gpus[0].memory_bytes == 85520809984  # read off the bundle's nvml.json by hand
    assert pcie.beside_refused(session) is None  # the pattern's 90 % leaves 8 GB, the copies need 3 GiB


def test_unknown_memory_sizes_keep_the_copies_alone(tmp_path):
    titan = _session(tmp_path, "memory_pattern: {seconds: 5}\npcie_load: {seconds: 2}\n", "titan-rtx-nvlink",
                     BUNDLE.parent / "titan-rtx-nvlink")  # its bundle holds `nvidia-smi topo -m` only
    assert REGISTRY["pcie_load"].beside_refused(titan) == "the GPUs' memory sizes are not known"


def test_a_copy_rate_floor_keeps_the_copies_alone(tmp_path):
    session = _session(tmp_path, "pcie_load: {gen: 5, width: 16, min: 40 GB/s}\n")
    assert REGISTRY["pcie_load"].beside_refused(session) == "a copy-rate floor is judged on copies that run alone"


def test_a_pattern_that_leaves_too_little_memory_keeps_the_copies_alone(tmp_path):
    big_copies = _session(tmp_path, "memory_pattern: {seconds: 5, fraction: 0.95}\npcie_load: {size: 3 GiB}\n")
    assert REGISTRY["pcie_load"].beside_refused(big_copies) == (
        "the memory pattern leaves 3.98 GiB of a GPU, the copies need 5.00 GiB")
    by_bytes = _session(tmp_path, "memory_pattern: {seconds: 5, bytes: 78 GiB}\n")
    assert REGISTRY["pcie_load"].beside_refused(by_bytes) == (  # 85520809984 - 78 GiB = 1768947712 bytes
        "the memory pattern leaves 1.65 GiB of a GPU, the copies need 3.00 GiB")


def _sleeper(name: str, seconds: float, log: list):
    """A measurement whose workload is a real child process sleeping ``seconds``; it logs when it ran."""
    def live(fabric_session):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", f"import time; time.sleep({seconds})"], check=True)
        log.append((name, started, time.monotonic()))
        return {"name": name, "runner": {"started_in": "cold"}}

    return live


def test_the_session_starts_the_partner_and_the_asking_test_waits_for_it(tmp_path, monkeypatch):
    log: list = []
    host = Measurement(name="host", fixture="host_fixture", doc="", why_not_promised=lambda p: None,
                       live=_sleeper("host", 1.0, log), replay=lambda d, s: None, nothing_recorded="",
                       record_file="host.json")
    partner = Measurement(name="partner", fixture="partner_fixture", doc="", why_not_promised=lambda p: None,
                          live=_sleeper("partner", 1.5, log), replay=lambda d, s: None, nothing_recorded="",
                          record_file="partner.json", runs_beside="host")
    monkeypatch.setitem(REGISTRY, "host", host)
    monkeypatch.setitem(REGISTRY, "partner", partner)
    session = FabricSession(RunOptions(profile=load_profile("h100-sxm-x1"), report_dir=tmp_path))
    session.prestart_workloads({"host_fixture", "partner_fixture"})  # no GPU here: spares are not started

    assert session.measurement("host")["name"] == "host"  # the pair ends together: the partner is done too
    assert [name for name, *_ in sorted(log, key=lambda row: row[2])] == ["host", "partner"]
    partner_result = session.measurement("partner")
    assert partner_result == {"name": "partner", "runner": {"started_in": "cold", "beside": "host"}}
    (_, host_start, host_end), (_, partner_start, _) = sorted(log, key=lambda row: row[0])
    (_, _, partner_end), = [row for row in log if row[0] == "partner"]
    assert partner_start < host_end and host_start < partner_end  # they ran at the same time
    assert (tmp_path / "partner.json").is_file()
    assert session.run_facts().measurements["partner"] == partner_result


def test_a_checkpoint_does_not_wait_for_a_partner_still_running(tmp_path):
    session = FabricSession(RunOptions(profile=load_profile("h100-sxm-x1"), report_dir=tmp_path))
    running: Future = Future()
    session._measured["partner"] = running
    assert "partner" not in session.run_facts().measurements
    running.set_result({"name": "partner"})
    assert session.run_facts().measurements["partner"] == {"name": "partner"}


def test_a_partner_not_asked_for_is_not_started(tmp_path, monkeypatch):
    log: list = []
    monkeypatch.setitem(REGISTRY, "host", Measurement(
        name="host", fixture="host_fixture", doc="", why_not_promised=lambda p: None, live=_sleeper("host", 0.1, log),
        replay=lambda d, s: None, nothing_recorded=""))
    monkeypatch.setitem(REGISTRY, "partner", Measurement(
        name="partner", fixture="partner_fixture", doc="", why_not_promised=lambda p: None,
        live=_sleeper("partner", 0.1, log), replay=lambda d, s: None, nothing_recorded="", runs_beside="host"))
    session = FabricSession(RunOptions(profile=load_profile("h100-sxm-x1"), report_dir=tmp_path))
    session.prestart_workloads({"host_fixture"})  # -k selected the host's tests only
    session.measurement("host")
    session.settle_measurements()
    assert [name for name, *_ in log] == ["host"]



def test_a_pytest_xdist_worker_starts_no_partner(tmp_path, monkeypatch):
    """Each worker collects every test but runs some: the partner's test may run on another worker, which would
    measure it a second time at once."""
    log: list = []
    monkeypatch.setitem(REGISTRY, "host", Measurement(
        name="host", fixture="host_fixture", doc="", why_not_promised=lambda p: None, live=_sleeper("host", 0.1, log),
        replay=lambda d, s: None, nothing_recorded=""))
    monkeypatch.setitem(REGISTRY, "partner", Measurement(
        name="partner", fixture="partner_fixture", doc="", why_not_promised=lambda p: None,
        live=_sleeper("partner", 0.1, log), replay=lambda d, s: None, nothing_recorded="", runs_beside="host"))
    session = FabricSession(RunOptions(profile=load_profile("h100-sxm-x1"), report_dir=tmp_path))
    session.journal_records(object())  # what the plugin gives a worker (records.worker_journal)
    session.prestart_workloads({"host_fixture", "partner_fixture"})
    session.measurement("host")
    session.settle_measurements()
    assert [name for name, *_ in log] == ["host"]


class _RecordedRuns:
    """profile init's live workloads (measure._Runs) played by a real bundle's recordings, each behind a real child
    process that sleeps: when each ran, and what it returned, are known."""

    log: list = []

    def __init__(self, fabric, name, diagnostics):
        from pytest_gpufabric.profile.measure import _recorded

        self.recorded = _recorded(BUNDLE, diagnostics)

    def _run(self, key: str, times: int) -> list[dict]:
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)"], check=True)
        self.log.append((key, started, time.monotonic()))
        return self.recorded[key](times)

    def __getattr__(self, key):
        return lambda times: self._run(key, times)

    def diagnostic(self, measurement, times):
        return self._run(measurement.diagnostic.measure_as, times)


def test_profile_init_measures_the_copies_beside_the_pattern_and_writes_the_same_sections(monkeypatch):
    from pytest_gpufabric.fabric.bundle import load_bundle
    from pytest_gpufabric.kinds import diagnostics
    from pytest_gpufabric.profile import measure

    fabric = load_bundle(BUNDLE)
    measurements = [kind.measurement for kind in diagnostics()]
    from_bundle = measure.measure_machine(fabric, "x", repeats=1, bundle=BUNDLE, diagnostics=measurements)
    monkeypatch.setattr(measure, "_Runs", _RecordedRuns)
    monkeypatch.setattr(measure.SPARES, "disable", lambda: None)
    _RecordedRuns.log = []
    live = measure.measure_machine(fabric, "x", repeats=1, diagnostics=measurements)

    ran = {key: (start, end) for key, start, end in _RecordedRuns.log}
    assert ran["pcie"][0] < ran["pattern"][1] and ran["pattern"][0] < ran["pcie"][1]  # at the same time
    others = sorted((start, end) for key, (start, end) in ran.items() if key not in ("pcie", "pattern"))
    assert all(end <= min(ran["pcie"][0], ran["pattern"][0]) or start >= max(ran["pcie"][1], ran["pattern"][1])
               for start, end in others)  # and nothing else did
    assert live.sections == from_bundle.sections and live.sections["pcie_load"]["gen"] == 5


RECORDED = Path(__file__).parent / "data" / "results" / "acceptance-time-h100-x1"


@pytest.mark.parametrize("run", ["run-2", "run-3", "run-4"])
def test_recorded_pairs_judged_as_the_copies_and_pattern_alone_were(run):
    """On 1x H100 SXM 80GB the copies ran beside the pattern (their record says so) and every judged figure is what
    the same machine gave with each alone (run-1): gen 5 x16 under load, no replay, no wrong bit, the pattern's
    coverage 88.6 % of free memory (figures read off the files by hand)."""
    import json

    pcie = json.loads((RECORDED / run / "pcie-load.json").read_text())
    pattern = json.loads((RECORDED / run / "memory-pattern.json").read_text())
    results = json.loads((RECORDED / run / "acceptance-results.json").read_text())
    assert pcie["runner"]["beside"] == "memory_pattern"
    (row,) = pcie["gpus"]
    assert (row["link"]["under_load"]["gen_min"], row["link"]["under_load"]["width_min"]) == (5, 16)
    assert row["replay_counter"]["rise"] == 0
    (tested,) = pattern["gpus"]
    assert sum(p["mismatches"] for p in tested["passes"]) == 0 and round(tested["coverage"], 3) == 0.886
    assert results["summary"]["verdict"] == "ACCEPTED"
    outcomes = {c["promise"]: c["verdict"] for c in results["checks"]}
    assert outcomes["pcie-under-load[GPU0]"] == outcomes["memory-pattern[GPU0]"] == "passed"


@pytest.mark.parametrize("run", ["run-5", "run-6", "run-7", "baseline-1", "baseline-2", "final-1"])
def test_the_faster_start_left_every_judged_figure_as_it_was(run):
    """1x H100 SXM 80GB, one machine: the runs with the spares started before NVML is read and the host copies
    through the CUDA driver (run-5 to run-7) judge the figures the baselines (this session's starting commit) judge,
    each within docs/margins.md's run-to-run spread: the copies 54.8-55.4 GB/s to the GPU and 55.2-55.4 from it,
    gen 5 x16 under load, no replay, no wrong bit, the pattern covering 88.5-88.6 % (read off the files by hand)."""
    import json

    from pytest_gpufabric.report.signing import verify_path

    folder = RECORDED / run
    copy = json.loads((folder / "bandwidth.json").read_text())["copy"]
    (host,) = copy["host_device"]
    assert copy.get("host_device_api") == (None if run.startswith("baseline") else "cuda driver")
    assert 54.5 < host["host_to_device"]["gbps"] < 55.5 and 55.0 < host["device_to_host"]["gbps"] < 55.5
    (row,) = json.loads((folder / "pcie-load.json").read_text())["gpus"]
    assert (row["link"]["under_load"]["gen_min"], row["link"]["under_load"]["width_min"]) == (5, 16)
    assert row["replay_counter"]["rise"] == 0
    (tested,) = json.loads((folder / "memory-pattern.json").read_text())["gpus"]
    assert sum(p["mismatches"] for p in tested["passes"]) == 0 and 0.884 < tested["coverage"] < 0.887
    results = json.loads((folder / "acceptance-results.json").read_text())
    assert results["summary"]["verdict"] == "ACCEPTED"
    assert verify_path(folder / "acceptance-results.json").problems == []  # whole, as the run wrote it
    last = json.loads((folder / "acceptance_time.last.json").read_text())
    if run == "final-1":  # the final code once, on another machine (no baseline there)
        assert last["boards"][0]["serial"] == "1651824002281" and len(last["package"]["sha256"]) == 64
        return
    assert last["boards"][0]["serial"] == "1652224058438"
    # the time: each run under the 30 s, each baseline over it
    assert (last["acceptance_wall_s"] <= 30.0) == run.startswith("run")
