"""Issue 43's last detections in `gpufabric health`'s passive tier: NVSwitch SXid errors in the kernel log
(nodehealth/sxid_lines.py, sxid.py, sxid_catalog.py) and the GPUDirect RDMA peer-memory module (peer_memory.py).

The SXid lines are real ones (tests/data/captures/public/sxid/, SOURCE.md says whose): each is turned into the
/dev/kmsg record the kernel hands the reader ("PRIO,SEQ,USEC,FLAGS;MESSAGE", its time since boot from the line's
own timestamp) and read by the live reader's own parser, then planted into a copy of h100-x2-health's health.json
(a live read of an NVSwitch H100 pair, its kernel log read and empty). The peer-memory cases are the same bundle's
recorded platform (its /proc/modules lists no peer-memory module) and copies of its platform/ tree.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from test_nodehealth_metrics import series

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output
from pytest_gpufabric.nodehealth.command import live_peer_memory
from pytest_gpufabric.nodehealth.record import parse_kmsg_record, parse_kmsg_sxid

DATA = Path(__file__).parent / "data"
CAPTURES = DATA / "captures" / "public" / "sxid"
THREE_SWITCHES = CAPTURES / "dmesg-hgx-sxid-20034-fatal-three-switches-after-xid79-gpud-readme.txt"
LINK30 = CAPTURES / "dmesg-sxid-20034-fatal-link30-redhat-6619941-via-gpud-test.txt"
NON_FATAL = CAPTURES / "dmesg-h100-tdx-sxid-22013-non-fatal-nvtrust-124-excerpt.txt"
ISO_12028 = CAPTURES / "dmesg-iso-sxid-12028-data-gpud-pr-338-excerpt.txt"
PLATFORM_PASTES = DATA / "captures" / "public" / "platform"
H100X2 = DATA / "bundles" / "h100-x2-health"
H100X2_PROFILE = DATA / "results" / "health-h100-x2" / "machine.yaml"
RECORDED = datetime.fromisoformat(json.loads((H100X2 / "health.json").read_text())["recorded_at"]).timestamp()
HEALTHY = "gpufabric: HEALTHY 2 GPUs, profile machine"
LINK30_DRAIN = ("gpufabric: DRAIN node SXid 20034 LTSSM Fault Up on nvidia-nvswitch0 (PCI 0000:a9:00.0); remedy: "
                "reset or reboot")
PEERMEM_DRAIN = ("gpufabric: DRAIN node GPUDirect RDMA module nvidia_peermem not loaded; remedy: software or "
                 "configuration")


@pytest.fixture(autouse=True)
def node(tmp_path, monkeypatch):
    """A node: its state folder and boot id file in tmp_path, no health settings from the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))
    (tmp_path / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0001\n")
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(tmp_path / "boot_id"))
    return tmp_path


def kmsg_records(path: Path, uptime_after_last_s: float = 30.0) -> tuple[list[str], float]:
    """The capture's lines as /dev/kmsg records, and the uptime the reader would see ``uptime_after_last_s`` after
    the last line. A line without a [seconds] stamp (dmesg's ISO form) is taken as logged at 0 s."""
    records, stamps = [], []
    for n, line in enumerate(path.read_text().splitlines()):
        stamp = re.match(r"\[\s*(\d+\.\d+)\] (.*)", line)
        seconds, message = (float(stamp[1]), stamp[2]) if stamp else (0.0, line.split("+00:00 ", 1)[-1])
        stamps.append(seconds)
        records.append(f"3,{n},{round(seconds * 1e6)},-;{message}\n SUBSYSTEM=pci\n")
    return records, max(stamps) + uptime_after_last_s


def kernel_log(*paths: Path, uptime_after_last_s: float = 30.0) -> dict:
    """What read_kernel_xids records of a kernel buffer holding the captures' lines (the live parsers, per record)."""
    log = {"source": "/dev/kmsg", "error": None, "xids": [], "sxids": []}
    for path in paths:
        records, uptime = kmsg_records(path, uptime_after_last_s)
        log["xids"] += [x for x in (parse_kmsg_record(r, uptime) for r in records) if x]
        log["sxids"] += [s for s in (parse_kmsg_sxid(r, uptime) for r in records) if s]
    return log


def planted(node: Path, log: dict | None, *, platform=None) -> Path:
    """A copy of h100-x2-health with ``log`` as its kernel log (None: as recorded) and ``platform(copy)`` applied."""
    copy = node / f"bundle-{len(list(node.glob('bundle-*')))}"
    shutil.copytree(H100X2, copy)
    if log is not None:
        data = json.loads((copy / "health.json").read_text())
        data["kernel_log"] = log
        (copy / "health.json").write_text(json.dumps(data))
    if platform is not None:
        platform(copy)
    return copy


def check(capsys, node: Path, bundle: Path, *extra: str, at: float = 0.0, profile: Path = H100X2_PROFILE) \
        -> tuple[int, list[str]]:
    rc = main(["health", "--profile", str(profile), "--replay", str(bundle), "--state-dir", str(node / "state"),
               "--now", str(RECORDED + at), *extra])
    out = capsys.readouterr().out.splitlines()
    assert out and len(out[0]) <= output.MAX_LINE and out[0].isascii()
    return rc, out


def document(capsys, node: Path, bundle: Path, *extra: str, at: float = 0.0) -> dict:
    rc, _ = check(capsys, node, bundle, "--json", str(node / "result.json"), *extra, at=at)
    result = json.loads((node / "result.json").read_text())
    output.validate_result(result)
    assert result["exit_code"] == rc
    return result


def state(node: Path) -> dict:
    return json.loads((node / "state" / "health-state.json").read_text())


# ---------------------------------------------------------------------------------------------------------------
# the reader


def test_each_real_sxid_line_gives_its_switch_address_code_and_age():
    records, uptime = kmsg_records(LINK30)
    assert [parse_kmsg_sxid(r, uptime) for r in records] == [
        {"switch": "nvidia-nvswitch0", "pci": "0000:a9:00.0", "sxid": 20034, "age_s": 30.0, "text": text}
        for text in [line.split("] ", 1)[1] for line in LINK30.read_text().splitlines()]]  # 15 and 4 us apart
    # the capture with an Xid 79 before the SXids: each parser takes its own lines only
    log = kernel_log(THREE_SWITCHES)
    assert [(x["pci"], x["xid"]) for x in log["xids"]] == [("0000:91:00", 79)]
    assert [(s["switch"], s["pci"], s["sxid"]) for s in log["sxids"]] == [
        ("nvidia-nvswitch1", "0000:06:00.0", 20034), ("nvidia-nvswitch0", "0000:05:00.0", 20034),
        ("nvidia-nvswitch2", "0000:07:00.0", 20034), ("nvidia-nvswitch0", "0000:05:00.0", 20034),
        ("nvidia-nvswitch2", "0000:07:00.0", 20034), ("nvidia-nvswitch0", "0000:05:00.0", 20034),
        ("nvidia-nvswitch2", "0000:07:00.0", 20034), ("nvidia-nvswitch0", "0000:05:00.0", 20034)]
    assert parse_kmsg_sxid("6,7,1000,-;nvidia-nvswitch0: Probing device 0000:05:00.0", 2.0) is None


def test_an_sxid_entry_that_is_not_one_is_could_not_tell(capsys, node):
    log = kernel_log(LINK30)
    log["sxids"][0]["pci"] = "a9"
    rc, out = check(capsys, node, planted(node, log))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node health.json not readable; remedy: rerun")
    assert any("kernel_log.sxids[0].pci" in line for line in out)


# ---------------------------------------------------------------------------------------------------------------
# the judgement


def test_a_fatal_sxid_drains_naming_the_switch_and_its_address(capsys, node):
    bundle = planted(node, kernel_log(LINK30))
    rc, out = check(capsys, node, bundle, "--reason")
    assert (rc, out[1]) == (1, LINK30_DRAIN)
    assert out[0] == "gpufabric node sxid: SXid 20034 LTSSM Fault Up on nvidia-nvswitch0 (PCI 0000:a9:00.0); reset"
    (finding,) = [f for f in document(capsys, node, bundle)["findings"] if f["check"] == "sxid"]
    assert (finding["severity"], finding["remedy"], finding["gpu"]) == ("drain", "reset or reboot", None)
    assert {k: finding["evidence"][k] for k in ("sxid", "switch", "pci", "count", "events", "age_s", "nvidia_class",
                                                "fatal_by")} == {
        "sxid": 20034, "switch": "nvidia-nvswitch0", "pci": "0000:a9:00.0", "count": 3, "events": 1, "age_s": 30.0,
        "nvidia_class": "fatal", "fatal_by": "catalogue"}


def test_three_switches_drain_each_by_its_address(capsys, node):
    """The HGX capture: SXid 20034 on three switches, nvidia-nvswitch0 twice (Links 63 and 62)."""
    result = document(capsys, node, planted(node, {**kernel_log(THREE_SWITCHES), "xids": []}))
    assert result["line"] == ("gpufabric: DRAIN node SXid 20034 LTSSM Fault Up x2 on nvidia-nvswitch0 (PCI "
                              "0000:05:00.0) (+2 more); remedy: reset or reboot")
    assert [(f["what"], f["evidence"]["count"]) for f in result["findings"] if f["check"] == "sxid"] == [
        ("SXid 20034 LTSSM Fault Up x2 on nvidia-nvswitch0 (PCI 0000:05:00.0)", 4),
        ("SXid 20034 LTSSM Fault Up on nvidia-nvswitch1 (PCI 0000:06:00.0)", 1),
        ("SXid 20034 LTSSM Fault Up on nvidia-nvswitch2 (PCI 0000:07:00.0)", 3)]
    assert sorted(d["key"] for d in state(node)["drains"]) == [
        "sxid:20034@0000:05:00.0", "sxid:20034@0000:06:00.0", "sxid:20034@0000:07:00.0"]


def test_a_non_fatal_sxid_is_a_warning(capsys, node):
    bundle = planted(node, kernel_log(NON_FATAL))
    rc, out = check(capsys, node, bundle)
    assert (rc, out[0]) == (0, HEALTHY + " (1 warning)")
    (finding,) = document(capsys, node, bundle)["findings"]
    assert (finding["check"], finding["severity"], finding["what"], finding["remedy"]) == (
        "sxid", "warn", "SXid 22013 Minion Link DLREQ interrupt on nvidia-nvswitch3 (PCI 0000:04:00.0)", None)
    assert (finding["evidence"]["nvidia_class"], finding["evidence"]["fatal_by"]) == ("non-fatal", None)
    assert finding["detail"] == (
        "non-fatal in NVIDIA's Fabric Manager guide, logged Non-fatal: shown, the node keeps working; logged 30 s "
        "before the check: nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ "
        "interrupt")
    assert state(node)["drains"] == []


def test_a_code_outside_the_catalogue_is_judged_by_the_drivers_word(capsys, node, tmp_path):
    """Copies of the real lines with their code changed to one NVIDIA's catalogue lacks: logged Fatal drains, logged
    Non-fatal is shown."""
    fatal, non_fatal = tmp_path / "fatal.txt", tmp_path / "non-fatal.txt"
    fatal.write_text(LINK30.read_text().replace("): 20034, ", "): 29999, "))
    non_fatal.write_text(NON_FATAL.read_text().replace("): 22013, ", "): 29998, "))
    result = document(capsys, node, planted(node, kernel_log(fatal)))
    assert result["line"] == ("gpufabric: DRAIN node SXid 29999 on nvidia-nvswitch0 (PCI 0000:a9:00.0); remedy: "
                              "reset or reboot")
    assert result["findings"][0]["evidence"]["fatal_by"] == "line"
    result = document(capsys, node, planted(node, kernel_log(non_fatal)), "--state-dir", str(node / "other"))
    (finding,) = result["findings"]
    assert (result["line"], finding["severity"]) == (HEALTHY + " (1 warning)", "warn")
    assert finding["detail"].startswith("not in NVIDIA's SXid catalogue, logged Non-fatal: shown")


@pytest.mark.parametrize("code, words, line", [
    (10007, "IO failure", "gpufabric: DRAIN node SXid 10007 Host_IO_failure on nvidia-nvswitch0 (PCI 0000:a9:00.0); "
                          "remedy: reset or reboot"),
    (10006, "NVSWITCH Temperature 105C | OVERT Threshold 105C",
     "gpufabric: DRAIN node SXid 10006 Host_thermal_shutdown on nvidia-nvswitch0 (PCI 0000:a9:00.0); remedy: reset "
     "or reboot"),
    (29999, "Link 30 LTSSM Fault Up", "gpufabric: DRAIN node SXid 29999 on nvidia-nvswitch0 (PCI 0000:a9:00.0); "
                                      "remedy: reset or reboot")])
def test_an_uncatalogued_sxid_without_a_severity_word_drains(capsys, node, tmp_path, code, words, line):
    """The real link-30 lines with the code and words the driver prints for its host errors (nvswitch.c: "IO
    failure" when the switch's BAR reads 0xBADF; the OVERT thermal shutdown), which carry no Fatal/Non-fatal word:
    not in the guide's catalogue and not logged Non-fatal is fatal, never a warning."""
    capture = tmp_path / f"sxid-{code}.txt"
    capture.write_text(LINK30.read_text().replace("): 20034, Fatal, Link 30 LTSSM Fault Up", f"): {code}, {words}")
                       .replace("): 20034, ", f"): {code}, "))
    result = document(capsys, node, planted(node, kernel_log(capture)))
    assert (result["exit_code"], result["line"]) == (1, line)
    (finding,) = result["findings"]
    assert (finding["severity"], finding["remedy"], finding["evidence"]["fatal_by"],
            finding["evidence"]["nvidia_class"]) == ("drain", "reset or reboot", "unclassed", None)
    assert finding["detail"].startswith("not in NVIDIA's SXid catalogue and not logged Non-fatal")
    assert [d["key"] for d in state(node)["drains"]] == [f"sxid:{code}@0000:a9:00.0"]


def test_a_non_fatal_sxid_whose_recovery_restarts_drains(capsys, node):
    """12028 (egress non-posted PRIV error): non-fatal in NVIDIA's guide, its recovery a restart: drained."""
    rc, out = check(capsys, node, planted(node, kernel_log(ISO_12028)))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN node SXid 12028 egress nonposted PRIV error on nvidia-nvswitch1 "
                               "(PCI 0000:84:00.0); remedy: reset or reboot")


def test_a_fatal_sxid_is_held_until_a_reboot(capsys, node):
    """Aged out of the hour's window on the same boot: held; a new boot id with a clean kernel log lifts it."""
    bundle = planted(node, kernel_log(LINK30))
    assert check(capsys, node, bundle)[:1] == (1,)
    rc, out = check(capsys, node, bundle, at=3569)  # 3599 s old: still judged
    assert (rc, out[0]) == (1, LINK30_DRAIN)
    rc, out = check(capsys, node, bundle, at=3700)  # out of the window, no reboot since
    assert (rc, out[0]) == (1, LINK30_DRAIN)
    text = "\n".join(out)
    assert "3 SXid line(s) older than 3600 s in the kernel log, not judged" in text
    assert "held: no reset or reboot since it was seen (boot id unchanged)" in text
    (entry,) = state(node)["drains"]
    assert {k: entry[k] for k in ("key", "check", "sxid", "switch", "pci", "remedy")} == {
        "key": "sxid:20034@0000:a9:00.0", "check": "sxid", "sxid": 20034, "switch": "nvidia-nvswitch0",
        "pci": "0000:a9:00.0", "remedy": "reset or reboot"}
    (node / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0002\n")
    rc, out = check(capsys, node, planted(node, {"source": "/dev/kmsg", "error": None, "xids": [], "sxids": []}),
                    at=4000)
    assert (rc, out[0]) == (0, HEALTHY)
    assert state(node)["drains"] == []


def test_an_unreadable_kernel_log_keeps_a_held_sxid_drain(capsys, node):
    assert check(capsys, node, planted(node, kernel_log(LINK30)))[0] == 1
    (node / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0002\n")
    unread = {"source": "/dev/kmsg", "error": "/dev/kmsg: Operation not permitted", "xids": []}
    rc, out = check(capsys, node, planted(node, unread), at=600)
    assert (rc, out[0]) == (1, LINK30_DRAIN)
    assert "held: sxid could not be read" in "\n".join(out)


def test_lines_logged_before_an_operators_clear_are_not_judged_again(capsys, node):
    bundle = planted(node, kernel_log(LINK30))
    assert check(capsys, node, bundle)[0] == 1
    assert main(["health", "--clear", "sxid", "--by", "alice", "--state-dir", str(node / "state"),
                 "--now", str(RECORDED + 60)]) == 0
    assert capsys.readouterr().out.splitlines() == ["gpufabric: cleared sxid:20034@0000:a9:00.0 by alice"]
    rc, out = check(capsys, node, bundle, at=120)
    assert (rc, out[0]) == (0, HEALTHY)
    assert ("  note: sxid:20034@0000:a9:00.0: its newest line was logged before alice cleared it "
            f"({datetime.fromtimestamp(RECORDED + 60, timezone.utc).isoformat(timespec='seconds')}): "
            "not judged again") in out


def test_a_record_written_before_sxids_were_read_says_so(capsys, node):
    rc, out = check(capsys, node, H100X2)
    assert (rc, out[0]) == (0, HEALTHY)
    assert f"  note: NVSwitch SXid events not checked: {H100X2 / 'health.json'} records no SXid lines (written " \
           "before they were read)" in out


def test_the_sxid_series_is_written_every_run(capsys, node):
    prom = node / "prom"
    prom.mkdir()
    for log, want in ((kernel_log(NON_FATAL), "0"), (kernel_log(LINK30), "1"),
                      ({"source": "/dev/kmsg", "error": "/dev/kmsg: Operation not permitted", "xids": []}, "1")):
        check(capsys, node, planted(node, log), "--prom", str(prom))
        found = series(prom / "gpufabric-health-passive.prom")
        assert found['gpufabric_health_node_check_status{tier="passive",check="nvswitch-sxid"}'] == want
    # a kernel log not read, nothing held: could not tell
    check(capsys, node, planted(node, {"source": "/dev/kmsg", "error": "/dev/kmsg: Operation not permitted",
                                       "xids": []}), "--prom", str(prom), "--state-dir", str(node / "fresh"))
    found = series(prom / "gpufabric-health-passive.prom")
    assert found['gpufabric_health_node_check_status{tier="passive",check="nvswitch-sxid"}'] == "2"


# ---------------------------------------------------------------------------------------------------------------
# the peer-memory module


def rdma_profile(node: Path) -> Path:
    """The h100-x2 profile promising the RDMA port a100-pcie-roce recorded (irdma0 port 1, RoCE): the h100-x2
    bundle records no RDMA port (that check could not tell) unless a copy gets that capture (with_rdma_port)."""
    profile = node / "machine-rdma.yaml"
    profile.write_text(H100X2_PROFILE.read_text() + "rdma:\n  devices:\n    - {name: irdma0, port: 1}\n")
    return profile


def with_rdma_port(copy: Path) -> None:
    """The copy's RDMA ports as a real node recorded them (a100-pcie-roce's ibv_devinfo -v: irdma0 port 1 ACTIVE),
    so only the peer-memory module decides."""
    shutil.copy(DATA / "bundles" / "a100-pcie-roce" / "ibv_devinfo-v.txt", copy / "ibv_devinfo-v.txt")


def platform_tree(copy: Path) -> Path:
    """The copy judged from its platform/ tree (the recorded /proc/modules among it), not its platform.json."""
    (copy / "platform.json").unlink()
    return copy / "platform"


def test_peer_memory_not_loaded_drains_where_rdma_is_promised(capsys, node):
    rc, out = check(capsys, node, H100X2, profile=rdma_profile(node))
    assert (rc, out[0]) == (1, PEERMEM_DRAIN)
    assert any("neither nvidia_peermem nor nv_peer_mem in /proc/modules" in line and "modprobe nvidia_peermem" in line
               for line in out)
    # without an RDMA promise it is not judged
    assert check(capsys, node, H100X2)[1][0] == HEALTHY


def test_peer_memory_loaded_is_healthy(capsys, node):
    def loaded(copy: Path) -> None:
        with_rdma_port(copy)
        module = platform_tree(copy) / "sys" / "module" / "nvidia_peermem"
        module.mkdir(parents=True)
        (module / "version").write_text("580.159.04\n")  # planted: the module ships with the bundle's driver

    rc, out = check(capsys, node, planted(node, None, platform=loaded), profile=rdma_profile(node))
    assert (rc, out[0]) == (0, HEALTHY)


@pytest.mark.parametrize(("paste", "rc", "line"), [
    ("lsmod-nvidia-peermem-loaded-gpud-pr-39-excerpt.txt", 0, HEALTHY),
    ("lsmod-grep-a100-8x-ib-no-peer-memory-nccl-988-excerpt.txt", 1, PEERMEM_DRAIN)])
def test_peer_memory_from_a_pasted_module_list(capsys, node, paste, rc, line):
    """A bundle whose platform is a customer's lsmod.txt (real pastes: the module loaded; two greps that printed
    nothing)."""
    def pasted(copy: Path) -> None:
        with_rdma_port(copy)
        platform_tree(copy)
        shutil.rmtree(copy / "platform")
        shutil.copy(PLATFORM_PASTES / paste, copy / "lsmod.txt")

    found_rc, out = check(capsys, node, planted(node, None, platform=pasted), profile=rdma_profile(node))
    assert (found_rc, out[0]) == (rc, line)


def test_peer_memory_that_cannot_be_read_is_unknown(capsys, node):
    def unreadable(copy: Path) -> None:
        with_rdma_port(copy)
        tree = platform_tree(copy)
        (tree / "proc" / "modules").unlink()
        shutil.rmtree(tree / "sys")

    rc, out = check(capsys, node, planted(node, None, platform=unreadable), profile=rdma_profile(node))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node peer-memory module not readable; remedy: software or "
                               "configuration")


def test_a_replay_without_the_platform_or_rdma_record_is_could_not_tell(capsys, node):
    """RDMA promised, the bundle's platform record (platform.json, platform/) removed and no RDMA port recorded:
    neither the peer-memory module nor the ports can be shown, so could not tell (exit 6), never a note under
    HEALTHY; with the ports recorded, the module alone."""
    def no_platform(copy: Path) -> None:
        platform_tree(copy)
        shutil.rmtree(copy / "platform")

    result = document(capsys, node, planted(node, None, platform=no_platform), "--profile", str(rdma_profile(node)))
    assert (result["exit_code"], result["line"]) == (6, "gpufabric: UNKNOWN node RDMA ports not recorded (+1 more); "
                                                        "remedy: rerun")
    assert sorted((f["check"], f["severity"], f["what"], f["remedy"]) for f in result["findings"]) == [
        ("ib-port", "unknown", "RDMA ports not recorded", "rerun"),
        ("peer-memory", "unknown", "peer-memory module not recorded", "rerun")]
    result = document(capsys, node, planted(node, None, platform=lambda c: (no_platform(c), with_rdma_port(c))),
                      "--profile", str(rdma_profile(node)), "--state-dir", str(node / "other"))
    assert (result["exit_code"], result["line"]) == (6, "gpufabric: UNKNOWN node peer-memory module not recorded; "
                                                        "remedy: rerun")


def test_the_live_reader_reads_below_its_root(tmp_path):
    modules = (H100X2 / "platform" / "proc" / "modules").read_text()
    (tmp_path / "empty").mkdir()
    assert live_peer_memory(str(tmp_path / "empty")) == ((None, ""), f"{tmp_path / 'empty'}: /proc/modules, "
                                                                     "/sys/module")
    absent = tmp_path / "absent"
    (absent / "proc").mkdir(parents=True)
    (absent / "proc" / "modules").write_text(modules)
    (absent / "sys" / "module" / "nvidia").mkdir(parents=True)
    (loaded, why), _ = live_peer_memory(str(absent))
    assert (loaded, why.startswith("neither nvidia_peermem nor nv_peer_mem in /proc/modules")) == (False, True)
    (absent / "sys" / "module" / "nvidia_peermem").mkdir()
    assert live_peer_memory(str(absent))[0][0] is True


def test_the_peer_memory_series_is_written(capsys, node):
    prom = node / "prom"
    prom.mkdir()
    check(capsys, node, H100X2, "--prom", str(prom), profile=rdma_profile(node))
    found = series(prom / "gpufabric-health-passive.prom")
    assert found['gpufabric_health_node_check_status{tier="passive",check="peer-memory"}'] == "1"
