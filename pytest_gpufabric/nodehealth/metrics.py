"""The node_exporter textfile of a health result: series an SRE can graph and alert on for years.

- one status series per GPU and per check: ``gpufabric_health_check_status{tier,gpu,uuid,pci_bus_id,serial,check}``
  0 ok (or not judged: a reading the GPU does not have), 1 fault (a drain, held ones included), 2 could not tell
  (also a quick workload that did not run: the passive tier drained first);
  and per node-level check ``gpufabric_health_node_check_status{tier,check}``. The checks are a fixed list per tier,
  so a healthy GPU has its series and every run writes the same set (the labels join dcgm-exporter's
  ``UUID``/``pci_bus_id``); never a reading or free text in a label, never NaN;
- a coverage gauge: ``gpufabric_health_checks{tier,outcome}`` (outcome ``judged`` or ``not_readable``);
- the verdict, exit status, finding counts, the remedy the drain asks for, seconds and the time of the run;
- every series carries ``tier``: the passive and quick tiers write their own files (output.prom_path), and
  node_exporter refuses one series written by two files.
"""

from __future__ import annotations

import math

from .. import remedy_classes
from .finding import DRAIN, DRAIN_VERDICT, HEALTHY, UNKNOWN, UNKNOWN_VERDICT, WARN
from .passive import METRIC_GPU_CHECKS, METRIC_NODE_CHECKS, METRIC_READ_WITH

#: the per-GPU checks of each tier (the passive ones: passive.METRIC_GPU_CHECKS), and the findings' checks each
#: one covers
GPU_CHECKS = METRIC_GPU_CHECKS
QUICK_GPU_CHECKS = {"quick-gemm": ("quick-gemm",), "quick-hbm": ("quick-hbm",),
                    "quick-memory-pattern": ("quick-memory-pattern",)}
#: node-level checks; "reading" is the check itself: the record, NVML, the state file, the deadline, a usage error
NODE_CHECKS = {
    **METRIC_NODE_CHECKS,
    "accepted-boards": (*METRIC_NODE_CHECKS["accepted-boards"], "baseline"),
    "quick-tier": ("quick-tier",),
    "reading": ("health-record", "nvml", "health-state", "deadline", "usage"),
}
STATUS = {"ok": 0, "fault": 1, "unknown": 2}
#: per-GPU checks that a node-level unknown of the same check leaves could-not-tell on every GPU (a kernel log not
#: read tells no GPU's Xids)
NODE_WIDE_UNKNOWN = ("xid",)


def _label(value: object) -> str:
    """A Prometheus label value: backslash, quote and newline escaped (the exposition format's three)."""
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _status(findings: list[dict], covers: tuple[str, ...], gpu: int | None, unread: bool) -> int:
    mine = [f for f in findings if f["check"] in covers and f["gpu"] == gpu]
    if any(f["severity"] == DRAIN for f in mine):
        return STATUS["fault"]
    if unread or any(f["severity"] == UNKNOWN for f in mine):
        return STATUS["unknown"]
    return STATUS["ok"]


def _number(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) and math.isfinite(value) else "0"


def prom_text(document: dict, timestamp: float, known_gpus: list[dict] | None = None) -> str:
    """The textfile of a result document. ``known_gpus``: the GPUs to write status series for when the run read none
    (the state's last known boards): each of their checks is then 2, could not tell, so the set stays the same."""
    tier, verdict, findings = document["tier"], document["verdict"], document["findings"]
    gpus = document["gpus"] or list(known_gpus or [])
    unread = not document["gpus"]  # the run read no GPU: every GPU check is could-not-tell unless a drain is held
    node_unknown = {f["check"] for f in findings if f["gpu"] is None and f["severity"] == UNKNOWN}
    checks = {**GPU_CHECKS, **(QUICK_GPU_CHECKS if tier == "quick" else {})}
    t = f'tier="{tier}"'
    lines = [
        "# HELP gpufabric_health_check_status Each GPU's check: 0 ok, 1 fault (drain), 2 could not tell.",
        "# TYPE gpufabric_health_check_status gauge"]
    judged = not_readable = 0
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        labels = (f'{t},gpu="{gpu["index"]}",uuid="{_label(gpu.get("uuid") or "")}",'
                  f'pci_bus_id="{_label(gpu.get("pci_bus_id") or "")}",serial="{_label(gpu.get("serial") or "")}"')
        for check, covers in checks.items():
            # the workloads did not run, or not on this GPU (another job held it: quick_gpus.py)
            skipped = check in QUICK_GPU_CHECKS and ("quick" not in document["seconds"] or gpu["index"] in {
                s["gpu"] for s in document.get("quick_skipped") or []})
            untold = check in NODE_WIDE_UNKNOWN and check in node_unknown
            status = _status(findings, covers, gpu["index"], unread or skipped or untold)
            judged, not_readable = judged + (status != 2), not_readable + (status == 2)
            lines.append(f'gpufabric_health_check_status{{{labels},check="{check}"}} {status}')
    lines += ["# HELP gpufabric_health_node_check_status Each node-level check: 0 ok, 1 fault, 2 could not tell.",
              "# TYPE gpufabric_health_node_check_status gauge"]
    for check, covers in NODE_CHECKS.items():
        status = _status(findings, covers, None, METRIC_READ_WITH.get(check) in node_unknown)
        judged, not_readable = judged + (status != 2), not_readable + (status == 2)
        lines.append(f'gpufabric_health_node_check_status{{{t},check="{check}"}} {status}')
    counts = document["counts"]
    drain_remedies = {f["remedy"] for f in findings if f["severity"] == DRAIN}
    lines += [
        "# HELP gpufabric_health_checks Checks of the last run: judged, or not readable (could not tell).",
        "# TYPE gpufabric_health_checks gauge",
        f'gpufabric_health_checks{{{t},outcome="judged"}} {judged}',
        f'gpufabric_health_checks{{{t},outcome="not_readable"}} {not_readable}',
        "# HELP gpufabric_health_verdict The last check's verdict (1 for the verdict it gave).",
        "# TYPE gpufabric_health_verdict gauge",
        *(f'gpufabric_health_verdict{{{t},verdict="{v}"}} {int(v == verdict)}'
          for v in (HEALTHY, DRAIN_VERDICT, UNKNOWN_VERDICT)),
        "# HELP gpufabric_health_exit_code Exit status of the last check: 0 healthy, 1 drain, 6 could not tell, "
        "2 usage error.",
        "# TYPE gpufabric_health_exit_code gauge",
        f"gpufabric_health_exit_code{{{t}}} {document['exit_code']}",
        "# HELP gpufabric_health_findings Findings of the last check, by severity.",
        "# TYPE gpufabric_health_findings gauge",
        *(f'gpufabric_health_findings{{{t},severity="{s}"}} {counts.get(s, 0)}' for s in (DRAIN, UNKNOWN, WARN)),
        "# HELP gpufabric_health_drain_remedy The remedy classes the node's drains ask for (1: asked).",
        "# TYPE gpufabric_health_drain_remedy gauge",
        *(f'gpufabric_health_drain_remedy{{{t},remedy="{remedy_classes.SHORT[r]}"}} {int(r in drain_remedies)}'
          for r in remedy_classes.CLASSES),
        "# HELP gpufabric_health_seconds Wall time of the last run (its passive reads and checks, its workloads).",
        "# TYPE gpufabric_health_seconds gauge",
        *(f'gpufabric_health_seconds{{{t},part="{part}"}} {_number(document["seconds"].get(part, 0.0))}'
          for part in ("passive", "quick") if part == "passive" or tier == "quick"),
        "# HELP gpufabric_health_last_run_timestamp_seconds When the last check ended (Unix time).",
        "# TYPE gpufabric_health_last_run_timestamp_seconds gauge",
        f"gpufabric_health_last_run_timestamp_seconds{{{t}}} {_number(timestamp)}"]
    return "\n".join(lines) + "\n"
