"""rack-imex on evidence that cannot show the domain (review 5, findings 2, 4, 7, 8): an IMEX status that
contradicts itself, a status or address file not tied to this run's trays, addresses every host has, and address
evidence that is partial or written another way.

Real data: AWS's real 18-node GB200 IMEX status (tests/data/captures/public/blackwell/SOURCES.md), the VM's real
`ip -j addr` and /proc/net files (tests/data/captures/host-addresses-vm/). DERIVED: the addressed rack's
ip-addr.json files and manifests (rack_replay.addressed_rack); each case changes copies of them in tmp_path."""

from __future__ import annotations

import json
import shutil

import pytest
from rack_replay import (
    IMEX_18,
    IP_ADDR_VM,
    RECORDED_AT,
    TRAYS,
    addressed_rack,
    judge_whole_rack,
    run_rack,
    tray_ip_addr,
    write_manifest,
)

from pytest_gpufabric.fleet.rack import judge_rack, read_trays
from pytest_gpufabric.formats.imex import parse_imex_status

PROC = IP_ADDR_VM.parent.parent / "proc"


def _imex(document: dict) -> dict:
    return next(p for p in document["promises"] if p["id"] == "rack-imex")


def _without_node_17(text: str) -> list[str]:
    """The real status with node #17's line, table row and column cut out (a domain without tray 18)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("Node #17 ") or line.startswith("      17 "):
            continue
        if line.lstrip().startswith("Nodes From\\To") or line[:8].strip().isdigit():
            line = line.rstrip()[:-3].rstrip()
        lines.append(line)
    return lines


def _one_node_status(address: str) -> str:
    """The real status cut to its node #0, listed by ``address``: the domain of a one-tray rack."""
    lines = IMEX_18.read_text().splitlines()
    head = lines[:lines.index("Nodes:") + 1]
    node = next(line for line in lines if line.startswith("Node #0 ")).replace("172.31.48.81 ", f"{address} ")
    return "\n".join([*head, node, "", " Nodes From\\To  0", "       0        C", "", "Domain State: UP"]) + "\n"


# finding 2: a status that repeats a node number or a row contradicts itself


def test_a_repeated_node_number_hiding_a_missing_tray_is_rejected(tmp_path):
    """The 17-node domain (tray 18 absent) with a second `Node #0` line holding tray 18's address: 18 node lines,
    a 17 x 17 table. It passed as 18 nodes READY, every pair connected."""
    rack = addressed_rack(tmp_path)
    lines = _without_node_17(IMEX_18.read_text())
    at = next(i for i, line in enumerate(lines) if line.startswith("Node #16 ")) + 1
    lines.insert(at, "Node #0   - 172.31.56.47    - READY                - Version: 570.172")
    imex = tmp_path / "imex.txt"
    imex.write_text("\n".join(lines) + "\n")
    status = parse_imex_status(imex.read_text())
    assert status["contradictions"] == ["node #0 is listed 2 times (172.31.48.81, 172.31.56.47)"]
    document = judge_whole_rack(rack, imex.read_text())
    assert (document["verdict"], _imex(document)) == ("REJECTED", {
        "id": "rack-imex", "outcome": "failed",
        "reason": "the IMEX status contradicts itself: node #0 is listed 2 times (172.31.48.81, 172.31.56.47)"})
    done = run_rack(str(rack), "--imex", str(imex))
    assert done.returncode == 1, done.stderr
    assert ("  rack-imex: failed: the IMEX status contradicts itself: node #0 is listed 2 times (172.31.48.81, "
            "172.31.56.47)") in done.stdout.splitlines()


def test_a_repeated_row_hiding_a_lost_connection_is_rejected(tmp_path):
    """Node 4's row says N (never connected) to node 0; an all-C copy of the row after it hid it (the last won)."""
    lines = IMEX_18.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("       4        C"))
    whole = lines[row]
    lines[row] = whole[:16] + "N" + whole[17:]
    after_the_table = next(i for i, line in enumerate(lines) if line.startswith("      17 ")) + 1
    lines.insert(after_the_table, whole)
    status = parse_imex_status("\n".join(lines))
    assert status["contradictions"] == ["the connectivity table gives node 4's row twice"]
    assert _imex(judge_whole_rack(addressed_rack(tmp_path), "\n".join(lines))) == {
        "id": "rack-imex", "outcome": "failed",
        "reason": "the IMEX status contradicts itself: the connectivity table gives node 4's row twice"}


def test_a_table_that_does_not_cover_exactly_the_listed_nodes_is_not_checked(tmp_path):
    """A row for a node the table has no column for, and a table of 17 nodes under a list of 18."""
    text = IMEX_18.read_text()
    extra = text.replace("\nDomain State: UP", "      18        " + "C   " * 17 + "C\nDomain State: UP")
    assert parse_imex_status(extra)["unknown"] == [
        "the connectivity table has rows for node(s) 18, which it has no column for"]
    cut = _without_node_17(text)
    cut.insert(next(i for i, line in enumerate(cut) if line.startswith("Node #16 ")) + 1,
               "Node #17  - 172.31.56.47    - READY                - Version: 570.172")
    document = judge_whole_rack(addressed_rack(tmp_path), "\n".join(cut))
    assert _imex(document) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "the table names nodes 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, the node list 0, "
                  "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17"}
