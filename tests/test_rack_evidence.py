"""`gpufabric fleet rack` refuses what only looks like a whole rack (fleet/rack.py): a tray's evidence copied or
linked from another tray, a fabric reading missing facts, an all_reduce that is not a good all_reduce over the rack,
--expect and --trays that disagree, fleet results that are not a verdict of these trays, fabric health that says a
GPU is misplaced, and evidence the readers could not read whole. Each case is a copy of the replayed rack
(tests/data/racks/gb200-nvl72-replayed), or of a real capture, changed in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from rack_replay import NCCL_72, RACK, TRAYS, copied_rack, dated_rack, fleet_results, run_rack, tray_record

from pytest_gpufabric.fleet.rack import all_reduce_run, judge_rack, read_trays
from pytest_gpufabric.report.integrity import integrity_block

ROOT = Path(__file__).resolve().parent.parent
BLACKWELL = ROOT / "tests/data/captures/public/blackwell"
SMI_Q_TEXT = BLACKWELL / "nvidia-smi-q-h100-1gpu-560.35.03-della-fabric-completed-clique0.txt"


def _promise(document: dict, promise: str) -> dict:
    return next(p for p in document["promises"] if p["id"] == promise)


def _set_fabric(rack: Path, tray: str, fabric: dict) -> None:
    path = rack / tray / "nvml.json"
    record = json.loads(path.read_text())
    for gpu in record["gpus"]:
        gpu["fabric"] = fabric
    path.write_text(json.dumps(record))


# finding 1: one board cannot be two trays


def test_a_tray_holding_another_trays_bundle_is_rejected(tmp_path):
    rack = copied_rack(tmp_path)
    shutil.copy(rack / "gb200-tray01" / "nvml.json", rack / "gb200-tray05" / "nvml.json")
    document = judge_rack(read_trays(rack))
    trays = _promise(document, "rack-trays")
    assert (document["verdict"], trays["outcome"]) == ("REJECTED", "failed")
    uuid = tray_record(1)["gpus"][0]["uuid"]
    assert trays["reason"].startswith("tray gb200-tray05's bundle was recorded on gb200-tray01, another tray of the "
                                      f"rack; GPU UUID {uuid} in tray gb200-tray01 and tray gb200-tray05: the same "
                                      "board twice")


def test_a_tray_folder_that_links_to_another_tray_is_rejected(tmp_path):
    rack = copied_rack(tmp_path)
    shutil.rmtree(rack / "gb200-tray05")
    os.symlink(rack / "gb200-tray01", rack / "gb200-tray05")
    trays = _promise(judge_rack(read_trays(rack)), "rack-trays")
    assert trays["outcome"] == "failed"
    assert trays["reason"].startswith(f"tray gb200-tray05: gb200-tray05 is a link to {rack / 'gb200-tray01'}: not "
                                      "the tray's own evidence")


# finding 2: a reading without the facts the promises need is not checked


@pytest.mark.parametrize("fabric, lacking", [({}, "state, status, clique id, cluster UUID"),
                                             ({"state": 3}, "status, clique id, cluster UUID")])
def test_a_fabric_reading_missing_its_facts_is_not_checked(tmp_path, fabric, lacking):
    rack = copied_rack(tmp_path)
    _set_fabric(rack, "gb200-tray05", fabric)
    document = judge_rack(read_trays(rack))
    assert document["verdict"] == "INCOMPLETE"
    gpu0 = f"tray gb200-tray05 GPU0 ({tray_record(5)['gpus'][0]['uuid']})"
    for promise in ("rack-fabric-registration", "rack-nvlink-domain"):
        assert _promise(document, promise)["outcome"] == "not checked"
        assert _promise(document, promise)["reason"].startswith(f"a fabric reading without {lacking} for {gpu0}; ")


def test_a_smi_q_text_cut_after_the_fabric_state_is_not_checked(tmp_path):
    rack = copied_rack(tmp_path)
    (rack / "gb200-tray10" / "nvml.json").unlink()
    text = SMI_Q_TEXT.read_text()
    cut = text.index("        Status                            : Success")
    (rack / "gb200-tray10" / "nvidia-smi-q.txt").write_text(text[:cut])
    registration = _promise(judge_rack(read_trays(rack)), "rack-fabric-registration")
    assert registration == {"id": "rack-fabric-registration", "outcome": "not checked",
                            "reason": "a fabric reading without status, clique id, cluster UUID for tray "
                                      "gb200-tray10 GPU0 (GPU-f7b02328-d6fe-5b1f-9683-15041689bb03)"}


# finding 3: the all_reduce evidence is one good all_reduce run over the rack's ranks


def _run_text(ranks: int, op: str = "all_reduce", *, host: str = "gb200-tray{tray:02d}", per_host: int = 4,
              name: str = "NVIDIA GB200", bus=None) -> str:
    """The real NVL72 all_reduce output with its device list made whole (ranks 0..ranks-1) under a header naming
    ``op``, each rank on the replayed rack's tray hosts (``per_host`` a host) naming ``name``; ``bus``: the bus id
    each device prints (by device number), else the capture's own ``[0x01]``."""
    lines = NCCL_72.read_text().splitlines(keepends=True)
    device = lines[0].replace("NVIDIA Graphics Device", name)
    listed = [device.replace("Rank 71", f"Rank {rank:2d}")
              .replace("slurm-gb200-207-171", host.format(tray=rank // per_host + 1, node=rank // per_host))
              .replace("device  3 [0x01]", f"device {rank % per_host:2d} [{bus(rank % per_host) if bus else '0x01'}]")
              for rank in range(ranks)]
    return f"# Collective test starting: {op}_perf\n" + "".join(listed) + "".join(lines[1:])


NO_BUS = "; bus ids not compared: the device lines print [0x01], not a domain:bus:device"


def _all_reduce(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "all_reduce.txt"
    path.write_text(text)
    done = run_rack(str(RACK), "--json", "--all-reduce", str(path), "--min-busbw", "800 GB/s")
    return _promise(json.loads(done.stdout), "rack-all-reduce")


def test_a_whole_72_rank_all_reduce_passes(tmp_path):
    assert _all_reduce(tmp_path, _run_text(72)) == {
        "id": "rack-all-reduce", "outcome": "passed",
        "reason": "all_reduce over 72 ranks: 834.57 GB/s busbw at 8589934592 B, floor 800 GB/s" + NO_BUS}


def _tray_bus(device: int) -> str:
    """The replayed trays' bus id of GPU ``device`` as nccl-tests prints it (00000008:01:00.0 -> 0008:01:00)."""
    domain, bus, slot = tray_record(1)["gpus"][device]["pci_bus_id"].split(".")[0].split(":")
    return f"{domain[-4:]}:{bus}:{slot}"


def test_a_72_rank_all_reduce_on_the_trays_own_bus_ids_passes_without_a_note(tmp_path):
    assert _all_reduce(tmp_path, _run_text(72, bus=_tray_bus)) == {
        "id": "rack-all-reduce", "outcome": "passed",
        "reason": "all_reduce over 72 ranks: 834.57 GB/s busbw at 8589934592 B, floor 800 GB/s"}


def test_a_72_rank_all_reduce_of_h100_hosts_is_no_evidence_of_the_rack(tmp_path):
    """72 H100 ranks, 8 a host on h100-node00..08: the right rank count and bandwidth, but not the rack's GPUs."""
    text = _run_text(72, host="h100-node{node:02d}", per_host=8, name="NVIDIA H100 80GB HBM3")
    assert _all_reduce(tmp_path, text) == {
        "id": "rack-all-reduce", "outcome": "not checked",
        "reason": "the all_reduce is not a run over the rack's GPUs: rank 0 names NVIDIA H100 80GB HBM3; rank 1 "
                  "names NVIDIA H100 80GB HBM3; rank 2 names NVIDIA H100 80GB HBM3 (+69 more ranks), the trays' "
                  "GPUs are NVIDIA GB200; ranks per host: h100-node00 ran 8, h100-node01 ran 8, h100-node02 ran 8 "
                  "(+6 more hosts), a tray has 4 GPUs; hosts h100-node00, h100-node01, h100-node02 (+6 more) are no "
                  "tray's (the trays' hosts: gb200-tray01, gb200-tray02, gb200-tray03 ...)"}


@pytest.mark.parametrize("change, reason", [
    ({"name": "NVIDIA Graphics Device"}, "rank 0 names NVIDIA Graphics Device; rank 1 names NVIDIA Graphics Device; "
                                         "rank 2 names NVIDIA Graphics Device (+69 more ranks), the trays' GPUs are "
                                         "NVIDIA GB200"),
    ({"host": "gb200-tray{tray:02d}", "per_host": 8}, "ranks per host: gb200-tray01 ran 8, gb200-tray02 ran 8, "
                                                      "gb200-tray03 ran 8 (+6 more hosts), a tray has 4 GPUs"),
    ({"bus": lambda device: f"0000:{0x18 + device:02x}:00"}, "rank 0 [0000:18:00] on gb200-tray01; rank 1 "
                                                             "[0000:19:00] on gb200-tray01; rank 2 [0000:1a:00] on "
                                                             "gb200-tray01 (+69 more): no GPU of that tray has that "
                                                             "bus id"),
])
def test_a_run_whose_device_lines_are_not_the_trays_gpus_is_not_checked(tmp_path, change, reason):
    assert _all_reduce(tmp_path, _run_text(72, **change)) == {
        "id": "rack-all-reduce", "outcome": "not checked",
        "reason": "the all_reduce is not a run over the rack's GPUs: " + reason}


def test_trays_without_a_host_leave_hosts_uncompared_but_judge_the_rest(tmp_path):
    rack = copied_rack(tmp_path)
    for tray in rack.iterdir():
        if tray.is_dir():
            record = json.loads((tray / "nvml.json").read_text())
            del record["hostname"]
            (tray / "nvml.json").write_text(json.dumps(record))
    run = all_reduce_run(_run_text(72, host="node{node:02d}"))
    assert judge_rack(read_trays(rack), all_reduce=run, min_busbw=800)["promises"][4] == {
        "id": "rack-all-reduce", "outcome": "passed",
        "reason": "all_reduce over 72 ranks: 834.57 GB/s busbw at 8589934592 B, floor 800 GB/s; hosts and bus ids "
                  "not compared: a tray's evidence names no host"}


def test_a_run_of_another_test_fails(tmp_path):
    assert _all_reduce(tmp_path, _run_text(72, "sendrecv")) == {
        "id": "rack-all-reduce", "outcome": "failed",
        "reason": "the output's last run is sendrecv, not an all_reduce"}


def test_wrong_values_fail_the_all_reduce(tmp_path):
    failed = _run_text(72).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 6170 FAILED")
    assert _all_reduce(tmp_path, failed) == {
        "id": "rack-all-reduce", "outcome": "failed",
        "reason": "the all_reduce's data check failed: Out of bounds values : 6170 FAILED" + NO_BUS}
    wrong = "\n".join(line[:-7] + "   1234" if line.startswith("  ") else line
                      for line in _run_text(72).splitlines())
    promise = _all_reduce(tmp_path, wrong + "\n")
    assert promise["outcome"] == "failed"
    assert promise["reason"].startswith("the all_reduce's data check failed: 1234 wrong values at 536870912 B "
                                        "in-place")


def test_the_last_run_is_judged_by_its_own_rank_count(tmp_path):
    text = _run_text(72) + _run_text(8)
    run = all_reduce_run(text)
    assert (run["ranks"], run["runs_in_file"]) == (8, 2)
    assert _all_reduce(tmp_path, text) == {
        "id": "rack-all-reduce", "outcome": "failed",
        "reason": "the all_reduce ran over 8 ranks, the rack has 72 GPUs (834.57 GB/s busbw at 8589934592 B, "
                  "floor 800 GB/s)" + NO_BUS}


# finding 4 and 8: options that cannot describe the rack are refused


@pytest.mark.parametrize("args, message", [
    (("--expect", "gb200-tray[01-17]"), "--expect names 17 trays, --trays is 18: they must agree (one distinct name "
                                        "per tray)"),
    (("--all-reduce", str(NCCL_72), "--min-busbw", "0 GB/s"),
     "--min-busbw '0 GB/s': give a bandwidth above 0")])
def test_options_that_cannot_describe_the_rack_are_a_usage_error(args, message):
    done = run_rack(str(RACK), *args)
    assert (done.returncode, done.stderr.strip()) == (4, f"gpufabric fleet rack: {message}")


# finding 5: the fleet results must be a whole verdict of these trays


def _fleet_outcome(tmp_path: Path, document: dict) -> dict:
    path = tmp_path / "fleet-results.json"
    path.write_text(json.dumps(document))
    return _promise(json.loads(run_rack(str(RACK), "--json", "--fleet", str(path)).stdout), "rack-trays-accepted")


def test_fleet_results_that_are_whole_pass(tmp_path):
    assert _fleet_outcome(tmp_path, fleet_results())["outcome"] == "passed"


def test_fleet_results_changed_after_they_were_written_fail(tmp_path):
    document = fleet_results()
    document["nodes"][4]["verdict"] = "ACCEPTED"
    document["nodes"][4]["reason"] = "edited"
    promise = _fleet_outcome(tmp_path, document)
    assert promise["outcome"] == "failed"
    assert promise["reason"].startswith("integrity: the fleet results changed after they were written")


def test_fleet_results_without_integrity_are_not_checked(tmp_path):
    document = fleet_results()
    del document["integrity"]
    assert _fleet_outcome(tmp_path, document) == {
        "id": "rack-trays-accepted", "outcome": "not checked",
        "reason": "the fleet results carry no integrity block (written by `gpufabric fleet report`)"}


def test_a_rejected_fleet_and_duplicate_hosts_fail(tmp_path):
    document = fleet_results()
    document.update(verdict="REJECTED", reason="results of 2 fleet runs mixed",
                    duplicate_hosts=[{"host": "gb200-tray05", "nodes": ["gb200-tray05", "gb200-tray06"]}])
    document["integrity"] = integrity_block(document, None, None, None)
    promise = _fleet_outcome(tmp_path, document)
    assert promise["outcome"] == "failed"
    assert promise["reason"].startswith("the fleet results' own verdict is REJECTED: results of 2 fleet runs mixed; "
                                        "the fleet results name a host for more than one node: ")


def test_a_tray_listed_twice_is_not_accepted(tmp_path):
    document = fleet_results({"gb200-tray05": "REJECTED"})
    document["nodes"].append({"name": "gb200-tray05", "verdict": "ACCEPTED", "reason": "as judged"})
    document["verdict"] = "ACCEPTED"
    document["integrity"] = integrity_block(document, None, None, None)
    promise = _fleet_outcome(tmp_path, document)
    assert promise == {"id": "rack-trays-accepted", "outcome": "failed",
                       "reason": "tray gb200-tray05 is listed 2 times in the fleet results"}


def test_the_fleet_promise_looks_up_the_rack_s_trays_not_the_folders():
    document = fleet_results()
    trays = [t for t in read_trays(RACK) if t.name != "gb200-tray18"]
    promise = _promise(judge_rack(trays, expected=TRAYS, fleet=document), "rack-trays-accepted")
    assert promise == {"id": "rack-trays-accepted", "outcome": "passed", "reason": "all 18 trays ACCEPTED"}
    promise = _promise(judge_rack(trays, fleet=document), "rack-trays-accepted")
    assert promise == {"id": "rack-trays-accepted", "outcome": "not checked",
                       "reason": "17 trays to look up, the rack has 18; the fleet results hold gb200-tray18, not a "
                                 "tray of this rack"}


# finding 6: fabric health that says the GPU is misplaced fails its registration


@pytest.mark.parametrize("field, word", [("Incorrect Configuration", "Insufficient NVLinks"),
                                         ("Partition Assigned", "False"), ("Route Recovery in progress", "True"),
                                         ("Access Timeout Recovery", "True")])
def test_fabric_health_saying_the_gpu_is_misplaced_fails_registration(tmp_path, field, word):
    rack = copied_rack(tmp_path)
    fabric = dict(tray_record(5)["gpus"][0]["fabric"], health={field: word})
    _set_fabric(rack, "gb200-tray05", fabric)
    registration = _promise(judge_rack(read_trays(rack)), "rack-fabric-registration")
    assert registration["outcome"] == "failed"
    assert registration["reason"].startswith(f"tray gb200-tray05 GPU0 ({tray_record(5)['gpus'][0]['uuid']}): fabric "
                                             f"health {field} {word}; ")


def test_mask_decoded_health_words_are_judged_the_same(tmp_path):
    """NVML's mask: Incorrect Configuration 5 (Insufficient NVLinks) at bits 8-11, Partition Assigned 1 (True)."""
    rack = copied_rack(tmp_path)
    _set_fabric(rack, "gb200-tray05", dict(tray_record(5)["gpus"][0]["fabric"], health_mask=(5 << 8) | (1 << 12)))
    registration = _promise(judge_rack(read_trays(rack)), "rack-fabric-registration")
    assert "fabric health Incorrect Configuration Insufficient NVLinks" in registration["reason"]


@pytest.mark.parametrize("health, mask, reason", [
    ({}, 1, "fabric health Bandwidth Degraded"),  # an empty health dict does not hide the mask
    ({"bandwidth": "degraded"}, None, "fabric health Bandwidth Degraded"),  # names and words in any case
    ({"Bandwidth": 1}, None, "fabric health Bandwidth Degraded"),  # NVML's per-field number, decoded
    ({"Bandwidth": "Full"}, 1, "gpus[0].fabric (GPU0) fabric health and health_mask in nvml.json disagree: "
                               "Bandwidth Full vs Degraded"),  # two readings that disagree: failed
])
def test_fabric_health_is_judged_from_both_the_dict_and_the_mask(tmp_path, health, mask, reason):
    rack = copied_rack(tmp_path)
    fabric = dict(tray_record(5)["gpus"][0]["fabric"], health=health)
    if mask is not None:
        fabric["health_mask"] = mask
    _set_fabric(rack, "gb200-tray05", fabric)
    registration = _promise(judge_rack(read_trays(rack)), "rack-fabric-registration")
    assert registration["outcome"] == "failed"
    assert registration["reason"].startswith(f"tray gb200-tray05 GPU0 ({tray_record(5)['gpus'][0]['uuid']}): "
                                             f"{reason};")


# finding 7: what a reader could not read, and two readings that disagree


def test_a_smi_q_text_the_reader_could_not_read_whole_is_not_checked(tmp_path):
    rack = copied_rack(tmp_path)
    (rack / "gb200-tray10" / "nvml.json").unlink()
    text = SMI_Q_TEXT.read_text().replace("Attached GPUs                             : 1",
                                          "Attached GPUs                             : 6")
    (rack / "gb200-tray10" / "nvidia-smi-q.txt").write_text(text)
    trays = _promise(judge_rack(read_trays(rack)), "rack-trays")
    assert trays["outcome"] == "failed"  # the one-GPU text is a tray of the wrong size as well
    assert "tray gb200-tray10: nvidia-smi-q.txt: the header says 6 attached GPUs" in trays["reason"]


def test_two_readings_of_a_tray_that_disagree_are_rejected(tmp_path):
    rack = copied_rack(tmp_path)
    shutil.copy(SMI_Q_TEXT, rack / "gb200-tray05" / "nvidia-smi-q.txt")
    trays = _promise(judge_rack(read_trays(rack)), "rack-trays")
    assert trays == {"id": "rack-trays", "outcome": "failed",
                     "reason": "tray gb200-tray05: its bundle and nvidia-smi-q.txt name different GPUs"}


def test_two_readings_of_one_gpu_with_another_fabric_state_are_rejected(tmp_path):
    """The tray's bundle holds the one GPU of the real della `-q` text with that text's fabric reading; the text
    beside it says In Progress."""
    rack = copied_rack(tmp_path)
    path = rack / "gb200-tray05" / "nvml.json"
    record = json.loads(path.read_text())
    record["gpus"] = [dict(record["gpus"][0], uuid="GPU-f7b02328-d6fe-5b1f-9683-15041689bb03",
                           fabric={"state": 3, "status": 0, "clique_id": 0,
                                   "cluster_uuid": "00000000-0000-0000-0000-000000000000"})]
    record["gpu_count"] = 1
    path.write_text(json.dumps(record))
    text = SMI_Q_TEXT.read_text()
    (rack / "gb200-tray05" / "nvidia-smi-q.txt").write_text(text)
    assert _promise(judge_rack(read_trays(rack)), "rack-trays")["reason"] == \
        "tray gb200-tray05 has 1 GPUs, a tray has 4"  # the same reading twice: no contradiction
    state = "        State                             : "
    (rack / "gb200-tray05" / "nvidia-smi-q.txt").write_text(text.replace(state + "Completed", state + "In Progress"))
    trays = _promise(judge_rack(read_trays(rack)), "rack-trays")
    assert trays["reason"].startswith(
        "tray gb200-tray05: its bundle and nvidia-smi-q.txt disagree on GPU0's fabric: ('Completed', 'Success', 0, "
        "'00000000-0000-0000-0000-000000000000') vs ('In Progress', 'Success', 0, "
        "'00000000-0000-0000-0000-000000000000')")


# finding 8: an IMEX domain named by hostnames is the rack's trays


def _imex_with_hosts(hosts: list[str]) -> str:
    lines = (BLACKWELL / "nvidia-imex-ctl-N-gb200-nvl72-18node-570.172-aws-p6e.txt").read_text().splitlines()
    out = []
    for line in lines:
        if line.startswith("Node #"):
            number, rest = line.split(" - ", 1)
            line = f"{number} - {hosts[int(number[6:])]}    - {rest.split(' - ', 1)[1]}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_an_imex_domain_of_other_hosts_fails(tmp_path):
    """The trays with their manifests (rack_replay.dated_rack: dated, so the status is tied to them)."""
    from pytest_gpufabric.formats.imex import parse_imex_status

    rack = dated_rack(tmp_path)
    ours = parse_imex_status(_imex_with_hosts(TRAYS))
    assert ours["nodes"][4]["address"] == "gb200-tray05"
    assert _promise(judge_rack(read_trays(rack), imex=ours), "rack-imex")["outcome"] == "passed"
    other = parse_imex_status(_imex_with_hosts([*TRAYS[:17], "gb300-tray18"]))
    assert _promise(judge_rack(read_trays(rack), imex=other), "rack-imex") == {
        "id": "rack-imex", "outcome": "failed",
        "reason": "IMEX node #17 (gb300-tray18) is no tray of the rack (their hosts: gb200-tray01, gb200-tray02, "
                  "gb200-tray03 ...); tray gb200-tray18 is in no IMEX node"}


def _four_gpu_text(tray: int) -> str:
    """The real della `-q` text made a tray's: its one GPU block four times, each with the tray's bus id and UUID
    and the rack's fabric clique and cluster UUID (the header's GPU count set to 4)."""
    from rack_replay import CLIQUE_ID, CLUSTER_UUID

    text = SMI_Q_TEXT.read_text()
    start = text.index("GPU 00000000:DB:00.0")
    header, block = text[:start], text[start:]
    block = block.replace("CliqueId                          : 0", f"CliqueId                          : {CLIQUE_ID}")
    block = block.replace("ClusterUUID                       : 00000000-0000-0000-0000-000000000000",
                          f"ClusterUUID                       : {CLUSTER_UUID}")
    blocks = [block.replace("00000000:DB:00.0", gpu["pci_bus_id"]).replace(
        "GPU-f7b02328-d6fe-5b1f-9683-15041689bb03", gpu["uuid"]) for gpu in tray_record(tray)["gpus"]]
    attached = "Attached GPUs                             : "
    header = header.replace(attached + "1", attached + "4")
    return header + "".join(b if b.endswith("\n") else b + "\n" for b in blocks)


def test_a_tray_text_whose_header_says_more_gpus_than_it_describes_is_not_checked(tmp_path):
    rack = copied_rack(tmp_path)
    (rack / "gb200-tray10" / "nvml.json").unlink()
    text = _four_gpu_text(10)
    (rack / "gb200-tray10" / "nvidia-smi-q.txt").write_text(text)
    whole = judge_rack(read_trays(rack))
    assert _promise(whole, "rack-trays") == {"id": "rack-trays", "outcome": "passed", "reason": "18 trays of 4 GPUs"}
    assert _promise(whole, "rack-fabric-registration")["outcome"] == "passed"
    (rack / "gb200-tray10" / "nvidia-smi-q.txt").write_text(text.replace(
        "Attached GPUs                             : 4", "Attached GPUs                             : 6"))
    trays = _promise(judge_rack(read_trays(rack)), "rack-trays")
    assert trays["outcome"] == "not checked"
    assert trays["reason"].startswith("tray gb200-tray10: nvidia-smi-q.txt: the header says 6 attached GPUs, the "
                                      "text describes 4")
