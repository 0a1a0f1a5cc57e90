"""The fleet page's small parts (fleet/html.py and flagged.py lay them out): a node's name linked to its own report,
a table cell, a number with its unit, an outlier in words, what to do next about a node, a node's burn-in per GPU.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from ..report.phrases import number
from ..units import is_number

_FAILED_SHOWN = 3  # failed checks written out per node (the others counted, all of them in the cell's title)
_OUTLIERS_SHOWN = 8  # outlier measurements shown per node, the worst first (the others in a title)

_VERDICT_CSS = {"ACCEPTED": "match", "REJECTED": "mismatch", "INCOMPLETE": "unknown", "NOT TESTED": "unknown"}


class _Links:
    """Each node's name, linked to its own HTML report by a path relative to ``out_dir`` (where fleet.html is
    written) when it has one. The path is percent-encoded ('/' kept): a folder named like a URL scheme
    ('javascript:...') stays a relative path. Node folders share a few parents: each parent's relative path is
    worked out once (os.path.relpath per node costs 10,000 nodes a second)."""

    def __init__(self, out_dir: Path | str) -> None:
        self.out_dir = os.path.abspath(str(out_dir))
        self.parents: dict[str, str] = {}

    def href(self, directory: str, report: str) -> str:
        parent, folder = os.path.split(os.path.abspath(directory))
        if parent not in self.parents:
            try:
                self.parents[parent] = os.path.relpath(parent, self.out_dir)
            except ValueError:  # another drive (Windows): the absolute path
                self.parents[parent] = parent
        href = os.path.join(self.parents[parent], folder, report)
        return quote(os.path.normpath(href).replace(os.sep, "/"), safe="/")

    def __call__(self, node: dict, css: str = "node") -> dict:
        """A cell (or a name in a list): the node's name, linked where it wrote a report."""
        name = str(node.get("name", ""))
        report, directory = node.get("report"), node.get("directory")
        href = self.href(str(directory), str(report)) if report and directory else None
        return {"text": name, "href": href, "css": css}


def _cell(text: str, css: str = "", title: str = "") -> dict:
    return {"text": text, "css": css, "title": title}


def _fmt(value: object, unit: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    return number(value, unit or None)


def _verdict_text(node: dict) -> str:
    return str(node.get("verdict") or "no results")


def _measurement(record: dict) -> str:
    return f"{record.get('check')} {record.get('subject')} {record.get('metric')}"


def _is_temperature(record: dict) -> bool:
    return record.get("unit") == "C"


def _worse_by(record: dict) -> str:
    """How much worse, in the measurement's own terms: degrees for a temperature, a share of the median else."""
    if _is_temperature(record) and isinstance(record.get("excess"), (int, float)):
        return f"+{record['excess']:.3g} C"
    worse = record.get("worse_by")
    return "—" if worse is None else f"{worse:.1%}"


def _outlier_phrase(record: dict) -> str:
    return (f"{_measurement(record)}: {_fmt(record.get('value'), record.get('unit') or '')} vs median "
            f"{_fmt(record.get('median'), record.get('unit') or '')} ({_worse_by(record)} worse, {record.get('rule')})")


def _headroom(record: dict) -> str:
    if not _is_temperature(record):
        return ""
    if not isinstance(record.get("headroom_c"), (int, float)):
        return "not known"
    return f"{record['headroom_c']:.3g} C (slowdown at {record.get('slowdown_c'):.3g} C)"


def _worst_first(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: -(r.get("worse_by") or 0))


def _remedy_cell(node: dict, lines: bool) -> dict | str:
    """What to do next about a node (its results' remedies, remedy.py): each class of its failed promises, with them
    where ``lines`` (the Not accepted part), counted else (the Nodes table); the evidence in the title."""
    remedies = {c: [str(p) for p in e.get("promises") or []] for c, e in (node.get("remedies") or {}).items()}
    if not remedies:
        return "—"
    text = ("\n".join(f"{c}: {', '.join(ids[:_FAILED_SHOWN])}" + (f" +{len(ids) - _FAILED_SHOWN} more"
                                                                    if len(ids) > _FAILED_SHOWN else "")
                       for c, ids in remedies.items()) if lines else
            ", ".join(f"{c} ({len(ids)})" for c, ids in remedies.items()))
    title = "\n".join(f"{c}: {', '.join(ids)}: {node['remedies'][c].get('why') or ''}" for c, ids in remedies.items())
    return _cell(text, "lines" if lines else "", title)


def _remarkable(node: dict) -> bool:
    return node.get("verdict") != "ACCEPTED" or bool(node.get("outliers")) or bool(node.get("drift"))


def _where(path: str, out_dir: Path | str) -> str:
    """A folder as the page may show it: relative to where fleet.html is, never a local absolute path."""
    try:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(str(out_dir)))
    except ValueError:  # another drive (Windows): its name
        return os.path.basename(os.path.normpath(path))


def _burn_in_gpus(node: dict) -> dict[str, dict]:
    """The node's burn-in per GPU as fleet/nodes.py keeps it (GPU name -> wrong_elements, checks, tflops), counts
    read as whole numbers (0 where a record lacks one)."""
    gpus = {}
    for gpu, record in (node.get("burn_in") or {}).items():
        if isinstance(record, dict):
            gpus[str(gpu)] = {"wrong_elements": _count(record.get("wrong_elements")),
                              "checks": _count(record.get("checks")), "tflops": record.get("tflops")}
    return gpus


def _count(value: object) -> int:
    return int(value) if is_number(value) else 0
