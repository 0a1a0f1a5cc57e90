"""What to do next (pytest_gpufabric/remedy.py): the remedy class and the evidence that points there, for each kind
of failure, on the shipped bundles of real machines, the results recorded live on real GPU machines, and COPIES of
them edited where a fault is needed that no machine showed. Each class is asserted exactly, with the sentence that
names its evidence; then the terminal, the report and the fleet page show them."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml
from fleet_nodes import replayed, write_node
from test_report import _gpufabric_section, _html_run, _open_promises, _promise_rows, _text_of

from pytest_gpufabric.fabric import platform_record as pr
from pytest_gpufabric.fabric.bundle import bundle_directory
from pytest_gpufabric.fabric.nvml import nvml_available
from pytest_gpufabric.remedy import annotate, remedy_of_check, remedy_of_promise
from pytest_gpufabric.remedy_classes import CLASSES, RERUN, RESEAT, RESET, RMA, SOFTWARE
from pytest_gpufabric.remedy_rules import Context
from pytest_gpufabric.report.results import schema_errors

DATA = Path(__file__).parent / "data"
RESULTS_DATA = DATA / "results"
PUBLIC = DATA / "captures" / "public" / "platform"
ACS_ON = PUBLIC / "lspci-vvvxxxx-haswell-e-root-port-acs-on-above-connectx3-pro.txt"
IOMMU_LOG = PUBLIC / "dmesg-grep-iommu-proxmox-intel-iommu-on-translated-excerpt.txt"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "acceptance-report.md"

#: the recorded planted-fault burn-ins of three H200 hosts: GPU1's GEMM results corrupted in every check
PLANTED = ["burn-in-planted-fault-on-h200-x2", "burn-in-planted-fault-second-host-on-h200-x2",
           "burn-in-planted-fault-third-host-on-h200-x2"]


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def _recorded(name: str) -> dict:
    return json.loads((RESULTS_DATA / f"{name}.json").read_text())


def _remedies(document: dict) -> dict[str, tuple[str, str]]:
    """Promise id -> (class, why) of every promise that carries a remedy."""
    return {p["id"]: (p["remedy"]["class"], p["remedy"]["why"]) for p in document["promises"] if "remedy" in p}


def _profile(pytester: pytest.Pytester, name: str, **sections) -> Path:
    """DERIVED: the shipped h200-nvswitch-x2 profile with the sections given (maps merge, lists replace)."""
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "extends": "h200-nvswitch-x2", **sections}, sort_keys=False))
    return path


# --- replays of the shipped faulty bundles ----------------------------------------------------------------------


def test_a_missing_nvlink_bridge_is_reseated(pytester: pytest.Pytester):
    """The TITAN RTX profile (two cards and an NVLink bridge) against the RTX 2080 Ti machine, whose cards talk over
    PCIe: the matrix and the link count point to the bridge; the CPU affinity to the BIOS; what the bundle did not
    record (the GPU model: no nvml.json) to a rerun. A passed promise carries none."""
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie")
    document = _results(pytester)
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    assert schema_errors(document) == []
    bundle = bundle_directory("rtx-2080ti-pcie")
    remedies = _remedies(document)
    assert remedies["topology-matrix"] == (RESEAT, "GPU0-GPU1: expected NV2, found PHB: the pair talks over PCIe "
                                                   "where NVLinks were sold: a missing or unseated NVLink bridge")
    for gpu in (0, 1):
        assert remedies[f"nvlinks[GPU{gpu}]"] == (RESEAT, f"GPU{gpu}: 0 active NVLinks of 2: a bridge or cable not "
                                                          "seated")
        assert remedies[f"gpu-model[GPU{gpu}]"] == (
            RERUN, f"the evidence could not show it (not recorded by bundle {bundle}: a bundle needs nvml.json "
                   "(gpufabric snapshot) or nvidia-smi-q.xml for this check): record or measure it again with what "
                   "that names")
    assert remedies["affinity[GPU0]"] == (SOFTWARE, "GPU0: CPU affinity 0-35, expected 0-17,36-53: the BIOS's NUMA "
                                                    "settings (NUMA per socket, sub-NUMA clustering)")
    assert remedies["nvlink-traffic[GPU0]"][0] == RERUN
    assert "nvlink-traffic.json" in remedies["nvlink-traffic[GPU0]"][1]
    assert "gpu-count" not in remedies  # passed: nothing to do
    assert set(remedies) == {p["id"] for p in document["promises"] if p["outcome"] in ("failed", "not checked")}
    # the terminal's list ends each line with the class ('?' for the brackets, which fnmatch reads as a set), what
    # failed first
    result.stdout.fnmatch_lines(["  failed: topology-matrix: 1 topology cell(s) differ*-> reseat or recable",
                                 "  failed: affinity?GPU0?: GPU0: CPU affinity 0-35*-> software or configuration",
                                 "  not checked: gpu-model?GPU0?: not recorded by bundle*-> rerun"])


def test_nccl_told_not_to_use_peer_to_peer_is_configuration(pytester: pytest.Pytester):
    """The 2x H200 SXM machine recorded with NCCL_P2P_DISABLE=1: the NVLinks carried nothing, and the run's own
    setting says why: the software, not the links. What the bundle does not hold is a rerun naming the file."""
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-p2p-disabled")
    document = _results(pytester)
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    remedies = _remedies(document)
    failed = {pid: r for pid, r in remedies.items() if pid.startswith("nvlink-traffic")}
    assert failed == {pid: (SOFTWARE, f"GPU{pid[-2]}: the training ran with NCCL_P2P_DISABLE=1: NCCL was told not to "
                                      "use peer-to-peer, so no NVLink could carry it")
                      for pid in ("nvlink-traffic[GPU0]", "nvlink-traffic[GPU1]", "nvlink-traffic-volume[GPU0]",
                                  "nvlink-traffic-volume[GPU1]")}
    assert remedies["copy-bandwidth[gpu_to_gpu]"] == (
        RERUN, "the bundle holds no bandwidth measurements (bandwidth.json or nccl-tests*.txt): run it again with what "
               "that names (the tool, the bundle's file)")
    result.stdout.fnmatch_lines(["  failed: nvlink-traffic?GPU0?: *-> software or configuration"])


def test_a_run_stopped_at_its_first_failure_is_rerun_for_the_rest(pytester: pytest.Pytester):
    pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-p2p-disabled", "-x")
    document = _results(pytester)
    unjudged = [p for p in document["promises"] if not p["tests"]]
    assert unjudged and all(p["remedy"] == {"class": RERUN, "why": f"no test judged it ({p['reason']}): run the "
                                                                   "acceptance whole"} for p in unjudged)
    assert unjudged[0]["reason"].startswith("the run stopped early (stopping after 1 failures)")


def test_a_bundle_lacking_a_file_and_a_deselected_promise_are_rerun(pytester: pytest.Pytester, tmp_path: Path):
    """COPY of the 2x H200 SXM training bundle without its NVLink counter samples, run with -k 'not ecc': the
    traffic promises name the file to record, the deselected ones say to run the acceptance whole."""
    bundle = tmp_path / "no-traffic"
    shutil.copytree(bundle_directory("h200-nvswitch-x2-training"), bundle)
    (bundle / "nvlink-traffic.json").unlink()
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle), "-k", "not ecc")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    remedies = _remedies(document)
    assert remedies["nvlink-traffic[GPU0]"] == (
        RERUN, "the bundle holds no NVLink counter samples taken during training (nvlink-traffic.json or "
               "nvidia-smi-nvlink-*.sample<N>.txt): run it again with what that names (the tool, the bundle's file)")
    assert remedies["ecc-mode[GPU0]"] == (RERUN, "no test judged it (deselected (-k 'not ecc'): not run): run the "
                                                 "acceptance whole")
    assert {cls for cls, _ in remedies.values()} == {RERUN}  # nothing of the machine is at fault
    assert schema_errors(document) == []


def test_a_file_that_cannot_be_collected_is_the_software(pytester: pytest.Pytester):
    pytester.makepyfile(test_mine="import no_such_module\n\ndef test_mine():\n    pass\n")
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-acceptance",
                                "test_mine.py", "--continue-on-collection-errors")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    cls, why = _remedies(document)["test_mine.py"]
    assert cls == SOFTWARE and why.startswith("could not be collected: ImportError while importing test module ")
    assert why.endswith("No module named 'no_such_module': the image lacks what its tests import")
    # the profile's other promises all passed; the bundle holds no kernel log to tell Xid events from
    assert set(_remedies(document)) == {"test_mine.py", "xid-events"} and _remedies(document)["xid-events"][0] == RERUN
    result.stdout.fnmatch_lines(["  not checked: test_mine.py: could not be collected: *-> software or configuration"])


def test_a_test_that_broke_is_the_software(pytester: pytest.Pytester):
    """A user's own test whose fixture raises: an error, not a measurement; nothing says the machine is at fault."""
    pytester.makepyfile(test_mine="import pytest\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError("
                                  "'no such device file')\n\ndef test_mine(broken):\n    pass\n")
    pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-acceptance",
                       "test_mine.py")
    assert _remedies(_results(pytester))["test_mine.py::test_mine"] == (
        SOFTWARE, "the test broke: RuntimeError: no such device file: the software around the measurement, not the "
                  "machine, failed")


@pytest.mark.skipif(nvml_available()[0], reason="this machine has a working NVIDIA driver")
def test_a_machine_without_a_driver_is_the_software(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "-k", "test_topology")
    document = _results(pytester)
    assert result.ret == 7 and document["summary"]["verdict"] == "NOT TESTED"
    error = document["machine_error"]
    assert error and _remedies(document)["gpu-count"] == (SOFTWARE, f"the machine could not be read ({error}): the "
                                                                    "driver")


# --- bandwidth: the platform, noise, or far below ---------------------------------------------------------------


def _bandwidth_run(pytester: pytest.Pytester, tmp_path: Path, floor: str, platform: bool) -> dict:
    """COPY of the 2x H200 SXM bandwidth bundle (all_reduce 297.4 GB/s busbw at 256 MiB), with ``platform``: a
    customer's lspci -vvv (ACS redirect on) and dmesg (IOMMU translated) beside it; a DERIVED floor the recorded
    figure misses."""
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle_directory("h200-nvswitch-x2-bandwidth"), bundle)
    if platform:
        shutil.copy(ACS_ON, bundle / pr.LSPCI_FILE)
        shutil.copy(IOMMU_LOG, bundle / pr.KERNEL_LOG_FILE)
    profile = _profile(pytester, "h200-floor", bandwidth={"collectives": {"all_reduce": [
        {"size": "256 MiB", "min_busbw": floor}]}})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle), "-k",
                                "test_collective_bandwidth and all_reduce")
    assert result.ret == 1
    return _results(pytester)


def test_a_bandwidth_the_platform_explains_is_configuration(pytester: pytest.Pytester, tmp_path: Path):
    remedies = _remedies(_bandwidth_run(pytester, tmp_path, "400 GB/s", True))
    cls, why = remedies["collective-bandwidth[all_reduce-256MiB]"]
    assert cls == SOFTWARE
    # the lspci is another machine's (no GPU of the bundle in it): its ACS explains nothing here (issue 40)
    assert why.startswith("all_reduce 256MiB: 297.43 GB/s below its 400 GB/s floor, and the platform explains it: "
                          "IOMMU translated for the machine")
    assert why.endswith("DMA goes through IOMMU page tables")


def test_a_bandwidth_a_little_short_with_nothing_to_explain_it_is_rerun(pytester: pytest.Pytester, tmp_path: Path):
    remedies = _remedies(_bandwidth_run(pytester, tmp_path, "400 GB/s", False))
    assert remedies["collective-bandwidth[all_reduce-256MiB]"] == (
        RERUN, "all_reduce 256MiB: 297.43 GB/s below its 400 GB/s floor, 74% of it, and no platform setting recorded "
               "explains it: one measurement can miss by noise; measure it once more")


def test_a_bandwidth_far_below_its_floor_is_no_noise(pytester: pytest.Pytester, tmp_path: Path):
    remedies = _remedies(_bandwidth_run(pytester, tmp_path, "1000 GB/s", False))
    assert remedies["collective-bandwidth[all_reduce-256MiB]"] == (
        SOFTWARE, "all_reduce 256MiB: 297.43 GB/s below its 1000 GB/s floor, 30% of it: too far for noise, and no "
                  "platform setting recorded explains it: the transport's settings (NCCL_P2P_*, NCCL_IB_*, MTU, PFC) "
                  "come first")


# --- the board itself -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PLANTED)
def test_wrong_gemm_results_in_the_burn_in_go_back_to_the_vendor(name: str):
    """The recorded planted-fault burn-ins: GPU1 computed wrong elements in every cross-check. Its NVLink ECC data
    counters rose too, which the profile did not forbid: they point nowhere."""
    document = _recorded(name)
    (check,) = [c for c in document["checks"] if c["verdict"] == "failed"]
    found = check["found"]
    wrong = found["errors_self"] + found["errors_cross"]
    assert remedy_of_check(check) == (RMA, f"{check['subject']}: {wrong} wrong element(s) in {found['checks']} "
                                           "cross-checks of its GEMM results: the board computes wrong results")
    assert "nvlink_ecc_data" in json.dumps(found["counters_rose"])


def test_a_planted_memory_fault_goes_back_to_the_vendor_and_says_it_was_planted():
    """The H100's recorded run with a bit flipped on purpose (--gpu-plant-memory-fault), a format-2 results file
    (its remedies made from its own checks)."""
    document = annotate(copy.deepcopy(_recorded("single-gpu-on-h100-x1/run-6/planted-memory-fault-results")))
    assert _remedies(document) == {"memory-pattern[GPU0]": (
        RMA, "GPU0 (serial 1752624024689): 1 word(s) read back other than written: failing device memory (planted by "
             "--plant-fault: it proves the check, not the board)")}


def _burn_in_check(**found) -> dict:
    """DERIVED: the planted-fault burn-in's failed check with its wrong elements taken out and ``found`` edited."""
    check = copy.deepcopy(next(c for c in _recorded(PLANTED[1])["checks"] if c["verdict"] == "failed"))
    check["found"].update({"errors_self": 0, "errors_cross": 0, **found})
    return check


@pytest.mark.parametrize("counter, cls, meaning", [
    ("remapped_rows_pending", RESET, "a row remap waits for a GPU reset"),
    ("remapped_rows_failure", RMA, "a row could not be remapped: the GPU needs service"),
    ("ecc_uncorrected", RMA, "uncorrected (double-bit) ECC errors: data was lost"),
    ("nvlink_replay:4", RESEAT, "NVLink packets replayed"),
    ("pcie_replay", RESEAT, "PCIe packets replayed: signal integrity (riser, slot, retimer)"),
])
def test_health_counters_that_rose_point_by_what_they_count(counter: str, cls: str, meaning: str):
    check = _burn_in_check(counters_rose={counter: 2})
    base = counter.split(":")[0]
    if base not in check["expected"]["forbidden_counters"]:  # DERIVED: a profile that forbids it
        check["expected"]["forbidden_counters"].append(base)
    assert remedy_of_check(check) == (cls, f"{check['subject']}: {base} rose by 2 ({meaning})")


def test_a_counter_the_profile_does_not_forbid_points_nowhere():
    check = _burn_in_check(counters_rose={"pcie_replay": 2, "nvlink_ecc_data:0": 900})
    assert remedy_of_check(check) == (RERUN, f"{check['subject']}: its figures hold no fault (the GEMM workload "
                                             "stopped?): burn it in once more")


def test_clock_events_and_a_slow_burn_in():
    hot = _burn_in_check(clock_events=["hw_slowdown", "sw_power_cap"])
    assert remedy_of_check(hot) == (RESEAT, f"{hot['subject']}: clocks held back by hw_slowdown (the hardware halved "
                                            "its clocks or more: a power-supply or board fault, an overheating board "
                                            "or a failed sensor)")
    capped = _burn_in_check(tflops=400.0, clock_events=["sw_power_cap"])
    assert remedy_of_check(capped) == (SOFTWARE, f"{capped['subject']}: 400 TFLOP/s, below the 500 promised, held at "
                                                 "its power cap: a power limit set lower than the profile assumes")
    slow = _burn_in_check(tflops=400.0, clock_events=[])
    assert remedy_of_check(slow)[0] == RERUN
    # wrong results and a link replaying: the dearest stands, a reseat would not mend wrong results
    both = _burn_in_check(errors_cross=3, counters_rose={"nvlink_replay:4": 9})
    assert remedy_of_check(both)[0] == RMA


def test_the_watchdogs_health_window_of_a_failed_test():
    """The 4x H200 run whose tests failed on NVLink CRC data counters (the profile then forbade them by default):
    each failed test's window names the GPU, counter and count; with today's default they are not forbidden."""
    document = _recorded("h200-nvswitch-x4-crc-data-forbidden-by-default-on-h200-x4")
    test = "test_bandwidth.py::test_collective_bandwidth[all_reduce-1MiB]"
    assert document["tests"][test] == "failed"
    promise = {"id": "collective-bandwidth[all_reduce-1MiB]", "outcome": "failed", "reason": "health", "tests": [test]}
    ctx = Context.of(document)
    ctx.section = {"forbid": ["xid", "nvlink_replay", "nvlink_recovery", "nvlink_crc_data"]}
    rose = sum(v for k, v in document["health"]["tests"][test]["0"]["rose"].items() if k.startswith("nvlink_crc_data"))
    assert remedy_of_promise(promise, ctx) == (
        RESEAT, f"GPU0 (serial 1654124045873): nvlink_crc_data rose by {rose} (NVLink data with CRC errors)")
    assert remedy_of_promise(promise, Context.of(document))[0] == SOFTWARE  # nothing forbidden rose: the test's error


# --- topology figures -------------------------------------------------------------------------------------------


def test_memory_promised_in_gib_for_a_board_sold_in_gb_is_the_profile(pytester: pytest.Pytester):
    """`141 GiB` for an H200 sold as 141 GB is refused when the profile loads (profile/loader.py); where the model is
    not in the catalogue the accept-time remedy says the same."""
    profile = _profile(pytester, "h200-141gib", gpus={"memory": "141 GiB"})  # DERIVED: sold as 141 GB
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "h200-nvswitch-x2")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*'141 GiB' is more than a healthy NVIDIA H200 SXM 141GB has*promise memory as "
                                 "sold, `memory: 141 GB`, not GiB."])
    from pytest_gpufabric.reference import find_reference

    assert find_reference("VIDIA H20") is None  # a substring of "NVIDIA H200" that names no one model
    profile = _profile(pytester, "h200-141gib-h", gpus={"memory": "141 GiB", "model": "VIDIA H20"})  # DERIVED
    pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "h200-nvswitch-x2", "-k", "test_gpu_memory")
    assert _remedies(_results(pytester))["gpu-memory[GPU0]"] == (
        SOFTWARE, "GPU0 has 140.40 GiB, all of the 141 GB it is sold as: the profile promises GiB where the board is "
                  "sold in GB; write the promise as sold")
    profile = _profile(pytester, "h200-160gb", gpus={"memory": "160 GB"})  # DERIVED: more than the board has
    pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "h200-nvswitch-x2", "-k", "test_gpu_memory")
    assert _remedies(_results(pytester))["gpu-memory[GPU1]"] == (
        RMA, "GPU1 has 140.40 GiB of the 149.01 GiB promised: a board of another SKU than sold")


def test_nvlinks_trained_below_their_speed_are_reset(pytester: pytest.Pytester):
    profile = _profile(pytester, "h200-fast-links", nvlink={"min_speed": "30 GB/s"})  # DERIVED: 26.562 recorded
    pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "h200-nvswitch-x2", "-k", "test_nvlinks")
    links = ", ".join(map(str, range(18)))
    assert _remedies(_results(pytester))["nvlinks[GPU0]"] == (
        RESET, f"GPU0: link(s) {links} trained below the promised speed: a reset retrains them; reseat the bridge if "
               "they train low again")


# --- where they are shown ---------------------------------------------------------------------------------------


def test_the_report_says_what_to_do_next_on_the_cover_and_in_the_promises(pytester: pytest.Pytester):
    html, document = _html_run(pytester, "--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie")
    section = _gpufabric_section(html)
    rows = {pid: (result, next_step) for pid, result, _, next_step in _open_promises(section)}
    assert rows["topology-matrix"] == ("failed", "reseat or recable: GPU0-GPU1: expected NV2, found PHB: the pair "
                                                 "talks over PCIe where NVLinks were sold: a missing or unseated "
                                                 "NVLink bridge")
    assert rows["affinity[GPU1]"][1].startswith("software or configuration: GPU1: CPU affinity 0-35")
    # the local folder of the bundle is left out on the page, as everywhere on it
    assert rows["gpu-model[GPU0]"][1] == (
        "rerun: the evidence could not show it (not recorded by bundle tests/data/bundles/rtx-2080ti-pcie: a bundle "
        "needs nvml.json (gpufabric snapshot) or nvidia-smi-q.xml for this check): record or measure it again with "
        "what that names")
    assert "<th>What to do next</th>" in section
    # the promises table: one line under each failed or not-checked promise, none under a passed one
    assert set(_promise_rows(section)) >= {"gpu-count", "topology-matrix"}
    text = _text_of(section)
    assert text.count("What to do next: ") == sum(1 for p in document["promises"] if "remedy" in p)
    assert "What to do next: reseat or recable: GPU0: 0 active NVLinks of 2: a bridge or cable not seated" in text


def test_the_fleet_page_names_each_nodes_remedies(tmp_path: Path):
    """A fleet of a node whose burn-in computed wrong results (the planted-fault log, replayed) and an accepted one:
    the rejected node's failed promise points to the vendor in its JSON, in Not accepted and in the Nodes table."""
    from pytest_gpufabric.fleet.html import _NODE_HEADER, fleet_html
    from pytest_gpufabric.fleet.report import build_fleet_document, validate_fleet_document

    root = tmp_path / "nodes"
    write_node(root, "gpu-a01", replayed("planted"))
    write_node(root, "gpu-a02", replayed("accepted"))
    document = build_fleet_document([root], None, allow_replays=True)
    validate_fleet_document(document)
    nodes = {n["name"]: n for n in document["nodes"]}
    (promise,) = [p for p in replayed("planted")["promises"] if p["outcome"] == "failed"]
    assert nodes["gpu-a01"]["remedies"] == {RMA: {"promises": ["burn-in-gpu[GPU1]"], "why": promise["remedy"]["why"]}}
    assert promise["remedy"]["why"].startswith("GPU1 (serial 1653724051203): 1682 wrong element(s) in 841 cross-checks")
    assert nodes["gpu-a02"]["remedies"] == {}
    page = fleet_html(document, tmp_path / "out")
    not_accepted = page[page.index("Not accepted"):page.index('id="distributions"')]
    assert "What to do next (hover for the evidence)" in not_accepted
    assert "return to the vendor: burn-in-gpu[GPU1]" in _text_of(not_accepted)
    nodes_table = page[page.index('id="nodes"'):]
    assert _NODE_HEADER[-1] == "What to do next"
    assert ">return to the vendor (1)</td>" in nodes_table
    assert "return to the vendor: burn-in-gpu[GPU1]: GPU1 (serial 1653724051203): 1682 wrong" in nodes_table


def test_every_class_is_documented():
    text = DOCS.read_text()
    section = text[text.index("## What to do next"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    for cls in CLASSES:
        assert f"**{cls}**" in section, cls
