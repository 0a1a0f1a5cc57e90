"""``fleet.html``: the fleet's verdict as one self-contained page (inline CSS, plots as inline SVG).

Summary first: the verdict and its reason, the counts, the fleet run(s), when and by which settings it was judged.
Then the flagged nodes (not accepted, never reported, outliers with the measurement that flagged them, inventory
drift, split fields, GPU serials on two nodes), one small plot per measurement of its distribution across the
passing nodes, and every node in one table, linked to its own report.

A fleet can be 10,000 nodes: nothing on the page is drawn per node (one plot per measurement), the detail tables
stop at ``_DETAIL_ROWS`` rows and name the rest, and past ``_FULL_TABLE`` nodes the accepted, unremarkable ones are
a list of names rather than table rows.

As in the node report, this module prepares plain data and the templates (report/templates/fleet*.j2, on the
report's base: the same style, print rules and cover) lay it out with autoescaping on: node names are folder names,
messages, profile names and inventory values all come from machines and files, and none of it can become markup.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from ..report.charts import distribution_chart
from ..report.phrases import number, short
from ..units import is_number

__all__ = ["fleet_html"]

_DETAIL_ROWS = 1000  # rows of each flagged-node table; the nodes past it are named, their detail is in the JSON
_FULL_TABLE = 2000  # nodes up to which the Nodes table lists every node; past it accepted plain ones are names
_FAILED_SHOWN = 3  # failed checks written out per node (the others counted, all of them in the cell's title)
_OUTLIERS_SHOWN = 8  # outlier measurements shown per node, the worst first (the others in a title)
_MESSAGE = 160  # characters of a failed check's message shown (ended at a word; the whole in the cell's title)
_LABELS = 10  # flagged nodes named under a plot
_HISTOGRAM_ABOVE = 200  # nodes above which a distribution is a histogram, not a strip of points
_SERIAL_NODES = 20  # nodes named per duplicated serial

_VERDICT_CSS = {"ACCEPTED": "match", "REJECTED": "mismatch", "INCOMPLETE": "unknown", "NOT TESTED": "unknown"}


# --- small parts ----------------------------------------------------------------------------------------


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


# --- summary --------------------------------------------------------------------------------------------


def _tiles(counts: dict) -> list[dict]:
    spec = [("nodes", "node folders", ""), ("expected", "expected", ""), ("accepted", "accepted", ""),
            ("rejected", "rejected", "bad"), ("incomplete", "incomplete", "bad"), ("unreadable", "unreadable", "bad"),
            ("missing", "missing", "bad"), ("outlier_nodes", "with outliers", "warn"),
            ("drifted_nodes", "drifted", "warn"), ("unsigned", "unsigned", "warn")]
    tiles = []
    for key, label, bad in spec:
        value = counts.get(key)
        text, css = ("—", "") if value is None else (f"{value:,}", bad if value else "")
        if key == "accepted" and value and value == counts.get("nodes"):
            css = "good"
        tiles.append({"n": text, "label": label, "css": css})
    return tiles


def _settings_text(settings: dict) -> str:
    return (f"flagged when worse than the median of its comparison group by more than {_fmt(settings.get('k'))} MAD "
            f"and by at least {(settings.get('min_deviation') or 0):.0%} of it (bandwidths, throughputs, times) or "
            f"{_fmt(settings.get('min_degrees_c'))} C (temperatures; or within "
            f"{_fmt(settings.get('slowdown_headroom_c'))} C of the GPU's own slowdown threshold); at least "
            f"{settings.get('group_min_nodes')} consecutively named nodes shifted together by "
            f"{(settings.get('group_min_deviation') or 0):.0%} or {_fmt(settings.get('group_min_degrees_c'))} C are "
            f"one group, reported once; at least {settings.get('min_nodes')} passing nodes per measurement")


def _where(path: str, out_dir: Path | str) -> str:
    """A folder as the page may show it: relative to where fleet.html is, never a local absolute path."""
    try:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(str(out_dir)))
    except ValueError:  # another drive (Windows): its name
        return os.path.basename(os.path.normpath(path))


def _facts(document: dict, out_dir: Path | str) -> list[tuple[str, str]]:
    settings = document.get("settings") or {}
    counts = document.get("counts") or {}
    fleet_ids = document.get("fleet_ids") or []
    facts = [
        ("Fleet run", ", ".join(map(str, fleet_ids)) if fleet_ids
         else "not recorded (the nodes ran without --gpu-fleet-id or a Slurm job)"),
        ("Generated", str(document.get("generated_at") or "?").replace("T", " ").replace("+00:00", " UTC")
         + f" (run {document.get('run_id') or '?'})"),
        ("Results read from", ", ".join(_where(str(p), out_dir) for p in document.get("inputs") or [])
         + " (relative to this page)" if document.get("inputs") else "—"),
        ("Settings from", str(document.get("settings_from") or "—")),
        ("Outlier rule", _settings_text(settings)),
        ("Outliers", "reject the fleet (fleet.fail_on_outlier)" if settings.get("fail_on_outlier")
         else "reported as findings; they do not reject the fleet"),
        ("Drift rejects in", ", ".join(map(str, settings.get("fail_on_drift") or []))
         or "no field: drift is reported, not failing"),
    ]
    classes: dict[str, int] = {}
    for m in document.get("metrics") or []:
        if isinstance(m.get("n"), int):
            classes[str(m.get("class") or "?")] = max(classes.get(str(m.get("class") or "?"), 0), m["n"])
    facts.insert(4, ("Compared", "; ".join(f"{kind}: up to {n:,} passing node(s)" for kind, n in classes.items())
                     or f"nothing: no measurement had {settings.get('min_nodes')} passing nodes of one machine class"))
    if counts.get("expected") is None:
        facts.insert(1, ("Expected nodes", "no list given (--expect or SLURM_JOB_NODELIST): missing nodes cannot "
                                           "be told"))
    signatures = document.get("signatures")
    if signatures:
        facts.append(("Signatures", f"every node's results checked against key {signatures.get('key_id')}: "
                                    f"{signatures.get('verified', 0):,} signed and untouched"))
    return facts


# --- flagged nodes --------------------------------------------------------------------------------------


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
        if wrong:
            reason += ("; " if reason else "") + "burn-in wrong elements: " + ", ".join(
                f"{gpu} {count:,}" for gpu, count in wrong.items())
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


# --- distributions --------------------------------------------------------------------------------------


def _values(metric: dict) -> list[float] | None:
    """The passing nodes' values of a measurement, where the document has them (``values``: a list, or
    {node: value}); None where it has only the summary."""
    values = metric.get("values")
    if isinstance(values, dict):
        values = list(values.values())
    if not isinstance(values, list):
        return None
    return [float(v) for v in values if is_number(v)]


def _flagged_values(nodes: list[dict]) -> dict[tuple, list[tuple[str, float]]]:
    """(check, subject, metric) -> [(node, value)] of the outliers, the worst first."""
    out: dict[tuple, list[tuple[str, float, float]]] = {}
    for node in nodes:
        for r in node.get("outliers") or []:
            if isinstance(r.get("value"), (int, float)):
                out.setdefault((r.get("check"), r.get("subject"), r.get("metric")), []).append(
                    (str(node.get("name")), float(r["value"]), r.get("worse_by") or 0))
    return {key: [(n, v) for n, v, _ in sorted(found, key=lambda f: -f[2])] for key, found in out.items()}


def distribution_figure(metric: dict, flagged: list[tuple[str, float]]) -> dict:
    """One measurement's figure: its chart (charts.distribution_chart) and its caption's parts."""
    unit = str(metric.get("unit") or "")
    limits = metric.get("limits") or {}
    values = _values(metric)
    chart = distribution_chart(values, metric.get("min"), metric.get("max"), metric.get("median"),
                               limits.get("mad"), limits.get("margin", limits.get("fraction")), flagged, unit,
                               _HISTOGRAM_ABOVE)
    if chart is not None:
        chart["title"] = f"{metric.get('check')} {metric.get('subject')} {metric.get('metric')}"
    stats = (f"{metric.get('class') or ''}: n={metric.get('n')}, {metric.get('better', '?')} is better, median "
             f"{_fmt(metric.get('median'), unit)}, MAD {_fmt(metric.get('mad'), unit)}, range "
             f"{_fmt(metric.get('min'), unit)} to {_fmt(metric.get('max'), unit)}")
    if values is None:
        stats += " (bar: the range; the nodes' own values are not in the document)"
    names = [n for n, _ in flagged] or sorted(map(str, metric.get("flagged") or []))
    shown = ", ".join(names[:_LABELS]) + (f" and {len(names) - _LABELS:,} more" if len(names) > _LABELS else "")
    return {"chart": chart, "title": f"{metric.get('check')} · {metric.get('subject')} · {metric.get('metric')}",
            "stats": stats, "flagged": shown}


def _distributions(document: dict) -> dict:
    metrics = list(document.get("metrics") or [])
    metrics.sort(key=lambda m: not m.get("flagged"))  # the measurements that flag a node first
    flagged_values = _flagged_values(document.get("nodes") or [])
    figures = []
    for metric in metrics:
        names = set(map(str, metric.get("flagged") or []))
        key = (metric.get("check"), metric.get("subject"), metric.get("metric"))
        figures.append(distribution_figure(metric, [(n, v) for n, v in flagged_values.get(key, []) if n in names]))
    intro = ("Each measurement across the passing nodes of one machine class: grey, the nodes "
             f"(a histogram above {_HISTOGRAM_ABOVE} nodes); black line, the fleet's median; dashed red, the MAD "
             "limit; dotted orange, the practical margin (a share of the median; degrees for temperatures); a node is "
             "flagged past both; red diamonds, the flagged nodes (named under the plot, up to {_LABELS}). "
             "Measurements that flag a node come first; a group's members are judged against their group's median, "
             "not these lines.").replace("{_LABELS}", str(_LABELS))
    return {"figures": figures, "intro": intro}


# --- nodes ----------------------------------------------------------------------------------------------


def _node_row(node: dict, link: _Links) -> list:
    verdict = _verdict_text(node)
    outliers = _worst_first(node.get("outliers") or [])
    drift = node.get("drift") or []
    failed = len(node.get("failed") or [])
    return [
        link(node),
        _cell(verdict, _VERDICT_CSS.get(verdict, "unknown"), str(node.get("reason") or "")),
        str(node.get("profile") or "—"),
        _cell(str(failed), "num mismatch" if failed else "num"),
        _cell(str(len(outliers)), "num unknown" if outliers else "num",
              "\n".join(_outlier_phrase(r) for r in outliers[:_OUTLIERS_SHOWN])),
        _cell(", ".join(str(d.get("field")) for d in drift) or "—", "unknown" if drift else "",
              "; ".join(f"{d.get('field')}: {d.get('value')} (majority {d.get('majority')})" for d in drift)),
        _burn_in_cell(node),
        _remedy_cell(node, lines=False),
    ]


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


def _burn_in_cell(node: dict) -> dict | str:
    """The Nodes table's burn-in column: the node's GEMM result checks and wrong elements, summed over its GPUs, the
    GPUs with wrong ones named; each GPU's figures in the title."""
    gpus = _burn_in_gpus(node)
    if not gpus:
        return "—"
    checks = sum(r["checks"] for r in gpus.values())
    wrong = {gpu: r["wrong_elements"] for gpu, r in gpus.items() if r["wrong_elements"]}
    text = f"{checks:,} check(s), {sum(wrong.values()):,} wrong"
    if wrong:
        text += " (" + ", ".join(wrong) + ")"
    title = "\n".join(f"{gpu}: {r['checks']:,} check(s), {r['wrong_elements']:,} wrong, {_fmt(r['tflops'], 'TFLOP/s')}"
                      for gpu, r in gpus.items())
    return _cell(text, "mismatch" if wrong else "", title)


_NODE_HEADER = ["Node", "Verdict", "Profile", "Failed checks", "Outliers", "Drift", "Burn-in", "What to do next"]


def _nodes(document: dict, link: _Links) -> dict:
    nodes = document.get("nodes") or []
    out = {"count": f"{len(nodes):,}", "header": _NODE_HEADER, "rows": [], "plain": [], "plain_count": "0",
           "intro": ""}
    if not nodes:
        out["intro"] = "No node results were found."
        return out
    if len(nodes) <= _FULL_TABLE:
        out["intro"] = ("Every node that has a folder; a name links to the node's own report where it wrote one. "
                        "Hover a cell for its detail.")
        out["rows"] = [_node_row(n, link) for n in nodes]
        return out
    remarkable = [n for n in nodes if _remarkable(n)]
    remarkable.sort(key=lambda n: (n.get("verdict") == "ACCEPTED", not n.get("outliers")))
    plain = [n for n in nodes if not _remarkable(n)]
    out["intro"] = (f"{len(remarkable):,} node(s) not accepted, outlying or drifted first; then the "
                    f"{len(plain):,} accepted node(s) with nothing flagged, by name. A name links to the node's own "
                    "report where it wrote one.")
    out["rows"] = [_node_row(n, link) for n in remarkable]
    out["plain"] = [link(n) for n in plain]
    out["plain_count"] = f"{len(plain):,}"
    return out


# --- the fabric -----------------------------------------------------------------------------------------


#: past this many nodes the heatmap shows the named nodes' rows only (a 1,000 x 1,000 table is no page)
_HEATMAP_NODES = 64


def _heat_cell(value: float | None, median: float | None, fraction: float) -> dict:
    """A pair's busbw, shaded from white (at or above the fleet's median) to red (at the slow line and below)."""
    if value is None:
        return {"value": None, "text": "-"}
    share = value / median if median else 1.0
    depth = min(1.0, max(0.0, (1.0 - share) / (1.0 - fraction))) if fraction < 1 else 0.0
    return {"value": value, "text": f"{value:.3g}", "shade": int(255 - 150 * depth),
            "title": f"{share:.0%} of the median pair"}


def _fabric(document: dict) -> dict | None:
    """The fabric between the nodes: the all-node collective against its floors, the slow node or pair named,
    and the node x node busbw of the pairwise rounds as a heatmap."""
    fabric = document.get("fabric")
    if not fabric:
        return None
    summary = (f"Verdict: {fabric['verdict']}. {len(fabric['nodes'])} node(s); every pair measured in "
               f"{fabric['rounds']} round(s) of disjoint pairs ({fabric['backend']}, {fabric['pair_size']:,} bytes "
               f"each way); a pair below {fabric['min_fraction_of_median']:g} of the median pair "
               f"({_fmt(fabric['pair_median'], 'GB/s')}) is slow; {fabric['line_rate']}. From {fabric['source']}.")
    checks = [[c["op"], f"{c['size']:,} B", c["expected"], _fmt(c["busbw"], "GB/s"),
               _cell(c["verdict"], "mismatch" if c["verdict"] == "failed" else "match")] for c in fabric["checks"]]
    named = {s["node"] for s in fabric["slow_nodes"]} | {n for p in fabric["slow_pairs"] for n in (p["a"], p["b"])}
    nodes = fabric["nodes"] if len(fabric["nodes"]) <= _HEATMAP_NODES else [n for n in fabric["nodes"] if n in named]
    heatmap = None
    if nodes:
        matrix = fabric["matrix"]
        rows = [{"node": a, "cells": [_heat_cell(matrix.get(a, {}).get(b), fabric["pair_median"],
                                                 fabric["min_fraction_of_median"]) if a != b
                                      else {"value": None, "text": "X"} for b in nodes]} for a in nodes]
        intro = ("busbw of each pair, GB/s each way (sendrecv): white at the fleet's median, red at the slow line and "
                 "below" + ("" if nodes == fabric["nodes"] else
                            f"; the {len(nodes)} named node(s) of {len(fabric['nodes'])} only") + ".")
        heatmap = {"nodes": nodes, "rows": rows, "intro": intro}
    nccl = [[node, ", ".join(f"{k} x{v}" for k, v in sorted((view or {}).get("transports", {}).items())) or "-",
             "; ".join((view or {}).get("net", [])) or "-"] for node, view in sorted((fabric.get("nccl") or
                                                                                       {}).items())]
    return {"summary": summary, "problems": list(fabric["problems"]), "checks": checks, "heatmap": heatmap,
            "nccl": nccl}


# --- the page -------------------------------------------------------------------------------------------


def fleet_html(document: dict, out_dir: Path | str) -> str:
    """The whole fleet.html page for a fleet-results document (fleet/analysis.py); ``out_dir`` is where it is
    written, so each node's report is linked by a relative path."""
    from ..report.render import render

    link = _Links(out_dir)
    verdict = document.get("verdict")
    css = {"ACCEPTED": "accepted", "REJECTED": "rejected", "INCOMPLETE": "incomplete",
           "NOT TESTED": "not-tested"}.get(verdict or "", "none")
    cover = {"title": "GPU fleet acceptance", "verdict_css": css,
             "verdict_text": f"Fleet verdict: {verdict}" if verdict else "No verdict",
             "reason": str(document.get("reason") or "")}
    return render("fleet.html.j2", page=True, page_id="gpufabric-fleet", css_class="fleet",
                  title=f"GPU fleet acceptance: {verdict or 'no verdict'}", cover=cover,
                  tiles=_tiles(document.get("counts") or {}), facts=_facts(document, out_dir),
                  flagged=_flagged(document, link), fabric=_fabric(document),
                  distributions=_distributions(document), nodes=_nodes(document, link))
