"""Judging another tool's word: a `dcgmi diag` result as the promise it speaks to (evidence.py)."""

from __future__ import annotations

from .result import CheckResult, failed, passed, unknown


def check_dcgm_result(row: dict, gpu=None, *, stands_for: str | None = None) -> CheckResult:
    """A DCGM test's status on one GPU (``gpu``: the machine's board of that index, for its serial, when known):
    pass passes; fail fails, naming the GPU and DCGM's message; skip, not run, warn and a status a cut paste lost
    are not checked (DCGM did not show it held), with DCGM's word. ``stands_for``: the profile's section a shipped
    promise holds this result to (a per-GPU diagnostic's): DCGM's pass is by its own criteria, not that section's
    limits, so it shows nothing there (only its failure counts)."""
    who = "machine" if row["gpu"] is None else (
        f"GPU{row['gpu']} (serial {gpu.serial})" if gpu is not None and gpu.serial else f"GPU{row['gpu']}")
    tool = "dcgmi diag" + (f" -r {row['level']}" if row.get("level") else "") + (
        f" (DCGM {row['version']})" if row.get("version") else "")
    said = f"{tool}: {row['test']} {row['status']} on {who}" + (f": {row['message']}" if row["message"] else "")
    source = f" [{row['source']}]"
    name = f"dcgm-{row['test'].replace('_', '-').replace(':', '-')}"
    expected = "pass"
    if row.get("uncovered"):  # DCGM's word, but not about this GPU (or not said to be)
        given = f"{tool}: {row['test']} {row['status']} on all the GPUs it tested" if row.get("for_all") else said
        return unknown(name, who, expected, f"{given}{source}; not evidence for {who}: {row['uncovered']}")
    if row["status"] == "pass" and stands_for:
        return unknown(name, who, expected, f"{said}{source}: DCGM passes it by its own criteria, which are not the "
                       f"profile's {stands_for}; this run's own measurement judges that")
    if row["status"] == "pass":
        return passed(name, who, expected, row["status"], said + source)
    if row["status"] == "fail":
        return failed(name, who, expected, row["status"], said + source + ". DCGM's message names the cause; its "
                      "own documentation lists what each test needs to pass.")
    why = {"warn": "DCGM warned, which it does not count as a pass or a failure: judge it by its message",
           "skip": "DCGM skipped the test", "not run": "DCGM did not run the test",
           "unreadable": "the paste was cut before this status"}.get(row["status"], f"status {row['status']!r}")
    return unknown(name, who, expected, f"{said}{source}: {why}")
