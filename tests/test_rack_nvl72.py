"""`gpufabric fleet rack`: an NVL72 rack judged as its 18 trays plus the rack's promises (fleet/rack.py).

The rack is tests/data/racks/gb200-nvl72-replayed/: 18 trays built from the real public GB200 outputs, their UUIDs
changed only where a rack needs 72 distinct boards and their fabric readings the test's own values (its README and
tests/rack_replay.py say exactly what). Every failing rack is a copy of it, changed in tmp_path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rack_replay import CLIQUE_ID, CLUSTER_UUID, NCCL_72, RACK, TRAYS, copied_rack, fleet_results, run_rack, tray_record

from pytest_gpufabric.fleet.rack import all_reduce_run, judge_rack, read_trays

ROOT = Path(__file__).resolve().parent.parent
DOMAIN = f"cluster UUID {CLUSTER_UUID}, clique {CLIQUE_ID}"
ZERO = "00000000-0000-0000-0000-000000000000"


def _set_fabric(rack: Path, tray: str, **fabric) -> None:
    path = rack / tray / "nvml.json"
    record = json.loads(path.read_text())
    for gpu in record["gpus"]:
        gpu["fabric"].update(fabric)
    path.write_text(json.dumps(record))


def _outcomes(document: dict) -> dict[str, str]:
    return {p["id"]: p["outcome"] for p in document["promises"]}


def test_the_committed_rack_is_what_the_captures_give():
    assert sorted(p.name for p in RACK.iterdir() if p.is_dir()) == TRAYS
    for tray, name in enumerate(TRAYS, start=1):
        assert json.loads((RACK / name / "nvml.json").read_text()) == tray_record(tray)
    first, second = (tray_record(t)["gpus"][0]["uuid"] for t in (1, 2))
    assert first == "GPU-c180d613-630c-b39f-e5e0-7eaf7372e826"  # the real UUID, as nvidia-smi -L printed it
    assert second == "GPU-c180d613-630c-b39f-e5e0-7eaf73720002"
    uuids = {g["uuid"] for t in range(1, 19) for g in tray_record(t)["gpus"]}
    assert len(uuids) == 72


def test_the_healthy_rack_holds_its_fabric_promises_and_is_incomplete_without_the_rest():
    done = run_rack(str(RACK), "--json")
    assert done.returncode == 6, done.stderr
    document = json.loads(done.stdout)
    assert document["verdict"] == "INCOMPLETE"
    assert document["domain"] == DOMAIN
    assert _outcomes(document) == {"rack-trays": "passed", "rack-fabric-registration": "passed",
                                   "rack-nvlink-domain": "passed", "rack-trays-accepted": "not checked",
                                   "rack-all-reduce": "not checked", "rack-imex": "not checked"}
    assert document["reason"] == ("rack-trays-accepted: the trays' own acceptance was not given (--fleet "
                                  "fleet-results.json)")


def test_one_tray_out_of_the_clique_rejects_the_rack_naming_the_tray(tmp_path):
    rack = copied_rack(tmp_path)
    _set_fabric(rack, "gb200-tray07", clique_id=CLIQUE_ID + 1)
    done = run_rack(str(rack))
    assert done.returncode == 1, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("gpufabric: REJECTED rack rack: rack-nvlink-domain: tray gb200-tray07 out of the rack's "
                            "NVLink domain: tray gb200-tray07 GPU0 (GPU-c180d613-630c-b39f-e5e0-7eaf73720007): "
                            f"cluster UUID {CLUSTER_UUID}, clique 4027: not the rack's ({DOMAIN})")
    document = json.loads(run_rack(str(rack), "--json").stdout)
    domain = next(p for p in document["promises"] if p["id"] == "rack-nvlink-domain")
    assert domain["outcome"] == "failed"
    assert domain["gpus"] == [f"tray gb200-tray07 GPU{i} ({tray_record(7)['gpus'][i]['uuid']})" for i in range(4)]
    assert _outcomes(document)["rack-fabric-registration"] == "passed"


def test_a_tray_left_out_of_the_partition_fails_registration_and_domain(tmp_path):
    """The failure the Azure HPC image check missed: Completed, Insufficient Resources, clique 0, an all-zero UUID."""
    rack = copied_rack(tmp_path)
    _set_fabric(rack, "gb200-tray12", status=23, clique_id=0, cluster_uuid=ZERO)
    document = judge_rack(read_trays(rack))
    assert document["verdict"] == "REJECTED"
    registration = next(p for p in document["promises"] if p["id"] == "rack-fabric-registration")
    assert registration["reason"].startswith(
        "tray gb200-tray12 GPU0 (GPU-c180d613-630c-b39f-e5e0-7eaf7372000c): fabric status Insufficient Resources, "
        "not Success")
    domain = next(p for p in document["promises"] if p["id"] == "rack-nvlink-domain")
    assert domain["reason"].startswith("tray gb200-tray12 out of the rack's NVLink domain: ")
    assert f"cluster UUID {ZERO}, clique 0: not the rack's ({DOMAIN})" in domain["reason"]


def test_one_gpu_still_registering_names_that_gpu(tmp_path):
    rack = copied_rack(tmp_path)
    path = rack / "gb200-tray03" / "nvml.json"
    record = json.loads(path.read_text())
    record["gpus"][2]["fabric"]["state"] = 2
    path.write_text(json.dumps(record))
    document = judge_rack(read_trays(rack))
    registration = next(p for p in document["promises"] if p["id"] == "rack-fabric-registration")
    assert registration == {"id": "rack-fabric-registration", "outcome": "failed",
                            "reason": "tray gb200-tray03 GPU2 (GPU-dbdc9460-7f3f-0c52-7566-7929b34f0003): fabric "
                                      "state In Progress, not Completed (the fabric manager has not registered the "
                                      "GPU)",
                            "gpus": ["tray gb200-tray03 GPU2 (GPU-dbdc9460-7f3f-0c52-7566-7929b34f0003)"]}


def test_a_missing_tray_is_named_and_a_short_tray_fails(tmp_path):
    rack = copied_rack(tmp_path)
    shutil.rmtree(rack / "gb200-tray18")
    document = json.loads(run_rack(str(rack), "--json", "--expect", "gb200-tray[01-18]").stdout)
    trays = document["promises"][0]
    assert trays == {"id": "rack-trays", "outcome": "not checked", "reason": "tray gb200-tray18 did not report"}
    path = rack / "gb200-tray05" / "nvml.json"
    record = json.loads(path.read_text())
    record["gpus"].pop()
    record["gpu_count"] = 3
    path.write_text(json.dumps(record))
    done = run_rack(str(rack), "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["promises"][0]["reason"] == (
        "tray gb200-tray05 has 3 GPUs, a tray has 4; 17 tray folders of 18: 1 did not report")


def test_the_public_72_rank_all_reduce_cannot_show_its_rank_count(tmp_path):
    """coreweave's NVL72 run prints only its last device line (Rank 71): at least 72 ranks, the count unknown. Its
    host and GPU name are another rack's, so on the replayed rack it is no evidence at all; with its line naming a
    tray's host and model it still cannot show the rank count."""
    run = all_reduce_run(NCCL_72.read_text())
    assert (run["ranks"], run["ranks_at_least"]) == (None, 72)
    done = run_rack(str(RACK), "--json", "--all-reduce", str(NCCL_72), "--min-busbw", "800 GB/s")
    promise = next(p for p in json.loads(done.stdout)["promises"] if p["id"] == "rack-all-reduce")
    assert promise == {"id": "rack-all-reduce", "outcome": "not checked",
                       "reason": "the all_reduce is not a run over the rack's GPUs: rank 71 names NVIDIA Graphics "
                                 "Device, the trays' GPUs are NVIDIA GB200; host slurm-gb200-207-171 is no tray's "
                                 "(the trays' hosts: gb200-tray01, gb200-tray02, gb200-tray03 ...)"}
    ours = tmp_path / "all_reduce.txt"
    ours.write_text(NCCL_72.read_text().replace("slurm-gb200-207-171", "gb200-tray18")
                    .replace("NVIDIA Graphics Device", "NVIDIA GB200"))
    done = run_rack(str(RACK), "--json", "--all-reduce", str(ours), "--min-busbw", "800 GB/s")
    promise = next(p for p in json.loads(done.stdout)["promises"] if p["id"] == "rack-all-reduce")
    assert promise == {"id": "rack-all-reduce", "outcome": "not checked",
                       "reason": "the rank count is unknown, its device list is cut (ranks printed up to 71: at "
                                 "least 72 ranks), so it cannot show an all_reduce over the rack's 72 GPUs (834.57 "
                                 "GB/s busbw at 8589934592 B, floor 800 GB/s); bus ids not compared: the device "
                                 "lines print [0x01], not a domain:bus:device"}


@pytest.mark.parametrize("verdicts, outcome", [({}, "passed"), ({"gb200-tray09": "REJECTED"}, "failed"),
                                               ({"gb200-tray09": None}, "not checked")])
def test_the_trays_own_acceptance_from_the_fleet_results(tmp_path, verdicts, outcome):
    fleet = tmp_path / "fleet-results.json"
    fleet.write_text(json.dumps(fleet_results(verdicts)))
    document = json.loads(run_rack(str(RACK), "--json", "--fleet", str(fleet)).stdout)
    assert _outcomes(document)["rack-trays-accepted"] == outcome


def test_bad_input_is_one_line_and_exit_4(tmp_path):
    (tmp_path / "fleet.json").write_text("[1, 2]")
    done = run_rack(str(RACK), "--fleet", str(tmp_path / "fleet.json"))
    assert done.returncode == 4
    assert done.stderr.startswith("gpufabric fleet rack: --fleet ") and "Traceback" not in done.stderr
    assert run_rack(str(tmp_path / "nowhere")).returncode == 4
    assert run_rack(str(RACK), "--all-reduce", str(NCCL_72)).stderr.strip() == (
        "gpufabric fleet rack: --all-reduce and --min-busbw go together")


def test_a_tray_whose_evidence_has_no_fabric_reading_is_not_checked_not_failed(tmp_path):
    rack = copied_rack(tmp_path)
    path = rack / "gb200-tray04" / "nvml.json"
    record = json.loads(path.read_text())
    for gpu in record["gpus"]:
        del gpu["fabric"]
    path.write_text(json.dumps(record))
    document = judge_rack(read_trays(rack))
    assert document["verdict"] == "INCOMPLETE"
    registration, domain = document["promises"][1:3]
    assert registration == {"id": "rack-fabric-registration", "outcome": "not checked",
                            "reason": "no fabric reading for " + ", ".join(
                                f"tray gb200-tray04 GPU{i} ({tray_record(4)['gpus'][i]['uuid']})" for i in range(4))}
    assert domain["outcome"] == "not checked"


def test_a_rack_in_no_multi_node_partition_fails_its_domain(tmp_path):
    rack = copied_rack(tmp_path)
    for tray in TRAYS:
        _set_fabric(rack, tray, clique_id=0, cluster_uuid=ZERO)
    document = judge_rack(read_trays(rack))
    domain = document["promises"][2]
    assert domain == {"id": "rack-nvlink-domain", "outcome": "failed",
                      "reason": "no GPU reports a rack cluster UUID and clique (every one all-zero or not "
                                "supported): the GPUs are in no multi-node NVLink partition"}


def test_a_tray_given_as_nvidia_smi_q_text_is_read_and_judged(tmp_path):
    """A tray folder holding a saved `nvidia-smi -q` (here the real one-GPU HGX H100 -q, clique 0, all-zero UUID)
    instead of a bundle: read through the -q reader, and judged as a tray of the wrong size outside the domain."""
    rack = copied_rack(tmp_path)
    (rack / "gb200-tray10" / "nvml.json").unlink()
    shutil.copy(ROOT / "tests/data/captures/public/blackwell/"
                "nvidia-smi-q-h100-1gpu-560.35.03-della-fabric-completed-clique0.txt",
                rack / "gb200-tray10" / "nvidia-smi-q.txt")
    document = judge_rack(read_trays(rack))
    tray = next(t for t in document["trays"] if t["name"] == "gb200-tray10")
    assert tray["source"] == "nvidia-smi-q.txt"
    assert tray["gpus"] == [{"gpu": "GPU0", "uuid": "GPU-f7b02328-d6fe-5b1f-9683-15041689bb03",
                             "pci_bus_id": "00000000:DB:00.0",
                             "fabric": {"state": "Completed", "status": "Success", "clique_id": 0,
                                        "cluster_uuid": ZERO, "health": {}}}]
    trays, _, domain = document["promises"][:3]
    assert trays["reason"] == "tray gb200-tray10 has 1 GPUs, a tray has 4"
    assert domain["reason"] == (
        "tray gb200-tray10 out of the rack's NVLink domain: tray gb200-tray10 GPU0 "
        f"(GPU-f7b02328-d6fe-5b1f-9683-15041689bb03): cluster UUID {ZERO}, clique 0: not the rack's ({DOMAIN})")
