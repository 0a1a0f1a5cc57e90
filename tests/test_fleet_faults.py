"""A fleet verdict that holds against broken and hostile node files (issue 21).

Every case starts from a real results file (the replay of a real machine's whole acceptance run, tests/fleet_nodes.py)
in a fleet of healthy DERIVED hosts, breaks one node's file in one way, and runs `gpufabric fleet report` as an
operator would: no traceback, a report written, the broken node not accepted and named with its reason, the fleet
not ACCEPTED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fleet_nodes import RESULTS_FILE, derived, replayed, write_node

from pytest_gpufabric.cli import main
from pytest_gpufabric.fleet.report import validate_fleet_document
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.report.integrity import sign_document

HEALTHY = [f"node{i:02d}" for i in range(1, 10)]
BROKEN = "node10"


def _fleet(root: Path) -> Path:
    accepted = replayed("accepted")
    for i, name in enumerate(HEALTHY):
        write_node(root, name, derived(accepted, name, 1 + (i - 4) * 0.001))
    return root


def _text() -> str:
    """The broken node's results as the plugin writes them (its digests made again: DERIVED), before they are
    broken."""
    return json.dumps(sign_document(derived(replayed("accepted"), BROKEN), None), indent=2) + "\n"


def _report(root: Path, out: Path, capsys, *args: str) -> tuple[int, dict, str]:
    code = main(["fleet", "report", "--allow-replays", str(root), "-o", str(out), *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    validate_fleet_document(document)
    assert (out / "fleet.html").is_file() and (out / "fleet-junit.xml").is_file()
    return code, document, captured.out


def _broken(document: dict) -> dict:
    return next(n for n in document["nodes"] if n["name"] == BROKEN)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


#: how the file is broken -> (the node's state, its verdict, words its reason holds)
CASES = {
    "cut at half its length, inside health": (
        lambda t: t[:len(t) // 2], "unreadable", None, "is cut short"),
    "only a summary saying ACCEPTED": (
        lambda t: '{"summary": {"verdict": "ACCEPTED"}}', "unreadable", None, "no results format version"),
    "checks missing": (
        lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "checks"}, indent=2),
        "unreadable", None, "must contain ['checks']"),
    "checks a dict": (
        lambda t: json.dumps({**json.loads(t), "checks": {"gpu-count": "passed"}}, indent=2),
        "unreadable", None, "data.checks must be array"),
    "a summary saying ACCEPTED over a failed check": (
        lambda t: _failed_check_under_accepted(t), "reported", "REJECTED", "its own summary says ACCEPTED"),
    "non-UTF-8 bytes three quarters in": (
        lambda t: t[:len(t) * 3 // 4].encode() + b"\xff\xfe" + t[len(t) * 3 // 4:].encode(),
        "unreadable", None, "is not UTF-8 at byte"),
    "nested 100,000 deep": (
        lambda t: t.replace('"health": {', '"health": {"x": ' + _deep(100_000) + ", ", 1),
        "unreadable", None, "nests deeper than 64 levels"),
    "errors_self: Infinity": (
        lambda t: t.replace('"errors_self": 0', '"errors_self": Infinity', 1), "unreadable", None,
        "holds a number that is not finite (Infinity"),
    "a schema version from the future": (
        lambda t: t.replace('"schema_version": 4', '"schema_version": 5', 1), "unreadable", None,
        "results format 5, newer than this pytest-gpufabric reads (up to 4)"),
    "not JSON at all": (
        lambda t: "gpufabric-results: all good\n", "unreadable", None, "not valid JSON"),
    "empty": (lambda t: "", "unreadable", None, "not valid JSON"),
}


def _failed_check_under_accepted(text: str) -> str:
    """A hand edit: the all_reduce floor's check says failed, its test and the summary still say passed."""
    document = json.loads(text)
    check = next(c for c in document["checks"] if c["name"] == "bandwidth-all_reduce")
    check["verdict"], check["message"] = "failed", "busbw 150.0 GB/s < 312 GB/s"
    assert document["summary"]["verdict"] == "ACCEPTED"
    return json.dumps(document, indent=2) + "\n"


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_node_is_named_and_not_accepted(tmp_path, capsys, case):
    breaks, state, verdict, words = CASES[case]
    root = _fleet(tmp_path / "fleet")
    broken = breaks(_text())
    folder = root / BROKEN
    folder.mkdir()
    (folder / RESULTS_FILE).write_bytes(broken if isinstance(broken, bytes) else broken.encode("utf-8"))
    code, document, printed = _report(root, tmp_path / "out", capsys)
    node = _broken(document)
    assert (node["state"], node["verdict"]) == (state, verdict)
    assert words in node["reason"], node["reason"]
    assert document["verdict"] == ("REJECTED" if verdict == "REJECTED" else "INCOMPLETE")
    assert code == (1 if verdict == "REJECTED" else 6)
    assert document["counts"]["accepted"] == len(HEALTHY)
    # the terminal names it and says why
    assert f"  not accepted {BROKEN}: " in printed and words[:30] in printed
    failures = {c.get("name"): c.find("failure") for c in ET.parse(tmp_path / "out" / "fleet-junit.xml").iter(
        "testcase")}
    assert failures[BROKEN] is not None and all(failures[name] is None for name in HEALTHY)


def test_a_symlink_loop_is_unreadable_not_never_reported(tmp_path, capsys):
    root = _fleet(tmp_path / "fleet")
    (root / BROKEN).mkdir()
    os.symlink(RESULTS_FILE, root / BROKEN / RESULTS_FILE)  # points at itself
    _, document, _ = _report(root, tmp_path / "out", capsys)
    node = _broken(document)
    assert node["state"] == "unreadable" and "Too many levels of symbolic links" in node["reason"]


def test_a_file_too_large_is_refused_unread(tmp_path, capsys):
    """1.5 GB (a sparse file: nothing is written to disk) is refused by its size, in no time and no memory."""
    root = _fleet(tmp_path / "fleet")
    (root / BROKEN).mkdir()
    with open(root / BROKEN / RESULTS_FILE, "wb") as handle:
        handle.truncate(1_500_000_000)
    _, document, _ = _report(root, tmp_path / "out", capsys)
    assert _broken(document)["reason"] == ("unreadable: gpufabric-results.json is 1,500.0 MB, over the 64 MB a "
                                           "results file may have (--max-node-mb)")


def test_a_folder_that_cannot_be_listed_is_said_and_the_rest_judged(tmp_path, capsys, monkeypatch):
    """As root (CI) no permission bit stops a listing: the OS error is raised here for one fleet folder, as a
    directory of another user would raise it; the nodes of the other folder are still judged."""
    root, other = _fleet(tmp_path / "fleet"), tmp_path / "second-rack"
    other.mkdir()
    real_iterdir = Path.iterdir

    def iterdir(path):
        if path == other:
            raise PermissionError(13, "Permission denied", str(path))
        return real_iterdir(path)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    code = main(["fleet", "report", "--allow-replays", str(root), str(other), "-o", str(tmp_path / "out")])
    document = json.loads((tmp_path / "out" / "fleet-results.json").read_text(encoding="utf-8"))
    assert document["unlisted"] == [f"{other}: Permission denied"]
    assert document["counts"]["accepted"] == len(HEALTHY)
    assert code == 6 and document["verdict"] == "INCOMPLETE" and "could not be listed" in document["reason"]
    assert "Traceback" not in capsys.readouterr().err


# --- one yardstick ----------------------------------------------------------------------------------------------


def test_a_node_of_another_profile_is_not_accepted_even_when_the_operator_names_one(tmp_path, capsys):
    root = _fleet(tmp_path / "fleet")
    write_node(root, BROKEN, derived(replayed("x4"), BROKEN))
    _, document, _ = _report(root, tmp_path / "out", capsys, "--profile", "h200-nvswitch-x2")
    node = _broken(document)
    assert node["verdict"] == "INCOMPLETE" and node["reason"].startswith("ran profile h200-nvswitch-x4 (sha256 ")
    assert document["settings_from"].startswith("profile h200-nvswitch-x2 (--profile, sha256 ")


def test_a_lenient_profile_named_by_a_node_is_never_the_yardstick(tmp_path, capsys):
    """A node 40 % slower whose file says it ran a profile of the same name from a lenient file of its own (the
    floors of its checks met, its path pointing at that file): it is held to the fleet's profile, by content, and
    that file is never read."""
    root = _fleet(tmp_path / "fleet")
    lenient = tmp_path / "lenient" / "lenient.yaml"
    lenient.parent.mkdir()
    lenient.write_text("name: h200-nvswitch-x2\nextends: h200-nvswitch-x2\nfleet: {min_deviation: 0.9, k: 1000}\n")
    slow = derived(replayed("accepted"), BROKEN, 0.6)
    slow["profile"] = {"name": "h200-nvswitch-x2", "path": str(lenient), "sha256": load_profile(str(lenient)).sha256,
                       "data": load_profile(str(lenient)).data}
    write_node(root, BROKEN, slow)
    _, document, _ = _report(root, tmp_path / "out", capsys)
    node = _broken(document)
    assert node["verdict"] == "INCOMPLETE" and node["reason"].startswith("ran profile h200-nvswitch-x2 (sha256 ")
    assert str(lenient) not in json.dumps(document["settings"]) and "lenient" not in document["settings_from"]
    assert (document["settings"]["k"], document["settings"]["min_deviation"]) == (5, 0.03)  # the fleet's own rules


def test_nodes_of_two_profiles_without_a_majority_say_so(tmp_path, capsys):
    root = tmp_path / "fleet"
    for name in ("a1", "a2"):
        write_node(root, name, derived(replayed("accepted"), name))
    for name in ("b1", "b2"):
        write_node(root, name, derived(replayed("x4"), name))
    code, document, printed = _report(root, tmp_path / "out", capsys)
    assert code == 6 and document["counts"]["accepted"] == 0
    assert "the nodes ran 2 profiles (" in document["profile"]["problem"]
    assert "name the one to judge by with --profile" in printed


# --- writing ----------------------------------------------------------------------------------------------------


def test_a_report_folder_inside_the_fleet_is_never_a_node(tmp_path, capsys):
    root = _fleet(tmp_path / "fleet")
    out = root / "report"
    assert main(["fleet", "report", "--allow-replays", str(root), "-o", str(out)]) == 0
    # a second report
    assert main(["fleet", "report", "--allow-replays", str(root), "-o", str(tmp_path / "elsewhere")]) == 0
    document = json.loads((tmp_path / "elsewhere" / "fleet-results.json").read_text(encoding="utf-8"))
    assert sorted(n["name"] for n in document["nodes"]) == HEALTHY
    capsys.readouterr()


def test_two_folders_of_one_host_are_named(tmp_path, capsys):
    root = _fleet(tmp_path / "fleet")
    twin = derived(replayed("accepted"), BROKEN)
    twin["run"]["host"] = "node03"  # DERIVED: a second folder whose results name node03
    write_node(root, BROKEN, twin)
    _, document, printed = _report(root, tmp_path / "out", capsys)
    assert document["duplicate_hosts"] == [{"host": "node03", "nodes": ["node03", BROKEN]}]
    assert f"one hostname, several folders: node03 in node03, {BROKEN}" in printed


def test_terminal_escapes_from_a_node_never_reach_the_terminal(tmp_path, capsys):
    """A driver version holding escape sequences (clear the screen, retitle the window): the drift line that
    shows it prints them written out (\\x1b), as formats/clean.py does."""
    root = _fleet(tmp_path / "fleet")
    hostile = derived(replayed("accepted"), BROKEN)
    hostile["machine"]["driver_version"] = "580.159.04\x1b]0;owned\x07\x1b[2J"
    write_node(root, BROKEN, hostile)
    _, document, printed = _report(root, tmp_path / "out", capsys)
    assert "\x1b" not in printed and "\x07" not in printed
    assert f"drift {BROKEN}: driver 580.159.04\\x1b]0;owned\\x07\\x1b[2J (fleet: 580.159.04)" in printed
    assert _broken(document)["drift"][0]["value"] == "580.159.04\x1b]0;owned\x07\x1b[2J"  # the data kept as it is


def test_concurrent_reports_into_one_folder_leave_one_run_whole(tmp_path):
    """Ten pairs of reports at once into one OUT (benchmarks/fleet_faults.py runs 80): afterwards the JSON, the page
    and the JUnit are all of one run (its run id in each), and no temporary file is left."""
    root = _fleet(tmp_path / "fleet")
    out = tmp_path / "out"
    runs = [subprocess.Popen([sys.executable, "-m", "pytest_gpufabric", "fleet", "report", "--allow-replays", str(root),
                              "-o", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(20)]
    assert [run.wait(timeout=300) for run in runs] == [0] * 20, [run.stderr.read() for run in runs]
    assert_one_run(out)


def assert_one_run(out: Path) -> None:
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    run_id = document["run_id"]
    assert f"(run {run_id})" in (out / "fleet.html").read_text(encoding="utf-8")
    junit = ET.parse(out / "fleet-junit.xml").getroot()
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["run_id"] == run_id
    assert sorted(p.name for p in out.iterdir()) == [".fleet-report.lock", "fleet-junit.xml", "fleet-results.json",
                                                    "fleet.html"]


# --- the fabric file the operator gives -----------------------------------------------------------------------

FABRIC = Path(__file__).parent / "data" / "results" / "fabric-7-netns-slow-node6-and-pair-1-3.json"


def _fabric_fleet(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    accepted = replayed("accepted")
    for i in range(7):
        write_node(root, f"node{i}", derived(accepted, f"node{i}"))
    return root


@pytest.mark.parametrize("breaks, words", [
    (lambda r: r["pairs"][0].pop("busbw"), "pairs[0] (node0-node1) has no finite busbw: None"),
    (lambda r: r["pairs"][0].update(busbw="fast"), "pairs[0] (node0-node1) has no finite busbw: 'fast'"),
    (lambda r: r["pairs"][0].update(a="node9"), "pairs[0].a 'node9' is not one of the run's nodes"),
    (lambda r: r.update(pairs={"node0-node1": 1.0}), "pairs must be a list, not dict"),
    (lambda r: r["all_node"][0].update(busbw="NaN"), "all_node must be a list of rows"),
], ids=["no-busbw", "busbw-text", "unknown-node", "pairs-dict", "all-node-text"])
def test_a_malformed_fabric_file_is_refused_with_its_problem(tmp_path, capsys, breaks, words):
    root = _fabric_fleet(tmp_path)
    result = json.loads(FABRIC.read_text(encoding="utf-8"))
    breaks(result)
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps(result), encoding="utf-8")
    assert main(["fleet", "report", "--allow-replays", str(root), "--fabric", str(fabric), "-o",
                 str(tmp_path / "out")]) == 4
    err = capsys.readouterr().err
    assert f"{fabric}: not a valid fabric result: {words}" in err and "Traceback" not in err


def test_nan_pair_bandwidths_are_refused_not_passed(tmp_path, capsys):
    root = _fabric_fleet(tmp_path)
    text = FABRIC.read_text(encoding="utf-8")
    fabric = tmp_path / "fabric.json"
    result = json.loads(text)
    for pair in result["pairs"]:
        pair["busbw"] = float("nan")
    fabric.write_text(json.dumps(result), encoding="utf-8")  # json.dumps writes the NaN token
    assert main(["fleet", "report", "--allow-replays", str(root), "--fabric", str(fabric), "-o",
                 str(tmp_path / "out")]) == 4
    assert "NaN, which JSON does not have (a number that is not finite)" in capsys.readouterr().err


def test_golden_floors_from_a_fleet_with_broken_files(tmp_path, capsys):
    """--from-fleet reads through the same loader: broken nodes are left out as unreadable, never a traceback."""
    root = _fleet(tmp_path / "fleet")
    (root / BROKEN).mkdir()
    (root / BROKEN / RESULTS_FILE).write_text(_text().replace('"errors_self": 0', '"errors_self": Infinity', 1))
    output = tmp_path / "golden.yaml"
    assert main(["profile", "init", "--allow-replays", "--from-fleet", str(root), "-o", str(output)]) == 0
    assert f"# Left out, not accepted: {BROKEN} (unreadable)." in output.read_text(encoding="utf-8")
    captured = capsys.readouterr()
    assert f"floors from {len(HEALTHY)} accepted node(s)" in captured.out and "Traceback" not in captured.err
