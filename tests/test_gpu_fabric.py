"""The GPU fabric registration (formats/gpu_fabric.py): read from the recorded bundles' nvidia-smi-q.xml and from an
nvml.json ``fabric`` entry, and judged once. The bundles are this project's recordings (tests/data/bundles/); the
changed cases are copies of them in tmp_path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpufabric.fabric.bundle import load_bundle
from pytest_gpufabric.formats.gpu_fabric import (
    GpuFabricInfo,
    fabric_problem,
    health_words,
    rack_fabric_problems,
)
from pytest_gpufabric.units import NA

BUNDLES = Path(__file__).resolve().parent / "data" / "bundles"
ZERO = "00000000-0000-0000-0000-000000000000"


def test_recorded_nvswitch_bundle_reads_completed_success_from_its_xml():
    fabric = load_bundle(BUNDLES / "h200-nvswitch-x4")
    assert [(g.fabric.state, g.fabric.status, g.fabric.clique_id, g.fabric.cluster_uuid) for g in fabric.gpus] == [
        ("Completed", "Success", 0, ZERO)] * 4
    assert fabric.provenance["fabric"] == "nvidia-smi -q -x"
    assert [fabric_problem(g.fabric) for g in fabric.gpus] == [None] * 4
    # one HGX board: clique 0 and an all-zero UUID are healthy, no rack domain to hold them to
    assert rack_fabric_problems([(g.label, g.fabric) for g in fabric.gpus], require_fabric=False) == ([], [], None)


def test_recorded_single_gpu_bundle_is_not_supported_not_a_failure():
    gpu = load_bundle(BUNDLES / "h100-x1").gpus[0]
    assert gpu.fabric.state is NA and gpu.fabric.clique_id is NA and gpu.fabric.unreadable == {}
    assert fabric_problem(gpu.fabric) is None
    assert rack_fabric_problems([("GPU0", gpu.fabric)]) == (
        [("GPU0", "fabric Not Supported: the GPU is not on an NVLink switch fabric")], [], None)


def test_a_bundle_whose_driver_printed_no_fabric_has_none():
    assert [g.fabric for g in load_bundle(BUNDLES / "rtx-2080ti-pcie").gpus] == [None, None]


def _bundle_with_nvml_fabric(tmp_path: Path, fabrics: list) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(BUNDLES / "h200-nvswitch-x2", copy)
    record = json.loads((copy / "nvml.json").read_text())
    for gpu, fabric in zip(record["gpus"], fabrics, strict=True):
        gpu["fabric"] = fabric
    (copy / "nvml.json").write_text(json.dumps(record))
    return copy


def test_nvml_fabric_entry_is_typed_and_wins_over_the_xml(tmp_path):
    bundle = _bundle_with_nvml_fabric(tmp_path, [
        {"state": 3, "status": 0, "clique_id": 7, "cluster_uuid": "1B2C3D4E-0000-4000-8000-00000000ABCD",
         "health_mask": 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8 | 1 << 12, "health_summary": 1},
        {"state": 2, "status": 0, "clique_id": 0, "cluster_uuid": ZERO, "health_mask": 0}])
    fabric = load_bundle(bundle)
    first, second = (g.fabric for g in fabric.gpus)
    assert (first.state, first.status, first.clique_id, first.cluster_uuid) == (
        "Completed", "Success", 7, "1b2c3d4e-0000-4000-8000-00000000abcd")
    assert first.health == {"Bandwidth": "Full", "Route Recovery in progress": "False", "Route Unhealthy": "False",
                            "Access Timeout Recovery": "False", "Incorrect Configuration": "None",
                            "Partition Assigned": "True", "Summary": "Healthy"}
    assert fabric_problem(first) is None
    assert fabric_problem(second) == "fabric state In Progress, not Completed (the fabric manager has not registered " \
                                     "the GPU)"


def test_nvml_insufficient_resources_and_not_supported(tmp_path):
    bundle = _bundle_with_nvml_fabric(tmp_path, [
        {"state": 3, "status": 23, "clique_id": 0, "cluster_uuid": ZERO},
        {"error": "NOT_SUPPORTED"}])
    first, second = (g.fabric for g in load_bundle(bundle).gpus)
    assert fabric_problem(first) == "fabric status Insufficient Resources, not Success"
    assert second.state is NA and fabric_problem(second) is None


def test_nvml_fabric_entry_of_the_wrong_shape_is_named_not_judged(tmp_path):
    bundle = _bundle_with_nvml_fabric(tmp_path, [{"state": "Finished", "status": 0}, {"state": 3, "clique_id": -1}])
    first, second = load_bundle(bundle).gpus
    assert first.unreadable["fabric"] == ("gpus[0].fabric (GPU0) fabric state 'Finished' in nvml.json is not one of "
                                          "['Completed', 'In Progress', 'Not Started', 'Not Supported']")
    assert fabric_problem(first.fabric) == first.unreadable["fabric"]
    assert second.unreadable["fabric"] == "gpus[1].fabric (GPU1) fabric clique id -1 in nvml.json is not a whole number"


def test_degraded_bandwidth_in_the_health_mask_is_a_problem():
    info = GpuFabricInfo(state="Completed", status="Success", clique_id=1, cluster_uuid=ZERO,
                         health=health_words(1))
    assert info.health == {"Bandwidth": "Degraded"}
    assert fabric_problem(info) == "fabric health Bandwidth Degraded"


@pytest.mark.parametrize("summary, expected", [(2, "fabric health Summary Unhealthy"), (1, None)])
def test_health_summary(summary, expected):
    info = GpuFabricInfo(state="Completed", status="Success", health=health_words(0, summary))
    assert fabric_problem(info) == expected


# --- the live read (fabric/gpu_fabric.py), its NVML calls answered by this test --------------------------------

class _NvmlError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value


class _Pynvml:
    """The pynvml names read_gpu_fabric uses, with nvidia-ml-py's real structures; the calls answer as a driver of
    ``knows`` struct versions would (NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25 for a newer one)."""

    def __init__(self, knows: int, answer: dict | None) -> None:
        import pynvml

        self.NVMLError = _NvmlError
        self.NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
        for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfo_t",
                     "nvmlGpuFabricInfo_v3", "nvmlGpuFabricInfo_v2"):
            setattr(self, name, getattr(pynvml, name))
        self.knows, self.answer, self.asked = knows, answer, []

    def query(self, name: str, handle, pointer):
        info = pointer._obj
        self.asked.append((name, getattr(info, "version", None)))
        if self.answer is None:
            return {"error": "NOT_SUPPORTED"}
        if getattr(info, "version", None) == self.nvmlGpuFabricInfo_v3 and self.knows < 3:
            raise _NvmlError(25)
        for key, value in self.answer.items():
            if key == "clusterUuid":
                for i, byte in enumerate(value):
                    info.clusterUuid[i] = byte
            elif hasattr(info, key):
                setattr(info, key, value)
        return 0


def test_the_live_read_takes_v3_and_types_its_record():
    from pytest_gpufabric.fabric.gpu_fabric import read_gpu_fabric

    nvml = _Pynvml(3, {"state": 3, "status": 0, "cliqueId": 4026, "healthMask": 2, "healthSummary": 1,
                       "clusterUuid": bytes(range(16))})
    record = read_gpu_fabric(nvml, "handle", nvml.query)
    assert record == {"state": 3, "status": 0, "clique_id": 4026,
                      "cluster_uuid": "00010203-0405-0607-0809-0a0b0c0d0e0f", "health_mask": 2, "health_summary": 1}
    assert [name for name, _ in nvml.asked] == ["nvmlDeviceGetGpuFabricInfoV"]


def test_the_live_read_falls_back_to_v2_on_an_older_driver():
    from pytest_gpufabric.fabric.gpu_fabric import read_gpu_fabric

    nvml = _Pynvml(2, {"state": 2, "status": 0, "cliqueId": 0, "healthMask": 0, "clusterUuid": bytes(16)})
    record = read_gpu_fabric(nvml, "handle", nvml.query)
    assert record == {"state": 2, "status": 0, "clique_id": 0, "cluster_uuid": ZERO, "health_mask": 0}
    assert [version for _, version in nvml.asked] == [nvml.nvmlGpuFabricInfo_v3, nvml.nvmlGpuFabricInfo_v2]


def test_the_live_read_records_not_supported():
    from pytest_gpufabric.fabric.gpu_fabric import read_gpu_fabric

    nvml = _Pynvml(3, None)
    assert read_gpu_fabric(nvml, "handle", nvml.query) == {"error": "NOT_SUPPORTED"}
