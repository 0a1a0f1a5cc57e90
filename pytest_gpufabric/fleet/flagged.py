"""The fleet page's flagged nodes: not accepted, never reported, outliers with the measurement that flagged them,
inventory drift, split fields and GPU serials on two nodes. A table stops at ``_DETAIL_ROWS`` rows and names the
rest: a fleet can be 10,000 nodes.
"""

from __future__ import annotations

import os

from ..report.phrases import short
from .html_cells import (
    _FAILED_SHOWN,
    _OUTLIERS_SHOWN,
    _VERDICT_CSS,
    _burn_in_gpus,
    _cell,
    _fmt,
    _headroom,
    _Links,
    _outlier_phrase,
    _remedy_cell,
    _verdict_text,
    _where,
    _worse_by,
    _worst_first,
)

_DETAIL_ROWS = 1000  # rows of each flagged-node table; the nodes past it are named, their detail is in the JSON
_MESSAGE = 160  # characters of a failed check's message shown (ended at a word; the whole in the cell's title)
_SERIAL_NODES = 20  # nodes named per duplicated serial


def _rest(nodes: list[dict], link: _Links, what: str) -> dict | None:
    """The nodes past a table's rows, named."""
    if not nodes:
        return None
    return {"text": f"{len(nodes):,} more {what} (their detail is in fleet-results.json):",
            "names": [link(n) for n in nodes]}


def _part(title: str, intro: str = "", header: list | None = None, rows: list | None = None,
          names: list | None = None, rest: dict | None = None, more: str = "") -> dict:
    return {"title": title, "intro": intro, "header": header, "rows": rows or [], "names": names, "rest": rest,
            "more": more}


def _not_accepted(nodes: list[dict], link: _Links) -> dict | None:
    bad = [n for n in nodes if n.get("verdict") != "ACCEPTED"]
    if not bad:
        return None
    rows = []
    for node in bad[:_DETAIL_ROWS]:
        failed = node.get("failed") or []
        lines = [f"{f.get('check')} {f.get('subject')}: {short(str(f.get('message') or ''), _MESSAGE)}"
                 for f in failed[:_FAILED_SHOWN]]
        if len(failed) > _FAILED_SHOWN:
            lines.append(f"+{len(failed) - _FAILED_SHOWN} more failed check(s)")
        whole = "\n".join(f"{f.get('check')} {f.get('subject')}: {f.get('message')}" for f in failed)
        if not failed:
            lines = ["no failed check recorded (the node's verdict comes from its tests: see its own report)"
                     if node.get("verdict") else "—"]
        wrong = {gpu: record["wrong_elements"] for gpu, record in _burn_in_gpus(node).items()
                 if record["wrong_elements"]}
        reason = str(node.get("reason") or "")
        directory = node.get("directory")
        if directory and os.path.isabs(str(directory)):  # the node's folder as the page shows folders: relative
            reason = reason.replace(str(directory), _where(str(directory), link.out_dir))
        if wrong:  # first: the cell shows the reason's first 300 characters
            reason = "burn-in wrong elements: " + ", ".join(f"{gpu} {count:,}" for gpu, count in wrong.items()) + (
                f"; {reason}" if reason else "")
        verdict = _verdict_text(node)
        rows.append([link(node), _cell(verdict, _VERDICT_CSS.get(verdict, "unknown")),
                     _cell(short(reason, 300), "note", reason), _cell("\n".join(lines), "lines", whole),
                     _remedy_cell(node, lines=True)])
    return _part(f"Not accepted ({len(bad):,})", header=["Node", "Verdict", "Why",
                                                          "Failed checks (hover for the whole messages)",
                                                          "What to do next (hover for the evidence)"],
                 rows=rows, rest=_rest(bad[_DETAIL_ROWS:], link, "node(s) not accepted"))


def _missing(document: dict) -> dict | None:
    missing = document.get("missing") or []
    if not missing:
        return None
    return _part(f"Never reported ({len(missing):,})", "Expected, but no results folder was found:",
                 names=[str(n) for n in missing])


def _classes(metrics: list[dict]) -> dict[tuple, str]:
    """(node, check, subject, metric) -> machine class, from the metrics' flagged lists."""
    out = {}
    for m in metrics:
        for node in m.get("flagged") or []:
            out[(node, m.get("check"), m.get("subject"), m.get("metric"))] = str(m.get("class") or "")
    return out


def _outliers(nodes: list[dict], metrics: list[dict], link: _Links) -> dict | None:
    flagged = [n for n in nodes if n.get("outliers")]
    if not flagged:
        return None
    flagged.sort(key=lambda n: -max((r.get("worse_by") or 0) for r in n["outliers"]))
    classes = _classes(metrics)
    several = len({m.get("class") for m in metrics}) > 1
    rows = []
    for node in flagged[:_DETAIL_ROWS]:
        records = _worst_first(node["outliers"])
        for i, r in enumerate(records[:_OUTLIERS_SHOWN]):
            unit = r.get("unit") or ""
            z = r.get("z")
            cells = [link(node) if i == 0 else _cell("″", "muted node", str(node.get("name")))]
            if several:
                cells.append(_cell(classes.get((node.get("name"), r.get("check"), r.get("subject"), r.get("metric")),
                                          ""), "node"))
            compared = str(r.get("compared_with") or "fleet")
            cells += [str(r.get("check")), str(r.get("subject")), str(r.get("metric")),
                      _cell(_fmt(r.get("value"), unit), "num mismatch"),
                      _cell(_fmt(r.get("median"), unit), "num", f"median of: {compared}"),
                      _cell(_fmt(r.get("mad"), unit), "num"),
                      _cell("— (MAD 0)" if z is None else f"{z:+.1f}", "num"), _cell(_worse_by(r), "num"),
                      _cell(_headroom(r), "num"), str(r.get("rule"))]
            rows.append(cells)
        if len(records) > _OUTLIERS_SHOWN:
            more = "\n".join(_outlier_phrase(r) for r in records[_OUTLIERS_SHOWN:])
            rows.append([_cell("″", "muted node", str(node.get("name"))), *([""] if several else []),
                         _cell(f"+{len(records) - _OUTLIERS_SHOWN} more measurement(s) of this node", "note", more),
                         *[""] * 9])
    header = ["Node", *(["Machine class"] if several else []), "Check", "Subject", "Metric", "Value",
              "Median compared with", "MAD", "Robust z", "Worse by", "Below slowdown", "Rule (both tests)"]
    return _part(f"Outliers among the passing nodes ({len(flagged):,})",
                 "Accepted on their own, but worse than their siblings of the same machine class (or of their own "
                 "group, where they are in one) past both tests; the worst first. Temperatures are judged in "
                 "degrees, with the GPU's headroom to its own slowdown threshold where its results carry it.",
                 header, rows, rest=_rest(flagged[_DETAIL_ROWS:], link, "outlier node(s)"))


_GROUP_NAMES = 40  # members named per group on the page (all of them in the cell's title and the JSON)


def _groups(document: dict) -> dict | None:
    """Nodes shifted together (a warm row, a slow batch): one row per group and measurement, its members named
    once. A group accuses no node."""
    groups = document.get("groups") or []
    if not groups:
        return None
    rows = []
    for g in groups[:_DETAIL_ROWS]:
        names = [str(n) for n in g.get("nodes") or []]
        shown = ", ".join(names[:_GROUP_NAMES]) + (f" and {len(names) - _GROUP_NAMES:,} more"
                                                   if len(names) > _GROUP_NAMES else "")
        for i, m in enumerate(g.get("measurements") or []):
            unit = str(m.get("unit") or "")
            shift = (f"+{m['shift']:.3g} C" if unit == "C" and isinstance(m.get("shift"), (int, float))
                     else "—" if m.get("shift_share") is None else f"{m['shift_share']:.1%} worse")
            headroom = ""
            if unit == "C":
                headroom = ("not known" if m.get("headroom_c_min") is None else
                            f"{m['headroom_c_min']:.3g} C at least ({m.get('slowdown_known')} known)")
            first = [_cell(str(g.get("id")), "node"), _cell(f"{g.get('count', len(names)):,}", "num"),
                     _cell(shown, "note", ", ".join(names))] if i == 0 else \
                [_cell("″", "muted node", str(g.get("id"))), "", ""]
            rows.append([*first, str(m.get("check")), str(m.get("subject")), str(m.get("metric")),
                         _cell(_fmt(m.get("median"), unit), "num unknown"),
                         _cell(_fmt(m.get("fleet_median"), unit), "num"), _cell(shift, "num"),
                         _cell(headroom, "num"), str(m.get("rule"))])
    more = len(groups) - _DETAIL_ROWS
    return _part(f"Groups of nodes shifted together ({len(groups):,})",
                 "Consecutively named nodes (a rack, a row, a batch) whose measurement is shifted from the fleet's "
                 "as one: each group is one finding, not an accusation of its members; its members are judged one "
                 "by one against the group's own median (in the outliers below where one stands out).",
                 ["Group", "Nodes", "Members", "Check", "Subject", "Metric", "Group median", "Fleet median", "Shift",
                  "Below slowdown", "Rule (both tests)"], rows,
                 more=f"{more:,} more group(s) in fleet-results.json." if more > 0 else "")


def _drift(document: dict, link: _Links) -> list[dict]:
    nodes = [n for n in document.get("nodes") or [] if n.get("drift")]
    failing = set((document.get("settings") or {}).get("fail_on_drift") or [])
    parts = []
    if nodes:
        rows = []
        for node in nodes[:_DETAIL_ROWS]:
            for i, d in enumerate(node["drift"]):
                css = "mismatch" if d.get("field") in failing else "unknown"
                rows.append([link(node) if i == 0 else _cell("″", "muted node", str(node.get("name"))),
                             str(d.get("field")), _cell(str(d.get("value")), css), str(d.get("majority"))])
        parts.append(_part(f"Inventory drift ({len(nodes):,})", "Nodes whose inventory differs from the fleet's "
                           "majority" + (" (red: a field in fleet.fail_on_drift)" if failing else "") + ".",
                           ["Node", "Field", "Value", "Fleet majority"], rows,
                           rest=_rest(nodes[_DETAIL_ROWS:], link, "drifted node(s)")))
    split = document.get("split_fields") or []
    if split:
        rows = [[str(s.get("field")), "; ".join(f"{value}: {count:,} node(s)" if isinstance(count, int)
                                                 else f"{value}: {count}"
                                                 for value, count in (s.get("values") or {}).items())]
                for s in split]
        parts.append(_part("Split fields", "No value is held by most nodes, so no node is told as drifted:",
                           ["Field", "Values"], rows))
    return parts


def _duplicates(document: dict) -> dict | None:
    duplicates = document.get("duplicate_serials") or []
    if not duplicates:
        return None
    rows = []
    for d in duplicates[:_DETAIL_ROWS]:
        owners = list(map(str, d.get("nodes") or []))
        text = ", ".join(owners[:_SERIAL_NODES]) + (f" and {len(owners) - _SERIAL_NODES:,} more"
                                                    if len(owners) > _SERIAL_NODES else "")
        rows.append([str(d.get("serial")), _cell(text, "", ", ".join(owners))])
    more = len(duplicates) - _DETAIL_ROWS
    return _part(f"GPU serials on more than one node ({len(duplicates):,})", "One board cannot be in two servers: "
                 "the results were copied between folders, or a node reported another's.", ["Serial", "Nodes"], rows,
                 more=f"{more:,} more in fleet-results.json." if more > 0 else "")


def _flagged(document: dict, link: _Links) -> list[dict]:
    nodes = document.get("nodes") or []
    parts = [_not_accepted(nodes, link), _missing(document), _groups(document),
             _outliers(nodes, document.get("metrics") or [], link),
             *_drift(document, link), _duplicates(document)]
    unexpected = document.get("unexpected") or []
    if unexpected:
        parts.append(_part(f"Not on the expected list ({len(unexpected):,})", names=[str(n) for n in unexpected]))
    return [p for p in parts if p]
