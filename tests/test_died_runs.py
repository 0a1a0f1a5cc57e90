"""A died run is evidence (issue 45): an nccl-tests run that stops mid-table keeps the rows it printed and says it did
not finish; a floor judged on it fails only where a row it measured is below the floor, and is otherwise not
checked, never passed.

Real died runs: tests/data/captures/public/nccl-tests/README.md names their sources; the values pinned here were
read off the files by hand. The acceptance cases cut a copy of the shipped 2x H200 nccl-tests log (``# DERIVED:``
says how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from replays import copy_bundle, edit_json, replay

from pytest_gpufabric.cli import main
from pytest_gpufabric.formats.nccl_tests import parse_nccl_tests, parse_nccl_tests_json

DATA = Path(__file__).parent / "data"
PUBLIC = DATA / "captures" / "public" / "nccl-tests"
DIED_H100 = PUBLIC / "2025-h100-1024rank-all_reduce-died-after-5-sizes-unhandled-cuda-error.txt"
DIED_H800 = PUBLIC / "2025-h800-2node-16rank-alltoall-died-inside-first-row-illegal-memory-access.txt"
ACCEPTANCE = DATA / "bundles" / "h200-nvswitch-x2-acceptance"
NCCL_TESTS_LOG = DATA / "bundles" / "h200-nvswitch-x2-nccl-tests" / "nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt"
H100_DIED_CAUSE = ("HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for "
                   "details) / '")


def test_a_run_that_died_after_five_sizes_keeps_its_rows():
    (run,) = parse_nccl_tests(DIED_H100.read_text(encoding="utf-8"))
    # read by hand: 1 GiB to 16 GiB, out-of-place busbw 110.84, 212.23, 338.16, 364.57, 367.29; no trailer
    assert [(r["size"], r["oop"]["busbw"]) for r in run["rows"]] == [
        (1073741824, 110.84), (2147483648, 212.23), (4294967296, 338.16), (8589934592, 364.57),
        (17179869184, 367.29)]
    assert (run["op"], run["op_from"], run["avg_busbw"]) == ("all_reduce", "command line", None)
    assert run["unfinished"] == f"the run died after 5 sizes (the last 17179869184 B): {H100_DIED_CAUSE}"


def test_a_run_that_died_inside_its_first_row_has_nothing_to_judge(capsys):
    with pytest.raises(ValueError) as error:
        parse_nccl_tests(DIED_H800.read_text(encoding="utf-8"))
    assert str(error.value) == (
        "no nccl-tests result rows found (line 27: the run died inside this row: '2097152         32768     float    "
        "none      -1'; it died: node0: Test CUDA failure common.cu:389 'an illegal memory access was encountered')")
    assert main(["parse", "nccl-tests", str(DIED_H800)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_whole_runs_say_nothing_of_finishing():
    """A run with its trailer, and NCCL 1's tests (which print none), are whole: no ``unfinished``."""
    for path in (NCCL_TESTS_LOG, PUBLIC / "2015-titan-x-4gpu-nccl1-all_reduce_test-bytes-N-res-ms.txt",
                 PUBLIC / "2026-h100-4gpu-5ops-nccl-tests-2.17.8-version-line-wide-wrong.txt"):
        assert all("unfinished" not in run for run in parse_nccl_tests(path.read_text(encoding="utf-8"))), path


def test_a_paste_cut_before_its_trailer_is_not_whole():
    """The 2x p5 README excerpt stops at its last row: died or cut, the text cannot tell; it is never whole."""
    text = (PUBLIC / "2024-h100-p5-2node-all_reduce-srun-label-prefix-cut-header.txt").read_text(encoding="utf-8")
    (run,) = parse_nccl_tests(text, "all_reduce")
    assert run["unfinished"] == ("the run did not finish: no '# Avg bus bandwidth' line after its 32 sizes (the last "
                                 "17179869184 B); it died or its text was cut")


def test_an_nccl_warn_before_the_end_is_the_cause(tmp_path):
    # DERIVED: the shipped log's first run cut after its 1 GiB row, followed by a real NCCL WARN line (the one the
    # CSCS documentation prints for a missing network plugin, search index id 36073711121)
    lines = NCCL_TESTS_LOG.read_text(encoding="utf-8").splitlines()
    cut = lines[:lines.index(next(line for line in lines if line.startswith("  4294967296")))]
    warn = "nid006352:34157:34217 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found."
    run = parse_nccl_tests_json("\n".join(cut + [warn]) + "\n")
    assert run["unfinished"] == f"the run died after 6 sizes (the last 1073741824 B): {warn}"


# --- the acceptance: a floor judged on a died run ------------------------------------------------------------


def _died_acceptance(pytester: pytest.Pytester, last_row: str, busbw: str | None = None) -> Path:
    """DERIVED: the accepted 2x H200 bundle with its torch.distributed collectives taken out and the 2x H200
    nccl-tests log's first run put in, cut after the row starting ``last_row`` (its 1 GiB time, algbw and busbw
    replaced by ``busbw`` where given), followed by the real died H100 run's first failure line."""
    bundle = copy_bundle(pytester, ACCEPTANCE)
    edit_json(bundle / "bandwidth.json", lambda d: d.update(collectives=None))
    lines = NCCL_TESTS_LOG.read_text(encoding="utf-8").splitlines()
    end = lines.index(next(line for line in lines if line.startswith(last_row)))
    kept = lines[:end + 1]
    if busbw is not None:
        kept = [line.replace("3266.84  328.68  328.68", busbw) for line in kept]
    (bundle / NCCL_TESTS_LOG.name).write_text("\n".join(kept + [H100_DIED_CAUSE]) + "\n", encoding="utf-8")
    return bundle


def _promises(document: dict) -> dict[str, tuple[str, str]]:
    return {p["id"]: (p["outcome"], p["reason"]) for p in document["promises"]}


DIED_AFTER_1GIB = f"the run died after 6 sizes (the last 1073741824 B): {H100_DIED_CAUSE}"


def test_a_floor_met_by_a_died_run_is_not_checked_never_passed(pytester: pytest.Pytester):
    code, document = replay(pytester, "h200-nvswitch-x2", _died_acceptance(pytester, "  1073741824"))
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    promises = _promises(document)
    outcome, reason = promises["collective-bandwidth[all_reduce-1GiB]"]
    assert outcome == "not checked"
    assert reason.endswith(f"; not passed on a run that did not finish: {DIED_AFTER_1GIB}")
    outcome, reason = promises["collective-bandwidth[all_reduce-4GiB]"]
    assert outcome == "not checked"
    assert f"has no all_reduce result at 4.00 GiB ({DIED_AFTER_1GIB})" in reason
    assert all(outcome != "passed" for pid, (outcome, _) in promises.items() if "all_reduce-1GiB" in pid)


def test_a_row_a_died_run_measured_below_the_floor_fails(pytester: pytest.Pytester):
    # DERIVED: the 1 GiB row at half its bandwidth, its time doubled with it: 164.34 GB/s, below the profile's 312
    code, document = replay(pytester, "h200-nvswitch-x2",
                            _died_acceptance(pytester, "  1073741824", busbw="6533.68  164.34  164.34"))
    assert (code, document["summary"]["verdict"]) == (1, "REJECTED")
    outcome, reason = _promises(document)["collective-bandwidth[all_reduce-1GiB]"]
    assert outcome == "failed"
    assert f"busbw 164.3 GB/s < 312 GB/s ({DIED_AFTER_1GIB}: a row it measured is already below the floor)" in reason


# --- the rack's all_reduce, and `gpufabric parse --reference` ------------------------------------------------

NCCL_72 = DATA / "captures" / "public" / "blackwell" / "nccl-2.26.2-gb200-nvl72-72rank-all_reduce-one-device-line.txt"


def _nvl72_died_after_2gib() -> str:
    """DERIVED: the public GB200 NVL72 all_reduce cut after its 2 GiB row, the real H100 failure line after it."""
    lines = NCCL_72.read_text(encoding="utf-8").splitlines()
    end = lines.index(next(line for line in lines if line.startswith("  2147483648")))
    return "\n".join(lines[:end + 1] + [H100_DIED_CAUSE]) + "\n"


def test_the_rack_floor_on_a_died_run_is_not_checked():
    from pytest_gpufabric.fleet.rack import _all_reduce_promise, all_reduce_run

    run = all_reduce_run(_nvl72_died_after_2gib())
    run["ranks"] = 72  # DERIVED: as if its device list were whole (the capture prints one line of 72)
    promise = _all_reduce_promise(run, 700.0, 72)
    assert promise == {"id": "rack-all-reduce", "outcome": "not checked", "reason": (
        f"the run died after 3 sizes (the last 2147483648 B): {H100_DIED_CAUSE}: the floor is held at the largest "
        "size of a whole run, which this run did not reach (all_reduce over 72 ranks: 757.78 GB/s busbw at "
        "2147483648 B, floor 700 GB/s, its last size measured)")}
    whole = all_reduce_run(NCCL_72.read_text(encoding="utf-8"))
    whole["ranks"] = 72
    assert _all_reduce_promise(whole, 800.0, 72)["outcome"] == "passed"  # the whole run, 834.57 at 8 GiB


def test_parse_reference_never_calls_a_died_run_normal(tmp_path, capsys):
    path = tmp_path / "died.txt"
    path.write_text(_nvl72_died_after_2gib(), encoding="utf-8")
    assert main(["parse", "nccl-tests", str(path), "--reference", "gb200"]) == 0
    document = json.loads(capsys.readouterr().out)
    (judgement,) = document["reference"]["judgements"]
    assert (judgement["size_bytes"], judgement["busbw_gbps"]) == (2147483648, 757.78)
    assert judgement["verdict"] == "not judged"
    assert judgement["text"].endswith(f"not judged: the run died after 3 sizes (the last 2147483648 B): "
                                      f"{H100_DIED_CAUSE}")


# --- in-network reduction: a GB200/GB300 busbw above the link peak is a reading -----------------------------


def test_a_gb300_busbw_above_the_nvlink_peak_is_not_called_impossible():
    from pytest_gpufabric.reference import find_reference
    from pytest_gpufabric.reference_normal import ABOVE_PEAK, IN_NETWORK_WORDS, judge

    gb300, h200 = find_reference("NVIDIA GB300"), find_reference("NVIDIA H200")
    floor = {"lowest": 0.762, "highest": 0.807, "size_bytes": 4294967296, "op": "all_reduce",
             "models": ["NVIDIA H200 SXM 141GB"]}
    # 945 GB/s: 1.05 of GB300's 900 GB/s per direction (a figure the issue says GB300 racks pass)
    verdict, words = judge(945 / 900, 945.0, floor, "nvlink", gb300, busbw=True, op="all_reduce")
    assert verdict == ABOVE_PEAK and words.endswith(IN_NETWORK_WORDS) and "impossible reading" in IN_NETWORK_WORDS
    assert words.count("not an impossible reading") == 1
    # SHARP reduces: a collective that does not reduce keeps the ring caveat on the same board
    for op in ("sendrecv", "all_gather", "alltoall", "broadcast", None):
        verdict, words = judge(945 / 900, 945.0, floor, "nvlink", gb300, busbw=True, op=op)
        assert verdict == ABOVE_PEAK and "NVLS" in words and "SHARP" not in words, op
    # an H200 board above its peak keeps the ring caveat
    verdict, words = judge(1.05, 472.5, floor, "nvlink", h200, busbw=True)
    assert verdict == ABOVE_PEAK and "NVLS" in words and "SHARP" not in words


def test_the_acceptance_judges_a_gb200_busbw_above_its_link_peak():
    """The public NVL72 all_reduce (834.57 GB/s at 8 GiB) against a link peak below it: on GB200 GPUs it is judged
    against the floor (NVLink SHARP); on other GPUs it stays an impossible reading, not judged."""
    from pytest_gpufabric.checks.bandwidth import CollectiveRun, check_collective_runs, in_network_reduction

    run = parse_nccl_tests(NCCL_72.read_text(encoding="utf-8"), "all_reduce")[0]
    runs = [CollectiveRun(run["rows"], 72)]
    threshold = {"size": "8 GiB", "min_busbw": "800 GB/s"}
    # DERIVED: a stand-in link peak of 800 GB/s, below the reading
    why = in_network_reduction(["NVIDIA GB200"], "all_reduce")
    assert why.startswith("gb200: NVLink SHARP")
    check = check_collective_runs("all_reduce", threshold, runs, 72, 800.0, "NVLink", "nccl-tests", in_network=why)
    assert check.verdict == "passed" and "above the link peak: gb200: NVLink SHARP" in check.message
    check = check_collective_runs("all_reduce", threshold, runs, 72, 800.0, "NVLink", "nccl-tests")
    assert check.verdict == "not checked" and "an impossible reading" in check.message
    assert in_network_reduction(["NVIDIA H200"], "all_reduce") is None


def test_in_network_reduction_needs_a_reducing_collective_on_gb200_or_gb300_only():
    """NVLink SHARP reduces in the switch: a sendrecv (or any collective that does not reduce) above the link peak
    stays an impossible reading on GB200 too, and so does any op on a machine not wholly GB200/GB300."""
    from pytest_gpufabric.checks.bandwidth import CollectiveRun, check_collective_runs, in_network_reduction

    for op in ("all_reduce", "reduce_scatter", "reduce"):
        assert in_network_reduction(["NVIDIA GB200", "NVIDIA GB200"], op).startswith("gb200: NVLink SHARP"), op
    for op in ("sendrecv", "all_gather", "alltoall", "broadcast"):
        assert in_network_reduction(["NVIDIA GB200", "NVIDIA GB200"], op) is None, op
    assert in_network_reduction(["NVIDIA GB200", "NVIDIA H200"], "all_reduce") is None
    assert in_network_reduction(["NVIDIA GB200", None], "all_reduce") is None
    assert in_network_reduction([], "all_reduce") is None
    # DERIVED: the shipped 2x H200 sendrecv run (1 GiB: 361.16 GB/s busbw) against a stand-in link peak of 300 GB/s
    (run,) = [r for r in parse_nccl_tests(NCCL_TESTS_LOG.read_text(encoding="utf-8")) if r["op"] == "sendrecv"]
    check = check_collective_runs("sendrecv", {"size": "1 GiB", "min_busbw": "300 GB/s"},
                                  [CollectiveRun(run["rows"], 2)], 2, 300.0, "NVLink", "nccl-tests sendrecv_perf",
                                  in_network=in_network_reduction(["NVIDIA GB200", "NVIDIA GB200"], "sendrecv"))
    assert check.verdict == "not checked" and "an impossible reading" in check.message


def _nvl72_above_gb200_peak(tmp_path) -> Path:
    """DERIVED: the public NVL72 all_reduce with its 8 GiB out-of-place busbw put at 945 GB/s, above GB200's 900."""
    path = tmp_path / "nvl72.txt"
    path.write_text(NCCL_72.read_text(encoding="utf-8").replace("20299  423.16  834.57", "20299  423.16  945.00"),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize(("op", "sharp"), [("all_reduce", True), ("sendrecv", False)])
def test_parse_reference_allows_sharp_only_for_a_reducing_collective(tmp_path, capsys, op, sharp):
    path = _nvl72_above_gb200_peak(tmp_path)
    assert main(["parse", "nccl-tests", str(path), "--reference", "gb200", "--op", op]) == 0
    (judgement,) = json.loads(capsys.readouterr().out)["reference"]["judgements"]
    assert (judgement["size_bytes"], judgement["busbw_gbps"], judgement["verdict"]) == (8589934592, 945.0,
                                                                                        "above peak")
    assert ("NVLink SHARP" in judgement["text"]) is sharp
    assert ("NCCL's in-switch (NVLS) and tree algorithms can go past it" in judgement["text"]) is not sharp


# --- nvbandwidth: a test cut mid-matrix -------------------------------------------------------------------------

NVB_H100 = DATA / "captures" / "public" / "nvbandwidth" / (
    "nvbandwidth-v0.4-h100-8gpu-d2d-read-ce-na-diagonal-root-prompt.txt")


@pytest.mark.parametrize(("floor", "outcome", "words"), [
    # rows 0-3 measured (lowest cell 370.26, GPU0->GPU6): all above 350 GB/s
    ("350 GB/s", "not checked", "is incomplete, not a whole result"),
    # GPU0->GPU4 370.38 < 370.5 (read by hand off row 0)
    ("370.5 GB/s", "failed", "is incomplete, not a whole result: a cell it measured is already below the floor"),
], ids=["met-so-far", "below-already"])
def test_an_nvbandwidth_test_cut_mid_matrix(pytester: pytest.Pytester, floor, outcome, words):
    # DERIVED: the real H100 capture cut after its row 3 (as a test that died there would stop)
    text = NVB_H100.read_text(encoding="utf-8")
    cut = text[:text.index("\n4    370.38")] + "\n"
    bundle = pytester.path / "their-outputs"
    bundle.mkdir()
    (bundle / NVB_H100.name).write_text(cut, encoding="utf-8")
    profile = pytester.path / "h100x8.yaml"
    profile.write_text(yaml.safe_dump({"name": "h100x8", "gpus": {"count": 8, "model": "H100"}, "bandwidth": {
        "copy": {"gpu_to_gpu": {"min": floor}}}}, sort_keys=False), encoding="utf-8")
    code, document = replay(pytester, profile, bundle)
    reasons = [p["reason"] for p in document["promises"] if p["id"] == "copy-bandwidth[gpu_to_gpu]"]
    outcomes = [p["outcome"] for p in document["promises"] if p["id"] == "copy-bandwidth[gpu_to_gpu]"]
    assert outcomes == [outcome] and words in reasons[0]
    assert code == (1 if outcome == "failed" else 7)


def test_parse_reference_never_calls_an_nvbandwidth_test_cut_mid_matrix_normal(tmp_path, capsys):
    text = NVB_H100.read_text(encoding="utf-8")
    path = tmp_path / "cut.txt"
    path.write_text(text[:text.index("\n4    370.38")] + "\n", encoding="utf-8")  # DERIVED: cut after row 3
    assert main(["parse", "nvbandwidth", str(path), "--reference", "h100"]) == 0
    (judgement,) = json.loads(capsys.readouterr().out)["reference"]["judgements"]
    assert (judgement["lowest_gbps"], judgement["verdict"]) == (370.26, "not judged")
    assert judgement["text"].endswith("not judged: the test did not finish (its matrix or SUM line is missing)")
    assert main(["parse", "nvbandwidth", str(NVB_H100), "--reference", "h100"]) == 0  # the whole capture: normal
    (judgement,) = json.loads(capsys.readouterr().out)["reference"]["judgements"]
    assert judgement["verdict"] == "normal"


# --- a failure line before the trailer: the run died, rows after the failure are not evidence ------------------


def _failure_before(text: str, row_start: str) -> str:
    """DERIVED: ``text`` with the real died H100 run's failure line put in before the first row starting
    ``row_start`` in each run (its trailer kept)."""
    lines = text.splitlines()
    out = []
    for line in lines:
        if line.startswith(row_start):
            out.append(H100_DIED_CAUSE)
        out.append(line)
    return "\n".join(out) + "\n"


DIED_BEFORE_1GIB = (f"the run died after 5 sizes (the last 268435456 B): {H100_DIED_CAUSE} (2 rows printed after it "
                    "not read: not evidence)")


def test_a_failure_line_before_the_trailer_makes_the_run_died():
    runs = parse_nccl_tests(_failure_before(NCCL_TESTS_LOG.read_text(encoding="utf-8"), "  1073741824"))
    assert [(run["op"], len(run["rows"]), run["rows"][-1]["size"]) for run in runs] == [
        ("all_reduce", 5, 268435456), ("all_reduce", 5, 268435456), ("sendrecv", 2, 268435456)]
    assert [run["unfinished"] for run in runs] == [DIED_BEFORE_1GIB] * 2 + [
        DIED_BEFORE_1GIB.replace("after 5 sizes", "after 2 sizes")]
    assert runs[0]["avg_busbw"] == 232.869  # the trailer is read, and does not make the run whole


def test_rows_after_a_failure_line_do_not_pass_the_acceptance(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, ACCEPTANCE)
    edit_json(bundle / "bandwidth.json", lambda d: d.update(collectives=None))
    (bundle / NCCL_TESTS_LOG.name).write_text(
        _failure_before(NCCL_TESTS_LOG.read_text(encoding="utf-8"), "  1073741824"), encoding="utf-8")
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    promises = _promises(document)
    for size in ("1GiB", "4GiB"):
        outcome, reason = promises[f"collective-bandwidth[all_reduce-{size}]"]
        assert outcome == "not checked"
        assert f"has no all_reduce result at {size[0]}.00 GiB ({DIED_BEFORE_1GIB})" in reason, reason


def test_the_rack_floor_on_rows_after_a_failure_is_not_checked():
    from pytest_gpufabric.fleet.rack import _all_reduce_promise, all_reduce_run

    run = all_reduce_run(_failure_before(NCCL_72.read_text(encoding="utf-8"), "  8589934592"))
    run["ranks"] = 72  # DERIVED: as if its device list were whole (the capture prints one line of 72)
    promise = _all_reduce_promise(run, 700.0, 72)
    assert promise == {"id": "rack-all-reduce", "outcome": "not checked", "reason": (
        f"the run died after 4 sizes (the last 4294967296 B): {H100_DIED_CAUSE} (1 row printed after it not read: "
        "not evidence): the floor is held at the largest size of a whole run, which this run did not reach "
        "(all_reduce over 72 ranks: 839.16 GB/s busbw at 4294967296 B, floor 700 GB/s, its last size measured)")}
