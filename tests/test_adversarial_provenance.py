"""Where the evidence came from, and what verify and the fleet judge (issue 40): tried as a hostile node would.

Every case starts from results a real replay wrote in the test (tests/fleet_nodes.py: the whole acceptance of a
2x H200 SXM 141GB machine, replayed once per process; and a signed replay of the same machine with peer-to-peer
disabled, REJECTED), or from results recorded on real machines (tests/data/results/); each edit of a copy is
DERIVED, as marked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from fleet_nodes import DATA, FLEET_ID, derived, replayed, report_of, write_node

from pytest_gpufabric.cli import main
from pytest_gpufabric.fleet.report import build_fleet_document
from pytest_gpufabric.report.html_signing import RESULTS_SCRIPT_ID, embed_results_json, sign_html
from pytest_gpufabric.report.integrity import bundle_digest, sign_document
from pytest_gpufabric.report.provenance import BOOT_ID_PATH, evidence_record
from pytest_gpufabric.report.results import RESULTS_SCHEMA_VERSION
from pytest_gpufabric.report.signing import load_private_key, verify_command, verify_path

RESULTS = "gpufabric-results.json"
BUNDLE = DATA / "bundles" / "h200-nvswitch-x2-acceptance"
REPLAYED = ("a replay of bundle h200-nvswitch-x2-acceptance (sha256 {sha}): recorded evidence, not a live run of "
            "this node (--allow-replays judges replays)")


def _key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _node(document: dict, name: str) -> dict:
    return next(n for n in document["nodes"] if n["name"] == name)


def _write(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def rejected_run(tmp_path_factory) -> dict:
    """A signed replay of the 2x H200 bundle with peer-to-peer disabled: REJECTED, its results and report."""
    work = tmp_path_factory.mktemp("rejected-run")
    key, pub = _key_pair(work, "vendor")
    reports = work / "reports"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-profile",
                           "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-p2p-disabled", "--gpu-sign-key",
                           str(key), "--gpu-report-dir", str(reports)], cwd=work, capture_output=True, text=True,
                          timeout=600)
    results = json.loads((reports / RESULTS).read_text(encoding="utf-8"))
    assert results["summary"]["verdict"] == "REJECTED", done.stdout[-3000:]
    return {"work": work, "key": key, "pub": pub, "results": results}


# --- finding 1: where the evidence came from ---------------------------------------------------------------


def test_results_say_where_their_evidence_came_from():
    """A replay names its bundle and the bundle's digest, and no host or boot; a live run names this host and this
    boot (read here, on the machine the tests run on). verify says a replay is one."""
    replay = replayed("accepted")
    assert replay["schema_version"] == RESULTS_SCHEMA_VERSION == 4
    assert {k: replay["evidence"][k] for k in ("kind", "bundle", "bundle_sha256", "host", "boot_id")} == {
        "kind": "replay", "bundle": BUNDLE.name, "bundle_sha256": bundle_digest(BUNDLE), "host": None, "boot_id": None}
    path = _write(Path(tempfile.mkdtemp()) / RESULTS, replay)
    code, lines = verify_command([str(path)], None, allow_unsigned=True)
    assert code == 0 and f"  note: its evidence is a replay of bundle {BUNDLE.name} (sha256 " \
        f"{bundle_digest(BUNDLE)[:12]}): recorded evidence, not a live run of a machine" in lines
    live = evidence_record(SimpleNamespace(replay=None, bundle_dir=None), {"run": {"host": os.uname().nodename}})
    assert live["kind"] == "live" and live["host"] == os.uname().nodename
    assert live["boot_id"] == Path(BOOT_ID_PATH).read_text(encoding="ascii").strip()


def test_a_replayed_node_is_never_accepted_even_signed(tmp_path, capsys):
    """Three nodes whose results are replays of a shipped bundle (what `gpufabric accept` writes by itself on a node
    without a driver), each signed by the vendor's key: --require-signed verifies them, and the fleet accepts none."""
    key, pub = _key_pair(tmp_path, "vendor")
    private = load_private_key(key)
    for name in ("gpu-01", "gpu-02", "gpu-03"):  # DERIVED: hosts and serials of their own
        write_node(tmp_path / "nodes", name, sign_document(derived(replayed("accepted"), name), private))
    out = tmp_path / "out"
    code = main(["fleet", "report", str(tmp_path / "nodes"), "-o", str(out), "--require-signed", "--key", str(pub)])
    printed = capsys.readouterr().out
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    assert (code, document["verdict"], document["counts"]["accepted"]) == (6, "INCOMPLETE", 0)
    assert document["signatures"]["verified"] == 3
    why = REPLAYED.format(sha=bundle_digest(BUNDLE)[:12])
    tally = "all 37 promise(s) checked passed, 1 waived: xid-events"
    assert _node(document, "gpu-01")["reason"] == f"{why}; {tally}"
    assert f"  not accepted gpu-02: INCOMPLETE: {why}; {tally}" in printed
    assert document["provenance"] == {"fleet_id": FLEET_ID, "fleet_id_from": f"fleet run {FLEET_ID} (named by 3 of 3 "
                                      "nodes)", "replays_allowed": False, "replayed": ["gpu-01", "gpu-02", "gpu-03"]}


def _as_live(document: dict, boot_id: str | None) -> dict:
    """DERIVED: a replay's results edited to claim a live run."""
    document["run"].update(mode="live", replay=None)
    document["evidence"].update(kind="live", bundle=None, bundle_sha256=None, host=document["run"]["host"],
                                boot_id=boot_id)
    return document


def test_a_replay_told_as_live_needs_a_boot_of_its_own(tmp_path):
    """A replay's results edited to say live: without a boot it shows no live run; with another node's boot it is
    that machine's results filed twice. Neither is accepted; an untouched live-looking pair is not named."""
    root = tmp_path / "nodes"
    write_node(root, "gpu-01", _as_live(derived(replayed("accepted"), "gpu-01"), None))
    write_node(root, "gpu-02", _as_live(derived(replayed("accepted"), "gpu-02"), "4f1c9a1e-boot"))
    write_node(root, "gpu-03", _as_live(derived(replayed("accepted"), "gpu-03"), "4f1c9a1e-boot"))
    document = build_fleet_document([root], None)
    assert document["counts"]["accepted"] == 0 and document["verdict"] == "INCOMPLETE"
    assert _node(document, "gpu-01")["reason"] == (
        f"its results (format {RESULTS_SCHEMA_VERSION}) do not name the host and boot they measured: they cannot show "
        "a live run of this node (run the acceptance again); all 37 promise(s) checked passed, 1 waived: xid-events")
    assert _node(document, "gpu-02")["reason"] == (
        "its boot (4f1c9a1e-boot) is also the one gpu-03 measured: one machine's results filed as several nodes; "
        "all 37 promise(s) checked passed, 1 waived: xid-events")


def test_nodes_of_no_fleet_run_or_of_another_are_not_accepted(tmp_path):
    root = tmp_path / "nodes"
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        write_node(root, name, derived(replayed("accepted"), name))
    stray = derived(replayed("accepted"), "gpu-04")
    stray["run"]["fleet_id"] = None  # DERIVED: a run outside any fleet run
    write_node(root, "gpu-04", stray)
    other = derived(replayed("accepted"), "gpu-05")
    other["run"]["fleet_id"] = "31337"  # DERIVED: another fleet run's node
    write_node(root, "gpu-05", other)
    document = build_fleet_document([root], None, allow_replays=True)
    assert [n["name"] for n in document["nodes"] if n["verdict"] == "ACCEPTED"] == ["gpu-01", "gpu-02", "gpu-03"]
    tally = "all 37 promise(s) checked passed, 1 waived: xid-events"
    assert _node(document, "gpu-04")["reason"] == ("of no fleet run: its results name no fleet id (--gpu-fleet-id, "
                                                   f"or SLURM_JOB_ID); {tally}")
    assert _node(document, "gpu-05")["reason"] == f"of fleet run 31337, not this fleet's {FLEET_ID}; {tally}"
    assert document["verdict"] == "REJECTED"  # two fleet runs' results mixed, as before
    named = build_fleet_document([root], None, fleet_id="31337", allow_replays=True)
    assert [n["name"] for n in named["nodes"] if n["verdict"] == "ACCEPTED"] == ["gpu-05"]


# --- finding 2: verify and the fleet judge content ------------------------------------------------------------


@pytest.mark.parametrize("version, said", [
    (1, "cannot be judged again: it is results format 1, written before the verdict had promises: its verdict "
        "cannot be judged again"),
    ("3", "cannot be judged again: its results format '3' is not a format number (pytest-gpufabric writes an "
          "integer)"),
    (3.0, "cannot be judged again: its results format 3.0 is not a format number (pytest-gpufabric writes an "
          "integer)"),
    (True, "cannot be judged again: its results format True is not a format number (pytest-gpufabric writes an "
           "integer)"),
    (5, "cannot be judged again: it is results format 5, newer than this pytest-gpufabric reads (up to 4): its "
        "verdict cannot be judged"),
    (4, "its summary says ACCEPTED, but its own tests, checks and promises say REJECTED ("),
    (3, "its summary says ACCEPTED, but its own tests, checks and promises say REJECTED ("),
])
def test_a_rejected_file_told_as_another_format_and_re_signed_is_invalid(rejected_run, tmp_path, version, said):
    """The REJECTED results edited to ACCEPTED, told as another format, and signed again with the attacker's own
    key (verify without --key checks the key the file names): INVALID, the format named, exit 1."""
    key, _ = _key_pair(tmp_path, "attacker")
    document = json.loads(json.dumps(rejected_run["results"]))
    document["summary"].update(verdict="ACCEPTED", exit_code=0)  # DERIVED
    document["schema_version"] = version  # DERIVED
    path = _write(tmp_path / RESULTS, sign_document(document, load_private_key(key)))
    code, lines = verify_command([str(path)], None)
    assert code == 1 and lines[0] == f"{path}: INVALID" and lines[1].startswith(f"  {said}")


#: what the promise list made again from the profile says of the NVLink tests removed
NOT_CHECKED = ("4 promise(s) not checked: nvlinks[GPU0], nvlinks[GPU1], nvlink-traffic-volume[GPU0], "
               "nvlink-traffic-volume[GPU1]")


@pytest.mark.parametrize("removed", ["tests", "checks"])
def test_a_file_without_its_tests_or_checks_is_not_waved_through(rejected_run, tmp_path, removed):
    """The REJECTED results edited to ACCEPTED with their tests (or checks) removed, signed again: nothing to judge
    the promises by is no reason to take the summary's word."""
    key, _ = _key_pair(tmp_path, "attacker")
    document = json.loads(json.dumps(rejected_run["results"]))
    document["summary"].update(verdict="ACCEPTED", exit_code=0)  # DERIVED
    del document[removed]  # DERIVED
    path = _write(tmp_path / RESULTS, sign_document(document, load_private_key(key)))
    assert verify_path(path).problems == ["cannot be judged again: it holds no tests and checks to judge its promises "
                                          "by"]


def _without_promise_list(document: dict, version: int, embed_profile: bool = True) -> dict:
    """DERIVED: the accepted replay with its NVLink-state test and check removed, told as format ``version`` without
    its promise list (promised)."""
    gone = [t for t in document["tests"] if "test_nvlinks" in t]
    assert gone
    for test in gone:
        del document["tests"][test]
    document["checks"] = [c for c in document["checks"] if c["test"] not in gone]
    document["schema_version"] = version
    del document["promised"]
    if not embed_profile:
        del document["profile"]["data"]
    return document


def test_format_2_without_its_promise_list_is_judged_by_its_profile_in_the_fleet(tmp_path):
    """A node told as format 2, its promise list and one promise's test removed: the list is made again from the
    profile it embeds, and the promise no test judged is not checked; without the embedded profile it cannot be
    judged again at all. Accepted by neither."""
    root = tmp_path / "nodes"
    for name in ("gpu-01", "gpu-02"):
        write_node(root, name, derived(replayed("accepted"), name))
    write_node(root, "gpu-03", _without_promise_list(derived(replayed("accepted"), "gpu-03"), 2))
    write_node(root, "gpu-04", _without_promise_list(derived(replayed("accepted"), "gpu-04"), 2, False))
    write_node(root, "gpu-05", _without_promise_list(derived(replayed("accepted"), "gpu-05"), 3))
    document = build_fleet_document([root], None, allow_replays=True)
    assert [n["name"] for n in document["nodes"] if n["verdict"] == "ACCEPTED"] == ["gpu-01", "gpu-02"]
    assert _node(document, "gpu-03")["verdict"] == "INCOMPLETE"
    assert _node(document, "gpu-03")["reason"] == (f"{NOT_CHECKED} (its own summary says ACCEPTED: not trusted)")
    assert _node(document, "gpu-04")["reason"].startswith(
        "not judged again: it is results format 2 and embeds no profile: the promise list cannot be made again")
    assert (_node(document, "gpu-05")["state"], _node(document, "gpu-05")["verdict"]) == ("unreadable", None)


def test_format_2_without_its_promise_list_is_invalid_to_verify(tmp_path):
    key, _ = _key_pair(tmp_path, "attacker")
    private = load_private_key(key)
    told = _without_promise_list(replayed("accepted"), 2)
    path = _write(tmp_path / "told" / RESULTS, sign_document(told, private))
    code, lines = verify_command([str(path)], None)
    assert code == 1 and lines[1] == ("  its summary says ACCEPTED, but its own tests, checks and promises say "
                                      f"INCOMPLETE ({NOT_CHECKED})")
    bare = _without_promise_list(replayed("accepted"), 2, embed_profile=False)
    path = _write(tmp_path / "bare" / RESULTS, sign_document(bare, private))
    assert verify_path(path).problems == [
        "cannot be judged again: it is results format 2 and embeds no profile: the promise list cannot be made again "
        "from its profile, so what was promised cannot be shown (run the acceptance again)"]
    current = _without_promise_list(replayed("accepted"), 4)
    path = _write(tmp_path / "current" / RESULTS, sign_document(current, private))
    assert verify_path(path).problems == [
        "cannot be judged again: it is results format 4 without its promise list (promised): what was promised cannot "
        "be shown"]


@pytest.mark.parametrize("recorded", ["acceptance-time-h100-x1/run-1/acceptance-results.json",
                                      "acceptance-time-h100-x2/run-1/acceptance-results.json",
                                      "identity-on-h100-x2/planted-results.json"])
def test_recorded_format_3_results_still_verify(recorded):
    """Results format 3 written by live runs on H100 machines: judged again as before, and whole."""
    path = DATA / "results" / recorded
    assert json.loads(path.read_text(encoding="utf-8"))["schema_version"] == 3
    assert verify_path(path).problems == []


def _without_run_id_report(report: Path, target: Path, private) -> Path:
    """DERIVED: a copy of a replay's HTML report whose embedded results name no run id, signed again."""
    page = report.read_text(encoding="utf-8")
    pattern = re.compile(r'(<script type="application/json" id="' + RESULTS_SCRIPT_ID + r'">)(.*?)(</script>)', re.S)
    match = pattern.search(page)
    embedded = json.loads(match.group(2))
    del embedded["run"]["id"]
    embedded = sign_document(embedded, private)
    page = page[:match.start(2)] + embed_results_json(embedded) + page[match.end(2):]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    sign_html(target, private)
    return target


def test_a_pair_without_run_ids_cannot_be_shown_to_be_one_run(rejected_run, tmp_path):
    """An ACCEPTED report and another run's REJECTED results, neither naming a run id (as files from before run
    ids were), each signed: each is whole, but together they are not valid."""
    key, _ = _key_pair(tmp_path, "attacker")
    private = load_private_key(key)
    results = json.loads(json.dumps(rejected_run["results"]))
    del results["run"]["id"]  # DERIVED
    results_path = _write(tmp_path / RESULTS, sign_document(results, private))
    report_path = _without_run_id_report(report_of("accepted"), tmp_path / "acceptance.html", private)
    assert verify_path(results_path).valid and verify_path(report_path).valid
    code, lines = verify_command([str(results_path), str(report_path)], None)
    assert code == 1
    assert f"{report_path}: NOT VALID TOGETHER: cannot show they are one run: no run id (written before run ids " \
           "were): the results and reports given cannot be shown to be of one run" in lines


def test_a_node_changed_after_signing_is_not_accepted_by_the_fleet(tmp_path, capsys):
    """A signed node whose checks were edited afterwards: without --require-signed the fleet still checks its
    digests and signature as verify does, and neither accepts it nor counts it as signed."""
    key, _ = _key_pair(tmp_path, "vendor")
    private = load_private_key(key)
    root = tmp_path / "nodes"
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        document = sign_document(derived(replayed("accepted"), name), private)
        if name == "gpu-03":
            document["checks"][0]["found"] = {"edited": True}  # DERIVED: changed after it was signed
        write_node(root, name, document)
    code = main(["fleet", "report", "--allow-replays", str(root), "-o", str(tmp_path / "out")])
    document = json.loads((tmp_path / "out" / "fleet-results.json").read_text(encoding="utf-8"))
    assert (code, document["verdict"], document["counts"]["accepted"], document["counts"]["unsigned"]) == (
        6, "INCOMPLETE", 2, 1)
    reason = _node(document, "gpu-03")["reason"]
    assert reason.startswith("its results do not verify: its results changed after they were written: checks[0] ")
    assert "the signature does not match" not in reason  # the digests were not remade: the content is what changed
    assert "gpu-03" in capsys.readouterr().out


def test_require_signed_refuses_a_node_report_and_results_without_run_ids(tmp_path, capsys):
    key, pub = _key_pair(tmp_path, "vendor")
    private = load_private_key(key)
    document = derived(replayed("accepted"), "gpu-01")
    del document["run"]["id"]  # DERIVED: results from before run ids were
    folder = write_node(tmp_path / "nodes", "gpu-01", sign_document(document, private))
    _without_run_id_report(report_of("accepted"), folder / "acceptance.html", private)
    code = main(["fleet", "report", "--allow-replays", str(tmp_path / "nodes"), "-o", str(tmp_path / "out"),
                 "--require-signed", "--key", str(pub)])
    err = capsys.readouterr().err
    assert code == 4
    assert "gpu-01: its report acceptance.html and its results: cannot show they are one run: no run id" in err
