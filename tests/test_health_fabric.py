"""`gpufabric health` judges each GPU's whole fabric reading through formats/gpu_fabric.py, as the acceptance and
the rack do: a state not Completed, a status not Success, a degraded health line, a GPU outside the NVLink clique of
its node drain naming the GPU and the node (an NVL72 rack's tray); Not Supported is not judged. Faults are planted
in copies of the recorded h200-nvswitch-x4 bundle's health.json (its host is named ``vm``); the clique id and
cluster UUID are the test's own values (the x4's recorded fabric has state and status only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from derive_health import with_read_kernel_log

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output
from pytest_gpufabric.nodehealth.finding import DRAIN

BUNDLES = Path(__file__).parent / "data" / "bundles"
X4 = with_read_kernel_log(BUNDLES / "h200-nvswitch-x4")
SERIAL3 = "1653724034047"
CLUSTER = "72727272-7272-4272-8272-727272727272"
ZERO = "00000000-0000-0000-0000-000000000000"


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED", "GPUFABRIC_BOOT_ID_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))


def _judged(capsys, tmp_path: Path, fabric_of_gpu3: dict, clique: int | None = 4026) -> dict:
    """The health result of a copy of the x4 bundle whose GPUs report one rack clique (``clique``), GPU3
    ``fabric_of_gpu3``."""
    copy = tmp_path / "x4"
    shutil.copytree(X4, copy)
    data = json.loads((copy / "health.json").read_text(encoding="utf-8"))
    for gpu in data["gpus"]:
        if clique is not None:
            gpu["fabric"].update(clique_id=clique, cluster_uuid=CLUSTER)
        if gpu["index"] == 3:
            gpu["fabric"] = fabric_of_gpu3
    (copy / "health.json").write_text(json.dumps(data), encoding="utf-8")
    rc = main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(copy), "--json"])
    document = json.loads(capsys.readouterr().out)
    output.validate_result(document)
    assert document["exit_code"] == rc
    return document


def _drains(document: dict) -> list[tuple]:
    return [(f["gpu"], f["what"], f["remedy"], f["detail"]) for f in document["findings"] if f["severity"] == DRAIN]


def test_a_healthy_rack_clique_is_healthy(capsys, tmp_path):
    document = _judged(capsys, tmp_path, {"state": 3, "status": 0, "clique_id": 4026, "cluster_uuid": CLUSTER})
    assert (document["verdict"], document["exit_code"], _drains(document)) == ("HEALTHY", 0, [])


def test_a_gpu_in_another_clique_drains_naming_gpu_and_node(capsys, tmp_path):
    document = _judged(capsys, tmp_path, {"state": 3, "status": 0, "clique_id": 4027, "cluster_uuid": CLUSTER})
    assert document["line"] == (f"gpufabric: DRAIN GPU3 (serial {SERIAL3}) outside the NVLink clique of its node; "
                                "remedy: reset or reboot")
    assert _drains(document) == [(3, "outside the NVLink clique of its node", "reset or reboot",
                                  f"GPU3 of vm: cluster UUID {CLUSTER}, clique 4027: not the rack's (cluster UUID "
                                  f"{CLUSTER}, clique 4026): it cannot reach the other GPUs over NVLink (the fabric "
                                  "manager did not place it in the partition; a reset registers it again)")]


def test_a_gpu_left_out_of_the_partition_drains_twice_over(capsys, tmp_path):
    """What a GPU the fabric manager did not place says: Insufficient Resources, clique 0, an all-zero cluster
    UUID (issue 45): its status fails it, and it is outside the clique the node's other GPUs share."""
    document = _judged(capsys, tmp_path, {"state": 3, "status": 23, "clique_id": 0, "cluster_uuid": ZERO})
    assert document["line"] == (f"gpufabric: DRAIN GPU3 (serial {SERIAL3}) NVSwitch fabric failed: Insufficient "
                                "Resources (+1 more); remedy: reset or reboot")
    assert [d[:3] for d in _drains(document)] == [
        (3, "NVSwitch fabric failed: Insufficient Resources", "reset or reboot"),
        (3, "outside the NVLink clique of its node", "reset or reboot")]
    assert _drains(document)[0][3].startswith("GPU3 of vm: fabric status Insufficient Resources, not Success: ")


def test_a_degraded_bandwidth_health_line_drains(capsys, tmp_path):
    # nvml.h NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW: bits 0-1 = 1
    document = _judged(capsys, tmp_path, {"state": 3, "status": 0, "clique_id": 4026, "cluster_uuid": CLUSTER,
                                          "health_mask": 1})
    assert [d[:3] for d in _drains(document)] == [
        (3, "NVSwitch fabric health Bandwidth Degraded", "reset or reboot")]


def test_not_started_drains_with_the_software_remedy(capsys, tmp_path):
    document = _judged(capsys, tmp_path, {"state": 1, "status": 0}, clique=None)
    assert document["line"] == (f"gpufabric: DRAIN GPU3 (serial {SERIAL3}) NVSwitch fabric not started; "
                                "remedy: software or configuration")


def test_not_supported_is_not_judged(capsys, tmp_path):
    """A GPU that answers NOT_SUPPORTED (no NVSwitch fabric, as the recorded h100-x1 answers) is not a fault."""
    document = _judged(capsys, tmp_path, {"error": "NOT_SUPPORTED"}, clique=None)
    assert (document["verdict"], _drains(document)) == ("HEALTHY", [])
    document = _judged(capsys, tmp_path / "state0", {"state": 0, "status": 0}, clique=None)
    assert (document["verdict"], _drains(document)) == ("HEALTHY", [])


def test_an_unreadable_clique_is_could_not_tell(capsys, tmp_path):
    document = _judged(capsys, tmp_path, {"state": 3, "status": 0, "clique_id": -1, "cluster_uuid": CLUSTER})
    assert (document["verdict"], document["exit_code"]) == ("UNKNOWN", 6)
    (finding,) = [f for f in document["findings"] if f["check"] == "fabric"]
    assert (finding["gpu"], finding["what"], finding["remedy"]) == (3, "fabric reading not readable", "rerun")
    assert finding["detail"] == (f"GPU3 fabric clique id -1 in {tmp_path / 'x4' / 'health.json'}: gpus[3].fabric is "
                                 "not a whole number")


def test_the_health_record_reads_the_fabric_through_the_one_live_reader():
    """nodehealth/ asks NVML for no fabric info of its own: record.py's live read is fabric/gpu_fabric.py's, whose
    version fallback also works through the health record's query (every NVML error recorded, never raised)."""
    import pytest_gpufabric.nodehealth as nodehealth

    sources = {p.name: p.read_text(encoding="utf-8") for p in Path(nodehealth.__file__).parent.glob("*.py")}
    assert [name for name, text in sources.items() if "GpuFabricInfo(" in text or "nvmlDeviceGetGpuFabric" in text] \
        == []
    assert "read_gpu_fabric(" in sources["record.py"]

    from test_gpu_fabric import _NvmlError, _Pynvml

    from pytest_gpufabric.fabric.gpu_fabric import read_gpu_fabric

    nvml = _Pynvml(2, {"state": 3, "status": 0, "cliqueId": 7, "healthMask": 0, "clusterUuid": bytes(16)})

    def recording(name, *args):  # as nodehealth/record.py's _answer: an NVML error kept as {"error": NAME}
        try:
            return nvml.query(name, *args)
        except _NvmlError:
            return {"error": "ARGUMENT_VERSION_MISMATCH"}

    assert read_gpu_fabric(nvml, "handle", recording)["clique_id"] == 7
    assert [version for _, version in nvml.asked] == [nvml.nvmlGpuFabricInfo_v3, nvml.nvmlGpuFabricInfo_v2]


def test_a_fabric_status_in_nvidia_smi_q_keeps_its_words(capsys, tmp_path):
    """A bundle without health.json is judged from its nvidia-smi -q -x (derive.py): GPU1's fabric status
    'Insufficient Resources' (DERIVED: written into a copy of the 2x H200 acceptance bundle's XML) drains as that,
    not as an unknown error."""
    copy = tmp_path / "x2"
    shutil.copytree(BUNDLES / "h200-nvswitch-x2-acceptance", copy)
    xml = copy / "nvidia-smi-q.xml"
    first, second = xml.read_text(encoding="utf-8").split('<gpu id="00000000:00:07.0">')
    second = second.replace("<status>Success</status>", "<status>Insufficient Resources</status>", 1)
    xml.write_text(first + '<gpu id="00000000:00:07.0">' + second, encoding="utf-8")
    rc = main(["health", "--profile", "h200-nvswitch-x2", "--replay", str(copy), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert rc == 1 and [d[:3] for d in _drains(document)] == [
        (1, "NVSwitch fabric failed: Insufficient Resources", "reset or reboot")]
