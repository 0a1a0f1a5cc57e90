"""One node of a fleet, as its own results say: its verdict, its failed checks, its inventory, its measurements.

A node is a folder holding ``gpufabric-results.json`` (what ``pytest --gpu-profile P --gpu-report-dir
reports/fleet/{host}`` wrote there); its name is the folder's name. Only what the fleet report needs is kept of
each document (a few kilobytes of a file that can hold megabytes of health timeline), so ten thousand nodes fit
in memory.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["METRICS", "RESULTS_FILE", "Node", "find_node_dirs", "read_node"]

RESULTS_FILE = "gpufabric-results.json"
_HTML_NAMES = ("acceptance.html", "report.html")

#: check name (or its prefix, ending in "-") -> the numbers of its ``found`` compared across the fleet: (field,
#: unit, +1 where more is better, -1 where less is). A field of None: ``found`` is {label: number} (copies by GPU
#: pair), each label one metric.
METRICS: dict[str, list[tuple[str | None, str, int]]] = {
    "bandwidth-": [("busbw_gbps", "GB/s", +1), ("time_us", "us", -1)],
    "copy-": [(None, "GB/s", +1)],
    "nvlink-traffic-volume": [("tx_ratio", "x expected", +1), ("rx_ratio", "x expected", +1)],
    "burn-in-gpu": [("tflops", "TFLOP/s", +1), ("max_temperature_c", "C", -1)],
    "burn-in-collectives": [("busbw_min", "GB/s", +1)],
    "memory-lms": [("time_per_image_s", "s", -1), ("ratio_vs_baseline", "x batch 1", -1)],
    "ib-write-bw": [("bw_avg_gbit", "Gb/s", +1)],
}


@dataclass
class Node:
    """What the fleet report keeps of one node's results."""

    name: str
    directory: str
    verdict: str | None = None  # ACCEPTED, REJECTED, INCOMPLETE; None: the results could not be read
    reason: str = ""
    profile: str | None = None
    profile_path: str | None = None  # where the node read its profile (on the node: may not exist here)
    fleet_id: str | None = None
    failed: list[dict] = field(default_factory=list)  # {"check", "subject", "message"}
    inventory: dict[str, str] = field(default_factory=dict)  # drift field -> value as text
    serials: list[str] = field(default_factory=list)
    metrics: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (check, subject, metric) -> value
    report: str | None = None  # the node's own HTML report, relative to its folder
    burn_in: dict | None = None  # per GPU: {"wrong_elements", "checks", "tflops"} from its burn-in verdicts
    error: str | None = None  # why the results could not be read


def find_node_dirs(paths: list[Path]) -> list[Path]:
    """The node folders under the given paths: a path holding a results file is a node; else each folder
    directly below it that holds one (or that holds nothing: a node that started but never reported is kept,
    so it is named, not forgotten)."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise ValueError(f"{path}: not a folder of node results")
        if (path / RESULTS_FILE).is_file():
            found.append(path)
            continue
        found += sorted(child for child in path.iterdir() if child.is_dir() and not child.name.startswith("."))
    return found


def _text(value) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _joined(values) -> str | None:
    """One text for a node from its GPUs' values: the value, or the distinct values joined when GPUs differ."""
    distinct = sorted({str(v) for v in values if v is not None})
    return ", ".join(distinct) if distinct else None


def _inventory(document: dict) -> tuple[dict[str, str], list[str]]:
    machine = document.get("machine") or {}
    gpus = machine.get("gpus") or []
    fields = {
        "profile": (document.get("profile") or {}).get("name"),
        "driver": machine.get("driver_version"),
        "cuda": machine.get("cuda_driver_version"),
        "nccl": _joined((document.get("software") or {}).get("nccl") or []),
        "gpu_count": len(gpus) if gpus else None,
        "gpu_model": _joined(g.get("name") for g in gpus),
        "vbios": _joined(g.get("vbios_version") for g in gpus),
        "pcie": _joined(f"gen {(g.get('pcie') or {}).get('gen_max')} x{(g.get('pcie') or {}).get('width_max')}"
                        for g in gpus if g.get("pcie")),
        "nvlinks_per_gpu": _joined(g.get("nvlinks_active") for g in gpus),
        "nvlink_speed_gbps": _joined(g.get("nvlink_speed_gbps") for g in gpus),
    }
    serials = [str(g["serial"]) for g in gpus if g.get("serial") not in (None, "", "N/A")]
    return {k: text for k, v in fields.items() if (text := _text(v)) is not None}, serials


@functools.lru_cache(maxsize=1024)
def metric_spec(check_name: str) -> list[tuple[str | None, str, int]]:
    for key, spec in METRICS.items():
        if check_name == key or (key.endswith("-") and check_name.startswith(key)):
            return spec
    return []


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


#: "GPU0 (serial 1654024032670)": the board's serial is the node's own; across the fleet the subject is "GPU0"
_SERIAL_SUFFIX = re.compile(r" \(serial [^)]*\)")


def _metrics(checks: list[dict]) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = {}
    for check in checks:
        found = check.get("found")
        name, subject = str(check.get("name", "")), _SERIAL_SUFFIX.sub("", str(check.get("subject", "")))
        for metric, _, _ in metric_spec(name):
            if metric is None and isinstance(found, dict):
                for label, value in found.items():
                    if (number := _number(value)) is not None:
                        out[(name, subject, str(label))] = number
            elif isinstance(found, dict) and (number := _number(found.get(metric))) is not None:
                out[(name, subject, metric)] = number
    return out


def _burn_in(checks: list[dict]) -> dict | None:
    """The burn-in per GPU as its verdicts say (rate, checks, wrong elements): a rejected board shows here first."""
    gpus = {}
    for check in checks:
        found = check.get("found")
        if check.get("name") == "burn-in-gpu" and isinstance(found, dict):
            subject = _SERIAL_SUFFIX.sub("", str(check.get("subject", "")))
            gpus[subject] = {"wrong_elements": int(found.get("errors_self") or 0) + int(found.get("errors_cross") or 0),
                             "checks": found.get("checks"), "tflops": found.get("tflops")}
    return gpus or None


#: what the fleet reads of a results document; the rest (the health timeline, the burn-in's chunks, per-test
#: durations) is most of a long run's file and is never parsed
_WANTED = ("profile", "run", "machine", "software", "checks", "summary")
_KEY_NAME = re.compile(r'"([A-Za-z_]+)": ')


def _top_level_keys(text: str) -> list[tuple[str, int, int]]:
    """(key, where its line starts, where its value starts) of each top-level key, as write_json (indent=2)
    writes them: at the start of a line, two spaces in. JSON escapes every newline inside a string and nests
    deeper keys further in, so nothing else in the document starts a line with two spaces and a quote."""
    keys, position = [], text.find('\n  "')
    while position >= 0:
        m = _KEY_NAME.match(text, position + 3)
        if m is None:
            raise ValueError(f"unexpected text at character {position + 3}")
        keys.append((m.group(1), position, m.end()))
        position = text.find('\n  "', m.end())
    return keys


def _load_results(text: str) -> dict:
    """The document's wanted parts. A file written by the plugin (indent 2) is cut at its top-level keys and only
    the wanted values are parsed: a 10-minute burn-in's results are 400 kB, of which the fleet needs 20. Any other
    layout is parsed whole."""
    keys = _top_level_keys(text) if text.startswith('{\n  "') else []
    if not keys:
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError("a JSON object was expected")
        return document
    document = {}
    ends = [start for _, start, _ in keys[1:]] + [text.rindex("}")]
    for (key, _, value_start), end in zip(keys, ends, strict=True):
        if key in _WANTED:
            document[key] = json.loads(text[value_start:end].rstrip().rstrip(","))
    return document


#: the first top-level key after every wanted one, in the order session.results_document writes them
_AFTER_WANTED = b'\n  "health": '
_CHUNK = 1 << 16


def _read_head(path: Path) -> str:
    """The results file up to its health timeline, read in chunks: what the fleet needs is in the first tens of
    kilobytes of a file that a long burn-in makes hundreds of kilobytes long. The whole file where the marker is
    not found (another layout)."""
    data = bytearray()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            data += chunk
            cut = data.find(_AFTER_WANTED, max(0, len(data) - len(chunk) - len(_AFTER_WANTED)))
            if cut >= 0:
                return data[:cut].decode("utf-8") + "\n}"
    return data.decode("utf-8")


def read_node(directory: Path) -> Node:
    """The node in ``directory``; a node whose results are missing or unreadable comes back with ``verdict`` None
    and ``error`` saying why (the fleet then names it, instead of failing the whole report)."""
    node = Node(name=directory.name, directory=str(directory))
    path = directory / RESULTS_FILE
    if not path.is_file():
        node.error = f"no {RESULTS_FILE} in {directory}: the node never reported"
        return node
    try:
        document = _load_results(_read_head(path))
        summary = document.get("summary") or {}
        node.verdict = str(summary.get("verdict") or "INCOMPLETE")
        node.reason = str(summary.get("verdict_reason") or "")
        node.profile = _text((document.get("profile") or {}).get("name"))
        node.profile_path = _text((document.get("profile") or {}).get("path"))
        node.fleet_id = _text((document.get("run") or {}).get("fleet_id"))
        checks = [c for c in document.get("checks") or [] if isinstance(c, dict)]
        node.failed = [{"check": str(c.get("name")), "subject": str(c.get("subject")),
                        "message": str(c.get("message") or "")[:2000]}
                       for c in checks if c.get("verdict") == "failed"]
        node.inventory, node.serials = _inventory(document)
        node.metrics = _metrics(checks)
        node.burn_in = _burn_in(checks)
    except (OSError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        node.verdict, node.error = None, f"{path}: not a gpufabric results file ({exc})"
        return node
    node.report = next((name for name in _HTML_NAMES if (directory / name).is_file()), None)
    return node
