"""What `gpufabric health` says: the first line a scheduler takes as its drain reason, the details after it, the
JSON document (health-result.schema.json) and the node_exporter textfile.

The line is at most 128 characters, printable ASCII without quotes (Slurm keeps it as the node's Reason; a quote
would end an scontrol argument) and always starts ``gpufabric: ``, the prefix by which the Slurm example resumes
only the nodes it drained itself::

    gpufabric: DRAIN GPU3 (serial 1653724061974) rows pending remapping; remedy: reset or reboot
    gpufabric: DRAIN GPU1 (serial 1653724062199) PCIe x8, the profile promises x16 (+2 more); remedy: reseat or recable
    gpufabric: UNKNOWN GPU0 (serial 1653724025850) remapped rows pending not readable; remedy: rerun
    gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (1 warning)

The scheduler's reason (``reason`` in the JSON, first with ``--reason``) puts the board and a fault word in its first
20 characters, all that ``sinfo -R`` shows, and starts ``gpufabric `` (the Slurm example's own drains)::

    gpufabric GPU3 xid79: Xid 79 fell off the bus, serial 1653724034047; reset
    gpufabric GPU1 rrpend: rows pending remapping, serial 1653824128984 (+1 more); reset
    gpufabric node hung: could not finish in 50 s; reset
    gpufabric ok: HEALTHY 4 GPUs, profile h200-nvswitch-x4
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .. import __version__, remedy_classes
from ..formats.clean import clean_line
from .finding import DRAIN, DRAIN_VERDICT, EXIT_CODES, HEALTHY, UNKNOWN, UNKNOWN_VERDICT, WARN, Finding, headline
from .passive import FAULT_WORDS as PASSIVE_FAULT_WORDS

PREFIX = "gpufabric: "
MAX_LINE = 128
FORMAT = "gpufabric-health-result/1"
SCHEMA_PATH = Path(__file__).with_name("health-result.schema.json")


def _clean(text: str) -> str:
    """Printable ASCII, no quotes or backslashes, single spaces."""
    kept = "".join(c if " " <= c <= "~" and c not in "\"'\\`" else " " for c in str(text))
    return " ".join(kept.split())


def _fit(head: str, middle: str, tail: str) -> str:
    """``head + middle + tail`` within MAX_LINE characters, the middle cut short (with "...") where it must."""
    room = MAX_LINE - len(head) - len(tail)
    if len(middle) > room:
        middle = middle[:max(room - 3, 0)].rstrip() + "..."
    return (head + middle + tail)[:MAX_LINE]


def verdict_line(verdict: str, findings: list[Finding], gpu_count: int | None, profile_name: str | None,
                 *, quick_skipped: int = 0) -> str:
    """The first line: the verdict, and for DRAIN and UNKNOWN the finding that decides it (board, what, remedy).
    A HEALTHY line counts the GPUs the quick tier skipped (never judged healthy: quick_gpus.py)."""
    if verdict == HEALTHY:
        warnings = sum(1 for f in findings if f.severity == WARN)
        said = f"{gpu_count} GPUs" if gpu_count is not None else "GPUs"
        said += f" (quick tier skipped {quick_skipped})" if quick_skipped else ""
        more = f" ({warnings} warning{'s' if warnings != 1 else ''})" if warnings else ""
        return _fit(PREFIX + "HEALTHY ", _clean(f"{said}, profile {profile_name}"), more)
    severity = DRAIN if verdict == DRAIN_VERDICT else UNKNOWN
    first = headline(findings, severity)
    if first is None:  # a verdict without its finding: a bug; the line still says the verdict
        return f"{PREFIX}{verdict}"
    others = sum(1 for f in findings if f.severity == severity) - 1
    tail = (f" (+{others} more)" if others else "") + (
        f"; remedy: {first.remedy}" if first.remedy else "")
    return _fit(f"{PREFIX}{verdict} {_clean(first.board)} ", _clean(first.what), tail)


#: a check's fault word in the scheduler's reason (a few characters: sinfo -R shows 20 of the whole reason): the
#: passive tier's (passive.FAULT_WORDS), the quick tier's and the check's own
FAULT_WORDS = {
    **PASSIVE_FAULT_WORDS, "quick-gemm": "gemm", "quick-hbm": "hbm", "quick-memory-pattern": "mempat",
    "quick-tier": "quick", "deadline": "hung", "baseline": "noprof", "health-state": "state",
    "health-record": "record", "nvml": "nvml", "usage": "usage",
}
REASON_PREFIX = "gpufabric "


def fault_word(finding: Finding) -> str:
    """``xid79``, ``rrpend``, ``temp?`` (a reading that could not be had): the fault in a word."""
    if finding.check == "xid" and isinstance(finding.evidence.get("xid"), int):
        word = f"xid{finding.evidence['xid']}"
    else:
        word = FAULT_WORDS.get(finding.check, finding.check.replace("-", "")[:8])
    unsure = finding.severity == UNKNOWN and finding.check not in ("deadline", "baseline", "health-state", "usage")
    return word + ("?" if unsure else "")


def scheduler_reason(verdict: str, findings: list[Finding], line: str) -> str:
    """The drain reason a scheduler keeps: ``gpufabric GPU3 xid79: what, serial S (+N more); remedy-word``."""
    if verdict == HEALTHY:
        return _fit(REASON_PREFIX + "ok: ", line.removeprefix(PREFIX), "")
    severity = DRAIN if verdict == DRAIN_VERDICT else UNKNOWN
    first = headline(findings, severity)
    if first is None:
        return f"{REASON_PREFIX}node {verdict.lower()}: {line.removeprefix(PREFIX)}"[:MAX_LINE]
    board = "node" if first.gpu is None else f"GPU{first.gpu}"
    others = sum(1 for f in findings if f.severity == severity) - 1
    serial = f", serial {_clean(first.serial)}" if first.serial else ""
    tail = serial + (f" (+{others} more)" if others else "") + (
        f"; {remedy_classes.SHORT.get(first.remedy, '')}" if first.remedy else "")
    return _fit(f"{REASON_PREFIX}{board} {fault_word(first)}: ", _clean(first.what), _clean(tail))


def detail_lines(findings: list[Finding], notes: list[str]) -> list[str]:
    """The lines after the first: every finding (drains first), then the notes."""
    order = {DRAIN: 0, UNKNOWN: 1, WARN: 2}
    lines = []
    for f in sorted(findings, key=lambda f: (order[f.severity], -1 if f.gpu is None else f.gpu)):
        fix = f" [{f.remedy}]" if f.remedy else ""
        lines.append(f"  {f.severity}: {f.board}: {f.what}{fix}" + (f": {f.detail}" if f.detail else ""))
    lines += [f"  note: {note}" for note in notes]
    return [clean_line(line) for line in lines]  # a board's serial or a note may hold a bundle's control bytes


def result_document(*, verdict: str, line: str, tier: str, findings: list[Finding], notes: list[str], source: str,
                    baseline: dict, gpus: list[dict], seconds: dict[str, float], host: str | None,
                    checked_at: str, replay: str | None, quick_skipped: list[dict] | None = None) -> dict:
    return {"format": FORMAT, "plugin_version": __version__, "verdict": verdict, "exit_code": EXIT_CODES[verdict],
            "line": line, "reason": scheduler_reason(verdict, findings, line),
            "tier": tier, "checked_at": checked_at, "host": host, "source": source, "replay": replay,
            "baseline": baseline, "gpus": gpus, "seconds": seconds,
            "counts": {s: sum(1 for f in findings if f.severity == s) for s in (DRAIN, UNKNOWN, WARN)},
            "findings": [f.to_dict() for f in findings], "notes": notes, "quick_skipped": quick_skipped or []}


def error_document(message: str, tier: str, now: float, host: str | None, replay: str | None) -> dict:
    """The result of a run that could not check (a usage error: exit 2), so that its files still say so."""
    from datetime import datetime, timezone

    finding = Finding("usage", UNKNOWN, "usage error", remedy=remedy_classes.SOFTWARE, detail=message,
                      evidence={"error": message})
    document = result_document(
        verdict=UNKNOWN_VERDICT, line=_fit(f"{PREFIX}{UNKNOWN_VERDICT} node usage error: ", _clean(message), ""),
        tier=tier, findings=[finding], notes=[], source=replay or "NVML", baseline=None, gpus=[],
        seconds={"passive": 0.0}, host=host, checked_at=datetime.fromtimestamp(now, timezone.utc).isoformat(
            timespec="seconds"), replay=replay)
    document["exit_code"] = 2
    return document


def validate_result(document: dict) -> None:
    """Raise jsonschema.ValidationError when the document is not what health-result.schema.json says."""
    import jsonschema

    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never a part: a temporary file
    in the same folder (named so that node_exporter's *.prom glob skips it), flushed, then renamed over."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prom_path(target: Path, tier: str) -> Path:
    """--prom's file: in a folder, the tier's own (a passive run never overwrites the quick tier's series)."""
    return target / f"gpufabric-health-{tier}.prom" if target.is_dir() else target
