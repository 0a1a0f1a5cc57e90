"""docs/verdict.md's table of every shipped profile against every shipped bundle, with the verdict each pairing gets:
made here by running each pair for real, so that it cannot drift from what the plugin does. The same runs are held
to tests/data/golden/promise-outcomes.json, every promise's id, outcome and reason per pairing, so that a change
meant to move code (not behaviour) shows any promise it moves.

    GPUFABRIC_WRITE_VERDICT_TABLE=1 python3 -m pytest tests/test_verdict_table.py

rewrites the table in docs/verdict.md and the golden file; without it, a table or an outcome that differs fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "verdict.md"
START, END = "<!-- verdict-table:start -->", "<!-- verdict-table:end -->"
PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
BUNDLES = sorted(p.name for p in (REPO / "tests" / "data" / "bundles").iterdir() if p.is_dir())
GOLDEN = REPO / "tests" / "data" / "golden" / "promise-outcomes.json"


def _cell(summary: dict) -> str:
    promises = summary["promises"]
    detail = {"ACCEPTED": f"{promises['passed']} passed",
              "REJECTED": f"{promises['failed']} failed",
              "INCOMPLETE": f"{promises['not_checked']} not checked",
              "NOT TESTED": "nothing checked"}[summary["verdict"]]
    return f"{summary['verdict']} ({detail})"


def _table(cells: dict[tuple[str, str], str]) -> str:
    lines = ["| bundle \\ profile | " + " | ".join(f"`{p}`" for p in PROFILES) + " |",
             "| --- |" + " --- |" * len(PROFILES)]
    for bundle in BUNDLES:
        lines.append(f"| `{bundle}` | " + " | ".join(cells[(bundle, p)] for p in PROFILES) + " |")
    return "\n".join(lines)


def test_the_verdict_table_of_profiles_against_bundles(pytester: pytest.Pytester):
    cells, outcomes = {}, {}
    for bundle in BUNDLES:
        for profile in PROFILES:
            report_dir = pytester.path / f"{bundle}--{profile}"
            result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--gpu-profile", profile, "--gpu-replay",
                                        bundle, "--gpu-report-dir", str(report_dir))
            document = json.loads((report_dir / "gpufabric-results.json").read_text(encoding="utf-8"))
            summary = document["summary"]
            assert result.ret == summary["exit_code"], (bundle, profile)
            cells[(bundle, profile)] = _cell(summary)
            outcomes[f"{profile} | {bundle}"] = {
                "verdict": summary["verdict"], "exit_code": summary["exit_code"],
                "promises": [[p["id"], p["outcome"], _here(p["reason"])] for p in document["promises"]]}
    table = _table(cells)
    _hold_to_golden(outcomes)
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"docs/verdict.md lacks the {START} ... {END} block"
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    if os.environ.get("GPUFABRIC_WRITE_VERDICT_TABLE") == "1":
        DOC.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")
    else:
        assert rest.split(END, 1)[0].strip() == table, ("docs/verdict.md's verdict table is out of date; rerun "
                                                         "with GPUFABRIC_WRITE_VERDICT_TABLE=1:\n" + table)
    # the README's demo, a whole run recorded with its kernel log, is ACCEPTED under its profile, and so is the other
    # 1x H100 SXM recorded with one; the two whole runs recorded before the kernel log was kept lack only that
    # (xid-events), each under its own profile
    assert sorted(pairing for pairing, cell in cells.items() if cell.startswith("ACCEPTED")) == [
        ("h100-sxm-x1-acceptance", "h100-sxm-x1"), ("h100-x1-arrival", "h100-sxm-x1")]
    whole = sorted(pairing for pairing, cell in cells.items() if cell == "INCOMPLETE (1 not checked)")
    # (and two 1x H100 recordings of every diagnostic, under the demo profile)
    assert whole == [("h100-x1-diagnostics", "h100-sxm-x1"), ("h100-x1-measured", "h100-sxm-x1"),
                     ("h200-nvswitch-x2-acceptance", "h200-nvswitch-x2"), ("h200-nvswitch-x4", "h200-nvswitch-x4")]


def _here(reason: str) -> str:
    """A reason with this checkout's path as <repo>: the golden file holds for any clone."""
    return reason.replace(str(REPO), "<repo>")


def _hold_to_golden(outcomes: dict) -> None:
    """Every pairing's promises, outcomes and reasons, as the golden file holds them (rewritten on request)."""
    if os.environ.get("GPUFABRIC_WRITE_VERDICT_TABLE") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(outcomes, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        return
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(outcomes) == sorted(golden), "the pairings differ from the golden file's"
    moved = []
    for pairing, now in sorted(outcomes.items()):
        before = golden[pairing]
        if (now["verdict"], now["exit_code"]) != (before["verdict"], before["exit_code"]):
            moved.append(f"{pairing}: {before['verdict']} -> {now['verdict']}")
        was = {pid: (outcome, reason) for pid, outcome, reason in before["promises"]}
        is_ = {pid: (outcome, reason) for pid, outcome, reason in now["promises"]}
        for pid in sorted(set(was) | set(is_)):
            if was.get(pid) != is_.get(pid):
                moved.append(f"{pairing}: {pid}: {was.get(pid)} -> {is_.get(pid)}")
    assert not moved, "promises moved (rerun with GPUFABRIC_WRITE_VERDICT_TABLE=1 if meant):\n" + "\n".join(moved[:40])
