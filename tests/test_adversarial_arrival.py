"""The state the machine arrives in is part of the evidence (issue 40): the acceptance judges what `gpufabric health`
reads, with the health check's own checks and limits, and a board a record announces but does not describe is
unknown to both.

Each case copies a shipped bundle into tmp_path and edits the copy: tests/data/bundles/h200-nvswitch-x4 (4x H200 SXM,
its health.json DERIVED from its own nvml.json and nvidia-smi-q.xml, no kernel log), h200-nvswitch-x2 (2x H200, the
same) and h200-nvswitch-x2-acceptance (the README's main job: no health.json; its nvml.json and nvidia-smi-q.xml
hold the counters). The Xid line planted is a real one (NVIDIA/gpu-operator#1146: "NVRM: Xid (PCI:0000:07:00): 48,
..."), its PCI address edited to the x4 bundle's GPU2 (00000000:00:08.0).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpufabric.cli import main
from pytest_gpufabric.report.check_words import phrase

BUNDLES = Path(__file__).parent / "data" / "bundles"
X4_SERIALS = ["1653724049829", "1653824128984", "1653724066364", "1653724034047"]
X2_SERIALS = ["1653824016477", "1653824016216"]
ACCEPTANCE_SERIALS = ["1654024030640", "1654024032670"]
XID_48 = ("NVRM: Xid (PCI:0000:00:08): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) "
          "has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.")
NO_KERNEL_LOG = "its kernel log is not recorded: a DERIVED record (the bundle holds no kernel log)"


def _copy(root: Path, name: str) -> Path:
    target = root / f"copy-of-{name}"
    shutil.copytree(BUNDLES / name, target)
    return target


def _edit_health(bundle: Path, edit) -> None:
    path = bundle / "health.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _gpu(data: dict, index: int) -> dict:
    return next(g for g in data["gpus"] if g["index"] == index)


def _judge(pytester: pytest.Pytester, profile: str, bundle: Path) -> tuple[int, str, dict[str, tuple[str, str]]]:
    """(exit code, verdict, promise id -> (outcome, reason)) of one replay; a passed arrival promise's reason is its
    check's message."""
    results = pytester.path / "reports" / "gpufabric-results.json"
    results.unlink(missing_ok=True)
    run = pytester.runpytest("--gpu-profile", profile, "--gpu-replay", str(bundle))
    document = json.loads(results.read_text(encoding="utf-8"))
    messages = {(c["name"] if c["subject"] == "machine" else f"{c['name']}[{c['subject']}]"): c["message"]
                for c in document["checks"] if c["name"] in ("gpu-health", "xid-events")}
    return int(run.ret), document["summary"]["verdict"], {
        p["id"]: (p["outcome"], p["reason"] or messages.get(p["id"], "")) for p in document["promises"]}


def _health(capsys, profile: str, bundle: Path) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main(["health", "--profile", profile, "--replay", str(bundle)])
    return rc, capsys.readouterr().out.splitlines()


def _plant_gpu2_faults(data: dict) -> None:
    """GPU2: a failed row remapping, a pending one, 12 uncorrectable ECC errors, and an Xid 48 two minutes old."""
    gpu2 = _gpu(data, 2)
    gpu2["ecc_uncorrected_volatile"] = 12
    gpu2["remapped_rows"].update(pending=1, failure=1)
    data["kernel_log"] = {"source": "/dev/kmsg", "error": None,
                          "xids": [{"pci": "0000:00:08", "xid": 48, "age_s": 120.0, "text": XID_48}]}


def test_control_the_recorded_x4_arrives_healthy_and_its_kernel_log_is_missing(pytester: pytest.Pytester):
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x4", BUNDLES / "h200-nvswitch-x4")
    assert (rc, verdict) == (6, "INCOMPLETE")
    for index, serial in enumerate(X4_SERIALS):
        outcome, reason = promises[f"gpu-health[GPU{index}]"]
        assert outcome == "passed" and reason.startswith(f"GPU{index} (serial {serial}): arrived healthy in ")
    outcome, reason = promises["xid-events"]
    assert outcome == "not checked" and NO_KERNEL_LOG in reason
    assert [pid for pid, (outcome, _) in promises.items() if outcome != "passed"] == ["xid-events"]


def test_a_machine_the_health_check_drains_is_rejected(pytester: pytest.Pytester, capsys):
    """Finding 1: the x4 copy whose GPU2 the health check sends back (rma) was ACCEPTED."""
    bundle = _copy(pytester.path, "h200-nvswitch-x4")
    _edit_health(bundle, _plant_gpu2_faults)
    rc, out = _health(capsys, "h200-nvswitch-x4", bundle)
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU2 (serial 1653724066364) row remapping failed (+3 more); "
                               "remedy: return to the vendor")
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x4", bundle)
    assert (rc, verdict) == (1, "REJECTED")
    outcome, reason = promises["gpu-health[GPU2]"]
    assert outcome == "failed"
    assert reason.startswith("GPU2 (serial 1653724066364): 12 uncorrectable ECC errors, row remapping failed, rows "
                             f"pending remapping in {bundle / 'health.json'}: the health check drains this machine.")
    outcome, reason = promises["xid-events"]
    assert outcome == "failed"
    assert reason.startswith("GPU2 (serial 1653724066364): Xid 48 double-bit ECC error in "
                             f"{bundle / 'health.json'}: the health check drains this machine.")
    assert [promises[f"gpu-health[GPU{i}]"][0] for i in (0, 1, 3)] == ["passed"] * 3
    # the remedy is the health check's own for each finding; the report's Found column names the figures
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8"))
    remedy = next(p["remedy"] for p in document["promises"] if p["id"] == "gpu-health[GPU2]")
    assert (remedy["class"], remedy["why"]) == ("return to the vendor", "GPU2: row remapping failed")
    check = next(c for c in document["checks"] if c["name"] == "gpu-health" and c["subject"] == "GPU2")
    assert phrase(check)[1] == "12 uncorrectable ECC errors; row remapping failed; rows pending remapping"
    check = next(c for c in document["checks"] if c["name"] == "xid-events")
    assert phrase(check)[1] == "GPU2: Xid 48 double-bit ECC error"


@pytest.mark.parametrize("edit,what", [
    (lambda d: _gpu(d, 1).update(recovery_action=1), "driver asks for GPU reset"),
    (lambda d: _gpu(d, 3).update(fabric={"state": 2, "status": 0}), "NVSwitch fabric in progress"),
    (lambda d: d["gpus"].__setitem__(0, {"index": 0, "lost": "GPU_IS_LOST"}), "fell off the bus"),
    # DERIVED: the x4 bundle's GPU2 at 91 C against its 89 C slowdown, idle (what the health check drains on)
    (lambda d: _gpu(d, 2).update(temperature_c=91), "91 C, slowdown at 89 C"),
], ids=["recovery-action", "fabric-in-progress", "gpu-lost", "temperature"])
def test_each_arrival_fault_the_health_check_drains_fails_its_gpu(pytester: pytest.Pytester, capsys, edit, what):
    bundle = _copy(pytester.path, "h200-nvswitch-x4")
    _edit_health(bundle, edit)
    assert _health(capsys, "h200-nvswitch-x4", bundle)[0] == 1
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x4", bundle)
    failed = {pid: reason for pid, (outcome, reason) in promises.items() if outcome == "failed"}
    assert verdict == "REJECTED" and rc == 1
    (pid, reason), = [(pid, reason) for pid, reason in failed.items() if pid.startswith("gpu-health")]
    assert f": {what} in " in reason


def test_the_main_job_reads_the_counters_its_own_recordings_hold(pytester: pytest.Pytester):
    """Finding 2: h200-nvswitch-x2-acceptance has no health.json; its nvml.json and nvidia-smi-q.xml hold every GPU
    counter, not the kernel log: the GPUs are judged, the Xids are not checked, the verdict is INCOMPLETE."""
    bundle = BUNDLES / "h200-nvswitch-x2-acceptance"
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x2", bundle)
    assert (rc, verdict) == (6, "INCOMPLETE")
    where = f"{bundle / 'nvml.json'} with nvidia-smi-q.xml"
    for index, serial in enumerate(ACCEPTANCE_SERIALS):
        assert promises[f"gpu-health[GPU{index}]"] == (
            "passed", f"GPU{index} (serial {serial}): arrived healthy in {where} (a record DERIVED from {where})")
    outcome, reason = promises["xid-events"]
    assert outcome == "not checked" and NO_KERNEL_LOG in reason and reason.startswith(
        f"Xid events cannot be told from {where}: ")
    assert [pid for pid, (outcome, _) in promises.items() if outcome != "passed"] == ["xid-events"]


def test_uncorrectable_errors_in_the_recorded_nvidia_smi_q_reject(pytester: pytest.Pytester):
    """The same reader on a copy whose nvidia-smi -q says GPU1 has 12 uncorrectable DRAM errors and a failed row
    remapping: rejected, naming the board and the figures."""
    bundle = _copy(pytester.path, "h200-nvswitch-x2-acceptance")
    xml = bundle / "nvidia-smi-q.xml"
    first, second = xml.read_text(encoding="utf-8").split('<gpu id="00000000:00:07.0">')
    second = second.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>12</dram_uncorrectable>",
                            1).replace("<remapped_row_failure>No<", "<remapped_row_failure>Yes<", 1)
    xml.write_text(first + '<gpu id="00000000:00:07.0">' + second, encoding="utf-8")
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x2", bundle)
    assert (rc, verdict) == (1, "REJECTED")
    outcome, reason = promises["gpu-health[GPU1]"]
    assert outcome == "failed" and reason.startswith(
        "GPU1 (serial 1654024032670): 12 uncorrectable ECC errors, row remapping failed in ")
    assert promises["gpu-health[GPU0]"][0] == "passed"


def test_a_board_counted_but_not_described_is_unknown(pytester: pytest.Pytester, capsys):
    """Finding 3: a health.json that counts 2 GPUs (and the PCI bus lists 2) but describes one was HEALTHY (and
    called the undescribed one "not in NVML")."""
    bundle = _copy(pytester.path, "h200-nvswitch-x2")

    def drop_gpu1(data):
        data["pci_gpus"] = [g["pci_bus_id"] for g in data["gpus"]]
        data["gpus"].pop(1)

    _edit_health(bundle, drop_gpu1)
    rc, out = _health(capsys, "h200-nvswitch-x2", bundle)
    # (+2 more: GPU1 counted, not described; the DERIVED record's kernel log, not recorded)
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node PCI 00000000:00:07.0 not matched (+2 more); remedy: rerun")
    assert "  unknown: GPU1: counted, not described (1 of 2 GPUs) [rerun]: " in "\n".join(out)
    assert not any(line.startswith("  drain") for line in out)
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x2", bundle)
    assert verdict != "ACCEPTED"
    assert promises["gpu-health[GPU1]"] == (
        "not checked", f"{bundle / 'health.json'} counts 2 GPUs (gpu_count) but describes 1: GPU1 (serial "
                       f"{X2_SERIALS[1]}) is not described, its arrival state is unknown")
    assert promises["gpu-health[GPU0]"][0] == "passed"


def test_a_pci_gpu_no_described_gpu_is_at_is_unknown(capsys, tmp_path):
    """pci_gpus against gpus: the PCI bus lists two GPUs, the record gives GPU1 no bus id: whether NVML has the
    second PCI GPU cannot be told (it was HEALTHY)."""
    bundle = _copy(tmp_path, "h200-nvswitch-x2")

    def no_bus_id(data):
        data["pci_gpus"] = [g["pci_bus_id"] for g in data["gpus"]]
        del _gpu(data, 1)["pci_bus_id"]

    _edit_health(bundle, no_bus_id)
    rc, out = _health(capsys, "h200-nvswitch-x2", bundle)
    # (+1 more: the DERIVED record's kernel log, not recorded)
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node PCI 00000000:00:07.0 not matched (+1 more); remedy: rerun")
    assert "  unknown: node: kernel log not recorded [rerun]: " in "\n".join(out)


def test_a_record_of_another_board_shows_nothing_of_this_one(pytester: pytest.Pytester):
    """The x4 copy's health.json names another serial at GPU2 (a record of another machine, or a board swapped
    since): GPU2's arrival state is not checked, naming both boards; it neither passes nor fails."""
    bundle = _copy(pytester.path, "h200-nvswitch-x4")
    _edit_health(bundle, lambda d: _gpu(d, 2).update(serial="1653724099999", uuid="GPU-another"))
    rc, verdict, promises = _judge(pytester, "h200-nvswitch-x4", bundle)
    assert (rc, verdict) == (6, "INCOMPLETE")
    assert promises["gpu-health[GPU2]"] == (
        "not checked", f"{bundle / 'health.json'}'s GPU2 is serial 1653724099999, this machine's GPU2 (serial "
                       f"{X4_SERIALS[2]}): a record of another board shows nothing of this one")


def test_a_kernel_log_recorded_live_is_judged(pytester: pytest.Pytester, capsys):
    """h100-x2-health's health.json was written by the live reader on 2x H100 (not derived): its kernel log was read
    (no Xid), so xid-events passes, and both boards' counters pass; the profile is the one `profile init` writes."""
    profile = pytester.path / "h100-x2.yaml"
    assert main(["profile", "init", "--replay", "h100-x2-health", "-o", str(profile)]) == 0
    bundle = BUNDLES / "h100-x2-health"
    _, _, promises = _judge(pytester, str(profile), bundle)
    assert promises["xid-events"] == ("passed", f"no Xid that drains a node in {bundle / 'health.json'}")
    assert [promises[f"gpu-health[GPU{i}]"][0] for i in (0, 1)] == ["passed", "passed"]


def test_health_reads_a_bundle_without_health_json_as_the_acceptance_does(capsys):
    """`gpufabric health --replay` of the acceptance bundle (no health.json): the counters its nvml.json and
    nvidia-smi-q.xml recorded, judged as the acceptance judges them (none is a fault), and the Xid check could not
    tell, as the acceptance's xid-events: no kernel log was recorded."""
    from pytest_gpufabric.cli import main

    assert main(["health", "--profile", "h200-nvswitch-x2", "--replay", "h200-nvswitch-x2-acceptance"]) == 6
    out = capsys.readouterr().out
    assert out.startswith("gpufabric: UNKNOWN node kernel log not recorded; remedy: rerun\n")
    assert "DERIVED from this bundle's nvml.json and nvidia-smi-q.xml" in out
    assert out.count("  unknown: ") == 1 and "  drain: " not in out and "  warn" not in out
