"""Bundles recorded with `gpufabric snapshot` on real GPU machines replay to the verdict the live run gave.

tests/data/results/ holds the live runs' gpufabric-results.json (hardware/record-acceptance.sh on
2x H200 SXM 141GB and 1x H100 SXM 80GB, 2026-11-22); tests/data/bundles/ holds the bundles recorded in the same runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

RESULTS = Path(__file__).parent / "data" / "results"

# (bundle, the live run's results, the -k selection the live run used). The first two runs predate the NVLink
# traffic suite, so their replay selects the topology suite; the others selected the suites
# that existed when they ran.
RECORDED_RUNS = [
    pytest.param("h200-nvswitch-x2", "h200-nvswitch-x2-live-on-h200-x2.json", "test_topology", id="h200-x2-passes"),
    pytest.param("h100-x1", "h200-nvswitch-x2-live-on-h100-x1.json", "test_topology", id="h100-x1-fails"),
    pytest.param("h200-nvswitch-x2-training", "h200-nvswitch-x2-with-nvlink-traffic-on-h200-x2.json",
                 "test_topology or test_nvlink_traffic", id="h200-x2-training-passes"),
    pytest.param("h200-nvswitch-x2-p2p-disabled", "nvlink-traffic-p2p-disabled-on-h200-x2.json", "nvlink",
                 id="h200-x2-p2p-disabled-fails"),
    pytest.param("h200-nvswitch-x2-bandwidth", "h200-nvswitch-x2-bandwidth-live-on-h200-x2.json",
                 "bandwidth and not hbm and not nvbandwidth",  # the live -k bandwidth, before those tests were
                 id="h200-x2-bandwidth-passes"),
    # every suite and a 10-minute burn-in in one run (hardware/record-burn-in.sh), bundled with the snapshot
    pytest.param("h200-nvswitch-x2-acceptance", "acceptance-with-10min-burn-in-on-h200-x2.json", None,
                 id="h200-x2-acceptance-passes"),
]
X4_PROFILES = RESULTS / "h200-x4-profiles"


def _outcomes(document: dict) -> dict[str, str]:
    return {nodeid.rsplit("/", 1)[-1]: outcome for nodeid, outcome in document["tests"].items()}


def _live_tests(replay: dict, live: dict) -> dict[str, str]:
    """The replay's outcomes of the tests the live run had (later suites' tests skip: _assert_same_verdict)."""
    return {test: outcome for test, outcome in _outcomes(replay).items() if test in _outcomes(live)}


def _replay(pytester: pytest.Pytester, bundle: str | Path, select: str | None,
            profile: str = "h200-nvswitch-x2") -> dict:
    selection = ["-k", select] if select else []
    pytester.runpytest("--gpu-profile", profile, "--gpu-replay", str(bundle), *selection)
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def _messages(document: dict) -> list[tuple[str, str, str]]:
    """Every check's message, without the source each names last ('[live]' or the bundle's file)."""
    # the arrival suite came after the live runs; a skip's own record ("no-measurement": records.py) too
    return sorted((c["name"], c["subject"], c["message"].rsplit(" [", 1)[0]) for c in document["checks"]
                  if c["name"] not in ("gpu-health", "xid-events", "no-measurement"))


_TEST_COUNTS = ("passed", "failed", "skipped", "error")


def _assert_same_verdict(replay: dict, live: dict, selected: bool) -> None:
    """The same test outcomes as live, and the live verdict as today's rules give it: the live runs counted tests
    (results schema 1); a run of a -k selection is INCOMPLETE now, since the profile's other promises were not
    run, and a rejection stays a rejection."""
    # suites added after a live run (the diagnostics, other tools' evidence) add tests that skip here as not
    # promised: the live run's own tests keep their outcomes, the new ones only skip. The arrival suite, added
    # after every live run, judges what the bundle recorded of the GPUs' counters; no bundle recorded the kernel
    # log, so xid-events is not checked and a run accepted live is INCOMPLETE in replay
    arrival = {test for test in _outcomes(replay) if test.startswith("test_arrival.py::")}
    added = set(_outcomes(replay)) - set(_outcomes(live)) - arrival
    assert {_outcomes(replay)[test] for test in added} <= {"skipped"}
    arrival_counts = {key: sum(1 for test in arrival if _outcomes(replay)[test] == key) for key in _TEST_COUNTS}
    assert {key: replay["summary"][key] - arrival_counts[key] - (len(added) if key == "skipped" else 0)
            for key in _TEST_COUNTS} == {key: live["summary"][key] for key in _TEST_COUNTS}
    assert arrival_counts["failed"] == 0  # the recorded machines arrived healthy
    no_kernel_log = any(p["id"] == "xid-events" and p["outcome"] == "not checked" for p in replay["promises"])
    expected = ("INCOMPLETE" if (selected or no_kernel_log) and live["summary"]["verdict"] == "ACCEPTED"
                else live["summary"]["verdict"])
    assert replay["summary"]["verdict"] == expected


@pytest.mark.parametrize(("bundle", "live_results", "select"), RECORDED_RUNS)
def test_bundle_replays_to_the_live_verdict(pytester: pytest.Pytester, bundle, live_results, select):
    live = json.loads((RESULTS / live_results).read_text())
    replay = _replay(pytester, bundle, select)
    _assert_same_verdict(replay, live, select is not None)
    assert _live_tests(replay, live) == _outcomes(live)
    assert [g["serial"] for g in replay["machine"]["gpus"]] == [g["serial"] for g in live["machine"]["gpus"]]
    assert replay["machine"]["matrix"] == live["machine"]["matrix"]
    if select is None:  # a whole run: every check says what it said on the machine (the profile promised 140 GiB
        # then; the shipped one promises the 141 GB sold)
        said = [(name, subject, message.replace("131.32 GiB", "140.00 GiB") if name == "gpu-memory" else message)
                for name, subject, message in _messages(replay)]
        assert said == _messages(live)


@pytest.mark.parametrize(("bundle", "live_results", "select"), RECORDED_RUNS[:2])
def test_nvml_record_alone_gives_the_same_verdict(pytester: pytest.Pytester, bundles, bundle, live_results, select):
    """Without the nvidia-smi text, the matrix comes from NVML's answers (NV18 from the switch links)."""
    only_nvml = pytester.path / "nvml-only"
    only_nvml.mkdir()
    shutil.copy(bundles / bundle / "nvml.json", only_nvml / "nvml.json")
    live = json.loads((RESULTS / live_results).read_text())
    replay = _replay(pytester, only_nvml, select)
    assert _live_tests(replay, live) == _outcomes(live)
    assert replay["machine"]["provenance"].get("matrix") != "nvidia-smi topo -m"


def test_h100_failure_names_count_and_topology(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h100-x1")
    result.stdout.fnmatch_lines_random([
        "*expected 2 GPUs, found 1 (GPU0 NVIDIA H100 80GB HBM3)*",
        "*GPU0-GPU1: expected NV18, found no such device*",
        "*GPU0: expected a NVIDIA H200, found NVIDIA H100 80GB HBM3 (serial 1752624010498)*",
        "*GPU0: expected at least 131.32 GiB of memory, found 79.65 GiB*",
        "*GPU1 is promised by profile h200-nvswitch-x2 but missing: the machine has 1 GPU(s)*",
    ])


def test_profile_init_on_the_machine_passes_its_own_bundle(judged, pytester: pytest.Pytester):
    """The profile `gpufabric profile init` wrote on the H200 machine passes every test of the bundle recorded
    there."""
    result = pytester.runpytest("--gpu-profile", str(RESULTS / "profile-init-on-h200-x2.yaml"),
                                "--gpu-replay", "h200-nvswitch-x2")
    # NVLink traffic: not in this bundle (4); bandwidth: not in the written profile (3); the GPUs arrived healthy (2)
    judged(result, passed=16)


def test_the_four_gpu_machine_replays_to_its_live_run(pytester: pytest.Pytester):
    """4x H200 SXM 141GB (hardware/record-new-machine.sh): the profile `profile init` wrote there, with floors low
    enough to record the bandwidth, was ACCEPTED live with every suite and a 1-minute burn-in; its bundle replays
    to the same outcomes and messages."""
    live = json.loads((RESULTS / "h200-nvswitch-x4-measured-live-on-h200-x4.json").read_text())
    assert live["summary"]["verdict"] == "ACCEPTED" and live["summary"]["passed"] == 46
    assert len(live["machine"]["gpus"]) == 4 and len(live["burn_in"]["chunks"]) == 2  # a GEMM chunk, an all_reduce
    replay = _replay(pytester, "h200-nvswitch-x4", None, str(X4_PROFILES / "h200-nvswitch-x4-measured.yaml"))
    _assert_same_verdict(replay, live, selected=False)
    assert _live_tests(replay, live) == _outcomes(live)
    assert _messages(replay) == _messages(live)


def test_the_shipped_four_gpu_profile_accepts_the_machine_it_was_written_from(judged, pytester: pytest.Pytester):
    """profiles/h200-nvswitch-x4 (thresholds at 95 % of the slower of the two machines) against the bundle: every
    check passes, the burn-in's all_reduce now judged against the 4 GiB floor too, and the GPUs arrived healthy
    (the bundle holds no kernel log: xid-events is not checked)."""
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x4", "--gpu-replay", "h200-nvswitch-x4")
    judged(result, passed=51)
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    busbw = {c["subject"]: c["found"]["busbw_gbps"] for c in document["checks"] if c["name"] == "bandwidth-all_reduce"}
    assert 338 < busbw["all_reduce 256MiB"] < 340 and 362 < busbw["all_reduce 4GiB"] < 364


@pytest.mark.parametrize(("profile", "failures"), [
    ("h200-nvswitch-x2", ["*expected 2 GPUs, found 4 (GPU0 NVIDIA H200, *",
                          "*GPU0: CPU affinity 0-63, expected 0-31*"]),
    ("titan-rtx-nvlink", ["*GPU0-GPU1: expected NV2, found NV18*", "*GPU0: expected a TITAN RTX, found NVIDIA H200*"]),
    ("rtx-2080ti-pcie", ["*GPU0-GPU1: expected PHB, found NV18*", "*18 active NVLinks, expected 0*"]),
])
def test_other_machines_profiles_fail_on_the_four_gpu_machine(pytester: pytest.Pytester, profile, failures):
    """As on the machine itself (its log: tests/data/results/h200-nvswitch-x4-live-on-h200-x4.log)."""
    result = pytester.runpytest("--gpu-profile", profile, "--gpu-replay", "h200-nvswitch-x4", "-k", "test_topology")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines_random(failures)


def test_nvlink_crc_data_at_idle_no_longer_fails_a_healthy_machine():
    """The first 4x H200 SXM 141GB run, under the old default that forbade NVLink CRC_DATA: every one of its 42 tests
    failed on the health check, the topology tests too (1 to 7 per GPU while nothing ran), with every measurement
    passing. Judged again from its recorded windows: nothing under today's defaults, the same rises when forbidden."""
    from pytest_gpufabric.checks.health import health_problems

    run = json.loads((RESULTS / "h200-nvswitch-x4-crc-data-forbidden-by-default-on-h200-x4.json").read_text())
    assert run["summary"]["failed"] == 42 and run["summary"]["passed"] == 0
    assert {c["verdict"] for c in run["checks"]} == {"passed"}
    windows = run["health"]["tests"]
    failed = [t for t, outcome in run["tests"].items() if outcome == "failed"]
    idle = [windows[t] for t in failed if "test_topology" in t]
    assert len(idle) == 26 and all(any(name.startswith("nvlink_crc_data:") for g in w.values() for name in g["rose"])
                                   for w in idle)
    assert all(health_problems(w, {}) == [] for w in windows.values())
    assert all(health_problems(windows[t], {"forbid": ["nvlink_crc_data"]}) for t in failed)


def test_the_shipped_four_gpu_profile_accepted_a_third_machine_live():
    """profiles/h200-nvswitch-x4 as shipped, live on a third 4x H200 SXM 141GB host (topology, NVLink traffic and
    bandwidth; the burn-in, memory and RDMA suites not selected): ACCEPTED, with NVLink CRC_DATA rising on every
    GPU and, as the default says, watched rather than failed."""
    live = json.loads((RESULTS / "h200-nvswitch-x4-shipped-profile-live-on-h200-x4.json").read_text())
    assert live["profile"]["name"] == "h200-nvswitch-x4" and live["run"]["mode"] == "live"
    assert live["summary"]["verdict"] == "ACCEPTED" and live["summary"]["passed"] == 38
    assert live["summary"]["failed"] == live["summary"]["error"] == 0
    assert len(live["machine"]["gpus"]) == 4
    shipped = json.loads((RESULTS / "h200-nvswitch-x4-measured-live-on-h200-x4.json").read_text())
    assert {g["serial"] for g in live["machine"]["gpus"]}.isdisjoint(g["serial"] for g in shipped["machine"]["gpus"])
    crc = {gpu for window in live["health"]["tests"].values() for gpu, record in window.items()
           if any(name.startswith("nvlink_crc_data:") for name in record["rose"])}
    assert crc == {"0", "1", "2", "3"}
