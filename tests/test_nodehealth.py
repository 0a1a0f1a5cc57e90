"""`gpufabric health` (issue 34) on recorded machines and planted copies of them.

The health records are the shipped bundles' health.json: DERIVED from the same bundle's nvml.json and
nvidia-smi-q.xml (tests/derive_health.py says how; test_derived_records_match_their_sources holds them to it).
Every fault is planted in a copy: one value of one GPU edited (remapped_rows.pending 1 on GPU1, a PCIe width of 8,
a NaN), and the first line, the exit status and the finding's evidence are asserted exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from derive_health import DERIVED_BUNDLES, derive, with_read_kernel_log

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output
from pytest_gpufabric.nodehealth.baseline import resolve_baseline
from pytest_gpufabric.nodehealth.finding import DRAIN, UNKNOWN
from pytest_gpufabric.nodehealth.record import load_health_file, parse_kmsg_record, read_kernel_xids

DATA = Path(__file__).parent / "data"
BUNDLES = DATA / "bundles"
#: the shipped DERIVED bundles, and copies of them that hold a kernel log as a live read recorded it (no Xid line):
#: a derived record alone is could not tell (its Xid check cannot be done), the copies are judged by every check
SHIPPED_X4, SHIPPED_X2 = BUNDLES / "h200-nvswitch-x4", BUNDLES / "h200-nvswitch-x2"
X4, X2 = with_read_kernel_log(SHIPPED_X4), with_read_kernel_log(SHIPPED_X2)
#: the live run of the machine the x4 bundle was recorded on (its serials); and a third x4 host's
X4_ACCEPTED = DATA / "results" / "h200-nvswitch-x4-measured-live-on-h200-x4.json"
OTHER_X4_ACCEPTED = DATA / "results" / "h200-nvswitch-x4-shipped-profile-live-on-h200-x4.json"
SERIALS = ["1653724049829", "1653824128984", "1653724066364", "1653724034047"]  # the x4 bundle's GPU0..3
#: a real kernel line (NVIDIA/open-gpu-kernel-modules#1151: "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the
#: bus."), its PCI address edited to the x4 bundle's GPU1 (00000000:00:07.0)
XID_79 = "NVRM: Xid (PCI:0000:00:07): 79, GPU has fallen off the bus."


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    """Run where no reports/gpufabric-results.json is, with no health settings from the environment and the node's
    state folder in tmp_path (a live check keeps its state there, never in the machine's /var/lib/gpufabric)."""
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED", "GPUFABRIC_BOOT_ID_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))


def planted(tmp_path: Path, edit, bundle: Path = X4) -> Path:
    """A copy of the bundle whose health.json ``edit(data)`` changed."""
    copy = tmp_path / f"planted-{len(list(tmp_path.glob('planted-*')))}"
    shutil.copytree(bundle, copy)
    data = json.loads((copy / "health.json").read_text(encoding="utf-8"))
    edit(data)
    (copy / "health.json").write_text(json.dumps(data), encoding="utf-8")
    return copy


def health(capsys, *args: str) -> tuple[int, list[str]]:
    rc = main(["health", *args])
    out = capsys.readouterr().out.splitlines()
    assert out and len(out[0]) <= output.MAX_LINE and out[0].isascii() and '"' not in out[0]
    return rc, out


def x4(capsys, bundle: Path, *extra: str) -> tuple[int, list[str]]:
    return health(capsys, "--profile", "h200-nvswitch-x4", "--replay", str(bundle), *extra)


def result_json(capsys, bundle: Path, *extra: str) -> dict:
    rc = main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle), "--json", *extra])
    document = json.loads(capsys.readouterr().out)
    output.validate_result(document)
    assert document["exit_code"] == rc
    return document


def gpu(data: dict, index: int) -> dict:
    return next(g for g in data["gpus"] if g["index"] == index)


# ---------------------------------------------------------------------------------------------------------------
# the recorded machines


@pytest.mark.parametrize("name", DERIVED_BUNDLES)
def test_derived_records_match_their_sources(name):
    """Each shipped health.json is what tests/derive_health.py makes of its bundle's own files, word for word."""
    assert json.loads((BUNDLES / name / "health.json").read_text()) == derive(BUNDLES / name)
    record = load_health_file(BUNDLES / name / "health.json")
    # the note a user of the shipped bundle reads names its sources, not a script of this repository
    assert record.derived.startswith("DERIVED from this bundle's nvml.json and nvidia-smi-q.xml") and \
        "tests/" not in record.derived
    assert all(not g.unreadable for g in record.gpus)


def test_the_derived_thresholds_are_what_nvml_answered_on_the_same_h100():
    """h100-x1-diagnostics' power hold read NVML's thresholds of its H100: 89 / 95 / 87 C; the T.Limit arithmetic
    gives the same from h100-x1's nvidia-smi -q (an H100 of the same model and driver)."""
    hold = json.loads((BUNDLES / "h100-x1-diagnostics" / "power-hold.json").read_text())
    thresholds = hold["gpus"][0]["thresholds_c"]
    derived = gpu(derive(BUNDLES / "h100-x1"), 0)
    assert (derived["slowdown_temperature_c"], derived["shutdown_temperature_c"], derived["gpu_max_temperature_c"]) \
        == (thresholds["slowdown"], thresholds["shutdown"], thresholds["gpu_max"]) == (89, 95, 87)


def test_recorded_machines_are_healthy(capsys, tmp_path):
    """The shipped DERIVED bundles, with a kernel log as a live read recorded it, are healthy."""
    assert x4(capsys, X4)[0:1] == (0,)
    assert x4(capsys, X4)[1][0] == "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4"
    rc, out = health(capsys, "--profile", "h200-nvswitch-x2", "--replay", str(X2))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 2 GPUs, profile h200-nvswitch-x2")
    # a profile written from the recorded H100 itself
    assert main(["profile", "init", "--replay", "h100-x1", "-o", str(tmp_path / "h100.yaml")]) == 0
    capsys.readouterr()
    rc, out = health(capsys, "--profile", str(tmp_path / "h100.yaml"), "--replay",
                     str(with_read_kernel_log(BUNDLES / "h100-x1")))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 1 GPUs, profile h100")


NOT_RECORDED = "gpufabric: UNKNOWN node kernel log not recorded; remedy: rerun"


@pytest.mark.parametrize("name", DERIVED_BUNDLES)
def test_a_derived_record_without_a_kernel_log_is_could_not_tell(capsys, tmp_path, name):
    """A shipped DERIVED bundle as it is: its Xid check cannot be done (no kernel log was recorded), so never
    healthy."""
    assert main(["profile", "init", "--replay", name, "-o", str(tmp_path / "machine.yaml")]) == 0
    capsys.readouterr()
    rc, out = health(capsys, "--profile", str(tmp_path / "machine.yaml"), "--replay", name)
    assert (rc, out[0]) == (6, NOT_RECORDED)
    assert out[1] == ("  unknown: node: kernel log not recorded [rerun]: Xid events not checked: the record holds no "
                      "kernel log (not recorded: a DERIVED record (the bundle holds no kernel log)); record the bundle "
                      "again with gpufabric snapshot, as root (it reads /dev/kmsg)")


def test_a_bundle_without_health_json_derived_from_nvml_is_could_not_tell(capsys, tmp_path):
    """A copy of the x4 bundle without its health.json: the record derived from its nvml.json and nvidia-smi-q.xml
    has no kernel log, so the Xid check is not done: exit 6, as docs/health.md says, not HEALTHY."""
    copy = tmp_path / "x4"
    shutil.copytree(SHIPPED_X4, copy)
    (copy / "health.json").unlink()
    document = result_json(capsys, copy)
    assert (document["exit_code"], document["line"]) == (6, NOT_RECORDED)
    assert [(f["check"], f["severity"], f["what"]) for f in document["findings"]] == [
        ("xid", "unknown", "kernel log not recorded")]


def test_a_record_calling_itself_derived_does_not_switch_the_xid_check_off(capsys, tmp_path):
    """h100-x2-health's live record with its kernel log unreadable is could not tell; a ``derived`` field added to
    it changes nothing."""
    profile = DATA / "results" / "health-h100-x2" / "machine.yaml"
    unreadable = "/dev/kmsg: Operation not permitted"
    expected = (6, "gpufabric: UNKNOWN node kernel log not readable; remedy: software or configuration")

    def denied(data):
        data["kernel_log"]["error"] = unreadable

    def denied_and_derived(data):
        denied(data)
        data["derived"] = "x"

    for edit in (denied, denied_and_derived):
        bundle = planted(tmp_path, edit, BUNDLES / "h100-x2-health")
        rc, out = health(capsys, "--profile", str(profile), "--replay", str(bundle))
        assert (rc, out[0]) == expected, edit.__name__


def test_accepted_boards_are_named_by_serial(capsys):
    rc, out = x4(capsys, X4, "--accepted", str(X4_ACCEPTED))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4")
    # the results of another x4 host: none of its boards is here, nobody is accused
    rc, out = x4(capsys, X4, "--accepted", str(OTHER_X4_ACCEPTED))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node none of the accepted boards here; "
                               "remedy: software or configuration")


# ---------------------------------------------------------------------------------------------------------------
# each finding, planted


DRAINS = [
    ("remapped rows pending", lambda d: gpu(d, 1)["remapped_rows"].update(pending=1),
     "gpufabric: DRAIN GPU1 (serial 1653824128984) rows pending remapping; "
     "remedy: reset or reboot", "remapped-rows-pending"),
    ("row remapping failed", lambda d: gpu(d, 2)["remapped_rows"].update(failure=1),
     "gpufabric: DRAIN GPU2 (serial 1653724066364) row remapping failed; "
     "remedy: return to the vendor", "remapped-rows-failure"),
    ("uncorrectable ECC", lambda d: gpu(d, 0).update(ecc_uncorrected_volatile=3),
     "gpufabric: DRAIN GPU0 (serial 1653724049829) 3 uncorrectable ECC errors; "
     "remedy: reset or reboot", "ecc-uncorrected"),
    ("narrow PCIe link", lambda d: gpu(d, 3).update(pcie_width_current=8),
     "gpufabric: DRAIN GPU3 (serial 1653724034047) PCIe x8, the profile promises x16; "
     "remedy: reseat or recable", "pcie-width"),
    ("an NVLink down", lambda d: gpu(d, 2)["nvlink_states"].__setitem__(5, 0),
     "gpufabric: DRAIN GPU2 (serial 1653724066364) 17 of 18 NVLinks active; remedy: reset or reboot", "nvlink-state"),
    ("hardware thermal slowdown", lambda d: gpu(d, 0).update(clock_event_reasons=0x41),
     "gpufabric: DRAIN GPU0 (serial 1653724049829) clocks held by hw_thermal_slowdown; "
     "remedy: reseat or recable", "clock-events"),
    ("at the slowdown temperature", lambda d: gpu(d, 1).update(temperature_c=91),
     "gpufabric: DRAIN GPU1 (serial 1653824128984) 91 C, slowdown at 89 C; remedy: reseat or recable", "temperature"),
    ("fabric registration in progress", lambda d: gpu(d, 3).update(fabric={"state": 2, "status": 0}),
     "gpufabric: DRAIN GPU3 (serial 1653724034047) NVSwitch fabric in progress; "
     "remedy: software or configuration", "fabric"),
    ("fabric registration failed", lambda d: gpu(d, 3).update(fabric={"state": 3, "status": 999}),
     "gpufabric: DRAIN GPU3 (serial 1653724034047) NVSwitch fabric failed: Unknown Error; "
     "remedy: reset or reboot", "fabric"),
    ("the driver asks for a reset", lambda d: gpu(d, 1).update(recovery_action=1),
     "gpufabric: DRAIN GPU1 (serial 1653824128984) driver asks for GPU reset; "
     "remedy: reset or reboot", "recovery-action"),
    ("a GPU off the bus (NVML)", lambda d: d["gpus"].__setitem__(2, {"index": 2, "lost": "GPU_IS_LOST"}),
     "gpufabric: DRAIN GPU2 fell off the bus; remedy: reset or reboot", "gpu-lost"),
    ("a GPU not enumerated", lambda d: (d["gpus"].pop(3), d.update(gpu_count=3)),
     "gpufabric: DRAIN node 3 of 4 GPUs answer; remedy: reset or reboot", "gpu-count"),
    ("a GPU on the PCI bus, not in NVML", lambda d: (d.update(pci_gpus=[g["pci_bus_id"] for g in d["gpus"]]),
                                                     d["pci_gpus"].append("00000000:00:0A.0")),
     "gpufabric: DRAIN node PCI 00000000:00:0A.0 not in NVML; remedy: reset or reboot", "gpu-not-in-nvml"),
    ("a recent Xid 79", lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
        {"pci": "0000:00:07", "xid": 79, "age_s": 30.5, "text": XID_79}]}),
     "gpufabric: DRAIN GPU1 (serial 1653824128984) Xid 79 fell off the bus; remedy: reset or reboot", "xid"),
]


@pytest.mark.parametrize("edit,line,check", [d[1:] for d in DRAINS], ids=[d[0] for d in DRAINS])
def test_each_planted_fault_drains_with_its_reason(capsys, tmp_path, edit, line, check):
    bundle = planted(tmp_path, edit)
    rc, out = x4(capsys, bundle)
    assert (rc, out[0]) == (1, line)
    document = result_json(capsys, bundle)
    drains = [f for f in document["findings"] if f["severity"] == DRAIN]
    assert [f["check"] for f in drains] == [check]
    assert document["line"] == line and document["verdict"] == "DRAIN"


def test_a_planted_fault_shows_its_evidence(capsys, tmp_path):
    document = result_json(capsys, planted(tmp_path, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1)))
    (finding,) = document["findings"]
    assert finding == {
        "check": "remapped-rows-pending", "severity": "drain", "gpu": 1, "serial": SERIALS[1],
        "what": "rows pending remapping", "remedy": "reset or reboot", "remedy_short": "reset",
        "evidence": {"remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": 1, "failure": 0},
                     "source": finding["evidence"]["source"]},
        "detail": finding["detail"]}
    assert finding["evidence"]["source"].endswith("health.json")
    assert "Xid 63" in finding["detail"]


def test_retired_pages_on_a_gpu_before_ampere(capsys, tmp_path):
    """Before Ampere NVML answers remapped rows NOT_SUPPORTED and counts retired pages instead."""
    def older(data):
        for g in data["gpus"]:
            g["remapped_rows"] = {"error": "NOT_SUPPORTED"}
            g["retired_pages"] = {"single_bit_ecc": 0, "double_bit_ecc": 0, "pending": 0}
        gpu(data, 2)["retired_pages"] = {"single_bit_ecc": 1, "double_bit_ecc": 2, "pending": 1}

    document = result_json(capsys, planted(tmp_path, older))
    assert document["line"] == ("gpufabric: DRAIN GPU2 (serial 1653724066364) page retirement pending; "
                                "remedy: reset or reboot")
    assert [(f["check"], f["severity"], f["what"]) for f in document["findings"]] == [
        ("retired-pages-pending", "drain", "page retirement pending"), ("retired-pages", "warn", "3 retired pages")]


def test_the_board_swapped_or_missing_since_the_acceptance(capsys, tmp_path):
    swapped = planted(tmp_path, lambda d: gpu(d, 2).update(serial="1653724099999"))
    rc, out = x4(capsys, swapped, "--accepted", str(X4_ACCEPTED))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU2 (serial 1653724099999) not the accepted board (serial "
                                "1653724066364); remedy: rerun")
    missing = planted(tmp_path, lambda d: (d["gpus"].pop(3), d.update(gpu_count=3)))
    rc, out = x4(capsys, missing, "--accepted", str(X4_ACCEPTED))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU3 (serial 1653724034047) missing (3 of 4 GPUs answer); "
                               "remedy: reset or reboot")
    lost = planted(tmp_path, lambda d: d["gpus"].__setitem__(3, {"index": 3, "lost": "GPU_IS_LOST"}))
    rc, out = x4(capsys, lost, "--accepted", str(X4_ACCEPTED))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU3 (serial 1653724034047) fell off the bus; remedy: reset or reboot")


def test_what_is_normal_between_jobs_is_not_a_fault(capsys, tmp_path):
    """An idle link at gen 1 (its speed drops, its width stays), the software power cap, an old Xid, an
    application's Xid, corrected ECC errors: healthy (the last two shown)."""
    def idle(data):
        gpu(data, 0).update(pcie_gen_current=1, clock_event_reasons=0x5, ecc_corrected_volatile=12)
        data["kernel_log"] = {"source": "/dev/kmsg", "error": None, "xids": [
            {"pci": "0000:00:07", "xid": 79, "age_s": 7200.0, "text": XID_79},
            {"pci": "0000:00:08", "xid": 13, "age_s": 20.0,
             "text": "NVRM: Xid (PCI:0000:00:08): 13, pid=1234, Graphics SM Warp Exception"}]}

    rc, out = x4(capsys, planted(tmp_path, idle))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (1 warning)")
    assert "  warn: GPU2 (serial 1653724066364): Xid 13" in out[1]
    assert any("1 Xid line(s) older than 3600 s" in line for line in out)


@pytest.mark.parametrize("window", ["0", "-1", "299.9", "300", "899.9", "nan", "inf"])
def test_an_xid_window_shorter_than_three_check_intervals_is_a_usage_error(capsys, tmp_path, window):
    """--xid-window 0 judged no Xid line (a fresh Xid 79 read HEALTHY), and one of the 300 s check interval let an
    Xid age out between two checks that ran late: below 900 s, NaN or inf is refused."""
    bundle = planted(tmp_path, lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
        {"pci": "0000:00:07", "xid": 79, "age_s": 10.0, "text": XID_79}]}))
    with pytest.raises(SystemExit) as caught:
        main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle), "--xid-window", window])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"error: argument --xid-window: {window!r}: give a number in [900, 3.1536e+08]\n")
    rc, out = x4(capsys, bundle, "--xid-window", "900")  # the shortest window judges it
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) Xid 79 fell off the bus; "
                                "remedy: reset or reboot")


def test_temperature_near_slowdown_and_persistence_off_are_warnings(capsys, tmp_path):
    bundle = planted(tmp_path, lambda d: (gpu(d, 1).update(temperature_c=86), gpu(d, 2).update(persistence_mode=0)))
    document = result_json(capsys, bundle)
    assert document["line"] == "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (2 warnings)"
    assert [(f["gpu"], f["check"], f["what"]) for f in document["findings"]] == [
        (1, "temperature", "86 C, slowdown at 89 C"), (2, "persistence-mode", "persistence mode off")]


def test_the_profile_decides_driver_and_persistence(capsys, tmp_path):
    profile = tmp_path / "site.yaml"
    profile.write_text("name: site\nextends: h200-nvswitch-x4\nplatform:\n  driver: {min: 590.44.01}\n"
                       "  persistence_mode: true\n")
    bundle = planted(tmp_path, lambda d: gpu(d, 2).update(persistence_mode=0))
    rc, out = health(capsys, "--profile", str(profile), "--replay", str(bundle))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN node driver 580.159.04, profile wants at least 590.44.01 (+1 more); "
                               "remedy: software or configuration")
    assert out[2].startswith("  drain: GPU2 (serial 1653724066364): persistence mode off [software or configuration]")


def test_a_drain_outranks_what_could_not_be_read(capsys, tmp_path):
    def both(data):
        gpu(data, 0)["remapped_rows"]["pending"] = -1
        gpu(data, 3)["remapped_rows"]["failure"] = 1
    rc, out = x4(capsys, planted(tmp_path, both))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU3 (serial 1653724034047) row remapping failed; "
                               "remedy: return to the vendor")


def test_several_drains_name_the_dearest_remedy_and_count_the_rest(capsys, tmp_path):
    def many(data):
        gpu(data, 0)["remapped_rows"]["pending"] = 1
        gpu(data, 1)["pcie_width_current"] = 4
        gpu(data, 2)["remapped_rows"]["failure"] = 1
    rc, out = x4(capsys, planted(tmp_path, many))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU2 (serial 1653724066364) row remapping failed (+2 more); "
                               "remedy: return to the vendor")


# ---------------------------------------------------------------------------------------------------------------
# could not tell: exit 6, naming file and key


UNREADABLE = [
    ("a negative count", lambda d: gpu(d, 1)["remapped_rows"].update(pending=-1),
     "gpufabric: UNKNOWN GPU1 (serial 1653824128984) remapped rows.pending not readable; remedy: rerun",
     "remapped rows pending -1 in {file} (gpus[1].remapped_rows.pending) is not in the range"),
    ("NaN", lambda d: gpu(d, 0).update(temperature_c=float("nan")),
     "gpufabric: UNKNOWN GPU0 (serial 1653724049829) temperature c not readable; remedy: rerun",
     "temperature c NaN in {file} (gpus[0].temperature_c) is not a finite number"),
    ("1e400", lambda d: gpu(d, 2).update(ecc_uncorrected_volatile="1e400"),
     "gpufabric: UNKNOWN GPU2 (serial 1653724066364) ecc uncorrected volatile not readable; remedy: rerun",
     "ecc uncorrected volatile '1e400' in {file} (gpus[2].ecc_uncorrected_volatile) is not a whole number"),
    ("an NVML error", lambda d: gpu(d, 3).update(remapped_rows={"error": "UNKNOWN"}),
     "gpufabric: UNKNOWN GPU3 (serial 1653724034047) remapped rows.pending not readable (+1 more); remedy: rerun",
     "NVML answered UNKNOWN [{file}: gpus[3].remapped_rows.pending]"),
    ("a key left out", lambda d: gpu(d, 2).pop("clock_event_reasons"),
     "gpufabric: UNKNOWN GPU2 (serial 1653724066364) clock event reasons not readable; remedy: rerun",
     "{file}: gpus[2].clock_event_reasons is not recorded"),
    ("a word for a count", lambda d: gpu(d, 0).update(pcie_width_current="x16"),
     "gpufabric: UNKNOWN GPU0 (serial 1653724049829) pcie width current not readable; remedy: rerun",
     "pcie width current 'x16' in {file} (gpus[0].pcie_width_current) is not a whole number"),
]


@pytest.mark.parametrize("edit,line,why", [u[1:] for u in UNREADABLE], ids=[u[0] for u in UNREADABLE])
def test_a_value_that_cannot_be_read_is_could_not_tell(capsys, tmp_path, edit, line, why):
    bundle = planted(tmp_path, edit)
    rc, out = x4(capsys, bundle)
    assert (rc, out[0]) == (6, line)
    document = result_json(capsys, bundle)
    unknown = [f for f in document["findings"] if f["severity"] == UNKNOWN]
    assert why.format(file=bundle / "health.json") in unknown[0]["detail"]


def test_1e400_as_json_writes_it(capsys, tmp_path):
    """A number past float's range in the file itself (json reads it as infinity): refused, its text shown."""
    bundle = planted(tmp_path, lambda d: None)
    path = bundle / "health.json"
    path.write_text(path.read_text().replace('"temperature_c": 31', '"temperature_c": 1e400'))
    rc, out = x4(capsys, bundle)
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN GPU3 (serial 1653724034047) temperature c not readable; "
                               "remedy: rerun")
    assert f"temperature c 1e400 in {path} (gpus[3].temperature_c) is not a finite number" in out[1]


@pytest.mark.parametrize("damage,why", [
    (lambda text: text[: len(text) // 2], "not JSON"),
    (lambda text: text.replace("gpufabric-health/1", "gpufabric-health/9"),
     "format is 'gpufabric-health/9', expected 'gpufabric-health/1'"),
    (lambda text: json.dumps({**json.loads(text), "gpus": {"0": {}}}), "gpus is {'0': {}}, not a list"),
], ids=["cut short", "another format", "no GPU list"])
def test_a_health_file_that_is_not_one_is_could_not_tell(capsys, tmp_path, damage, why):
    bundle = planted(tmp_path, lambda d: None)
    path = bundle / "health.json"
    path.write_text(damage(path.read_text()))
    rc, out = x4(capsys, bundle)
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node health.json not readable; remedy: rerun")
    assert str(path) in out[1] and why in out[1]


def test_a_bundle_without_health_json_is_could_not_tell(capsys):
    """A bundle of nvidia-smi's topo -m alone (the TITAN RTX write-up's): no health record, no counters to read."""
    rc, out = x4(capsys, BUNDLES / "titan-rtx-nvlink")
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node no health.json in the bundle; remedy: rerun")
    assert "record the bundle with gpufabric snapshot" in out[1]


def test_no_nvml_here_is_could_not_tell(capsys):
    from pytest_gpufabric.fabric.nvml import nvml_available

    if nvml_available()[0]:
        pytest.skip("this machine has NVML: the live check reads it")
    rc, out = health(capsys, "--profile", "h200-nvswitch-x4")
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node NVML not available; remedy: software or configuration")


def test_usage_errors_exit_2(capsys, tmp_path):
    assert main(["health", "--accepted", str(X4_ACCEPTED), "--replay", str(X4)]) == 2
    assert "the profile 'h200-nvswitch-x4-measured' the node was accepted with" in capsys.readouterr().err
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(tmp_path / "nothing")]) == 2
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(X4), "--quick"]) == 2
    assert "--quick runs workloads on this machine's GPUs" in capsys.readouterr().err


def test_the_profile_and_boards_come_from_the_accepted_results(tmp_path):
    (tmp_path / "state").mkdir()
    results = json.loads(X4_ACCEPTED.read_text())
    shipped = resolve_baseline("h200-nvswitch-x4", None, env={})
    results["profile"] = {"name": "h200-nvswitch-x4", "sha256": shipped.profile.sha256, "path": "/gone/x4.yaml"}
    (tmp_path / "state" / "gpufabric-results.json").write_text(json.dumps(results))
    baseline = resolve_baseline(None, None, env={"GPUFABRIC_STATE_DIR": str(tmp_path / "state")})
    assert baseline.profile.sha256 == shipped.profile.sha256
    assert baseline.profile_from == f"the accepted results {tmp_path / 'state' / 'gpufabric-results.json'}"
    assert [b.serial for b in baseline.boards] == SERIALS


def test_results_in_the_current_folder_are_never_taken_as_the_nodes(tmp_path, capsys):
    """`gpufabric accept` leaves reports/gpufabric-results.json where it ran: health must not read it by accident."""
    (tmp_path / "reports").mkdir()
    shutil.copyfile(X4_ACCEPTED, tmp_path / "reports" / "gpufabric-results.json")
    rc, out = health(capsys, "--replay", str(X4))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node no profile or accepted results; "
                               "remedy: software or configuration")
    assert "gpufabric-results.json, not found; the current folder is never read" in out[1]


def test_no_profile_and_no_accepted_results_is_unknown_with_the_fix(capsys, tmp_path, monkeypatch):
    """A healthy node with nothing to judge it by is never drained against a shipped demo profile: exit 6, the
    fix on the next line, the JSON says no baseline."""
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "state"))
    rc, out = health(capsys, "--replay", str(X4))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node no profile or accepted results; "
                               "remedy: software or configuration")
    assert "give --profile NAME|FILE" in out[1] and "gpufabric profile init" in out[1]
    assert f"--accepted RESULTS.json, the results the node was ACCEPTED with (default {tmp_path / 'state'}" in out[1]
    assert main(["health", "--replay", str(X4), "--json"]) == 6
    document = json.loads(capsys.readouterr().out)
    output.validate_result(document)
    assert document["baseline"] is None and [f["check"] for f in document["findings"]] == ["baseline"]


def test_the_profiles_gpu_model_is_held(capsys):
    """A 2x H100 node judged by an H200 profile drains (software: the wrong profile, or changed boards), naming
    both models."""
    rc, out = health(capsys, "--profile", "h200-nvswitch-x2", "--replay", str(BUNDLES / "h100-x2-identity"))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU0 (serial 1752624020194) H100 80GB HBM3, profile has H200 "
                               "(+1 more); remedy: software or configuration")


def test_only_an_accepted_run_counts_as_the_nodes_acceptance(tmp_path, capsys):
    results = json.loads(X4_ACCEPTED.read_text())
    results["summary"]["verdict"] = "REJECTED"
    (tmp_path / "rejected.json").write_text(json.dumps(results))
    assert main(["health", "--accepted", str(tmp_path / "rejected.json"), "--replay", str(X4)]) == 2
    assert "holds a run judged REJECTED, not the node's acceptance" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# the outputs


def test_the_line_stays_within_128_characters():
    from pytest_gpufabric.nodehealth.finding import Finding

    long = Finding("xid", DRAIN, "Xid 154 the driver asks for a recovery action x12 at PCI 0000:b9:00 " * 3, 3,
                   "1653724034047", "reset or reboot")
    line = output.verdict_line("DRAIN", [long, long], 4, "x")
    assert len(line) == 128 and line.startswith("gpufabric: DRAIN GPU3 (serial 1653724034047) Xid 154 the driver")
    assert line.endswith("... (+1 more); remedy: reset or reboot")


def test_json_and_prom_files_are_written_beside_the_text(capsys, tmp_path):
    bundle = planted(tmp_path, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    prom, result = out_dir / "gpufabric_health.prom", out_dir / "health.json"
    prom.write_text("old\n")
    rc, out = x4(capsys, bundle, "--json", str(result), "--prom", str(prom))
    assert rc == 1 and out[0].startswith("gpufabric: DRAIN GPU1")
    document = json.loads(result.read_text())
    output.validate_result(document)
    text = prom.read_text()
    assert 'gpufabric_health_verdict{tier="passive",verdict="DRAIN"} 1' in text
    assert 'gpufabric_health_verdict{tier="passive",verdict="HEALTHY"} 0' in text
    assert 'gpufabric_health_exit_code{tier="passive"} 1' in text
    assert ('gpufabric_health_check_status{tier="passive",gpu="1",uuid="GPU-8478a18a-03bc-4e21-8f4a-dc9fe8884ef9",'
            'pci_bus_id="00000000:00:07.0",serial="1653824128984",check="memory-repair"} 1') in text
    assert sorted(p.name for p in out_dir.iterdir()) == ["gpufabric_health.prom", "health.json"]  # no temporaries


def test_prom_is_replaced_atomically_or_not_at_all(capsys, tmp_path, monkeypatch):
    prom = tmp_path / "gpufabric_health.prom"
    prom.write_text("the last check's metrics\n")

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(output.os, "replace", refuse)
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(X4), "--prom", str(prom)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert prom.read_text() == "the last check's metrics\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_replay_needs_no_torch_and_reports_its_time(tmp_path):
    """The x4 bundle (a 4-GPU box) replayed as a fresh process, HEALTHY, its own time in the JSON; the passive
    tier imports no torch. Its time budget (5 s, the interpreter's start included) is benchmarks/health_replay.py's."""
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--profile", "h200-nvswitch-x4",
                           "--replay", str(X4), "--json"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert done.returncode == 0, done.stderr
    seconds = json.loads(done.stdout)["seconds"]["passive"]
    assert isinstance(seconds, float) and 0 < seconds < 60
    assert "torch" not in subprocess.run(
        [sys.executable, "-c", "import sys, pytest_gpufabric.nodehealth.command, pytest_gpufabric.nodehealth.passive;"
                               "print(sorted(m for m in sys.modules if m.startswith('torch')))"],
        capture_output=True, text=True).stdout.replace("[]", "")


# ---------------------------------------------------------------------------------------------------------------
# the kernel log


def test_a_kmsg_record_gives_its_xid_and_age():
    record = f"3,5120,43321000000,-;{XID_79}\n SUBSYSTEM=pci\n"  # /dev/kmsg: "PRIO,SEQ,USEC,FLAGS;MESSAGE"
    assert parse_kmsg_record(record, uptime_s=43351.5) == {"pci": "0000:00:07", "xid": 79, "age_s": 30.5,
                                                           "text": XID_79}
    assert parse_kmsg_record("6,5121,43322000000,-;nvidia-nvlink: Nvlink Core is being initialized", 1e5) is None
    old_form = "4,9,1000,-;NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff"
    assert parse_kmsg_record(old_form, 2.0)["pci"] == "0000:01:00"


def test_a_kernel_log_that_cannot_be_read_says_why(tmp_path):
    missing = tmp_path / "kmsg"
    assert read_kernel_xids(str(missing)) == {"source": str(missing), "error": f"{missing}: No such file or "
                                              "directory", "xids": [], "sxids": []}


# ---------------------------------------------------------------------------------------------------------------
# the quick tier, on CPU stand-ins


CPU_PROFILE = """name: cpu-health
gpus: {count: 2}
burn_in: {device: cpu, min_tflops: 0.001}
memory_bandwidth: {min: 0.01 GB/s}
"""


def test_quick_commands_are_sized_for_a_check_between_jobs():
    from pytest_gpufabric.nodehealth.quick import quick_commands

    commands = quick_commands(resolve_baseline("h200-nvswitch-x4", None, env={}).profile)
    assert commands["gemm"][2:] == ["--seconds", "3.0", "--size", "8192", "--dtype", "bfloat16"]
    assert commands["hbm"][2:] == ["--size", str(1 << 30), "--iters", "5", "--warmup", "2", "--device", "cuda"]
    pattern = commands["memory-pattern"]
    assert pattern[pattern.index("--bytes") + 1] == str(1 << 30) and pattern[pattern.index("--seconds") + 1] == "0.5"


def test_quick_tier_catches_a_planted_gemm_and_memory_fault(tmp_path):
    from pytest_gpufabric.nodehealth.quick import run_quick

    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    baseline = resolve_baseline(str(tmp_path / "cpu-health.yaml"), None, env={})
    node = load_health_file(X2 / "health.json")
    findings, notes, results = run_quick(node, baseline, plant_fault=1)
    drains = sorted((f.gpu, f.check, f.remedy) for f in findings if f.severity == DRAIN)
    assert drains == [(1, "quick-gemm", "return to the vendor"), (1, "quick-memory-pattern", "return to the vendor")]
    assert [f for f in findings if f.severity == UNKNOWN] == []
    gemm = next(f for f in findings if f.check == "quick-gemm" and f.severity == DRAIN)  # a loaded CPU may warn too
    row = next(r for r in results["gemm"]["gpus"] if r["gpu"] == 1)
    assert gemm.what == f"{2 * row['checks']} wrong GEMM elements" and row["checks"] > 0
    assert gemm.serial == "1653824016216"  # named by the node's board at that index
    pattern = next(f for f in findings if f.check == "quick-memory-pattern")
    assert pattern.what == "1 memory words read back wrong" and "planted on purpose" in pattern.detail
    assert any(note.startswith("gemm: CPU stand-ins") for note in notes)
    line = output.verdict_line("DRAIN", findings, 2, "cpu-health")
    assert line == f"gpufabric: DRAIN GPU1 (serial 1653824016216) {gemm.what} (+1 more); remedy: return to the vendor"


# ---------------------------------------------------------------------------------------------------------------
# the fleet


def test_the_fleet_lists_nodes_whose_last_check_drained(capsys, tmp_path):
    from pytest_gpufabric.fleet.report import build_fleet_document, validate_fleet_document

    fleet = tmp_path / "fleet"
    bundle = planted(tmp_path, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))
    for name, replay in (("x4a", X4), ("x4b", bundle)):
        (fleet / name).mkdir(parents=True)
        shutil.copy(X4_ACCEPTED, fleet / name / "gpufabric-results.json")
        x4(capsys, replay, "--json", str(fleet / name / "gpufabric-health.json"))
    (fleet / "x4c").mkdir()
    shutil.copy(X4_ACCEPTED, fleet / "x4c" / "gpufabric-results.json")
    (fleet / "x4c" / "gpufabric-health.json").write_text("{not json")
    document = build_fleet_document([fleet], None, allow_replays=True)
    validate_fleet_document(document)
    assert document["health"]["checked"] == 2
    assert [(n["node"], n["line"]) for n in document["health"]["drain"]] == [
        ("x4b", "gpufabric: DRAIN GPU1 (serial 1653824128984) rows pending remapping; remedy: reset or reboot")]
    assert document["health"]["unknown"] == []
    assert [n["node"] for n in document["health"]["unreadable"]] == ["x4c"]


# ---------------------------------------------------------------------------------------------------------------
# node-problem-detector (examples/kubernetes)


NPD_YAML = Path(__file__).resolve().parent.parent / "examples" / "kubernetes" / "gpufabric-npd.yaml"


def test_the_npd_plugin_maps_our_exit_codes_onto_npds(tmp_path):
    """The ConfigMap's plugin script, run as NPD runs it: 0 OK, 1 NonOK, 2 Unknown, the first line its message."""
    import yaml

    documents = list(yaml.safe_load_all(NPD_YAML.read_text()))
    config = next(d for d in documents if d["kind"] == "ConfigMap")["data"]
    daemonset = next(d for d in documents if d["kind"] == "DaemonSet")
    monitor = json.loads(config["gpufabric-health-monitor.json"])
    (rule,) = monitor["rules"]
    assert monitor["plugin"] == "custom" and monitor["pluginConfig"]["max_output_length"] >= output.MAX_LINE
    assert rule["path"] == "/config/plugin/gpufabric-npd.sh" and rule["condition"] == "GPUFabricUnhealthy"
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert "--config.custom-plugin-monitor=/config/gpufabric-health-monitor.json" in container["command"]
    items = {i["key"]: i["path"] for v in daemonset["spec"]["template"]["spec"]["volumes"] if "configMap" in v
             for i in v["configMap"]["items"]}
    assert items == {"gpufabric-health-monitor.json": "gpufabric-health-monitor.json",
                     "gpufabric-npd.sh": "plugin/gpufabric-npd.sh"}

    script = tmp_path / "gpufabric-npd.sh"
    script.write_text(config["gpufabric-npd.sh"])
    script.chmod(0o755)
    faulty = planted(tmp_path, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1))

    def npd(*args: str) -> tuple[int, str]:
        env = {**os.environ, "GPUFABRIC": f"{sys.executable} -m pytest_gpufabric",
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "GPUFABRIC_HEALTH_ARGS": " ".join(args)}
        done = subprocess.run([str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
        return done.returncode, done.stdout

    assert npd("--profile h200-nvswitch-x4 --replay", str(X4)) == (
        0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4\n")
    assert npd("--profile h200-nvswitch-x4 --replay", str(faulty)) == (
        1, "gpufabric: DRAIN GPU1 (serial 1653824128984) rows pending remapping; remedy: reset or reboot\n")
    assert npd("--profile h200-nvswitch-x4 --replay", str(BUNDLES / "titan-rtx-nvlink")) == (
        2, "gpufabric: UNKNOWN node no health.json in the bundle; remedy: rerun\n")
    assert npd("--replay", str(X4)) == (  # nothing to judge the node by: Unknown to NPD
        2, "gpufabric: UNKNOWN node no profile or accepted results; remedy: software or configuration\n")
    rc, message = npd("--profile no-such-profile --replay", str(X4))  # gpufabric's usage error, Unknown to NPD
    assert rc == 2 and message.startswith("gpufabric: UNKNOWN gpufabric health exited 2: gpufabric: ")


def test_the_docs_install_it_as_health_check_program_in_five_lines():
    import re

    repo = Path(__file__).resolve().parent.parent
    text = (repo / "docs" / "health.md").read_text()
    section = text.split("## Install it as Slurm's HealthCheckProgram", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```\n(.*?)```", section, flags=re.S)
    lines = block.strip().splitlines()
    assert len(lines) == 5
    assert "HealthCheckProgram=/etc/slurm/gpufabric/healthcheck.sh" in block
    for script in ("healthcheck.sh", "prolog.sh", "epilog.sh", "gpufabric-node-health.sh"):
        assert os.access(repo / "examples" / "slurm" / script, os.X_OK)


MORE = [
    ("a GPU without a handle", lambda d: d["gpus"].__setitem__(1, {"index": 1, "handle": {"error": "NO_PERMISSION"}}),
     (), 6, "gpufabric: UNKNOWN GPU1 not readable; remedy: rerun"),
    ("a serial NVML refuses", lambda d: gpu(d, 0).update(serial={"error": "UNKNOWN"}), ("--accepted", str(X4_ACCEPTED)),
     6, "gpufabric: UNKNOWN GPU0 serial not readable; remedy: rerun"),
    ("boards swapped between slots",
     lambda d: (gpu(d, 0).update(serial=SERIALS[1]), gpu(d, 1).update(serial=SERIALS[0])),
     ("--accepted", str(X4_ACCEPTED)), 0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (2 warnings)"),
    ("ECC turned off", lambda d: gpu(d, 2).update(ecc_mode=0), (), 1,
     "gpufabric: DRAIN GPU2 (serial 1653724066364) ECC disabled; remedy: software or configuration"),
    ("no slowdown threshold, margin used up", lambda d: gpu(d, 1).update(
        slowdown_temperature_c={"error": "NOT_SUPPORTED"}, margin_temperature_c=0), (), 0,
     "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (1 warning)"),
    ("a driver changed since the acceptance", lambda d: d.update(driver_version="580.126.09"),
     ("--accepted", str(X4_ACCEPTED)), 0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (1 warning)"),
    ("an Xid of a device that is no GPU here", lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None,
     "xids": [{"pci": "0000:b9:00", "xid": 74, "age_s": 12.0, "text": "NVRM: Xid (PCI:0000:b9:00): 74, pid=<unknown>, "
               "name=<unknown>, NVLink: fatal error detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"}]}),
     (), 1, "gpufabric: DRAIN node Xid 74 NVLink error at PCI 0000:b9:00; remedy: reset or reboot"),
]


@pytest.mark.parametrize("edit,args,rc,line", [m[1:] for m in MORE], ids=[m[0] for m in MORE])
def test_more_findings(capsys, tmp_path, edit, args, rc, line):
    found, out = x4(capsys, planted(tmp_path, edit), *args)
    assert (found, out[0]) == (rc, line)


def test_more_gpus_than_the_profile_is_could_not_tell(capsys):
    rc, out = health(capsys, "--profile", "h200-nvswitch-x2", "--replay", str(X4))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node 4 GPUs, profile has 2; remedy: software or configuration")


def test_above_the_profiles_temperature_is_a_warning(capsys, tmp_path):
    profile = tmp_path / "cool.yaml"
    profile.write_text("name: cool\nextends: h200-nvswitch-x4\nhealth: {max_temperature_c: 40}\n")
    rc, out = health(capsys, "--profile", str(profile), "--replay",
                     str(planted(tmp_path, lambda d: gpu(d, 3).update(temperature_c=45))))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile cool (1 warning)")
    assert out[1] == ("  warn: GPU3 (serial 1653724034047): 45 C, above 40 C: above the profile's "
                      "health.max_temperature_c")


def test_quick_tier_holds_hbm_and_gemm_to_the_profiles_floors(tmp_path):
    """No fault planted; floors no CPU reaches: HBM below its floor drains every board (software: clocks held low,
    another process), a GEMM rate below the burn-in's floor is only shown, the memory pattern passes."""
    from pytest_gpufabric.nodehealth.quick import run_quick

    (tmp_path / "fast.yaml").write_text(CPU_PROFILE.replace("min_tflops: 0.001", "min_tflops: 100000")
                                        .replace("min: 0.01 GB/s", "min: 100000 GB/s").replace("cpu-health", "fast"))
    baseline = resolve_baseline(str(tmp_path / "fast.yaml"), None, env={})
    findings, notes, _ = run_quick(load_health_file(X2 / "health.json"), baseline)
    assert sorted((f.gpu, f.check, f.severity, f.remedy) for f in findings) == [
        (0, "quick-gemm", "warn", None), (0, "quick-hbm", "drain", "software or configuration"),
        (1, "quick-gemm", "warn", None), (1, "quick-hbm", "drain", "software or configuration")]
    hbm = next(f for f in findings if f.check == "quick-hbm")
    assert hbm.what.startswith("HBM ") and hbm.what.endswith(" GB/s below floor")
    assert any(n.startswith("GPU0: memory pattern over 1.00 MiB") and n.endswith("no mismatch") for n in notes)
