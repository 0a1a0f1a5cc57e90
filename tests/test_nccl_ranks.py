"""The rank count of an nccl-tests run is taken only from a whole device list (formats/nccl_ranks.py): a list cut
short says the count is unknown instead of counting the lines that are left. Real outputs: this project's 2x H200
run and coreweave's 72-rank NVL72 run (tests/data/captures/, the public one's SOURCES.md row)."""

from __future__ import annotations

from pathlib import Path

from pytest_gpufabric.formats.nccl_tests import parse_nccl_tests_json

DATA = Path(__file__).resolve().parent / "data" / "captures"
H200 = DATA / "h200-nvswitch-x2" / "nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt"
NVL72 = DATA / "public" / "blackwell" / "nccl-2.26.2-gb200-nvl72-72rank-all_reduce-one-device-line.txt"


def _first_run(text: str) -> dict:
    parsed = parse_nccl_tests_json(text)
    return parsed["runs"][0] if "runs" in parsed else parsed


def test_a_whole_device_list_gives_the_rank_count():
    run = _first_run(H200.read_text())
    assert run["nranks"] == 2 and [d["rank"] for d in run["devices"]] == [0, 1]
    assert "nranks_unknown" not in run


def test_a_device_list_cut_at_its_top_leaves_the_count_unknown():
    lines = H200.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("#  Rank  0 "))
    run = _first_run("\n".join(lines[:first] + lines[first + 1:]))
    assert "nranks" not in run
    assert run["nranks_unknown"] == ("the device list is cut or repeats: 1 line(s) for ranks 1 to 1, so at least 2 "
                                     "ranks, the count unknown")


def test_the_nvl72_run_whose_list_is_cut_to_rank_71_claims_no_count():
    run = _first_run(NVL72.read_text())
    assert "nranks" not in run  # its one device line comes before any run header: not counted as 1 rank
    assert run["rows"][-1]["oop"]["busbw"] == 834.57
