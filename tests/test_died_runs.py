"""A died run is evidence (issue 45): an nccl-tests run that stops mid-table keeps the rows it printed and says it did
not finish; a floor judged on it fails only where a row it measured is below the floor, and is otherwise not
checked, never passed.

Real died runs: tests/data/captures/public/nccl-tests/README.md names their sources; the values pinned here were
read off the files by hand. The acceptance cases cut a copy of the shipped 2x H200 nccl-tests log (``# DERIVED:``
says how)."""

from __future__ import annotations

from pathlib import Path

import pytest
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
