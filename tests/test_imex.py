"""`nvidia-imex-ctl -N` (formats/imex.py) and the rack's IMEX promise (fleet/rack.py), on a real 18-node GB200 NVL72
IMEX status (tests/data/captures/public/blackwell/, its SOURCES.md row: every value below read off it by hand).
The failing cases are copies of it changed here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rack_replay import NCCL_72, addressed_rack, dated_rack, fleet_results

from pytest_gpufabric.fleet.rack import all_reduce_run, judge_rack, read_trays
from pytest_gpufabric.formats.imex import parse_imex_status

ROOT = Path(__file__).resolve().parent.parent
BLACKWELL = ROOT / "tests" / "data" / "captures" / "public" / "blackwell"
IMEX = BLACKWELL / "nvidia-imex-ctl-N-gb200-nvl72-18node-570.172-aws-p6e.txt"


def _imex_outcome(text: str, rack: Path) -> dict:
    document = judge_rack(read_trays(rack), imex=parse_imex_status(text))
    return next(p for p in document["promises"] if p["id"] == "rack-imex")


def test_the_real_nvl72_imex_status(tmp_path):
    status = parse_imex_status(IMEX.read_text())
    assert [n["node"] for n in status["nodes"]] == list(range(18))
    assert status["nodes"][0] == {"node": 0, "address": "172.31.48.81", "state": "READY", "version": "570.172"}
    assert status["nodes"][17]["address"] == "172.31.56.47"
    assert sorted(status["connectivity"], key=int) == [str(i) for i in range(18)]
    assert {code for row in status["connectivity"].values() for code in row.values()} == {"C"}
    assert (status["domain_state"], status["unknown"]) == ("UP", [])
    # its nodes by IP: the trays' recorded addresses (derived: tests/test_rack_imex_addresses.py) match them
    assert _imex_outcome(IMEX.read_text(), addressed_rack(tmp_path)) == {
        "id": "rack-imex", "outcome": "passed",
        "reason": "IMEX domain UP: 18 nodes READY, every pair connected, each node one tray (18 by address)"}


def test_a_node_down_and_a_lost_connection_fail_naming_them(tmp_path):
    text = IMEX.read_text().replace("Node #4   - 172.31.50.39    - READY  ",
                                    "Node #4   - 172.31.50.39    - UNAVAILABLE")
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("       4        C"))
    lines[row] = lines[row][:16] + "D" + lines[row][17:]
    text = "\n".join(lines).replace("Domain State: UP", "Domain State: DEGRADED")
    assert _imex_outcome(text, dated_rack(tmp_path)) == {
        "id": "rack-imex", "outcome": "failed",
        "reason": "IMEX domain state DEGRADED, not UP; IMEX node #4 (172.31.50.39) UNAVAILABLE, not READY; IMEX node "
                  "4 to node 0: D, not C (connected)"}


def test_a_status_cut_before_its_domain_line_is_not_checked(tmp_path):
    text = IMEX.read_text()
    cut = text[:text.index("      12        C")]
    status = parse_imex_status(cut)
    assert status["unknown"] == ["no `Domain State:` line: the output is cut, the domain's state is unknown",
                                 "the connectivity table is cut: node(s) 12, 13, 14, 15, 16, 17 have no whole row"]
    assert _imex_outcome(cut, dated_rack(tmp_path))["outcome"] == "not checked"


def test_an_imex_domain_of_another_size_fails(tmp_path):
    rack = addressed_rack(tmp_path)
    lines = [line for line in IMEX.read_text().splitlines() if not line.startswith("Node #17 ")]
    cut = _imex_outcome("\n".join(lines), dated_rack(tmp_path / "dated"))
    assert cut["outcome"] == "not checked"  # the table still names node 17: cut
    whole = parse_imex_status(IMEX.read_text())
    document = judge_rack(read_trays(rack), imex=whole, tray_count=19)
    imex = next(p for p in document["promises"] if p["id"] == "rack-imex")
    assert imex["reason"] == "the IMEX domain has 18 nodes, the rack 19 trays"


def test_every_rack_promise_held_is_accepted(tmp_path):
    """The one path to ACCEPTED: the replayed rack with its trays' addresses (derived: rack_replay.addressed_rack),
    its trays ACCEPTED in fleet results written here, the real IMEX status, and the real NVL72 all_reduce taken as
    if its device list were whole (its rank count set to 72: the capture itself shows only rank 71,
    test_rack_nvl72.py holds that to not checked) and its one device line on a tray of this rack (the capture's is
    another rack's host and driver name)."""
    ours = NCCL_72.read_text().replace("slurm-gb200-207-171", "gb200-tray18").replace("NVIDIA Graphics Device",
                                                                                    "NVIDIA GB200")
    run = dict(all_reduce_run(ours), ranks=72)
    fleet = fleet_results()
    rack = addressed_rack(tmp_path)
    document = judge_rack(read_trays(rack), fleet=fleet, all_reduce=run, min_busbw=800.0,
                          imex=parse_imex_status(IMEX.read_text()))
    assert document["verdict"] == "ACCEPTED"
    assert {p["outcome"] for p in document["promises"]} == {"passed"}
    assert document["reason"] == "every promise of the rack held"
    below = judge_rack(read_trays(rack), fleet=fleet, all_reduce=run, min_busbw=850.0,
                       imex=parse_imex_status(IMEX.read_text()))
    assert below["verdict"] == "REJECTED"
    assert below["reason"] == ("rack-all-reduce: all_reduce over 72 ranks: 834.57 GB/s busbw at 8589934592 B, "
                               "floor 850 GB/s; bus ids not compared: the device lines print [0x01], not a "
                               "domain:bus:device")


def test_parse_imex_cli(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "parse", "imex", str(IMEX)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["domain_state"] == "UP"
    rack = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "fleet", "rack", str(addressed_rack(tmp_path)),
                           "--imex", str(IMEX)], capture_output=True, text=True, cwd=ROOT)
    assert rack.returncode == 6
    assert ("  rack-imex: passed: IMEX domain UP: 18 nodes READY, every pair connected, each node one tray (18 by "
            "address)") in rack.stdout.splitlines()
