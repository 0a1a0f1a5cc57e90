"""ACCEPTED only when every promise was checked (issue 20): the verdict rules, waivers, numbers that are not finite,
and for every shipped suite a run whose evidence or tool is taken away, which must end INCOMPLETE, never ACCEPTED.

The runs replay bundles recorded on real machines; the changes made to them (a file removed, numbers made NaN)
are DERIVED and said so where they are made.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from pytest_gpufabric.report.results import schema_errors
from pytest_gpufabric.verdict import (
    ACCEPTED,
    FAILED,
    INCOMPLETE,
    NOT_CHECKED,
    NOT_TESTED,
    PASSED,
    REJECTED,
    WAIVED,
    Promise,
    build_promises,
    judge,
    parse_waiver,
)

BUNDLES = Path(__file__).parent / "data" / "bundles"
ACCEPTANCE = BUNDLES / "h200-nvswitch-x2-acceptance"  # a whole run of a real machine: ACCEPTED as it is


def _results(pytester: pytest.Pytester) -> dict:
    def refuse(token: str):
        raise ValueError(f"{token} in the results: not strict JSON")

    text = (pytester.path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8")
    return json.loads(text, parse_constant=refuse)


def _promises(document: dict, outcome: str) -> dict[str, str]:
    return {p["id"]: p["reason"] for p in document["promises"] if p["outcome"] == outcome}


# --- the rules ------------------------------------------------------------------------------------------------


def test_one_measurement_that_shows_a_promise_is_enough_and_a_failure_wins():
    rows = [("t::torch[a]", "floor[a]", "passed", ""),
            ("t::nccl[a]", "floor[a]", "skipped", "not checked: no all_reduce_perf on PATH"),
            ("t::torch[b]", "floor[b]", "skipped", "not checked: the bundle holds no bandwidth.json"),
            ("t::nccl[b]", "floor[b]", "skipped", "not checked: no all_reduce_perf on PATH"),
            ("t::torch[c]", "floor[c]", "failed", "busbw 280.0 GB/s < 312 GB/s\nUsual causes: ..."),
            ("t::nccl[c]", "floor[c]", "passed", ""),
            ("t::x", "not-promised", "skipped", "profile p promises no x"),
            ("t::w", "waived-one", "skipped", "waived: agreed with ACME (--gpu-waive)"),
            ("t::broken", "broke", "error", "the test broke: KeyError: 'busbw'")]
    promises = {p.id: p for p in build_promises(rows)}
    assert promises["floor[a]"].outcome == PASSED and promises["floor[a]"].tests == ["t::torch[a]", "t::nccl[a]"]
    assert promises["floor[b]"].outcome == NOT_CHECKED
    assert promises["floor[b]"].reason == "the bundle holds no bandwidth.json; no all_reduce_perf on PATH"
    # the whole reason: what usually causes it is part of why it failed
    assert (promises["floor[c]"].outcome, promises["floor[c]"].reason) == (
        FAILED, "busbw 280.0 GB/s < 312 GB/s\nUsual causes: ...")
    assert "not-promised" not in promises  # a plain skip is no promise
    assert (promises["waived-one"].outcome, promises["waived-one"].reason) == (WAIVED, "agreed with ACME (--gpu-waive)")
    assert promises["broke"].outcome == NOT_CHECKED  # a broken test neither passes nor accuses the machine


@pytest.mark.parametrize("outcomes, machine_error, unfinished, verdict", [
    ([PASSED, PASSED], None, None, ACCEPTED),
    ([PASSED, WAIVED], None, None, ACCEPTED),
    ([PASSED, NOT_CHECKED], None, None, INCOMPLETE),
    ([PASSED, NOT_CHECKED, FAILED], None, None, REJECTED),
    ([NOT_CHECKED, NOT_CHECKED], None, None, NOT_TESTED),
    ([WAIVED], None, None, NOT_TESTED),
    ([], None, None, NOT_TESTED),
    ([NOT_CHECKED], "NVML not available", None, NOT_TESTED),
    ([PASSED, NOT_CHECKED], "NVML not available", None, INCOMPLETE),  # RDMA read without NVML, GPUs not
    ([PASSED], None, "the run was interrupted", INCOMPLETE),
    ([FAILED], None, "the run was interrupted", REJECTED),  # what it found before stopping stands
])
def test_the_verdict_follows_from_the_promises(outcomes, machine_error, unfinished, verdict):
    promises = [Promise(f"p{i}", outcome, "why" if outcome != PASSED else "") for i, outcome in enumerate(outcomes)]
    assert judge(promises, machine_error, unfinished)[0] == verdict


def test_a_promise_that_was_not_run_keeps_the_run_from_accepted():
    verdict, reason = judge([Promise("gpu-count", PASSED)], not_run={"nvlinks[GPU0]": "deselected (-k/-m): not run"})
    assert verdict == INCOMPLETE and reason == "1 promise(s) not checked: nvlinks[GPU0]"


@pytest.mark.parametrize("text", ["gpu-memory", "gpu-memory=", "=agreed", " = "])
def test_a_waiver_needs_a_promise_and_a_reason(text):
    with pytest.raises(ValueError, match="give PROMISE=REASON"):
        parse_waiver(text)


def test_a_waiver_names_a_promise_its_parameters_or_a_pattern():
    waiver = parse_waiver("gpu-memory = 80 GB as sold, agreed 2026-11-20")
    assert waiver.reason == "80 GB as sold, agreed 2026-11-20"
    assert waiver.matches("gpu-memory") and waiver.matches("gpu-memory[GPU1]") and not waiver.matches("gpu-model")
    assert parse_waiver("collective-bandwidth[*-1MiB]=x").matches("collective-bandwidth[all_reduce-1MiB]")


# --- the shipped profiles, as a new user runs them -------------------------------------------------------------


def test_the_readme_roce_command_is_incomplete_naming_what_the_bundle_cannot_show(tmp_path):
    """`gpufabric accept --profile a100-pcie-roce`: the bundle (a public write-up) holds ib_write_bw and
    ibv_devinfo, no GPU and no line rate. ib_write_bw passes; the GPU and port-rate promises are not checked."""
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "a100-pcie-roce",
                           "--replay", "a100-pcie-roce"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 6, done.stdout + done.stderr
    assert "gpufabric: INCOMPLETE (profile a100-pcie-roce" in done.stdout
    document = json.loads((tmp_path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8"))
    unchecked = _promises(document, NOT_CHECKED)
    assert set(unchecked) == {"gpu-count", "gpu-model[GPU0]", "gpu-health[GPU0]", "xid-events", "rdma-port[irdma0:1]",
                              "rdma-counters"}
    assert "rate unknown" in unchecked["rdma-port[irdma0:1]"] and "line rate" in unchecked["rdma-port[irdma0:1]"]
    assert "records no GPUs" in unchecked["gpu-model[GPU0]"]
    assert _promises(document, PASSED) == {"ib-write-bw": ""}
    assert document["summary"]["exit_code"] == 6


# --- numbers that are not finite -------------------------------------------------------------------------------


def _nan_everywhere(value, keys: set[str]):
    """DERIVED: every number under one of ``keys`` made NaN."""
    if isinstance(value, dict):
        return {k: (math.nan if k in keys and isinstance(v, (int, float)) else _nan_everywhere(v, keys))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_everywhere(v, keys) for v in value]
    return value


def test_a_bundle_of_nan_bandwidths_is_not_accepted_and_its_results_are_strict_json(pytester: pytest.Pytester):
    bundle = pytester.path / "nan-bundle"
    shutil.copytree(ACCEPTANCE, bundle)
    recorded = json.loads((bundle / "bandwidth.json").read_text(encoding="utf-8"))
    # json.dumps writes the NaN token, as a hand-edited or broken recording would hold it
    (bundle / "bandwidth.json").write_text(json.dumps(_nan_everywhere(recorded, {"busbw", "algbw", "gbps"})))
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle),
                                "--junitxml", "junit.xml")
    assert result.ret == 6
    document = _results(pytester)  # refuses NaN and Infinity tokens
    assert schema_errors(document) == []
    assert document["summary"]["verdict"] == INCOMPLETE
    unchecked = _promises(document, NOT_CHECKED)
    # the 1 MiB latency floor too: its row's busbw is NaN, so the row is not a measurement to judge a time by
    assert set(unchecked) == {"collective-bandwidth[all_reduce-1MiB]",
                              "collective-bandwidth[all_reduce-256MiB]", "collective-bandwidth[all_reduce-1GiB]",
                              "collective-bandwidth[all_reduce-4GiB]", "collective-bandwidth[sendrecv-1GiB]",
                              "copy-bandwidth[gpu_to_gpu]", "copy-bandwidth[host_to_device]",
                              "copy-bandwidth[device_to_host]", "xid-events"}
    assert "not a finite number (found.busbw_gbps = nan)" in unchecked["collective-bandwidth[all_reduce-1GiB]"]
    assert "not a finite number (GB/s.GPU0 = nan; GB/s.GPU1 = nan)" in unchecked["copy-bandwidth[host_to_device]"]
    # the verdict is in pytest's JUnit XML too
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    properties = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert properties["gpufabric_verdict"] == INCOMPLETE and properties["gpufabric_exit_code"] == "6"


# --- waivers --------------------------------------------------------------------------------------------------


TITAN_UNCHECKED = {"gpu-model[GPU0]", "gpu-model[GPU1]", "nvlink-traffic-volume[GPU0]",
                   "nvlink-traffic-volume[GPU1]", "gpu-health[GPU0]", "gpu-health[GPU1]", "xid-events"}


def test_waivers_on_the_command_line_make_an_agreed_run_accepted(pytester: pytest.Pytester):
    """The TITAN RTX write-up recorded neither the GPU model nor the training workload: waived in writing,
    the run is ACCEPTED, and the waivers are on the cover and in the results."""
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "--gpu-waive", "gpu-model=the write-up names the cards TITAN RTX; agreed 2026-11-20",
                                "--gpu-waive", "nvlink-traffic-volume[*]=no workload result recorded; agreed",
                                "--gpu-waive", "ecc-mode=not promised, so matches nothing",
                                "--gpu-waive", "gpu-health=the write-up recorded no GPU counters; agreed",
                                "--gpu-waive", "xid-events=the write-up recorded no kernel log; agreed",
                                "--html", "report.html", "--self-contained-html")
    assert result.ret == 0
    document = _results(pytester)
    assert document["summary"]["verdict"] == ACCEPTED
    assert set(_promises(document, WAIVED)) == TITAN_UNCHECKED
    assert document["summary"]["promises"] == {"passed": 8, "failed": 0, "not_checked": 0, "waived": 7}
    waivers = {w["promise"]: w for w in document["waivers"]}
    assert waivers["gpu-model"]["matched"] == ["gpu-model[GPU0]", "gpu-model[GPU1]"]
    assert waivers["gpu-model"]["source"] == "--gpu-waive"
    assert waivers["ecc-mode"]["matched"] == []
    result.stdout.fnmatch_lines(["ACCEPTED: all 8 promise(s) checked passed, 7 waived: *"])
    html = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert "<h3>Waivers</h3>" in html and "the write-up names the cards TITAN RTX; agreed 2026-11-20" in html


def test_a_profile_can_carry_its_waivers(pytester: pytest.Pytester):
    profile = pytester.path / "titan-agreed.yaml"
    profile.write_text(yaml.safe_dump({"name": "titan-agreed", "extends": "titan-rtx-nvlink", "waive": [
        {"promise": "gpu-model", "reason": "agreed with ACME, contract 4711"}]}))
    pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "titan-rtx-nvlink")
    document = _results(pytester)
    assert set(_promises(document, WAIVED)) == {"gpu-model[GPU0]", "gpu-model[GPU1]"}
    assert document["waivers"][0]["source"] == "profile titan-agreed"
    # what is not waived still keeps the run open
    assert document["summary"]["verdict"] == INCOMPLETE
    assert set(_promises(document, NOT_CHECKED)) == {"nvlink-traffic-volume[GPU0]", "nvlink-traffic-volume[GPU1]",
                                                     "gpu-health[GPU0]", "gpu-health[GPU1]", "xid-events"}


def test_a_waiver_without_its_reason_is_a_usage_error(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "--gpu-waive", "gpu-model")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gpu-waive 'gpu-model': give PROMISE=REASON*"])


def test_a_waived_failure_is_not_run_and_its_promise_is_waived(pytester: pytest.Pytester):
    """The TITAN RTX profile on the 2080 Ti machine fails its bridge; waiving the NVLink promises leaves the
    affinity failures, which still reject."""
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie",
                                "--gpu-waive", "topology-matrix=bridge ordered separately",
                                "--gpu-waive", "nvlinks=bridge ordered separately")
    document = _results(pytester)
    assert set(_promises(document, WAIVED)) == {"topology-matrix", "nvlinks[GPU0]", "nvlinks[GPU1]"}
    assert set(_promises(document, FAILED)) == {"affinity[GPU0]", "affinity[GPU1]"}
    assert result.ret == 1 and document["summary"]["verdict"] == REJECTED


# --- markers in the user's own tests ---------------------------------------------------------------------------


def test_a_marker_on_evidence_without_gpus_is_not_checked_never_failed(pytester: pytest.Pytester):
    pytester.makepyfile(test_mine="""
import pytest

@pytest.mark.gpu(count=1, model="A100")
def test_needs_the_a100(fabric):
    pass
""")
    result = pytester.runpytest("--gpu-profile", "a100-pcie-roce", "--gpu-replay", "a100-pcie-roce", "-rs",
                                "test_mine.py")
    result.stdout.fnmatch_lines(["SKIPPED*not checked: bundle *a100-pcie-roce records no GPUs"])
    assert "test_mine.py::test_needs_the_a100" in _promises(_results(pytester), NOT_CHECKED)


# --- proof per suite: take its evidence or its tool away ------------------------------------------------------


def _without(pytester: pytest.Pytester, base: Path, *names: str) -> Path:
    """DERIVED: a copy of a recorded bundle without the named files."""
    bundle = pytester.path / f"{base.name}-without"
    shutil.copytree(base, bundle)
    for name in names:
        (bundle / name).unlink()
    return bundle


def test_the_acceptance_bundle_as_recorded_lacks_only_its_kernel_log(pytester: pytest.Pytester):
    """Every promise it shows passed; it holds no kernel log, so xid-events is not checked (docs/verdict.md)."""
    pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(ACCEPTANCE))
    document = _results(pytester)
    assert document["summary"]["verdict"] == INCOMPLETE and set(_promises(document, NOT_CHECKED)) == {"xid-events"}


@pytest.mark.parametrize("removed, args, promise", [
    (("nvml.json", "nvidia-smi-q.xml"), (), "gpu-memory[GPU0]"),  # the topology suite
    (("nvlink-traffic.json",), (), "nvlink-traffic[GPU1]"),  # the NVLink traffic suite
    (("bandwidth.json",), (), "collective-bandwidth[all_reduce-4GiB]"),  # the bandwidth suite
    (("memory.json",), (), "memory-estimate"),  # the memory suite
    (("gpufabric-burnin.jsonl",), ("--gpu-burn-in", "10m"), "burn-in-gpu[GPU0]"),  # the burn-in, asked for
], ids=["topology", "nvlink-traffic", "bandwidth", "memory", "burn-in"])
def test_a_suite_without_its_evidence_is_incomplete(pytester: pytest.Pytester, removed, args, promise):
    bundle = _without(pytester, ACCEPTANCE, *removed)
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle), *args)
    document = _results(pytester)
    assert document["summary"]["verdict"] == INCOMPLETE and result.ret == 6
    assert promise in _promises(document, NOT_CHECKED)
    assert not _promises(document, FAILED)


def test_the_rdma_suite_without_its_ib_write_bw_output_is_not_tested(pytester: pytest.Pytester):
    bundle = _without(pytester, BUNDLES / "a100-pcie-roce", "ib_write_bw.txt")
    pytester.runpytest("--gpu-profile", "a100-pcie-roce", "--gpu-replay", str(bundle))
    document = _results(pytester)
    # ib_write_bw was all this bundle showed: without it nothing is checked at all
    assert document["summary"]["verdict"] == NOT_TESTED and not _promises(document, PASSED)
    assert _promises(document, NOT_CHECKED)["ib-write-bw"] == ("the bundle holds no ib_write_bw output "
                                                               "(ib_write_bw.txt or rdma-bw.json)")


def test_the_rdma_suite_without_perftest_is_not_checked(pytester: pytest.Pytester):
    """Live, with a perftest binary that is not installed: ib_write_bw is not checked, naming the tool."""
    profile = pytester.path / "no-perftest.yaml"
    profile.write_text(yaml.safe_dump({"name": "no-perftest", "extends": "a100-pcie-roce",
                                       "rdma": {"ib_write_bw": {"binary": "no-such-ib_write_bw"}}}))
    pytester.runpytest("--gpu-profile", str(profile), "-k", "ib_write_bw")
    document = _results(pytester)
    assert _promises(document, NOT_CHECKED)["ib-write-bw"].startswith("no-such-ib_write_bw not found on PATH")
    assert document["summary"]["verdict"] in (INCOMPLETE, NOT_TESTED)


def test_the_platform_suite_without_its_recording_is_incomplete(pytester: pytest.Pytester):
    profile = pytester.path / "with-platform.yaml"
    profile.write_text(yaml.safe_dump({"name": "with-platform", "extends": "h200-nvswitch-x2",
                                       "platform": {"numa_balancing": False}}))
    pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(ACCEPTANCE))
    document = _results(pytester)
    assert document["summary"]["verdict"] == INCOMPLETE
    why = _promises(document, NOT_CHECKED)["platform-numa-balancing"]
    assert why.startswith("NUMA balancing: not recorded by bundle") and "platform.json" in why


def test_without_torch_a_measurement_is_not_checked(monkeypatch):
    """torch missing where a workload needs it: ToolMissing, which the fixtures turn into "not checked" (as the
    perftest case above shows end to end), with the command that installs it."""
    import importlib.util

    from pytest_gpufabric.errors import ToolMissing
    from pytest_gpufabric.workloads.environment import require_torch

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "torch" else real(name, *a, **k))
    with pytest.raises(ToolMissing, match=r"the memory suite needs torch, which is not installed: pip install "
                                          r"'pytest-gpufabric\[torch\]'"):
        require_torch("the memory suite")


def test_results_files_are_readable_like_any_other_output(tmp_path):
    """gpufabric-results.json was written 0600 through mkstemp: a pipeline running as another user could not read
    it. Now 0666 less the umask, as fleet-results.json and any plainly opened file."""
    import os
    import stat

    from pytest_gpufabric.report.results import write_json

    old = os.umask(0o022)
    try:
        path = write_json({"schema_version": 2}, tmp_path / "gpufabric-results.json")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        os.umask(0o077)  # a user who keeps files private still does
        assert stat.S_IMODE(write_json({}, tmp_path / "private.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)
