"""The verdict no pytest option and no edited results file can bend (issue 29, sections 1 and 4).

Each case starts from a whole acceptance run recorded on a real 2x H200 SXM machine (the shipped bundle
``h200-nvswitch-x2-acceptance``, which replays ACCEPTED) and does what an operator, or a hostile one, might: select
part of the suites, rerun the last failures, ignore a suite, break a file of their own tests, leave out the
burn-in, edit the results and recompute their digests. None of them may end ACCEPTED unless every promise of the
profile passed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpufabric.paths import SUITES_DIR
from pytest_gpufabric.report.integrity import INTEGRITY_KEY, integrity_block
from pytest_gpufabric.report.results import json_text

PROFILE = "h200-nvswitch-x2"
ACCEPTED_BUNDLE = "h200-nvswitch-x2-acceptance"  # every suite and a 10-minute burn-in on 2x H200 SXM: ACCEPTED
REJECTED_BUNDLE = "h200-nvswitch-x2-p2p-disabled"  # the same machine with peer-to-peer off: 4 promises fail
RESULTS = Path("reports") / "gpufabric-results.json"


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / RESULTS).read_text())


#: the recordings hold no kernel log (made before gpufabric snapshot kept one), so xid-events cannot be shown; these
#: tests are about what bends a verdict, and their runs waive it as customer and vendor may (docs/verdict.md)
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the verdict's own tests"


def _run(pytester: pytest.Pytester, *args: str, bundle: str = ACCEPTED_BUNDLE):
    return pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", bundle, "--gpu-waive", NO_KERNEL_LOG, *args)


def _outcome(document: dict, promise_id: str) -> tuple[str, str]:
    promise = next(p for p in document["promises"] if p["id"] == promise_id)
    return promise["outcome"], promise["reason"]


def test_control_the_whole_recorded_run_is_accepted(pytester: pytest.Pytester):
    result = _run(pytester)
    document = _results(pytester)
    assert result.ret == 0 and document["summary"]["verdict"] == "ACCEPTED"
    assert document["summary"]["scope"] == "" and document["promised"]["left_out"] == []
    # every promise the profile makes was judged: the list came from the profile, not the tests that ran
    assert [p["id"] for p in document["promised"]["promised"]] == [p["id"] for p in document["promises"]]
    assert all(p["outcome"] == "passed" for p in document["promises"] if p["id"] != "xid-events")
    assert _outcome(document, "xid-events")[0] == "waived"


def test_deselecting_a_promise_with_k_is_incomplete(pytester: pytest.Pytester):
    result = _run(pytester, "-k", "not ecc")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    assert _outcome(document, "ecc-mode[GPU0]") == ("not checked", "deselected (-k 'not ecc'): not run")
    result.stdout.fnmatch_lines(["*gpufabric: INCOMPLETE*", "INCOMPLETE: 2 promise(s) not checked: ecc-mode*"])


def test_deselecting_under_xdist_is_incomplete(pytester: pytest.Pytester):
    """The workers deselect and the controller never sees it: the promise list made on the controller does."""
    pytest.importorskip("xdist")
    result = _run(pytester, "-n", "2", "-k", "not ecc")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    assert _outcome(document, "ecc-mode[GPU1]") == (
        "not checked", "its test did not run in this selection (-k 'not ecc')")
    assert document["summary"]["promises"] == {"passed": 35, "failed": 0, "not_checked": 2, "waived": 1}


def test_the_whole_run_under_xdist_is_accepted(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    result = _run(pytester, "-n", "2")
    assert result.ret == 0 and _results(pytester)["summary"]["verdict"] == "ACCEPTED"


def test_marker_selection_is_incomplete(pytester: pytest.Pytester):
    """-m selects the user's own marked test: it passes, and the profile's promises it left out are not checked."""
    pytester.makeini("[pytest]\nmarkers = mine: the user's own\n")
    pytester.makepyfile(test_mine="import pytest\n\n@pytest.mark.mine\ndef test_mine():\n    pass\n")
    result = _run(pytester, "test_mine.py", "-m", "mine")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    assert _outcome(document, "gpu-count") == ("not checked", "deselected (-m 'mine'): not run")
    assert _outcome(document, "test_mine.py::test_mine") == ("passed", "")


def test_deselect_of_one_test_is_incomplete(pytester: pytest.Pytester):
    collected = _run(pytester, "--collect-only", "-q").stdout.lines
    nodeid = next(line for line in collected if line.endswith("test_topology.py::test_gpu_count"))
    result = _run(pytester, "--deselect", nodeid)
    document = _results(pytester)
    assert result.ret == 6
    outcome, reason = _outcome(document, "gpu-count")
    assert outcome == "not checked" and reason.startswith("deselected (--deselect ")


def test_last_failed_after_a_rejected_run_is_not_accepted(pytester: pytest.Pytester):
    """--lf reruns only what failed: on a bundle where those pass, the other promises were not judged again."""
    first = _run(pytester, bundle=REJECTED_BUNDLE)
    assert first.ret == 1 and _results(pytester)["summary"]["verdict"] == "REJECTED"
    result = _run(pytester, "--lf")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    assert _outcome(document, "gpu-count") == ("not checked", "deselected (--lf): not run")
    assert document["summary"]["promises"]["passed"] == 4


def test_ignoring_a_suite_is_incomplete(pytester: pytest.Pytester):
    ignored = SUITES_DIR / "test_topology.py"
    result = _run(pytester, f"--ignore={ignored}")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    assert _outcome(document, "topology-matrix") == (
        "not checked", f"its suite test_topology.py was left out (--ignore {ignored})")


def test_a_collection_error_is_never_accepted(pytester: pytest.Pytester):
    """--continue-on-collection-errors with a file of the user's own that fails to import: pytest says 1 error,
    and the verdict names the file as a promise that could not be checked."""
    pytester.makepyfile(test_mine="import no_such_module\n\ndef test_mine():\n    pass\n")
    pytester.makepyfile(test_good="def test_good():\n    pass\n")
    result = _run(pytester, "test_mine.py", "test_good.py", "--continue-on-collection-errors")
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    outcome, reason = _outcome(document, "test_mine.py")
    assert outcome == "not checked" and reason.startswith("could not be collected: ")
    assert reason.endswith("ModuleNotFoundError: No module named 'no_such_module'")
    assert _outcome(document, "test_good.py::test_good") == ("passed", "")  # a user's test: its own promise


def test_a_collection_error_that_stops_the_run_is_not_accepted(pytester: pytest.Pytester):
    """Without --continue-on-collection-errors pytest stops before any test: the run is interrupted (exit 2)
    and its results say what stopped it."""
    pytester.makepyfile(test_mine="import no_such_module\n")
    result = _run(pytester, "test_mine.py")
    document = _results(pytester)
    assert result.ret == 2 and document["summary"]["verdict"] == "INCOMPLETE"
    assert document["summary"]["exit_code"] == 2
    assert _outcome(document, "test_mine.py")[0] == "not checked"


def test_stopping_at_the_first_failure_names_what_was_not_judged(pytester: pytest.Pytester):
    result = _run(pytester, "-x", bundle=REJECTED_BUNDLE)
    document = _results(pytester)
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    unjudged = [p for p in document["promises"] if not p["tests"]]
    assert unjudged and all(p["reason"].startswith("the run stopped early (stopping after 1 failures) before")
                            for p in unjudged)


def _bundle_without_burn_in(tmp_path: Path) -> Path:
    from pytest_gpufabric.fabric.bundle import bundle_directory

    copy = tmp_path / "no-burn-in"
    shutil.copytree(bundle_directory(ACCEPTED_BUNDLE), copy)
    (copy / "gpufabric-burnin.jsonl").unlink()
    return copy


def test_a_run_without_the_promised_burn_in_says_so(pytester: pytest.Pytester, tmp_path: Path):
    """The profile promises a burn-in (burn_in:); a run without one is ACCEPTED for what it judged, and says
    plainly, on the terminal, in the results and on the cover, what it left out."""
    result = _run(pytester, "--html", "r.html", "--self-contained-html", bundle=str(_bundle_without_burn_in(tmp_path)))
    document = _results(pytester)
    assert result.ret == 0 and document["summary"]["verdict"] == "ACCEPTED"
    assert document["summary"]["scope"] == "without the burn-in the profile promises"
    assert {p["id"] for p in document["promised"]["left_out"]} == {
        "burn-in-gpu[GPU0]", "burn-in-gpu[GPU1]", "burn-in-collectives", "burn-in-memory"}
    assert "burn-in-gpu[GPU0]" not in {p["id"] for p in document["promises"]}
    result.stdout.fnmatch_lines(["*gpufabric: ACCEPTED without the burn-in the profile promises (profile*"])
    page = (pytester.path / "r.html").read_text()
    assert "Verdict: ACCEPTED without the burn-in the profile promises" in page


def test_a_fleet_of_two_scopes_drifts(pytester: pytest.Pytester, tmp_path: Path):
    """Nodes of a fleet accepted with and without the burn-in are of different scope: drift, named."""
    nodes = tmp_path / "fleet"
    for name, bundle in (("node1", ACCEPTED_BUNDLE), ("node2", ACCEPTED_BUNDLE),
                         ("node3", str(_bundle_without_burn_in(tmp_path)))):
        assert _run(pytester, "--gpu-report-dir", str(nodes / name), bundle=bundle).ret == 0
    from pytest_gpufabric.fleet.report import build_fleet_document

    fleet = build_fleet_document([nodes], None, allow_replays=True)
    drift = {n["name"]: n["drift"] for n in fleet["nodes"]}
    assert drift["node3"] == [{"field": "scope", "value": "without the burn-in the profile promises",
                               "majority": "whole acceptance"}]
    assert drift["node1"] == drift["node2"] == []


# --- edited results: the fleet and `gpufabric verify` judge them again ---------------------------------------


def _gpufabric(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _redigest(document: dict) -> dict:
    """The document with its integrity block made again over its content, unsigned: what anyone can do."""
    plain = {k: v for k, v in document.items() if k != INTEGRITY_KEY}
    profile = plain.get("profile") or {}
    plain[INTEGRITY_KEY] = integrity_block(plain, profile.get("sha256"), None, None, None)
    return plain


@pytest.fixture
def rejected_results(pytester: pytest.Pytester) -> dict:
    assert _run(pytester, bundle=REJECTED_BUNDLE).ret == 1
    return _results(pytester)


def test_verify_says_unsigned_results_prove_nothing(pytester: pytest.Pytester, rejected_results: dict):
    path = pytester.path / RESULTS
    done = _gpufabric("verify", str(path), cwd=pytester.path)
    assert done.returncode == 1, done.stdout
    assert "UNSIGNED: its digests match, but it is unsigned" in done.stdout
    allowed = _gpufabric("verify", str(path), "--allow-unsigned", cwd=pytester.path)
    assert allowed.returncode == 0 and "whole, unsigned" in allowed.stdout


def test_verify_refuses_a_rejection_edited_to_accepted(pytester: pytest.Pytester, rejected_results: dict):
    """The summary edited to ACCEPTED and the digests recomputed: whole by its digests, but its own promises say
    REJECTED, and it is unsigned."""
    edited = dict(rejected_results)
    edited["summary"] = {**edited["summary"], "verdict": "ACCEPTED", "exit_code": 0,
                         "verdict_reason": "all 35 promise(s) checked passed"}
    path = pytester.path / "edited.json"
    path.write_text(json_text(_redigest(edited)))
    done = _gpufabric("verify", str(path), "--allow-unsigned", cwd=pytester.path)
    assert done.returncode == 1
    assert "its summary says ACCEPTED, but its own tests, checks and promises say REJECTED" in done.stdout


def test_the_fleet_judges_a_promise_list_edited_shorter(pytester: pytest.Pytester, tmp_path: Path):
    """A results file whose promise list and promises were cut to what passed: the fleet makes the list again from
    the profile the file embeds, and the promises cut out are not checked."""
    assert _run(pytester, "-k", "not ecc").ret == 6
    document = _results(pytester)
    cut = {"ecc-mode[GPU0]", "ecc-mode[GPU1]"}
    document["promised"]["promised"] = [p for p in document["promised"]["promised"] if p["id"] not in cut]
    document["promises"] = [p for p in document["promises"] if p["id"] not in cut]
    document["not_run"] = {}
    document["summary"] = {**document["summary"], "verdict": "ACCEPTED", "exit_code": 0}
    node = tmp_path / "fleet" / "node1"
    node.mkdir(parents=True)
    (node / "gpufabric-results.json").write_text(json_text(_redigest(document)))
    from pytest_gpufabric.fleet.report import build_fleet_document

    fleet = build_fleet_document([tmp_path / "fleet"], None, allow_replays=True)
    (judged,) = fleet["nodes"]
    assert judged["verdict"] == "INCOMPLETE" and judged["promises"]["not_checked"] == 2
    assert "its own summary says ACCEPTED: not trusted" in judged["reason"]
    assert fleet["verdict"] == "INCOMPLETE" and fleet["counts"]["unsigned"] == 1
    assert "1 node(s) unsigned" in fleet["reason"]


def test_the_fleet_refuses_a_profile_edited_under_its_digest(pytester: pytest.Pytester, tmp_path: Path):
    """The embedded profile edited (a promise taken out of it) without its sha256: not the profile it names."""
    assert _run(pytester).ret == 0
    document = _results(pytester)
    del document["profile"]["data"]["gpus"]["ecc"]
    node = tmp_path / "fleet" / "node1"
    node.mkdir(parents=True)
    (node / "gpufabric-results.json").write_text(json_text(_redigest(document)))
    from pytest_gpufabric.fleet.report import build_fleet_document

    (judged,) = build_fleet_document([tmp_path / "fleet"], None, allow_replays=True)["nodes"]
    assert judged["verdict"] == "INCOMPLETE"
    assert "profile-integrity" in judged["reason"]
