"""A tray's readings held to its manifest.json (review 7, findings 2 and 4): where a tray folder has a manifest,
every reading the rack reads must be listed there, not recorded as unwritten, and carry its sha256 (either hex case);
a digest that is not 64 hex digits is a malformed manifest (not checked). A folder without a manifest keeps the
rule it had: its readings are read as they are.

Real data: the replayed GB200 rack (tests/data/racks/gb200-nvl72-replayed/, from real public GB200 outputs) and
AWS's real 18-node IMEX status. DERIVED: the addressed rack's ip-addr.json files and manifests
(rack_replay.addressed_rack); each case changes copies of them in tmp_path."""

from __future__ import annotations

import json
import shutil

from rack_replay import (
    BLACKWELL,
    IMEX_18,
    addressed_rack,
    dated_rack,
    judge_whole_rack,
    run_rack,
    tray_record,
    write_manifest,
)

from pytest_gpufabric.fabric.host_addresses import not_as_recorded

TRAY = "gb200-tray05"


def _promise(document: dict, promise: str) -> dict:
    return next(p for p in document["promises"] if p["id"] == promise)


def _judged(rack) -> dict:
    """The rack judged whole, against the 18-tray IMEX nodes file."""
    return judge_whole_rack(rack, IMEX_18.read_text())


def _trays(rack) -> dict:
    """The rack-trays promise of the rack judged whole."""
    return _promise(_judged(rack), "rack-trays")


def _manifest(rack, tray: str = TRAY) -> dict:
    return json.loads((rack / tray / "manifest.json").read_text())


def _save(rack, manifest: dict, tray: str = TRAY) -> None:
    (rack / tray / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _foreign_nvml(rack) -> None:
    """Tray 05's nvml.json replaced by one of another recording (driver 560.0), its manifest left as it was."""
    record = tray_record(5)
    record["driver_version"] = "560.0"
    (rack / TRAY / "nvml.json").write_text(json.dumps(record, indent=1) + "\n")


# finding 2: a reading the manifest does not list, lists without a digest, or says was not written


def test_a_reading_the_manifest_says_was_not_written_is_rejected(tmp_path):
    """The snapshot's NVML failed (its manifest lists no nvml.json and says why); an nvml.json put in the folder
    after it was read and dated by that manifest: ACCEPTED. It is no reading of that recording."""
    rack = addressed_rack(tmp_path)
    manifest = _manifest(rack)
    manifest["files"].remove("nvml.json")
    del manifest["sha256"]["nvml.json"]
    manifest["commands"]["nvml.json"] = {"error": "NVML: GPU is lost"}
    _save(rack, manifest)
    _foreign_nvml(rack)
    reason = ("tray gb200-tray05: nvml.json is in the folder, but manifest.json says its snapshot did not write it "
              "(NVML: GPU is lost): not the tray's recording")
    document = _judged(rack)
    assert (document["verdict"], _promise(document, "rack-trays")) == (
        "REJECTED", {"id": "rack-trays", "outcome": "failed", "reason": reason})
    done = run_rack(str(rack), "--imex", str(IMEX_18))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == f"gpufabric: REJECTED rack rack: rack-trays: {reason}"


def test_a_reading_the_manifest_does_not_list_is_rejected(tmp_path):
    rack = addressed_rack(tmp_path)
    manifest = _manifest(rack)
    manifest["files"].remove("nvml.json")
    del manifest["sha256"]["nvml.json"]
    _save(rack, manifest)
    _foreign_nvml(rack)
    document = _judged(rack)
    assert (document["verdict"], _promise(document, "rack-trays")) == ("REJECTED", {
        "id": "rack-trays", "outcome": "failed",
        "reason": "tray gb200-tray05: nvml.json is not listed in manifest.json (put in the folder after or before "
                  "its snapshot): not the tray's recording"})


def test_a_reading_listed_without_its_sha256_is_rejected(tmp_path):
    rack = addressed_rack(tmp_path)
    manifest = _manifest(rack)
    del manifest["sha256"]["nvml.json"]
    _save(rack, manifest)
    _foreign_nvml(rack)
    document = _judged(rack)
    assert (document["verdict"], _promise(document, "rack-trays")) == ("REJECTED", {
        "id": "rack-trays", "outcome": "failed",
        "reason": "tray gb200-tray05: manifest.json lists nvml.json without its sha256: not shown to be the tray's "
                  "recording"})


def test_a_command_that_exited_non_zero_has_no_reading(tmp_path):
    """`nvidia-smi topo -m` exited 1 in the snapshot (no file written): a topology file in the folder is not its."""
    folder = tmp_path / "tray"
    folder.mkdir()
    shutil.copy(BLACKWELL / "nvidia-smi-L-gb200-4gpu-slurm-k8s-aarch64.txt", folder / "nvidia-smi-topo-m.txt")
    manifest = write_manifest(folder)
    manifest["commands"]["nvidia-smi-topo-m.txt"] = {"cmd": ["nvidia-smi", "topo", "-m"], "returncode": 1,
                                                     "stderr": ""}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert not_as_recorded(folder, ("nvidia-smi-topo-m.txt", "nvml.json")) == ([
        "nvidia-smi-topo-m.txt is in the folder, but manifest.json says its snapshot did not write it (exit 1): not "
        "the tray's recording"], [])


def test_a_manifest_from_before_digests_is_held_to_its_file_list(tmp_path):
    """The shipped bundles' manifests (snapshot before it recorded digests) have no sha256: a reading they list
    passes, one they do not list is not the recording's."""
    rack = dated_rack(tmp_path)
    for tray in ("gb200-tray05", "gb200-tray06"):
        manifest = _manifest(rack, tray)
        del manifest["sha256"]
        _save(rack, manifest, tray)
    assert _trays(rack)["outcome"] == "passed"
    manifest = _manifest(rack, "gb200-tray06")
    manifest["files"].remove("nvml.json")
    _save(rack, manifest, "gb200-tray06")
    assert _trays(rack) == {
        "id": "rack-trays", "outcome": "failed",
        "reason": "tray gb200-tray06: nvml.json is not listed in manifest.json (put in the folder after or before "
                  "its snapshot): not the tray's recording"}


def test_a_manifest_stripped_of_its_digests_is_no_old_one(tmp_path):
    """Review 8, finding 4: the snapshot began recording the addresses and the digests in one change, so a manifest
    with the address commands and no sha256 (the key deleted) is no snapshot's: the tray is not checked, where the
    list alone passed a reading swapped after the snapshot; "sha256": null is malformed, as the docs' table says."""
    rack = addressed_rack(tmp_path)
    manifest = _manifest(rack)
    assert "ip-addr.json" in manifest["commands"]
    del manifest["sha256"]
    _save(rack, manifest)
    assert _trays(rack) == {
        "id": "rack-trays", "outcome": "not checked",
        "reason": "tray gb200-tray05: manifest.json records the host's addresses but no sha256: no `gpufabric "
                  "snapshot` writes that (its digests removed?): the tray's readings cannot be tied to it"}
    rack = addressed_rack(tmp_path / "b")
    manifest = _manifest(rack)
    manifest["sha256"] = None
    _save(rack, manifest)
    assert _trays(rack) == {
        "id": "rack-trays", "outcome": "not checked",
        "reason": "tray gb200-tray05: manifest.json is malformed (its sha256 not as `gpufabric snapshot` writes "
                  "them): the tray's readings cannot be tied to it"}


def test_a_tray_without_a_manifest_keeps_todays_rule(tmp_path):
    """No manifest (a saved text given by hand, an older bundle): nothing to hold the reading to; it is read."""
    rack = dated_rack(tmp_path)
    (rack / TRAY / "manifest.json").unlink()
    _foreign_nvml(rack)
    assert _trays(rack) == {
        "id": "rack-trays", "outcome": "passed", "reason": "18 trays of 4 GPUs"}


def test_a_manifest_that_cannot_be_read_leaves_the_tray_not_checked(tmp_path):
    rack = addressed_rack(tmp_path)
    (rack / TRAY / "manifest.json").write_text('{"files": [')
    trays = _trays(rack)
    assert trays["outcome"] == "not checked"
    assert trays["reason"].startswith("tray gb200-tray05: manifest.json cannot be read (")
    assert trays["reason"].endswith("): the tray's readings cannot be tied to it")
    rack = addressed_rack(tmp_path / "b")
    manifest = _manifest(rack)
    manifest["sha256"] = list(manifest["sha256"].values())
    _save(rack, manifest)
    assert _trays(rack) == {
        "id": "rack-trays", "outcome": "not checked",
        "reason": "tray gb200-tray05: manifest.json is malformed (its sha256 not as `gpufabric snapshot` writes "
                  "them): the tray's readings cannot be tied to it"}


# finding 4: a digest in upper-case hex is the same digest; one that is not 64 hex digits is malformed


def test_an_upper_case_digest_of_an_untouched_tray_is_accepted(tmp_path):
    rack = addressed_rack(tmp_path)
    manifest = _manifest(rack)
    manifest["sha256"] = {name: digest.upper() for name, digest in manifest["sha256"].items()}
    _save(rack, manifest)
    document = _judged(rack)
    assert (document["verdict"], _promise(document, "rack-trays")["outcome"],
            _promise(document, "rack-imex")["outcome"]) == ("ACCEPTED", "passed", "passed")
    _foreign_nvml(rack)  # an upper-case digest still tells another file
    assert _trays(rack) == {
        "id": "rack-trays", "outcome": "failed",
        "reason": "tray gb200-tray05: nvml.json is not the file its bundle recorded (its sha256 differs from "
                  "manifest.json's)"}


def test_a_digest_that_is_not_64_hex_digits_is_a_malformed_manifest(tmp_path):
    rack = addressed_rack(tmp_path)
    manifest = _manifest(rack)
    manifest["sha256"]["nvml.json"] = manifest["sha256"]["nvml.json"][:63]
    manifest["sha256"]["ip-addr.json"] = "sha256:" + manifest["sha256"]["ip-addr.json"]
    _save(rack, manifest)
    document = _judged(rack)
    short = _manifest(rack)["sha256"]["nvml.json"]
    assert (document["verdict"], _promise(document, "rack-trays")) == ("INCOMPLETE", {
        "id": "rack-trays", "outcome": "not checked",
        "reason": f"tray gb200-tray05: manifest.json is malformed: its sha256 of nvml.json is not 64 hex digits "
                  f"('{short}')"})
    assert _promise(document, "rack-imex") == {
        "id": "rack-imex", "outcome": "not checked",
        "reason": "IMEX node #4 (172.31.50.39) matched to no tray: not checked for tray gb200-tray05: ip-addr.json "
                  "not tied to the tray's bundle: manifest.json is malformed: its sha256 of ip-addr.json is not 64 "
                  "hex digits"}
