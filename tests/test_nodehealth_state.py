"""The node's health state (nodehealth/state.py): drains remembered between runs of `gpufabric health`.

Each run replays a copy of a shipped bundle (faults planted as tests/test_nodehealth.py plants them) against a state
folder in tmp_path; the clock is `--now` (a replayed record's Xid lines age with it) and the boot id a file the test
writes (GPUFABRIC_BOOT_ID_FILE), so an Xid ages out and a reboot happens within the test.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from test_nodehealth import BUNDLES, CPU_PROFILE, DATA, X2, X4, XID_79, gpu, planted
from test_nodehealth_metrics import series

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output
from pytest_gpufabric.nodehealth.finding import DRAIN, Finding
from pytest_gpufabric.nodehealth.state import (
    BOOT_ID_ENV,
    BOOT_ID_FILE,
    HealthState,
    boot_id,
    ignored_boot_id_override,
    reconcile,
)
from pytest_gpufabric.remedy_classes import RESEAT, SOFTWARE

RECORDED_X4 = datetime.fromisoformat(json.loads((X4 / "health.json").read_text())["recorded_at"]).timestamp()
ROWS_PENDING = "gpufabric: DRAIN GPU1 (serial 1653824128984) rows pending remapping; remedy: reset or reboot"
XID_LINE = "gpufabric: DRAIN GPU1 (serial 1653824128984) Xid 79 fell off the bus; remedy: reset or reboot"
HEALTHY_X4 = "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4"
#: 2x H100 recorded by the live reader as root (its kernel log read), and the profile written from it
H100X2 = BUNDLES / "h100-x2-health"
H100X2_PROFILE = DATA / "results" / "health-h100-x2" / "machine.yaml"
RECORDED_H100X2 = datetime.fromisoformat(json.loads((H100X2 / "health.json").read_text())["recorded_at"]).timestamp()
#: a real kernel line (NVIDIA/open-gpu-kernel-modules#1151), its PCI address edited to h100-x2-health's GPU0
XID_79_H100 = "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus."
XID_LINE_H100 = "gpufabric: DRAIN GPU0 (serial 1652024011167) Xid 79 fell off the bus; remedy: reset or reboot"
#: what the reader records of /dev/kmsg read as nobody (tests/data/results/health-h100-x2/passive-nobody.out)
NO_KMSG = {"source": "/dev/kmsg", "error": "/dev/kmsg: Operation not permitted", "xids": []}


@pytest.fixture(autouse=True)
def node(tmp_path, monkeypatch):
    """A node: its state folder and its boot id file (tmp_path), no health settings from the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))
    boot = tmp_path / "boot_id"
    boot.write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0001\n")
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(boot))
    return tmp_path


def reboot(node: Path, n: int = 2) -> None:
    (node / "boot_id").write_text(f"5e0d7a64-0c4f-4d43-9a57-1b1c1f5e000{n}\n")


def check(capsys, node: Path, bundle: Path, *extra: str, at: float = 0.0, profile: str = "h200-nvswitch-x4") \
        -> tuple[int, list[str]]:
    rc = main(["health", "--profile", profile, "--replay", str(bundle), "--state-dir", str(node / "state"),
               "--now", str(RECORDED_X4 + at), *extra])
    return rc, capsys.readouterr().out.splitlines()


def state(node: Path) -> dict:
    return json.loads((node / "state" / "health-state.json").read_text())


def with_xid(age_s: float = 30.0):
    return lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
        {"pci": "0000:00:07", "xid": 79, "age_s": age_s, "text": XID_79}]})


def test_a_drain_is_recorded_with_its_tier_board_boot_and_first_seen(capsys, node):
    faulty = planted(node, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))
    assert check(capsys, node, faulty, at=10)[0] == 1
    assert check(capsys, node, faulty, at=310)[0] == 1
    (entry,) = state(node)["drains"]
    assert entry == {"key": "remapped-rows-pending@1653824128984", "check": "remapped-rows-pending",
                     "tier": "passive", "gpu": 1, "serial": "1653824128984", "what": "rows pending remapping",
                     "remedy": "reset or reboot", "boot_id": "5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0001",
                     "first_seen": "2026-11-22T17:57:39+00:00", "first_seen_s": RECORDED_X4 + 10,
                     "last_seen": "2026-11-22T18:02:39+00:00"}
    assert [p.name for p in (node / "state").iterdir() if p.name.endswith(".tmp")] == []  # written by rename


def test_a_reset_fault_gone_without_a_reboot_stays_drained(capsys, node):
    """The counter reads clean again (another reader, a bad replay): no reboot since, so the drain is held; after a
    new boot id the same tier seeing it gone lifts it."""
    faulty = planted(node, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))
    assert check(capsys, node, faulty)[0] == 1
    rc, out = check(capsys, node, X4, at=300)
    assert (rc, out[0]) == (1, ROWS_PENDING)
    assert "held: no reset or reboot since it was seen (boot id unchanged)" in "\n".join(out)
    reboot(node)
    assert check(capsys, node, X4, at=600)[:1] == (0,)
    assert state(node)["drains"] == []


def test_a_reseat_fault_stays_drained_until_a_reboot(capsys, node):
    """A narrow PCIe link reads x16 again on the same boot (a reseat takes the node down, so this is not one): held
    until a new boot id."""
    narrow = planted(node, lambda d: gpu(d, 2).update(pcie_width_current=8))
    narrow_line = ("gpufabric: DRAIN GPU2 (serial 1653724066364) PCIe x8, the profile promises x16; "
                   "remedy: reseat or recable")
    rc, out = check(capsys, node, narrow)
    assert (rc, out[0]) == (1, narrow_line)
    rc, out = check(capsys, node, X4, at=300)
    assert (rc, out[0]) == (1, narrow_line)
    assert "held: no reset or reboot since it was seen (boot id unchanged)" in "\n".join(out)
    reboot(node)
    rc, out = check(capsys, node, X4, at=600)
    assert (rc, out[0]) == (0, HEALTHY_X4)
    assert "  note: pcie-width@1653724066364: drained since 2026-11-22T17:57:29+00:00, now gone: lifted" in out


def test_an_xid_that_ages_out_stays_drained_until_a_reboot(capsys, node):
    bundle = planted(node, with_xid(30.0))
    assert check(capsys, node, bundle)[1][0] == XID_LINE
    assert check(capsys, node, bundle, at=3569)[1][0] == XID_LINE  # 3599 s old: still in the window
    rc, out = check(capsys, node, bundle, at=3670)  # 3700 s old: out of the window, no reset since
    assert (rc, out[0]) == (1, XID_LINE)
    assert "1 Xid line(s) older than 3600 s in the kernel log, not judged" in "\n".join(out)
    reboot(node)
    rc, out = check(capsys, node, X4, at=3970)  # a new boot: the kernel log starts empty
    assert (rc, out[0]) == (0, HEALTHY_X4)
    assert state(node)["drains"] == []


def test_a_boot_id_source_that_changes_between_reads_shows_no_reboot(capsys, node, monkeypatch):
    """GPUFABRIC_BOOT_ID_FILE naming /proc/sys/kernel/random/uuid (a new UUID at every read, one word away from
    boot_id): it shows no reboot, so an Xid drain that left the window stays held."""
    monkeypatch.setenv(BOOT_ID_ENV, "/proc/sys/kernel/random/uuid")
    bundle = planted(node, with_xid(30.0))
    assert check(capsys, node, bundle, at=10)[1][0] == XID_LINE
    rc, out = check(capsys, node, bundle, at=4000)
    assert (rc, out[0]) == (1, XID_LINE)
    assert "held: the boot id was not readable when it was seen: no reboot can be shown since" in "\n".join(out)
    assert state(node)["drains"][0]["boot_id"] is None


def test_only_a_replay_reads_the_boot_id_file_and_only_a_stable_uuid(tmp_path):
    kernel = Path(BOOT_ID_FILE).read_text(encoding="ascii").strip()
    planted_id = tmp_path / "boot_id"
    planted_id.write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0002\n")
    env = {BOOT_ID_ENV: str(planted_id)}
    assert boot_id(env) == kernel  # a live check: the kernel's, whatever the environment says
    assert ignored_boot_id_override(env) == (
        f"{BOOT_ID_ENV}={planted_id} ignored: a live check reads the kernel's boot id ({BOOT_ID_FILE}); the "
        "variable is for replays (tests)")
    assert boot_id(env, replay=True) == "5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0002"
    assert ignored_boot_id_override(env, replay=True) is None
    planted_id.write_text("rebooted\n")  # not a UUID
    assert boot_id(env, replay=True) is None
    assert boot_id({BOOT_ID_ENV: "/proc/sys/kernel/random/uuid"}, replay=True) is None


def test_a_clear_dated_after_the_checks_clock_hides_no_new_xid(capsys, node):
    """The clock stepped back a day after alice's clear: a new Xid (5 s old by that clock) is judged, not taken for
    one logged before the clear."""
    assert check(capsys, node, planted(node, with_xid(30.0)), at=10)[0] == 1
    assert main(["health", "--clear", "xid", "--by", "alice", "--state-dir", str(node / "state"),
                 "--now", str(RECORDED_X4 + 20)]) == 0
    capsys.readouterr()
    stepped_back = datetime.fromtimestamp(RECORDED_X4 - 86000, timezone.utc).isoformat(timespec="seconds")
    new = planted(node, lambda d: (with_xid(5.0)(d), d.update(recorded_at=stepped_back)))
    rc, out = check(capsys, node, new, at=-86000)
    assert (rc, out[0]) == (1, XID_LINE)
    assert not any("cleared it" in line for line in out)


def test_a_clear_covers_no_line_of_a_later_boot(capsys, node):
    """After a reboot the kernel log holds only lines logged since: a line that a wrong clock dates before alice's
    clear is judged."""
    bundle = planted(node, with_xid(30.0))
    assert check(capsys, node, bundle)[0] == 1
    assert main(["health", "--clear", "xid", "--by", "alice", "--state-dir", str(node / "state"),
                 "--now", str(RECORDED_X4 + 60)]) == 0
    capsys.readouterr()
    assert check(capsys, node, bundle, at=100)[:1] == (0,)  # the same boot: the line predates the clear
    reboot(node)
    rc, out = check(capsys, node, bundle, at=100)
    assert (rc, out[0]) == (1, XID_LINE)


def test_an_operators_clear_is_recorded_and_respected(capsys, node):
    bundle = planted(node, with_xid(30.0))
    assert check(capsys, node, bundle)[0] == 1
    assert main(["health", "--clear", "xid", "--by", "alice", "--state-dir", str(node / "state"),
                 "--now", str(RECORDED_X4 + 60)]) == 0
    assert capsys.readouterr().out == "gpufabric: cleared xid:79@1653824128984 by alice\n"
    (cleared,) = state(node)["cleared"]
    assert (cleared["key"], cleared["by"], cleared["at"]) == ("xid:79@1653824128984", "alice",
                                                              "2026-11-22T17:58:29+00:00")
    rc, out = check(capsys, node, bundle, at=120)  # the same line, logged before the clear: not judged again
    assert (rc, out[0]) == (0, HEALTHY_X4)
    assert ("  note: xid:79@1653824128984: its newest line was logged before alice cleared it "
            "(2026-11-22T17:58:29+00:00): not judged again") in out
    later = datetime.fromtimestamp(RECORDED_X4 + 895, timezone.utc).isoformat(timespec="seconds")
    again = planted(node, lambda d: (with_xid(5.0)(d), d.update(recorded_at=later)))  # an Xid after the clear
    assert check(capsys, node, again, at=900)[1][0] == XID_LINE


def test_clear_needs_who_and_a_held_drain(capsys, node):
    assert main(["health", "--clear", "xid", "--state-dir", str(node / "state")]) == 2
    assert "--clear needs --by NAME" in capsys.readouterr().err
    assert main(["health", "--clear", "xdi", "--by", "bob", "--state-dir", str(node / "state")]) == 2
    assert "--clear xdi: no held drain of that check (held: none)" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["{not json", json.dumps({"format": "other", "drains": []}),
                                    json.dumps({"format": "gpufabric-health-state/1", "drains": [{"key": 3}]})])
def test_a_state_file_that_is_not_one_is_unknown_never_reset(capsys, node, damage):
    (node / "state").mkdir()
    path = node / "state" / "health-state.json"
    path.write_text(damage)
    rc, out = check(capsys, node, X4)
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node health state not readable; remedy: software or configuration")
    assert str(path) in out[1]
    assert path.read_text() == damage
    assert main(["health", "--clear", "all", "--by", "bob", "--state-dir", str(node / "state")]) == 2
    assert "the health state cannot be read, nothing cleared" in capsys.readouterr().err
    assert path.read_text() == damage


def test_a_quick_tier_drain_stays_drained_across_passive_runs(capsys, node):
    """Wrong GEMM elements (the quick tier's planted fault, CPU stand-ins) drain; passive runs do not run the GEMM,
    so they keep the drain; a clean quick run after a reboot lifts it (rma: the board was replaced)."""
    (node / "cpu-health.yaml").write_text(CPU_PROFILE)
    profile = str(node / "cpu-health.yaml")
    rc, out = check(capsys, node, X2, "--quick", "--plant-fault", "1", profile=profile)
    assert rc == 1 and out[0].startswith("gpufabric: DRAIN GPU1 (serial 1653824016216) ")
    assert out[0].endswith(" wrong GEMM elements (+1 more); remedy: return to the vendor")
    drained = out[0]
    for at in (300, 600, 900):
        rc, out = check(capsys, node, X2, at=at, profile=profile)
        assert (rc, out[0]) == (1, drained)
        assert "held: a quick tier run verifies it (this was a passive run)" in "\n".join(out)
    assert {d["tier"] for d in state(node)["drains"]} == {"quick"}
    reboot(node)
    rc, out = check(capsys, node, X2, "--quick", at=1200, profile=profile)
    # a loaded CPU may run the stand-ins' GEMM below the floor: a warning each (shown, not judged)
    assert rc == 0 and out[0] in ("gpufabric: HEALTHY 2 GPUs, profile cpu-health",
                                  "gpufabric: HEALTHY 2 GPUs, profile cpu-health (2 warnings)")
    assert state(node)["drains"] == []


def test_the_state_shows_in_the_json(capsys, node):
    faulty = planted(node, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))
    check(capsys, node, faulty)
    main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(X4), "--state-dir", str(node / "state"),
          "--json"])
    document = json.loads(capsys.readouterr().out)
    output.validate_result(document)
    (held,) = document["findings"]
    assert held["evidence"]["held"] is True and held["evidence"]["tier"] == "passive"


def check_h100(capsys, node: Path, bundle: Path, *extra: str, at: float = 0.0, state_dir: str = "state") \
        -> tuple[int, list[str]]:
    rc = main(["health", "--profile", str(H100X2_PROFILE), "--replay", str(bundle), "--state-dir",
               str(node / state_dir), "--now", str(RECORDED_H100X2 + at), *extra])
    return rc, capsys.readouterr().out.splitlines()


def h100_xid(age_s: float = 30.0):
    return lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
        {"pci": "0000:00:06", "xid": 79, "age_s": age_s, "text": XID_79_H100}]})


def test_every_xid_drain_and_every_hands_on_remedy_waits_for_a_reboot(node):
    """An Xid whose remedy is a reseat (54: CHECK_MECHANICALS) or software (78: UPDATE_SWFW) that leaves the window
    is held until a new boot id; a software fault of another check (the driver) is lifted when seen gone."""
    drains = [Finding("xid", DRAIN, "Xid 54", 0, "1652024011167", RESEAT, {"xid": 54}),
              Finding("xid", DRAIN, "Xid 78", 1, "1651224020708", SOFTWARE, {"xid": 78}),
              Finding("driver", DRAIN, "driver 570, profile wants 580", None, None, SOFTWARE)]
    held = HealthState(node / "health-state.json")
    reconcile(held, drains, tier="passive", node_read=True, now=0.0, boot="boot-1")
    kept, notes = reconcile(held, [], tier="passive", node_read=True, now=7200.0, boot="boot-1")
    assert sorted(f.evidence["key"] for f in kept) == ["xid:54@1652024011167", "xid:78@1651224020708"]
    assert {f.evidence["kept_because"] for f in kept} == {"no reset or reboot since it was seen (boot id unchanged)"}
    assert notes == ["driver@node: drained since 1970-01-01T00:00:00+00:00, now gone: lifted"]
    kept, notes = reconcile(held, [], tier="passive", node_read=True, now=7300.0, boot="boot-2")
    assert kept == [] and len(notes) == 2 and held.drains == {}


def test_an_unreadable_kernel_log_is_could_not_tell(capsys, node):
    """The kernel log not read (not root): the Xid check could not tell: UNKNOWN, exit 6, its metric 2."""
    nolog = planted(node, lambda d: d.update(kernel_log=NO_KMSG), H100X2)
    rc, out = check_h100(capsys, node, nolog, "--prom", str(node / "h.prom"))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node kernel log not readable; remedy: software or configuration")
    assert ("  unknown: node: kernel log not readable [software or configuration]: Xid events not checked: the "
            "kernel log could not be read (/dev/kmsg: Operation not permitted); run the check as root "
            "(kernel.dmesg_restrict), with /dev/kmsg in a container") in out
    metrics = series(node / "h.prom")
    assert metrics['gpufabric_health_node_check_status{tier="passive",check="xid"}'] == "2"
    assert [v for k, v in metrics.items() if 'check="xid"' in k and "gpufabric_health_check_status" in k] \
        == ["2", "2"]


def test_an_unreadable_kernel_log_keeps_the_held_xid_drains(capsys, node):
    """Drained by an Xid 79; after a reboot the kernel log cannot be read: what would show the Xid gone was not read,
    so the drain is held; a readable, empty log on that boot lifts it."""
    assert check_h100(capsys, node, planted(node, h100_xid(30.0), H100X2))[1][0] == XID_LINE_H100
    reboot(node)
    rc, out = check_h100(capsys, node, planted(node, lambda d: d.update(kernel_log=NO_KMSG), H100X2), at=600)
    assert (rc, out[0]) == (1, XID_LINE_H100)
    assert "held: xid could not be read" in "\n".join(out)
    assert check_h100(capsys, node, H100X2, at=900)[0] == 0


def test_a_clear_never_reaches_past_the_real_clock(capsys, node):
    """--clear --now a year ahead: the clear is recorded at the real clock, so an Xid logged after it drains."""
    assert check_h100(capsys, node, planted(node, h100_xid(30.0), H100X2))[0] == 1
    real = time.time()
    assert main(["health", "--clear", "xid", "--by", "alice", "--state-dir", str(node / "state"),
                 "--now", str(real + 365 * 86400)]) == 0
    capsys.readouterr()
    (cleared,) = state(node)["cleared"]
    assert real <= cleared["at_s"] <= time.time()
    reboot(node)
    day2 = real + 86400
    fresh = planted(node, lambda d: (h100_xid(30.0)(d), d.update(
        recorded_at=datetime.fromtimestamp(day2, timezone.utc).isoformat(timespec="seconds"))), H100X2)
    rc = main(["health", "--profile", str(H100X2_PROFILE), "--replay", str(fresh), "--state-dir",
               str(node / "state"), "--now", str(day2)])
    assert (rc, capsys.readouterr().out.splitlines()[0]) == (1, XID_LINE_H100)


def test_a_drain_seen_under_an_unreadable_boot_id_is_lifted_only_by_a_clear(capsys, node, monkeypatch):
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(node / "no-boot-id"))
    faulty = planted(node, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))
    assert check(capsys, node, faulty)[0] == 1
    assert state(node)["drains"][0]["boot_id"] is None
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(node / "boot_id"))  # readable again: not shown to be a reboot
    rc, out = check(capsys, node, X4, at=300)
    assert (rc, out[0]) == (1, ROWS_PENDING)
    assert "held: the boot id was not readable when it was seen: no reboot can be shown since" in "\n".join(out)
    reboot(node)
    assert check(capsys, node, X4, at=600)[0] == 1
    assert main(["health", "--clear", "all", "--by", "bob", "--state-dir", str(node / "state")]) == 0
    capsys.readouterr()
    assert check(capsys, node, X4, at=900)[:1] == (0,)


@pytest.mark.parametrize("how", ["copied", "symlinked"])
def test_another_nodes_state_is_refused(capsys, node, how):
    """This node (2x H100) is drained; another node's healthy state (the x4's boards) put in its place is UNKNOWN
    naming the file, never the drain forgotten."""
    assert check_h100(capsys, node, planted(node, h100_xid(30.0), H100X2))[0] == 1
    assert check(capsys, node, X4, "--state-dir", str(node / "other"))[0] == 0  # the other node's own state
    path, other = node / "state" / "health-state.json", node / "other" / "health-state.json"
    path.unlink()
    if how == "copied":
        path.write_text(other.read_text())
    else:
        path.symlink_to(other)
    rc, out = check_h100(capsys, node, H100X2, at=300)
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node health state not readable; remedy: software or configuration")
    why = ("another node's state (boards 1653724034047, 1653724049829, 1653724066364, 1653824128984; this node's: "
           "1651224020708, 1652024011167)" if how == "copied" else f"a symlink (to {other})")
    assert f"{path}: {why}" in "\n".join(out)
    assert path.is_symlink() == (how == "symlinked")
