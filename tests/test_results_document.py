"""The results document is a pure function (report/results_document.py) of the session's facts and the recorder's
outcomes; the report reads the document and its recorder by object, never the session's private state."""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.report.results import schema_errors
from pytest_gpufabric.report.results_document import ReportedOutcomes, results_document
from pytest_gpufabric.run_options import RunOptions
from pytest_gpufabric.session import FabricSession

BUNDLES = Path(__file__).parent / "data" / "bundles"
PACKAGE = Path(__file__).resolve().parents[1] / "pytest_gpufabric"


def _replayed_session(tmp_path: Path) -> FabricSession:
    session = FabricSession(RunOptions(profile=load_profile("h200-nvswitch-x2"),
                                       replay=str(BUNDLES / "h200-nvswitch-x2"), report_dir=tmp_path))
    session.discover()
    return session


def test_the_same_inputs_give_the_same_document(tmp_path):
    facts = _replayed_session(tmp_path).run_facts()
    tests = ReportedOutcomes(outcomes={"suites/test_topology.py::test_gpu_count": "passed"})
    first = results_document(facts, tests, 0, None)
    assert first == results_document(facts, tests, 0, None)
    assert schema_errors(first) == []
    assert first["finished_at"] is None and first["run"]["mode"] == "replay"
    assert first["summary"]["verdict"] == "INCOMPLETE"
    assert first["summary"]["verdict_reason"].startswith(
        "the run had not finished when this was written (1 test(s) reported)")
    assert [g["serial"] for g in first["machine"]["gpus"]] == ["1653824016477", "1653824016216"]


def test_a_finished_run_that_checked_nothing_is_not_tested(tmp_path):
    facts = _replayed_session(tmp_path).run_facts()
    document = results_document(facts, ReportedOutcomes(), 0, "2026-12-06T00:00:00+00:00")
    assert document["finished_at"] == "2026-12-06T00:00:00+00:00"
    assert document["summary"]["verdict"] == "NOT TESTED" and document["summary"]["exit_code"] == 7
    assert document["summary"]["verdict_reason"].startswith(
        "no promise could be checked: gpu-health[GPU0], gpu-health[GPU1], xid-events, gpu-count")
    assert {p["outcome"] for p in document["promises"]} == {"not checked"}


def _private_reads(source: str) -> list[str]:
    """Attributes with a leading underscore read off another object (not self), and getattr with such a name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1 \
                and getattr(node.args[0], "id", None) not in ("self", "cls") \
                and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_"):
            found.append(f"line {node.lineno}: getattr(..., {node.args[1].value!r})")
    return found


def test_the_report_reads_no_private_state_of_the_session():
    reads = {path.name: _private_reads(path.read_text(encoding="utf-8"))
             for path in sorted((PACKAGE / "report").glob("*.py"))}
    assert {name: found for name, found in reads.items() if found} == {}


def test_the_report_finds_its_recorder_by_object_not_by_name():
    named = [f"{path.name}: {line.strip()}" for path in sorted((PACKAGE / "report").glob("*.py"))
             for line in path.read_text(encoding="utf-8").splitlines() if 'get_plugin("gpufabric-' in line]
    assert named == []
