"""The fleet's reader shares what nodes share, and nothing else (issue 31: ten thousand nodes in seconds).

A part of a node's results whose bytes were read before (the embedded profile, the promise list, the test
outcomes: alike across a fleet) is parsed, validated and judged once (fleet/loader.py). These cases make sure that
sharing never lets a node through on another node's bytes: the nodes are DERIVED hosts of the replay of a real
machine's whole acceptance run (tests/fleet_nodes.py), read in one report, one of them edited after the healthy
ones were read.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet_nodes import derived, replayed, write_node

from pytest_gpufabric import __version__
from pytest_gpufabric.fleet.report import build_fleet_document


def _report(root: Path) -> dict:
    return {n["name"]: n for n in build_fleet_document([root], None, allow_replays=True)["nodes"]}


def _written(root: Path, name: str, text: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "gpufabric-results.json").write_text(text, encoding="utf-8")


def test_an_edited_profile_after_healthy_ones_is_judged_on_its_own_bytes(tmp_path):
    """node1 and node2 embed the profile their sha256 names; node3 the same profile with its ECC promise taken out
    (the sha256 left as it was); node4 the healthy bytes again. Only node3 fails the profile's integrity."""
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    for name in ("node1", "node2", "node4"):
        write_node(root, name, derived(accepted, name))
    edited = derived(accepted, "node3")
    del edited["profile"]["data"]["gpus"]["ecc"]
    write_node(root, "node3", edited)
    nodes = _report(root)
    for name in ("node1", "node2", "node4"):
        assert (nodes[name]["verdict"], nodes[name]["promises"]) == (
            "ACCEPTED", {"passed": 37, "failed": 0, "not_checked": 0, "waived": 1}), nodes[name]["reason"]
    assert nodes["node3"]["verdict"] == "INCOMPLETE"
    assert nodes["node3"]["promises"] == {"passed": 37, "failed": 0, "not_checked": 1, "waived": 1}
    assert "profile-integrity" in nodes["node3"]["reason"]


def test_a_shortened_promise_list_after_healthy_ones_is_made_again_from_the_profile(tmp_path):
    """node2's promise list and promises cut to what passed, the ECC promises gone: its embedded profile (the
    bytes node1 has, checked once) still promises them, so they are not checked."""
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    write_node(root, "node1", derived(accepted, "node1"))
    cut = derived(accepted, "node2")
    gone = {"ecc-mode[GPU0]", "ecc-mode[GPU1]"}
    cut["promised"]["promised"] = [p for p in cut["promised"]["promised"] if p["id"] not in gone]
    cut["promises"] = [p for p in cut["promises"] if p["id"] not in gone]
    cut["tests"] = {test: outcome for test, outcome in cut["tests"].items() if "::test_ecc" not in test}
    cut["checks"] = [check for check in cut["checks"] if "::test_ecc" not in check["test"]]  # the records judge
    write_node(root, "node2", cut)
    nodes = _report(root)
    assert nodes["node1"]["verdict"] == "ACCEPTED"
    assert nodes["node2"]["verdict"] == "INCOMPLETE"
    assert nodes["node2"]["promises"] == {"passed": 35, "failed": 0, "not_checked": 2, "waived": 1}


def test_the_same_invalid_part_in_two_nodes_is_refused_in_both(tmp_path):
    """A schema problem is never remembered as if it were a value: each node holding those bytes is unreadable,
    with the problem named."""
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    write_node(root, "node1", derived(accepted, "node1"))
    for name in ("node2", "node3"):
        broken = derived(accepted, name)
        broken["tests"]["test_topology.py::test_affinity[GPU1]"] = "maybe"
        write_node(root, name, broken)
    nodes = _report(root)
    assert nodes["node1"]["verdict"] == "ACCEPTED"
    for name in ("node2", "node3"):
        assert (nodes[name]["state"], nodes[name]["verdict"]) == ("unreadable", None)
        assert nodes[name]["reason"] == (
            "unreadable: gpufabric-results.json is not a valid results document (format 4): "
            "data.tests.test_topology.py::test_affinity[GPU1] must be one of ['passed', 'failed', 'skipped', "
            "'error']")


def test_a_nan_past_many_capital_ns_is_found(tmp_path):
    """The search for NaN jumps from one capital N to the next, and past the 256th searches the rest plainly: a
    NaN in the burn-in (a part the fleet does not read) after 300 of them is found all the same."""
    text = json.dumps(derived(replayed("accepted"), "node1"), indent=2) + "\n"
    version = f'"plugin_version": "{__version__}"'
    assert version in text and '"elapsed_s": 600.0469648039999' in text
    text = text.replace(version, version[:-1] + " " + "N" * 300 + '"', 1)
    text = text.replace('"elapsed_s": 600.0469648039999', '"elapsed_s": NaN', 1)
    root = tmp_path / "fleet"
    _written(root, "node1", text)
    node = _report(root)["node1"]
    at = text.encode().index(b": NaN")
    assert (node["state"], node["verdict"]) == ("unreadable", None)
    assert node["reason"] == (f"unreadable: gpufabric-results.json holds a number that is not finite (NaN at byte "
                              f"{at:,}): not a results file this tool wrote")


def test_the_node_readers_fit_the_cpus_the_report_may_use():
    """A report run inside a Slurm step or a container confined to one CPU of a larger host reads its nodes in its
    own process, not with a worker per host CPU crowding that one (os.cpu_count counts the host's)."""
    import os
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity"):
        import pytest

        pytest.skip("no CPU affinity on this system")
    one = min(os.sched_getaffinity(0))
    code = (f"import os; os.sched_setaffinity(0, {{{one}}}); from pytest_gpufabric.fleet.report import usable_cpus; "
            "print(usable_cpus(), os.cpu_count())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    usable, host = (int(v) for v in done.stdout.split())
    assert usable == 1 and host == os.cpu_count()


def test_reading_ahead_neither_waits_on_a_fifo_nor_fetches_a_huge_file(tmp_path):
    """The reader asks the kernel to fetch the next nodes' files ahead (fleet/nodes.py read_nodes_ahead): a FIFO
    among them is never opened to wait for a writer, a sparse 1.5 GB file is not fetched; both nodes are named
    unreadable, as without reading ahead, and the healthy nodes around them are read."""
    import os

    import pytest

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    from pytest_gpufabric.fleet.nodes import READ_AHEAD, read_nodes_ahead

    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    names = [f"n{i:02d}" for i in range(READ_AHEAD + 3)]
    for name in names:
        write_node(root, name, derived(accepted, name))
    os.unlink(root / "n01" / "gpufabric-results.json")
    os.mkfifo(root / "n01" / "gpufabric-results.json")
    with open(root / "n02" / "gpufabric-results.json", "wb") as handle:
        handle.truncate(1_500_000_000)
    nodes = read_nodes_ahead([root / name for name in names])
    assert [n.name for n in nodes] == names
    assert (nodes[1].state, nodes[1].error) == ("unreadable", "unreadable: gpufabric-results.json is not a regular "
                                                              "file")
    assert nodes[2].state == "unreadable" and "1,500.0 MB, over the 67 MB a results file may have" in nodes[2].error
    assert all(n.state == "reported" for i, n in enumerate(nodes) if i not in (1, 2))
