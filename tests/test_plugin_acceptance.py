"""The plugin end to end (pytester), on bundles recorded from real machines."""

from __future__ import annotations

import json

import pytest

from pytest_gpufabric.fabric.nvml import nvml_available
from pytest_gpufabric.profile.loader import load_profile

needs_no_driver = pytest.mark.skipif(nvml_available()[0], reason="this machine has a working NVIDIA driver")


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def test_titan_profile_on_titan_bundle_is_incomplete(judged, pytester: pytest.Pytester):
    """The write-up recorded `topo -m` and `nvlink -g 0` samples only: what it shows passes, and the promises it
    cannot show (the GPU model; the all-reduce volume, for want of the workload's result) keep the run from
    ACCEPTED, each named with why."""
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink", "-rs")
    # topology: 6 judged, 8 not promised or not recorded; NVLink traffic: growth on both GPUs judged from the
    # recorded `nvlink -g 0` samples, volume not checked (the recording has no workload)
    judged(result, passed=8)
    assert result.ret == 6
    result.stdout.fnmatch_lines(["*gpufabric: INCOMPLETE (profile titan-rtx-nvlink*",
                                 "INCOMPLETE: 7 promise(s) not checked: gpu-health[[]GPU0[]], gpu-health[[]GPU1[]], "
                                 "xid-events, gpu-model[[]GPU0[]], gpu-model[[]GPU1[]], "
                                 "nvlink-traffic-volume[[]GPU0[]] and 1 more"])
    # what the bundle cannot tell is skipped with the reason, not passed
    result.stdout.fnmatch_lines(["*not checked: not recorded by bundle*nvml.json (gpufabric snapshot) or "
                                 "nvidia-smi-q.xml*"])
    results = _results(pytester)
    assert results["summary"]["verdict"] == "INCOMPLETE" and results["summary"]["exit_code"] == 6
    # the write-up recorded no GPU counters and no kernel log: the arrival state is not checked either
    assert results["summary"]["promises"] == {"passed": 8, "failed": 0, "not_checked": 7, "waived": 0}
    unchecked = {p["id"]: p["reason"] for p in results["promises"] if p["outcome"] == "not checked"}
    assert unchecked["gpu-model[GPU0]"].startswith("not recorded by bundle")
    assert "holds no workload result" in unchecked["nvlink-traffic-volume[GPU1]"]
    assert results["profile"]["sha256"] == load_profile("titan-rtx-nvlink").sha256
    matrix = next(c for c in results["checks"] if c["name"] == "topology-matrix")
    assert matrix["expected"]["GPU0"]["GPU1"] == "NV2" and matrix["found"]["GPU0"]["GPU1"] == "NV2"


def test_titan_profile_fails_on_2080ti_bundle_with_cell_diff(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*1 topology cell(s) differ from profile titan-rtx-nvlink:*",
        "*GPU0-GPU1: expected NV2, found PHB*",
    ])
    result.stdout.fnmatch_lines(["*GPU0*0 active NVLinks, expected 2*"])
    result.stdout.fnmatch_lines(["*GPU0: CPU affinity 0-35, expected 0-17,36-53*"])
    result.stdout.fnmatch_lines(["*gpufabric: REJECTED*"])
    assert "Traceback" not in result.stdout.str()
    # the verdict's list: one line per cause (three or more promises of one cause are one line), what failed before
    # what could not be checked
    listed = [line for line in result.outlines if line.startswith(("  failed", "  not checked"))]
    assert [line.split(":")[0].strip() for line in listed] == ["failed"] * 5 + [
        "not checked (3 promises", "not checked", "not checked", "not checked (4 promises"]
    assert listed[5].startswith("  not checked (3 promises: gpu-health x2, xid-events): the bundle holds no health "
                                "record")
    assert listed[0].startswith("  failed: topology-matrix: 1 topology cell(s) differ from profile "
                                "titan-rtx-nvlink: GPU0-GPU1: expected NV2, found PHB; Usual causes: ")
    results = _results(pytester)
    assert results["summary"]["verdict"] == "REJECTED"
    failed = {c["name"] for c in results["checks"] if c["verdict"] == "failed"}
    assert failed == {"topology-matrix", "nvlink-links", "affinity"}


def test_h200_profile_passes_on_h200_bundle(judged, pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2", "-rs")
    judged(result, passed=16)  # with gpu-health of both GPUs, from the bundle's health.json
    result.stdout.fnmatch_lines(["*the bundle holds no NVLink counter samples taken during training*"])
    result.stdout.fnmatch_lines(["*the bundle holds no bandwidth measurements (bandwidth.json or nccl-tests*.txt)*"])


def test_unknown_profile_is_a_usage_error_listing_profiles(pytester: pytest.Pytester):
    pytester.makepyfile("def test_never(): raise AssertionError('must not run')")
    result = pytester.runpytest("--gpu-profile", "titan-rtx")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown profile 'titan-rtx' (did you mean 'titan-rtx-nvlink'?); available "
                                 "profiles: a100-pcie-roce, gb200-nvl72-tray, h100-sxm-x1, h200-nvswitch-x2, "
                                 "h200-nvswitch-x4, hgx-b200-8gpu, hgx-b300-8gpu, rtx-2080ti-pcie, titan-rtx-nvlink*"])
    assert "must not run" not in result.stdout.str()


@pytest.mark.parametrize(
    ("text", "json_path", "problem"),
    [
        ("name: bad\ngpus: {count: 2, modle: X}\n", "$.gpus", "Additional properties are not allowed ('modle'"),
        ("name: bad\ngpus: {count: 2, memory: 24 gigs}\n", "$.gpus.memory", "does not match"),
        ("name: bad\ngpus: {count: two}\n", "$.gpus.count", "'two' is not of type 'integer'"),
        ("name: bad\ngpus: {count: 2}\ntopology:\n  matrix:\n    GPU0: {GPU1: NV9X}\n",
         "$.topology.matrix.GPU0.GPU1", "does not match"),
        ("name: bad\ngpus: {count: 2}\ntopology:\n  matrix:\n    GPU0: {GPU1: NV2}\n    GPU1: {GPU0: PHB}\n",
         "$.topology.matrix.GPU0.GPU1", "GPU0-GPU1 is 'NV2' but GPU1-GPU0 is 'PHB'"),
        ("name: bad\ngpus: {count: 2}\npairs: [[0, 2]]\n", "$.pairs[0]", "GPU 2 is not among the profile's 2 GPUs"),
        ("gpus: {count: 2}\n", "$", "'name' is a required property"),
        ("name: bad\ngpus: {count: 2}\ntopology:\n  matrix:\n    0: {1: NV2}\n", "$.topology.matrix",
         "key 0 is a int; write it as a name such as GPU0"),
    ],
)
def test_malformed_profile_names_file_path_and_problem(pytester: pytest.Pytester, text, json_path, problem):
    profile = pytester.path / "bad.yaml"
    profile.write_text(text)
    result = pytester.runpytest("--gpu-profile", str(profile))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"{profile} at {json_path}: " in err and problem in err
    assert "Traceback" not in err


def test_profile_that_is_not_yaml(pytester: pytest.Pytester):
    profile = pytester.path / "broken.yaml"
    profile.write_text("name: x\ngpus: {count: 2\n")
    result = pytester.runpytest("--gpu-profile", str(profile))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{profile}: not valid YAML (line 3, column 1)*"])


def test_profile_extends_and_overrides(judged, pytester: pytest.Pytester, monkeypatch):
    (pytester.path / "profiles").mkdir()
    (pytester.path / "profiles" / "titan-rtx-nvlink-site.yaml").write_text(
        "name: titan-rtx-nvlink-site\nextends: titan-rtx-nvlink\ngpus: {model: RTX}\n"
    )
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink-site", "--gpu-replay", "titan-rtx-nvlink")
    judged(result, passed=8)
    profile = load_profile("titan-rtx-nvlink-site", pytester.path)
    assert profile.gpu_count == 2 and profile.gpu_model == "RTX" and profile.matrix["GPU0"]["GPU1"] == "NV2"
    assert [p.name for p in profile.chain] == ["titan-rtx-nvlink-site.yaml", "titan-rtx-nvlink.yaml"]


def test_a_profile_that_extends_another_may_choose_one_of_two_floors(tmp_path):
    """A fabric floor is min_busbw or min_fraction_of_line_rate (oneOf): the file of a profile that extends another
    is checked without the required keys it may inherit, but the choice between the two floors stays required."""
    from pytest_gpufabric.errors import ProfileError

    profile = tmp_path / "site.yaml"
    profile.write_text("name: site\nextends: h200-nvswitch-x2\nfabric:\n  all_reduce:\n"
                       "    - {size: 1 MiB, min_busbw: 0.05 GB/s}\n")
    assert load_profile(str(profile)).data["fabric"]["all_reduce"] == [{"size": "1 MiB", "min_busbw": "0.05 GB/s"}]
    profile.write_text("name: site\nextends: h200-nvswitch-x2\nfabric:\n  all_reduce:\n    - {size: 1 MiB}\n")
    with pytest.raises(ProfileError, match=r"at \$\.fabric\.all_reduce\[0\]: .* is not valid under any of"):
        load_profile(str(profile))


def test_profile_extends_cycle_is_reported(pytester: pytest.Pytester):
    (pytester.path / "a.yaml").write_text("name: a\nextends: b\n")
    (pytester.path / "b.yaml").write_text("name: b\nextends: a\n")
    result = pytester.runpytest("--gpu-profile", str(pytester.path / "a.yaml"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*profiles extend each other in a cycle*"])


def test_profile_search_path_from_environment(judged, pytester: pytest.Pytester, monkeypatch, tmp_path_factory):
    extra = tmp_path_factory.mktemp("site-profiles")
    (extra / "site-pcie.yaml").write_text("name: site-pcie\nextends: rtx-2080ti-pcie\n")
    monkeypatch.setenv("GPUFABRIC_PROFILE_PATH", str(extra))
    result = pytester.runpytest("--gpu-profile", "site-pcie", "--gpu-replay", "rtx-2080ti-pcie")
    judged(result, passed=6)


def test_corrupt_bundle_is_a_usage_error(pytester: pytest.Pytester):
    archive = pytester.path / "support.tar.gz"
    archive.write_bytes(b"\x1f\x8b\x08\x00 this is not really gzip")
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", str(archive))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-replay: *support.tar.gz: not a readable .tar.gz bundle*"])


def test_bundle_without_topology_is_a_usage_error(pytester: pytest.Pytester):
    (pytester.path / "empty-bundle").mkdir()
    (pytester.path / "empty-bundle" / "notes.txt").write_text("customer notes")
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "empty-bundle")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*a bundle needs the topology (nvidia-smi-topo-m.txt or nvml.json), the RDMA devices "
         "(ibv_devinfo-v.txt or sysfs/), a suite's recording or another tool's output (it holds notes.txt)*"]
    )


def test_tar_gz_bundle_replays(judged, pytester: pytest.Pytester, bundles):
    import tarfile

    archive = pytester.path / "titan.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundles / "titan-rtx-nvlink", arcname="titan-rtx-nvlink")
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", str(archive))
    judged(result, passed=8)


@needs_no_driver
def test_no_driver_is_not_tested_with_one_clear_message(pytester: pytest.Pytester):
    """This machine has no NVIDIA driver: nothing was examined, so the verdict is NOT TESTED (exit 7), never a
    rejection; the reason points at --gpu-replay, and no test fails or errors."""
    result = pytester.runpytest_subprocess("--gpu-profile", "titan-rtx-nvlink")
    assert result.ret == 7
    out = result.stdout.str()
    assert "use --gpu-replay to check a recorded bundle" in out
    result.stdout.fnmatch_lines(["*gpufabric: NOT TESTED (profile titan-rtx-nvlink, no machine)*",
                                 "NOT TESTED: the machine could not be examined: NVML not available: *"])
    outcomes = result.parseoutcomes()
    assert "failed" not in outcomes and "errors" not in outcomes and outcomes["skipped"] >= 14
    assert "Traceback" not in out and "raise " not in out
    results = _results(pytester)
    assert results["machine"] is None and results["machine_error"].startswith("NVML not available")
    assert results["summary"]["verdict"] == "NOT TESTED" and results["summary"]["exit_code"] == 7
    assert results["summary"]["promises"]["failed"] == 0 and results["summary"]["promises"]["passed"] == 0


def test_markers_skip_what_the_profile_does_not_promise(judged, pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu(count=4)
        def test_four_gpus(): pass

        @pytest.mark.gpu(model="H200")
        def test_h200(): pass

        @pytest.mark.nvlink(min_links=2)
        def test_bridged_pair(fabric): assert fabric.label("GPU0", "GPU1") == "NV2"

        @pytest.mark.rdma(count=1)
        def test_needs_rdma_device(): pass
        """
    )
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "-rs", "test_markers_skip_what_the_profile_does_not_promise.py",
                                "-k", "four or h200 or bridged or needs_rdma")
    judged(result, passed=1)
    result.stdout.fnmatch_lines_random([
        "*profile titan-rtx-nvlink promises 2 GPU(s); the test needs 4*",
        "*profile titan-rtx-nvlink promises TITAN RTX; the test needs H200*",
        "*profile titan-rtx-nvlink promises 0 RDMA port(s); the test needs 1*",
    ])


def test_markers_fail_what_the_profile_promises_and_the_machine_lacks(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.nvlink(min_links=2)
        def test_bridged_pair(): pass
        """
    )
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie",
                                "test_markers_fail_what_the_profile_promises_and_the_machine_lacks.py",
                                "-k", "bridged")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*promised by profile titan-rtx-nvlink but missing: no NVLink of 2+ links between a GPU pair "
        "(found GPU0-GPU1 PHB)*"
    ])


def test_markers_without_profile_skip_missing_hardware(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.nvlink
        def test_needs_nvlink(): pass

        @pytest.mark.gpu(count=2)
        def test_two_gpus(gpus): pass
        """
    )
    result = pytester.runpytest("--gpu-replay", "rtx-2080ti-pcie", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines_random([
        "*no NVLink of 1+ links between a GPU pair (found GPU0-GPU1 PHB)*",
        "*no --gpu-profile given: nothing is promised*",
    ])


@needs_no_driver
def test_markers_without_driver_or_options_skip_with_reason(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_gpu(): pass
        """
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*NVML not available: *"])


def test_gpu_pair_is_parametrized_over_the_profile_pairs(judged, pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        def test_pair(gpu_pair, fabric):
            a, b = gpu_pair
            assert fabric.label(a.label, b.label) == "NV18"
        """
    )
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2",
                                "-v", "test_gpu_pair_is_parametrized_over_the_profile_pairs.py")
    result.stdout.fnmatch_lines(["*test_pair?GPU0-GPU1? PASSED*"])
    judged(result, passed=17)  # topology, the GPUs' arrival state and this one; no traffic or bandwidth recorded


def test_single_gpu_machine_fails_the_two_gpu_profile(pytester: pytest.Pytester, bundles):
    """A bundle with GPU1 removed stands for a machine that lost a GPU: count and topology fail, by name."""
    from pytest_gpufabric.formats.topo import parse_topo_m

    topo = (bundles / "h200-nvswitch-x2" / "nvidia-smi-topo-m.txt").read_text()
    # DERIVED from the real H200 capture: keep the header's GPU0 column and the GPU0 row only
    lines = topo.splitlines()
    header = lines[0].replace("GPU1\t", "")
    row = lines[1].replace("\tNV18", "")
    single = "\n".join([header, row, *lines[3:]]) + "\n"
    assert list(parse_topo_m(single).matrix) == ["GPU0"]
    (pytester.path / "one-gpu").mkdir()
    (pytester.path / "one-gpu" / "nvidia-smi-topo-m.txt").write_text(single)
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "one-gpu")
    result.stdout.fnmatch_lines(["*expected 2 GPUs, found 1*"])
    result.stdout.fnmatch_lines(["*GPU0-GPU1: expected NV18, found no such device*"])
    result.stdout.fnmatch_lines(["*GPU1 is promised by profile h200-nvswitch-x2 but missing*"])


def test_plugin_can_be_disabled(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess("-p", "no:gpufabric", "--gpu-profile", "titan-rtx-nvlink")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --gpu-profile*"])


def test_without_profile_no_suites_are_collected(pytester: pytest.Pytester):
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert not (pytester.path / "reports").exists()


def test_user_paths_run_with_the_suites(judged, pytester: pytest.Pytester):
    pytester.makepyfile("def test_mine(gpus): assert len(gpus) == 2")
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "test_user_paths_run_with_the_suites.py")
    judged(result, passed=9)


def test_ini_options(judged, pytester: pytest.Pytester):
    pytester.makeini("[pytest]\ngpu_profile = titan-rtx-nvlink\ngpu_replay = rtx-2080ti-pcie\ngpu_report_dir = out\n")
    result = pytester.runpytest()
    judged(result, failed=5, passed=1)
    assert (pytester.path / "out" / "gpufabric-results.json").is_file()


def test_html_report_has_environment_inventory_and_topology(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie",
                                "--html", "reports/acceptance.html", "--self-contained-html")
    assert result.ret == 1
    html = (pytester.path / "reports" / "acceptance.html").read_text()
    assert "GPU profile sha256" in html and load_profile("titan-rtx-nvlink").sha256 in html
    assert "Topology: expected vs found" in html and "Inventory" in html
    assert "expected NV2, found PHB" in html
    assert 'class=\\"mismatch\\"' in html or 'class="mismatch"' in html
    assert "Verdict: REJECTED" in html


def test_what_a_bundle_did_not_record_is_skipped_not_passed(pytester: pytest.Pytester, bundles):
    """Only topo -m of the H200: the link count is judged from NV18, speed and NVSwitch remotes cannot be."""
    import shutil

    (pytester.path / "topo-only").mkdir()
    shutil.copy(bundles / "h200-nvswitch-x2" / "nvidia-smi-topo-m.txt", pytester.path / "topo-only")
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "topo-only", "-rs",
                                "-k", "test_topology and test_nvlinks")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*18 active NVLinks as promised, but the link speed and link remote (NVSwitch or "
                                 "GPU) is not recorded by bundle*nvml.json (gpufabric snapshot)*"])


def test_partial_affinity_evidence_is_skipped(pytester: pytest.Pytester):
    """The TITAN RTX topo -m has no NUMA column: a promised NUMA affinity cannot be judged from it."""
    (pytester.path / "numa.yaml").write_text(
        "name: numa\nextends: titan-rtx-nvlink\ntopology:\n  numa_affinity: {GPU0: '0', GPU1: '1'}\n"
    )
    result = pytester.runpytest("--gpu-profile", str(pytester.path / "numa.yaml"), "--gpu-replay",
                                "titan-rtx-nvlink", "-rs", "-k", "affinity")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*GPU0: numa_affinity not recorded by bundle*"])


def test_a_run_that_judged_nothing_keeps_the_last_results(pytester: pytest.Pytester):
    """-k matching nothing (or --collect-only) judges nothing: the last results and report stay as they were and
    the run exits as pytest does (5: nothing collected; 0 for --collect-only)."""
    args = ("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink", "--html", "reports/a.html",
            "--self-contained-html")
    reports = pytester.path / "reports"
    assert pytester.runpytest(*args, "-k", "nothing").ret == 5
    assert not (reports / "a.html").exists() and not (reports / "gpufabric-results.json").exists()
    assert pytester.runpytest(*args).ret == 6
    before = {name: (reports / name).read_bytes() for name in ("gpufabric-results.json", "a.html")}
    result = pytester.runpytest(*args, "-k", "nothing")
    assert result.ret == 5
    result.stdout.fnmatch_lines(["*gpufabric: no test ran, nothing judged*",
                                 "the results and report of the last run, if any, are kept: *gpufabric-results.json"])
    assert "Generated html report" not in result.stdout.str()  # it was not: the last run's page stands
    collected = pytester.runpytest(*args, "--collect-only")
    assert collected.ret == 0 and "Generated html report" not in collected.stdout.str()
    assert {name: (reports / name).read_bytes() for name in before} == before
    assert sorted(path.name for path in reports.iterdir()) == ["a.html", "gpufabric-results.json"]


def test_no_promise_checked_is_not_tested(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "-k", "rdma")
    summary = _results(pytester)["summary"]
    assert summary["verdict"] == "NOT TESTED" and result.ret == 7
    assert summary["verdict_reason"].startswith("no promise could be checked: ")
    assert "rdma-counters" not in _results(pytester)["not_run"]  # the profile promises no RDMA
    assert _results(pytester)["not_run"]["gpu-count"] == "deselected (-k 'rdma'): not run"


def test_a_selection_of_the_suites_is_incomplete(pytester: pytest.Pytester):
    """-k runs a part of the acceptance: what it judged passes, the promises it left out are named, and the
    verdict is INCOMPLETE, never ACCEPTED on a part."""
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "-k", "topology_matrix")
    result.assert_outcomes(passed=1)
    results = _results(pytester)
    assert result.ret == 6 and results["summary"]["verdict"] == "INCOMPLETE"
    assert results["summary"]["promises"]["passed"] == 1
    assert set(results["not_run"]) >= {"gpu-count", "nvlinks[GPU0]", "nvlink-traffic[GPU1]"}
    assert "burn-in-gpu[GPU0]" not in results["not_run"]  # no burn-in was asked for: not a promise of this run


def test_replay_without_profile_gives_no_verdict(pytester: pytest.Pytester):
    pytester.makepyfile("def test_two(fabric): assert len(fabric.gpus) == 2")
    result = pytester.runpytest("--gpu-replay", "titan-rtx-nvlink")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*gpufabric: no verdict (nothing promised)*"])
    assert _results(pytester)["summary"]["verdict"] is None


def test_results_are_collected_under_xdist(judged, pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie", "-n", "2")
    judged(result, failed=5, passed=1)
    results = _results(pytester)
    outcomes = result.parseoutcomes()
    assert len(results["tests"]) == outcomes["passed"] + outcomes["failed"] + outcomes["skipped"]
    assert results["summary"]["failed"] == 5
    assert {c["name"] for c in results["checks"] if c["verdict"] == "failed"} == {
        "topology-matrix", "nvlink-links", "affinity"}


def test_malformed_nvml_record_is_a_usage_error(pytester: pytest.Pytester, bundles):
    import json as json_module

    record = json_module.loads((bundles / "h100-x1" / "nvml.json").read_text())
    record["nics"] = [1]  # DERIVED: the real H100 record with a damaged NIC list
    (pytester.path / "damaged").mkdir()
    (pytester.path / "damaged" / "nvml.json").write_text(json_module.dumps(record))
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "damaged")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*damaged/nvml.json: not a gpufabric NVML record*"])
    assert "Traceback" not in result.stderr.str()
