"""IMEX nodes listed by IP address matched to the rack's trays (issue 45): the host's addresses as `gpufabric
snapshot` records them (fabric/host_addresses.py), and the rack's ``rack-imex`` promise (fleet/rack_imex.py).

Real data: the `ip -j addr` and /proc/net files recorded on this project's VM (tests/data/captures/host-addresses-vm/,
its README.md), AWS's real 18-node GB200 IMEX status (tests/data/captures/public/blackwell/SOURCES.md), the replayed
rack's trays. DERIVED: each tray's ip-addr.json is the VM's with eth0's address set to its IMEX node's
(rack_replay.tray_ip_addr); the failing cases change copies of them and of the IMEX status in tmp_path."""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess

from rack_replay import (
    IMEX_18,
    IP_ADDR_VM,
    RACK,
    TRAYS,
    addressed_rack,
    dated_rack,
    judge_whole_rack,
    run_rack,
    tray_ip_addr,
    write_manifest,
)

from pytest_gpufabric.fabric import recorded_command
from pytest_gpufabric.fabric.host_addresses import (
    identifies_one_host,
    parse_fib_trie,
    parse_if_inet6,
    parse_ip_addr_json,
    read_host_addresses,
    snapshot_addresses,
    tie_to_bundle,
)
from pytest_gpufabric.fleet.rack import judge_rack, read_trays
from pytest_gpufabric.formats.imex import parse_imex_status

VM = IP_ADDR_VM.parent.parent
PLATFORM_CAPTURES = RACK.parent.parent / "captures" / "public" / "platform"
VM_RECORDED = ["127.0.0.1", "::1", "192.0.2.2", "fd00::2", "fe80::fc:ff:fe00:1"]
VM_ADDRESSES = ["192.0.2.2", "fd00::2"]  # loopback and link-local name no one host: dropped
NO_ADDRESSES = "no ip-addr.json (`ip -j addr`, recorded by `gpufabric snapshot`)"


def _imex(promises: dict) -> dict:
    return next(p for p in promises["promises"] if p["id"] == "rack-imex")


def _whole_rack(rack, imex_text: str) -> dict:
    return judge_whole_rack(rack, imex_text)


# the recorder and its readers, on the VM's real output


def test_the_recorded_ip_output_and_proc_files_give_the_same_addresses():
    assert parse_ip_addr_json((VM / "ip" / "ip-addr.json").read_text()) == VM_RECORDED
    assert read_host_addresses(VM / "ip").addresses == VM_ADDRESSES
    assert (read_host_addresses(VM / "ip").source, read_host_addresses(VM / "ip").families) == ("ip-addr.json", (4, 6))
    from_proc = read_host_addresses(VM / "proc")
    assert (from_proc.source, from_proc.families) == ("proc-net-fib_trie.txt, proc-net-if_inet6.txt", (4, 6))
    assert sorted(from_proc.addresses) == sorted(VM_ADDRESSES)
    # fib_trie's 127.0.0.0 is `/8 host LOCAL` (the loopback net), 192.0.2.255 `/32 link BROADCAST`: not addresses
    assert parse_fib_trie((VM / "proc" / "proc-net-fib_trie.txt").read_text()) == ["127.0.0.1", "192.0.2.2"]
    assert parse_if_inet6((VM / "proc" / "proc-net-if_inet6.txt").read_text()) == [
        "fd00::2", "::1", "fe80::fc:ff:fe00:1"]


def test_unreadable_address_evidence_says_which_file(tmp_path):
    assert read_host_addresses(tmp_path).addresses is None
    assert read_host_addresses(tmp_path).why == NO_ADDRESSES
    (tmp_path / "ip-addr.json").write_text(IP_ADDR_VM.read_text()[:40])
    assert read_host_addresses(tmp_path).why.startswith("ip-addr.json: not JSON (")
    (tmp_path / "ip-addr.json").write_text('{"ifname": "eth0"}')
    assert read_host_addresses(tmp_path).why == "ip-addr.json: not `ip -j addr` output (a JSON list of interfaces)"
    assert parse_ip_addr_json("[]") == []


def test_the_recorder_writes_what_ip_prints(tmp_path):
    """Live, on this machine: the recorder's ip-addr.json is `ip -j addr`'s output; without `ip` it copies the
    /proc/net files, which give the same addresses."""
    commands = snapshot_addresses(tmp_path)
    assert commands == {"ip-addr.json": {"cmd": ["ip", "-j", "addr"], "returncode": 0, "stderr": ""}}
    live = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout
    assert parse_ip_addr_json((tmp_path / "ip-addr.json").read_text()) == parse_ip_addr_json(live)


def test_without_ip_the_recorder_copies_the_kernel_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded_command.shutil, "which", lambda name: None)
    commands = snapshot_addresses(tmp_path)
    assert commands == {"ip-addr.json": {"cmd": ["ip", "-j", "addr"], "error": "ip not on PATH"},
                        "proc-net-fib_trie.txt": {"file": "/proc/net/fib_trie"},
                        "proc-net-if_inet6.txt": {"file": "/proc/net/if_inet6"}}
    live = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout
    assert sorted(read_host_addresses(tmp_path).addresses) == sorted(
        a for a in parse_ip_addr_json(live) if identifies_one_host(a))


def test_snapshot_records_the_addresses_in_the_bundle(tmp_path, monkeypatch, capsys):
    """`gpufabric snapshot` with NVML answering as the H200 machine did (DERIVED, as tests/test_platform.py's
    snapshot test: its recorded nvml.json stands in for NVML); the addresses are this machine's, read live."""
    from pytest_gpufabric import cli

    nvml = importlib.import_module("pytest_gpufabric.fabric.nvml")
    record = json.loads((RACK.parent.parent / "bundles" / "h200-nvswitch-x2" / "nvml.json").read_text())
    monkeypatch.setattr(nvml, "collect_record", lambda **_: record)
    assert cli.main(["snapshot", str(tmp_path / "bundle")]) == 0
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert "ip-addr.json" in manifest["files"]
    assert manifest["commands"]["ip-addr.json"] == {"cmd": ["ip", "-j", "addr"], "returncode": 0, "stderr": ""}
    assert read_host_addresses(tmp_path / "bundle").source == "ip-addr.json"
    # each file with its sha256, so a later ip-addr.json is not taken for the bundle's
    digest = hashlib.sha256((tmp_path / "bundle" / "ip-addr.json").read_bytes()).hexdigest()
    assert manifest["sha256"]["ip-addr.json"] == digest
    assert set(manifest["sha256"]) == {p.name for p in (tmp_path / "bundle").iterdir() if p.is_file()} - {
        "manifest.json"}
    recorded = read_host_addresses(tmp_path / "bundle")
    assert tie_to_bundle(tmp_path / "bundle", recorded, manifest["hostname"]) == (None, manifest["recorded_at"])


def test_a_snapshot_without_ip_does_not_seal_an_earlier_ip_addr_json(tmp_path, monkeypatch, capsys):
    """Review 6, finding 3: the bundle folder kept an earlier recording's ip-addr.json (tray 05's, IMEX node #4's
    address) and a hand-saved lsmod (a real public excerpt); the snapshot, run where `ip` is missing, copied the
    /proc/net files, and listed and digested the leftover with them as this run's. The snapshot removes its own
    earlier files first and lists only what it wrote; the hand-saved file stays, unlisted."""
    from pytest_gpufabric import cli

    nvml = importlib.import_module("pytest_gpufabric.fabric.nvml")
    record = json.loads((RACK.parent.parent / "bundles" / "h200-nvswitch-x2" / "nvml.json").read_text())
    monkeypatch.setattr(nvml, "collect_record", lambda **_: record)
    which = recorded_command.shutil.which
    monkeypatch.setattr(recorded_command.shutil, "which", lambda name: None if name == "ip" else which(name))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "ip-addr.json").write_text(tray_ip_addr(5))
    lsmod = PLATFORM_CAPTURES / "lsmod-nvidia-peermem-loaded-gpud-pr-39-excerpt.txt"
    (bundle / "lsmod.txt").write_text(lsmod.read_text())
    assert cli.main(["snapshot", str(bundle)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"removed the earlier ip-addr.json from {bundle} first (names the snapshot writes: a file "
                      "this run did not write is not left to pass as its own)")
    assert out[-1] == f"left in {bundle} as they were, not this recording's (not in its manifest): lsmod.txt"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert not (bundle / "ip-addr.json").exists()
    assert {"ip-addr.json", "lsmod.txt"} & (set(manifest["files"]) | set(manifest["sha256"])) == set()
    assert (bundle / "lsmod.txt").read_text() == lsmod.read_text()
    assert manifest["commands"]["ip-addr.json"] == {"cmd": ["ip", "-j", "addr"], "error": "ip not on PATH"}
    assert {"proc-net-fib_trie.txt", "proc-net-if_inet6.txt"} <= set(manifest["sha256"])
    recorded = read_host_addresses(bundle)
    assert recorded.source == "proc-net-fib_trie.txt, proc-net-if_inet6.txt"
    assert "172.31.50.39" not in recorded.addresses
    assert tie_to_bundle(bundle, recorded, manifest["hostname"]) == (None, manifest["recorded_at"])
    # a second snapshot into its own folder replaces the whole earlier recording, its folders included
    assert cli.main(["snapshot", str(bundle)]) == 0
    again = json.loads((bundle / "manifest.json").read_text())
    assert (again["files"], set(again["sha256"])) == (manifest["files"], set(manifest["sha256"]))
    assert "platform" in again["files"]


def test_a_snapshot_refuses_a_folder_it_copies_into_that_no_manifest_lists(tmp_path, monkeypatch, capsys):
    """A platform/ folder already in the bundle folder with no manifest listing it (put there by hand, or the
    manifest lost): the snapshot copies into platform/, so old and new files would mix under this run's name. It
    refuses before writing anything (exit 2, one line naming the folder), and the folder stays as it was."""
    from pytest_gpufabric import cli

    nvml = importlib.import_module("pytest_gpufabric.fabric.nvml")
    record = json.loads((RACK.parent.parent / "bundles" / "h200-nvswitch-x2" / "nvml.json").read_text())
    monkeypatch.setattr(nvml, "collect_record", lambda **_: record)
    bundle = tmp_path / "bundle"
    (bundle / "platform").mkdir(parents=True)
    lsmod = PLATFORM_CAPTURES / "lsmod-nvidia-peermem-loaded-gpud-pr-39-excerpt.txt"
    (bundle / "platform" / "lsmod.txt").write_text(lsmod.read_text())
    assert cli.main(["snapshot", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert err == (f"gpufabric: {bundle / 'platform'}: a folder no earlier snapshot's manifest lists (the snapshot "
                   "copies into it, and its files and this run's would mix): move it aside or snapshot into an empty "
                   "folder\n")
    assert sorted(p.name for p in bundle.rglob("*")) == ["lsmod.txt", "platform"]


# the rack: IMEX nodes by IP matched to the trays' recorded addresses


def test_every_imex_node_one_trays_address_is_accepted(tmp_path):
    rack = addressed_rack(tmp_path)
    assert json.loads(tray_ip_addr(5))[3]["addr_info"][0]["local"] == "172.31.50.39"  # IMEX node #4's
    document = _whole_rack(rack, IMEX_18.read_text())
    assert _imex(document) == {"id": "rack-imex", "outcome": "passed",
                               "reason": "IMEX domain UP: 18 nodes READY, every pair connected, each node one tray "
                                         "(18 by address)"}
    assert document["verdict"] == "ACCEPTED"
    assert document["trays"][4]["addresses"] == ["172.31.50.39", "fd00::5"]


def test_an_imex_address_no_tray_holds_is_rejected_naming_it(tmp_path):
    rack = addressed_rack(tmp_path)
    imex = tmp_path / "imex.txt"
    imex.write_text(IMEX_18.read_text().replace("172.31.56.47", "172.31.56.48"))
    assert _whole_rack(rack, imex.read_text())["verdict"] == "REJECTED"
    done = run_rack(str(rack), "--imex", str(imex))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == (
        "gpufabric: REJECTED rack rack: rack-imex: IMEX node #17 (172.31.56.48) is no tray's address (the trays' "
        "addresses: gb200-tray01 172.31.48.81 fd00::1, gb200-tray02 172.31.48.98 fd00::2, gb200-tray03 "
        "172.31.48.221 fd00::3 (+15 more)); tray gb200-tray18 is in no IMEX node (its addresses: 172.31.56.47 "
        "fd00::12)")


def test_a_tray_absent_from_the_imex_domain_is_rejected_naming_it(tmp_path):
    """The domain of 17 nodes: node #17's line, its table row and column cut out of the real status."""
    rack = addressed_rack(tmp_path)
    lines = []
    for line in IMEX_18.read_text().splitlines():
        if line.startswith("Node #17 ") or line.startswith("      17 "):
            continue
        if line.lstrip().startswith("Nodes From\\To") or line[:8].strip().isdigit():
            line = line.rstrip()[:-3].rstrip()  # the last column: node 17
        lines.append(line)
    imex = tmp_path / "imex.txt"
    imex.write_text("\n".join(lines) + "\n")
    status = parse_imex_status(imex.read_text())
    assert (len(status["nodes"]), len(status["connectivity"]["0"]), status["unknown"]) == (17, 17, [])
    assert _whole_rack(rack, imex.read_text())["verdict"] == "REJECTED"
    done = run_rack(str(rack), "--imex", str(imex))
    assert done.returncode == 1, done.stderr
    assert "  rack-imex: failed: the IMEX domain has 17 nodes, the rack 18 trays; tray gb200-tray18 is in no IMEX " \
           "node (its addresses: 172.31.56.47 fd00::12)" in done.stdout.splitlines()


def test_a_tray_without_addresses_is_not_checked_naming_it(tmp_path):
    rack = addressed_rack(tmp_path)
    (rack / "gb200-tray10" / "ip-addr.json").unlink()
    document = _whole_rack(rack, IMEX_18.read_text())
    assert document["verdict"] == "INCOMPLETE"
    assert _imex(document) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": f"IMEX node #9 (172.31.53.80) matched to no tray: not checked for tray gb200-tray10: {NO_ADDRESSES}"}
    done = run_rack(str(rack), "--imex", str(IMEX_18))
    assert done.returncode == 6, done.stderr
    (rack / "gb200-tray10" / "ip-addr.json").write_text("[{")
    assert _imex(_whole_rack(rack, IMEX_18.read_text()))["reason"].startswith(
        "IMEX node #9 (172.31.53.80) matched to no tray: not checked for tray gb200-tray10: ip-addr.json: not JSON (")


def test_trays_recorded_before_addresses_were_are_not_checked(tmp_path):
    """The replayed rack's trays with their manifests but no ip-addr.json: its IMEX nodes by IP are matched to
    nothing, never passed."""
    document = _whole_rack(dated_rack(tmp_path), IMEX_18.read_text())
    assert document["verdict"] == "INCOMPLETE"
    assert _imex(document)["reason"] == (
        "IMEX node #0 (172.31.48.81), IMEX node #1 (172.31.48.98), IMEX node #2 (172.31.48.221) (+15 more) matched "
        "to no tray: not checked for trays gb200-tray01, gb200-tray02, gb200-tray03, gb200-tray04, gb200-tray05, "
        f"gb200-tray06 (+12 more): {NO_ADDRESSES}")


def test_an_imex_node_of_a_tray_that_did_not_report_is_not_called_a_stranger(tmp_path):
    rack = addressed_rack(tmp_path)
    for path in (rack / "gb200-tray18").iterdir():
        path.unlink()
    (rack / "gb200-tray18").rmdir()
    document = judge_rack(read_trays(rack), expected=TRAYS, imex=parse_imex_status(IMEX_18.read_text()))
    assert _imex(document) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #17 (172.31.56.47) matched to no tray: not checked for tray gb200-tray18: did not report"}


def test_one_address_on_two_trays_is_rejected(tmp_path):
    """Tray 01's recording copied onto tray 02, then recorded into tray 02's manifest as if its bundle held it."""
    rack = addressed_rack(tmp_path)
    (rack / "gb200-tray02" / "ip-addr.json").write_text(tray_ip_addr(1))
    write_manifest(rack / "gb200-tray02")
    assert _imex(judge_rack(read_trays(rack), imex=parse_imex_status(IMEX_18.read_text())))["reason"] == (
        "IMEX node #0 (172.31.48.81) is an address of trays gb200-tray01, gb200-tray02: one node, several trays; "
        "IMEX node #1 (172.31.48.98) is no tray's address (the trays' addresses: gb200-tray01 172.31.48.81 fd00::1, "
        "gb200-tray02 172.31.48.81 fd00::1, gb200-tray03 172.31.48.221 fd00::3 (+15 more))")


def test_one_tray_named_by_two_imex_nodes_is_rejected(tmp_path):
    """Node #1 listed by tray 01's other address (its IPv6): tray 01 is two nodes, tray 02 none."""
    rack = addressed_rack(tmp_path)
    status = parse_imex_status(IMEX_18.read_text().replace("172.31.48.98 ", "fd00::1      "))
    assert status["nodes"][1]["address"] == "fd00::1"
    assert _imex(judge_rack(read_trays(rack), imex=status))["reason"] == (
        "tray gb200-tray01 is IMEX node #0 (172.31.48.81) and IMEX node #1 (fd00::1): one tray, several IMEX nodes; "
        "tray gb200-tray02 is in no IMEX node (its addresses: 172.31.48.98 fd00::2)")


def test_imex_nodes_by_hostname_and_a_tray_without_one_is_not_checked(tmp_path):
    """The nodes listed by the trays' hostnames (as tests/test_rack_evidence.py lists them); tray 05's nvml.json
    without its hostname: its node may be that tray."""
    rack = addressed_rack(tmp_path)
    text = IMEX_18.read_text()
    for number, address in enumerate(parse_imex_status(text)["nodes"]):
        text = text.replace(f" - {address['address']} ", f" - {TRAYS[number]} ")
    record = json.loads((rack / "gb200-tray05" / "nvml.json").read_text())
    assert _imex(judge_rack(read_trays(rack), imex=parse_imex_status(text)))["reason"] == (
        "IMEX domain UP: 18 nodes READY, every pair connected, each node one tray (18 by hostname)")
    del record["hostname"]
    (rack / "gb200-tray05" / "nvml.json").write_text(json.dumps(record))
    assert _imex(judge_rack(read_trays(rack), imex=parse_imex_status(text))) == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #4 (gb200-tray05) matched to no tray: not checked for tray gb200-tray05: its evidence "
                  "names no host"}
