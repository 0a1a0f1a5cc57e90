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
    document = judge_whole_rack(rack, imex.read_text())
    assert (document["verdict"], _imex(document)) == ("REJECTED", {
        "id": "rack-imex", "outcome": "failed",
        "reason": "the IMEX status contradicts itself: node #0 is listed 2 times (172.31.48.81, 172.31.56.47)"})
    status = parse_imex_status(imex.read_text())
    assert status["contradictions"] == ["node #0 is listed 2 times (172.31.48.81, 172.31.56.47)"]
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
    assert _imex(judge_whole_rack(addressed_rack(tmp_path), "\n".join(lines))) == {
        "id": "rack-imex", "outcome": "failed",
        "reason": "the IMEX status contradicts itself: the connectivity table gives node 4's row twice"}
    status = parse_imex_status("\n".join(lines))
    assert status["contradictions"] == ["the connectivity table gives node 4's row twice"]


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


# finding 4: the status and the addresses tied to this run's trays


def test_a_status_far_from_the_trays_recordings_is_not_checked_naming_both_dates(tmp_path):
    rack = addressed_rack(tmp_path)
    stale = IMEX_18.read_text().replace("5/12/2025 06:08:10.580", "1/1/2019 00:00:00.000")
    document = judge_whole_rack(rack, stale)
    assert (document["verdict"], _imex(document)) == ("INCOMPLETE", {
        "id": "rack-imex", "outcome": "not checked",
        "reason": f"the IMEX status is dated 2019-01-01T00:00:00 (its own clock, no zone), tray gb200-tray01's "
                  f"bundle was recorded {RECORDED_AT}: 2323.2 days apart, more than 2: the status is not shown to "
                  "be this run's"})
    # a day later is one acceptance: the status's clock has no zone, the trays are recorded over a day or so
    next_day = IMEX_18.read_text().replace("5/12/2025 06:08:10.580", "5/13/2025 05:50:00.000")
    assert _imex(judge_whole_rack(rack, next_day))["outcome"] == "passed"


def test_a_status_without_a_timestamp_or_trays_without_dates_is_not_checked(tmp_path):
    rack = addressed_rack(tmp_path)
    undated = IMEX_18.read_text().replace("5/12/2025 06:08:10.580\n", "")
    assert _imex(judge_whole_rack(rack, undated)) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "the IMEX status has no timestamp line (or no date in it): it cannot be tied to the trays' "
                  "recordings, not shown to be this run's"}
    assert parse_imex_status(undated)["unknown"] == ["no timestamp line: when the status was taken is unknown"]
    for name in TRAYS:
        (rack / name / "manifest.json").unlink()
    assert _imex(judge_whole_rack(rack, IMEX_18.read_text())) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "no tray's bundle records when it was recorded (manifest.json recorded_at): the IMEX status of "
                  "2025-05-12T06:08:10.580000 (its own clock, no zone) cannot be tied to them, not shown to be this "
                  "run's"}


def test_trays_without_a_readable_recorded_at_are_not_checked_naming_them(tmp_path):
    """Review 6, finding 6: trays 02-18's manifests without recorded_at (or with a date that is no ISO 8601) were
    left out of the date tie, and tray 01's date alone tied the status: rack-imex passed."""
    rack = addressed_rack(tmp_path)
    for name in TRAYS[1:]:
        manifest = json.loads((rack / name / "manifest.json").read_text())
        del manifest["recorded_at"]
        (rack / name / "manifest.json").write_text(json.dumps(manifest))
    document = judge_whole_rack(rack, IMEX_18.read_text())
    assert (document["verdict"], _imex(document)) == ("INCOMPLETE", {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "trays gb200-tray02, gb200-tray03, gb200-tray04, gb200-tray05, gb200-tray06, gb200-tray07 (+11 "
                  "more): no readable recorded_at in the bundle's manifest.json: the IMEX status of "
                  "2025-05-12T06:08:10.580000 (its own clock, no zone) cannot be tied to them, not shown to be this "
                  "run's"})
    write_manifest(rack / "gb200-tray07", recorded_at="Mon May 12 2025")
    for name in TRAYS[1:]:
        if name != "gb200-tray07":
            write_manifest(rack / name)
    document = judge_whole_rack(rack, IMEX_18.read_text())
    assert (document["verdict"], _imex(document)["reason"]) == (
        "INCOMPLETE", "tray gb200-tray07 ('Mon May 12 2025'): no readable recorded_at in the bundle's manifest.json: "
                      "the IMEX status of 2025-05-12T06:08:10.580000 (its own clock, no zone) cannot be tied to it, "
                      "not shown to be this run's")
    done = run_rack(str(rack), "--imex", str(IMEX_18))
    assert done.returncode == 6, done.stderr


def test_an_address_file_of_a_host_outside_the_rack_is_not_taken_for_the_tray(tmp_path):
    """Node #9 is a host outside the rack (172.31.99.9), and tray 10's ip-addr.json was replaced by that host's
    after its snapshot: the node counted as tray 10 and the rack was ACCEPTED."""
    rack = addressed_rack(tmp_path)
    (rack / "gb200-tray10" / "ip-addr.json").write_text(tray_ip_addr(10).replace("172.31.53.80", "172.31.99.9"))
    outside = IMEX_18.read_text().replace("172.31.53.80 ", "172.31.99.9  ")
    untied = ("IMEX node #9 (172.31.99.9) matched to no tray: not checked for tray gb200-tray10: ip-addr.json not "
              "tied to the tray's bundle: ")
    document = judge_whole_rack(rack, outside)
    assert (document["verdict"], _imex(document)) == ("INCOMPLETE", {
        "id": "rack-imex", "outcome": "not checked",
        "reason": untied + "ip-addr.json is not the file its bundle recorded (its sha256 differs from "
                           "manifest.json's)"})
    manifest = json.loads((rack / "gb200-tray10" / "manifest.json").read_text())
    del manifest["sha256"]["ip-addr.json"]  # a manifest that lists no digest for it: a bundle of an older version
    (rack / "gb200-tray10" / "manifest.json").write_text(json.dumps(manifest))
    assert _imex(judge_whole_rack(rack, outside))["reason"] == untied + (
        "manifest.json does not list ip-addr.json with its sha256 (not recorded by this bundle's `gpufabric "
        "snapshot`)")
    (rack / "gb200-tray10" / "manifest.json").unlink()
    assert read_trays(rack)[9].addresses_why == ("ip-addr.json not tied to the tray's bundle: no manifest.json: the "
                                                 "addresses cannot be tied to the tray's bundle")
    # without a manifest the tray is not dated either: the status is not tied to it (finding 6 of review 6)
    assert _imex(judge_whole_rack(rack, outside))["reason"] == (
        "tray gb200-tray10: no readable recorded_at in the bundle's manifest.json: the IMEX status of "
        "2025-05-12T06:08:10.580000 (its own clock, no zone) cannot be tied to it, not shown to be this run's")


def test_a_tray_reading_swapped_after_its_snapshot_is_rejected(tmp_path):
    """Review 6, finding 5: tray 05 recorded GPU0's fabric status 5 (its manifest over that nvml.json); the clean
    nvml.json put back after the snapshot passed, its sha256 against the manifest's never checked."""
    rack = addressed_rack(tmp_path)
    clean = (rack / "gb200-tray05" / "nvml.json").read_text()
    record = json.loads(clean)
    record["gpus"][0]["fabric"]["status"] = 5
    (rack / "gb200-tray05" / "nvml.json").write_text(json.dumps(record, indent=1) + "\n")
    write_manifest(rack / "gb200-tray05")
    recorded = judge_whole_rack(rack, IMEX_18.read_text())
    assert (recorded["verdict"], recorded["reason"].split(":")[0]) == ("REJECTED", "rack-fabric-registration")
    (rack / "gb200-tray05" / "nvml.json").write_text(clean)
    document = judge_whole_rack(rack, IMEX_18.read_text())
    rack_trays = next(p for p in document["promises"] if p["id"] == "rack-trays")
    assert (document["verdict"], rack_trays) == ("REJECTED", {
        "id": "rack-trays", "outcome": "failed",
        "reason": "tray gb200-tray05: nvml.json is not the file its bundle recorded (its sha256 differs from "
                  "manifest.json's)"})
    done = run_rack(str(rack), "--imex", str(IMEX_18))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == (
        "gpufabric: REJECTED rack rack: rack-trays: tray gb200-tray05: nvml.json is not the file its bundle "
        "recorded (its sha256 differs from manifest.json's)")


def test_an_address_file_recorded_on_another_host_is_not_taken_for_the_tray(tmp_path):
    rack = addressed_rack(tmp_path)
    write_manifest(rack / "gb200-tray10", hostname="login01")
    assert _imex(judge_whole_rack(rack, IMEX_18.read_text())) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #9 (172.31.53.80) matched to no tray: not checked for tray gb200-tray10: ip-addr.json "
                  "not tied to the tray's bundle: manifest.json was recorded on login01, the tray's bundle on "
                  "gb200-tray10"}
    write_manifest(rack / "gb200-tray10", hostname="GB200-Tray10")  # hostnames compare ignoring case
    assert _imex(judge_whole_rack(rack, IMEX_18.read_text()))["outcome"] == "passed"


def test_an_address_file_left_from_an_earlier_recording_is_not_read(tmp_path):
    """Review 6, finding 3: tray 05's folder kept the ip-addr.json of an earlier recording (IMEX node #4's
    address); the snapshot made there without `ip` copied the /proc/net files (the VM's real ones) and its manifest
    says so, yet sealed the leftover too, and the reader took it: ACCEPTED. Only what the manifest's commands say
    this run wrote is read: the tray's own addresses are not node #4's."""
    rack = addressed_rack(tmp_path)
    tray = rack / "gb200-tray05"
    for name in ("proc-net-fib_trie.txt", "proc-net-if_inet6.txt"):
        shutil.copy(PROC / name, tray)
    manifest = write_manifest(tray)
    assert {"ip-addr.json", "proc-net-fib_trie.txt", "proc-net-if_inet6.txt"} <= set(manifest["sha256"])
    manifest["commands"] = {"ip-addr.json": {"cmd": ["ip", "-j", "addr"], "error": "ip not on PATH"},
                            "proc-net-fib_trie.txt": {"file": "/proc/net/fib_trie"},
                            "proc-net-if_inet6.txt": {"file": "/proc/net/if_inet6"}}
    (tray / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    document = judge_whole_rack(rack, IMEX_18.read_text())
    assert (document["verdict"], _imex(document)) == ("REJECTED", {
        "id": "rack-imex", "outcome": "failed",
        "reason": "IMEX node #4 (172.31.50.39) is no tray's address (the trays' addresses: gb200-tray01 "
                  "172.31.48.81 fd00::1, gb200-tray02 172.31.48.98 fd00::2, gb200-tray03 172.31.48.221 fd00::3 (+15 "
                  "more)); tray gb200-tray05 is in no IMEX node (its addresses: 192.0.2.2 fd00::2)"})
    assert document["trays"][4]["addresses"] == ["192.0.2.2", "fd00::2"]
    # a snapshot that could write no addresses at all: the leftover is still not read, the addresses are unknown
    (tray / "proc-net-fib_trie.txt").unlink()
    (tray / "proc-net-if_inet6.txt").unlink()
    manifest["commands"] = {"ip-addr.json": {"cmd": ["ip", "-j", "addr"], "returncode": 1, "stderr": ""},
                            "proc-net-fib_trie.txt": {"file": "/proc/net/fib_trie", "error": "Permission denied"},
                            "proc-net-if_inet6.txt": {"file": "/proc/net/if_inet6", "error": "Permission denied"}}
    (tray / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    assert _imex(judge_whole_rack(rack, IMEX_18.read_text())) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #4 (172.31.50.39) matched to no tray: not checked for tray gb200-tray05: its snapshot "
                  "recorded no addresses (manifest.json: ip-addr.json: exit 1; proc-net-fib_trie.txt: Permission "
                  "denied; proc-net-if_inet6.txt: Permission denied)"}


# finding 7: loopback and link-local addresses name no tray


@pytest.mark.parametrize(("address", "kind"), [("127.0.0.1", "loopback"), ("::1", "loopback"),
                                                ("169.254.0.5", "link-local"), ("fe80::fc:ff:fe00:1", "link-local"),
                                                ("fe80::fc:ff:fe00:1%eth0", "link-local")])
def test_an_imex_node_listed_by_an_address_every_host_has_is_rejected(tmp_path, address, kind):
    """A one-tray rack (--trays 1) whose one IMEX node is listed by loopback or link-local: any machine prints
    that status. Tray 01's ip-addr.json holds the VM's real link-local fe80::fc:ff:fe00:1 and loopbacks."""
    rack = addressed_rack(tmp_path)
    for name in TRAYS[1:]:
        shutil.rmtree(rack / name)
    imex = tmp_path / "imex1.txt"
    imex.write_text(_one_node_status(address))
    document = judge_rack(read_trays(rack), tray_count=1, imex=parse_imex_status(imex.read_text()))
    reason = (f"IMEX node #0 ({address}) is a {kind} address: every host has or shares one, it names no tray; tray "
              "gb200-tray01 is in no IMEX node (its addresses: 172.31.48.81 fd00::1)")
    assert _imex(document) == {"id": "rack-imex", "outcome": "failed", "reason": reason}
    done = run_rack(str(rack), "--trays", "1", "--imex", str(imex))
    assert done.returncode == 1, done.stderr
    assert f"  rack-imex: failed: {reason}" in done.stdout.splitlines()


# finding 8: partial address evidence, and addresses or hostnames written another way


def test_a_tray_that_recorded_only_its_ipv6_addresses_is_not_checked_for_an_ipv4_node(tmp_path):
    """Tray 05 recorded only /proc/net/if_inet6 (the VM's real file; fib_trie missing): its IPv4 is unknown."""
    rack = addressed_rack(tmp_path)
    (rack / "gb200-tray05" / "ip-addr.json").unlink()
    shutil.copy(PROC / "proc-net-if_inet6.txt", rack / "gb200-tray05")
    write_manifest(rack / "gb200-tray05")
    document = judge_whole_rack(rack, IMEX_18.read_text())
    assert (document["verdict"], _imex(document)) == ("INCOMPLETE", {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #4 (172.31.50.39) matched to no tray: not checked for tray gb200-tray05: its IPv4 "
                  "addresses not recorded (only IPv6)"})
    (rack / "gb200-tray05" / "proc-net-if_inet6.txt").unlink()  # the copy its manifest says the snapshot made
    assert _imex(judge_whole_rack(rack, IMEX_18.read_text()))["reason"] == (
        "IMEX node #4 (172.31.50.39) matched to no tray: not checked for tray gb200-tray05: no proc-net-if_inet6.txt "
        "(the /proc/net copies its manifest.json says the snapshot made)")


def test_an_ip_addr_json_that_is_a_folder_is_not_checked_naming_it(tmp_path):
    """The folder is not passed over for the /proc/net copies beside it."""
    rack = addressed_rack(tmp_path)
    (rack / "gb200-tray05" / "ip-addr.json").unlink()
    (rack / "gb200-tray05" / "ip-addr.json").mkdir()
    for name in ("proc-net-fib_trie.txt", "proc-net-if_inet6.txt"):
        shutil.copy(PROC / name, rack / "gb200-tray05")
    write_manifest(rack / "gb200-tray05")
    assert _imex(judge_whole_rack(rack, IMEX_18.read_text())) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #4 (172.31.50.39) matched to no tray: not checked for tray gb200-tray05: ip-addr.json "
                  "is a folder: its addresses cannot be read"}


def test_a_hostname_in_capitals_and_an_ipv4_mapped_address_are_the_tray(tmp_path):
    """Node #2 by its tray's hostname in capitals, node #4 by its IPv4 address written IPv4-mapped."""
    rack = addressed_rack(tmp_path)
    text = IMEX_18.read_text().replace("172.31.48.221 ", "GB200-TRAY03  ").replace(
        "172.31.50.39 ", "::ffff:172.31.50.39 ")
    status = parse_imex_status(text)
    assert [status["nodes"][2]["address"], status["nodes"][4]["address"]] == ["GB200-TRAY03", "::ffff:172.31.50.39"]
    document = judge_whole_rack(rack, text)
    assert (document["verdict"], _imex(document)) == ("ACCEPTED", {
        "id": "rack-imex", "outcome": "passed",
        "reason": "IMEX domain UP: 18 nodes READY, every pair connected, each node one tray (17 by address, 1 by "
                  "hostname)"})
