"""``fleet.html``: the fleet's verdict as one self-contained page (inline CSS, plots as PNG data URIs).

Summary first: the verdict and its reason, the counts, the fleet run(s), when and by which settings it was judged.
Then the flagged nodes (not accepted, never reported, outliers with the measurement that flagged them, inventory
drift, split fields, GPU serials on two nodes), one small plot per measurement of its distribution across the
passing nodes, and every node in one table, linked to its own report.

A fleet can be 10,000 nodes: nothing on the page is drawn per node (one plot per measurement), the detail tables
stop at ``_DETAIL_ROWS`` rows and name the rest, and past ``_FULL_TABLE`` nodes the accepted, unremarkable ones are
a list of names rather than table rows.

As in the node report (report/html.py, whose Html type and helpers this uses), markup comes only from this
module's own code; every other text (node names are folder names, messages, profile names, inventory values: all
of it from machines and files) is escaped.
"""

from __future__ import annotations

import base64
import io
import math
import os
from html import escape
from pathlib import Path
from urllib.parse import quote

from ..report.html import _STYLE, Html, _cell, _join, _number, _table, _truncated

__all__ = ["fleet_html"]

_DETAIL_ROWS = 1000  # rows of each flagged-node table; the nodes past it are named, their detail is in the JSON
_FULL_TABLE = 2000  # nodes up to which the Nodes table lists every node; past it accepted plain ones are names
_FAILED_SHOWN = 3  # failed checks written out per node (the others counted, all of them in the cell's title)
_OUTLIERS_SHOWN = 8  # outlier measurements shown per node, the worst first (the others in a title)
_MESSAGE = 160  # characters of a failed check's message shown
_LABELS = 10  # flagged nodes labelled by name on a plot
_HISTOGRAM_ABOVE = 200  # nodes above which a distribution is a histogram, not a strip of points
_SERIAL_NODES = 20  # nodes named per duplicated serial

_FLEET_STYLE = Html(
    "<style>"
    "body{font-family:Helvetica,Arial,sans-serif;margin:14px 22px;background:#fff}"
    ".fleet .cover .verdict{display:inline-block;min-width:420px}"
    ".fleet .tiles{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0 12px}"
    ".fleet .tile{border:1px solid #dee2e6;border-radius:6px;padding:6px 12px;min-width:92px;text-align:center}"
    ".fleet .tile .n{font-size:24px;font-weight:bold;display:block}"
    ".fleet .tile .l{font-size:12px;color:#495057}"
    ".fleet .tile.bad{background:#f8d7da;border-color:#f1aeb5;color:#842029}"
    ".fleet .tile.warn{background:#fff3cd;border-color:#ffe69c;color:#664d03}"
    ".fleet .tile.good{background:#d1e7dd;border-color:#a3cfbb}"
    ".fleet .names{font-family:monospace;line-height:1.6;word-break:break-all}"
    ".fleet .plots{display:flex;flex-wrap:wrap;gap:4px 14px}"
    ".fleet .plots figure{margin:4px 0 10px;width:400px}"
    ".fleet .plots figure img{width:400px;max-width:400px}"
    ".fleet .plots figcaption{font-family:monospace;font-size:11px;word-break:break-word}"
    ".fleet .plots figcaption .flag{color:#842029}"
    ".fleet td.lines{white-space:pre-line;font-family:Helvetica,Arial,sans-serif;max-width:640px}"
    ".fleet a{color:#0a58ca}"
    ".fleet td.node{white-space:nowrap}"
    ".fleet .muted{color:#6c757d}"
    "</style>"
)

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

    def __call__(self, node: dict) -> Html:
        name = str(node.get("name", ""))
        report, directory = node.get("report"), node.get("directory")
        if not report or not directory:
            return Html(escape(name))
        return Html(f'<a href="{escape(self.href(str(directory), str(report)), quote=True)}">{escape(name)}</a>')


def _link_cell(node: dict, link: _Links, css: str = "node") -> Html:
    attrs = f' class="{escape(css, quote=True)}"' if css else ""
    return Html(f"<td{attrs}>{link(node)}</td>")


def _names(nodes: list[dict], link: _Links) -> Html:
    """Names (linked where a report exists) as one comma-separated paragraph."""
    return Html('<p class="names">' + ", ".join(link(n) for n in nodes) + "</p>")


def _plain_names(names: list[str]) -> Html:
    return _join(Html('<p class="names">'), ", ".join(map(str, names)), Html("</p>"))


def _fmt(value: object, unit: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    return _number(value, unit or None)


def _verdict_text(node: dict) -> str:
    return str(node.get("verdict") or "no results")


def _measurement(record: dict) -> str:
    return f"{record.get('check')} {record.get('subject')} {record.get('metric')}"


def _worse_by(record: dict) -> str:
    worse = record.get("worse_by")
    return "—" if worse is None else f"{worse:.1%}"


def _outlier_phrase(record: dict) -> str:
    return (f"{_measurement(record)}: {_fmt(record.get('value'), record.get('unit') or '')} vs median "
            f"{_fmt(record.get('median'), record.get('unit') or '')} ({_worse_by(record)} worse, {record.get('rule')})")


def _worst_first(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: -(r.get("worse_by") or 0))


def _remarkable(node: dict) -> bool:
    return node.get("verdict") != "ACCEPTED" or bool(node.get("outliers")) or bool(node.get("drift"))


# --- summary --------------------------------------------------------------------------------------------


def _tiles(counts: dict) -> Html:
    def tile(key: str, label: str, bad: str) -> str:
        value = counts.get(key)
        if value is None:
            text, css = "—", ""
        else:
            text, css = f"{value:,}", (bad if value else "")
        if key == "accepted" and value and value == counts.get("nodes"):
            css = "good"
        return (f'<div class="tile {css}"><span class="n">{escape(text)}</span>'
                f'<span class="l">{escape(label)}</span></div>')

    spec = [("nodes", "node folders", ""), ("expected", "expected", ""), ("accepted", "accepted", ""),
            ("rejected", "rejected", "bad"), ("incomplete", "incomplete", "bad"), ("unreadable", "unreadable", "bad"),
            ("missing", "missing", "bad"), ("outlier_nodes", "with outliers", "warn"),
            ("drifted_nodes", "drifted", "warn")]
    return Html('<div class="tiles">' + "".join(tile(*s) for s in spec) + "</div>")


def _settings_text(settings: dict) -> str:
    k, fraction = settings.get("k"), settings.get("fraction")
    rule = (f"worse than the median by {_fmt(k)} MAD, or worse than {_fmt(fraction)} x the median (median / "
            f"{_fmt(fraction)} where lower is better), and by more than "
            f"{(settings.get('min_deviation') or 0):.0%} of the median; "
            f"at least {settings.get('min_nodes')} passing nodes per measurement")
    return rule


def _summary(document: dict) -> Html:
    verdict = document.get("verdict")
    css = {"ACCEPTED": "accepted", "REJECTED": "rejected", "INCOMPLETE": "incomplete",
           "NOT TESTED": "not-tested"}.get(verdict or "", "none")
    settings = document.get("settings") or {}
    counts = document.get("counts") or {}
    fleet_ids = document.get("fleet_ids") or []
    facts = [
        ("Fleet run", ", ".join(map(str, fleet_ids)) if fleet_ids
         else "not recorded (the nodes ran without --gpu-fleet-id or a Slurm job)"),
        ("Generated", str(document.get("generated_at") or "?").replace("T", " ").replace("+00:00", " UTC")
         + f" (run {document.get('run_id') or '?'})"),
        ("Results read from", ", ".join(map(str, document.get("inputs") or [])) or "—"),
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
    rows = "".join(f"<tr><th>{escape(k)}</th>{_cell(v)}</tr>" for k, v in facts)
    return _join(
        Html('<div class="cover">'),
        Html("<h1>GPU fleet acceptance</h1>"),
        Html(f'<div class="verdict {css}">{"Fleet verdict: " + escape(verdict) if verdict else "No verdict"}</div>'),
        Html('<p class="reason">'), str(document.get("reason") or ""), Html("</p>"),
        _tiles(counts),
        Html(f'<table class="facts">{rows}</table>'),
        Html("</div>"),
    )


# --- flagged nodes --------------------------------------------------------------------------------------


def _rest(nodes: list[dict], link: _Links, what: str) -> Html:
    """The nodes past a table's rows, named."""
    if not nodes:
        return Html("")
    return _join(Html("<p>"), f"{len(nodes):,} more {what} (their detail is in fleet-results.json):", Html("</p>"),
                 _names(nodes, link))


def _not_accepted(nodes: list[dict], link: _Links) -> Html:
    bad = [n for n in nodes if n.get("verdict") != "ACCEPTED"]
    if not bad:
        return Html("")
    rows = []
    for node in bad[:_DETAIL_ROWS]:
        failed = node.get("failed") or []
        lines = [f"{f.get('check')} {f.get('subject')}: {_truncated(str(f.get('message') or ''), _MESSAGE)}"
                 for f in failed[:_FAILED_SHOWN]]
        if len(failed) > _FAILED_SHOWN:
            lines.append(f"+{len(failed) - _FAILED_SHOWN} more failed check(s)")
        whole = "\n".join(f"{f.get('check')} {f.get('subject')}: {f.get('message')}" for f in failed)
        if not failed:
            lines = ["no failed check recorded (the node's verdict comes from its tests: see its own report)"
                     if node.get("verdict") else "—"]
        burn_in = node.get("burn_in") or {}
        wrong = {gpu: count for gpu, count in (burn_in.get("wrong_elements") or {}).items() if count}
        reason = str(node.get("reason") or "")
        if wrong:
            reason += ("; " if reason else "") + "burn-in wrong elements: " + ", ".join(
                f"{gpu} {count:,}" for gpu, count in wrong.items())
        verdict = _verdict_text(node)
        rows.append([_link_cell(node, link), _cell(verdict, _VERDICT_CSS.get(verdict, "unknown")),
                     _cell(_truncated(reason, 300), "note", reason), _cell("\n".join(lines), "lines", whole)])
    return _join(Html(f"<h3>Not accepted ({len(bad):,})</h3>"),
                 _table(["Node", "Verdict", "Why", "Failed checks (hover for the whole messages)"], rows),
                 _rest(bad[_DETAIL_ROWS:], link, "node(s) not accepted"))


def _missing(document: dict) -> Html:
    missing = document.get("missing") or []
    if not missing:
        return Html("")
    return _join(Html(f"<h3>Never reported ({len(missing):,})</h3><p>Expected, but no results folder was found:</p>"),
                 _plain_names(missing))


def _classes(metrics: list[dict]) -> dict[tuple, str]:
    """(node, check, subject, metric) -> machine class, from the metrics' flagged lists."""
    out = {}
    for m in metrics:
        for node in m.get("flagged") or []:
            out[(node, m.get("check"), m.get("subject"), m.get("metric"))] = str(m.get("class") or "")
    return out


def _outliers(nodes: list[dict], metrics: list[dict], link: _Links) -> Html:
    flagged = [n for n in nodes if n.get("outliers")]
    if not flagged:
        return Html("")
    flagged.sort(key=lambda n: -max((r.get("worse_by") or 0) for r in n["outliers"]))
    classes = _classes(metrics)
    several = len({m.get("class") for m in metrics}) > 1
    rows = []
    for node in flagged[:_DETAIL_ROWS]:
        records = _worst_first(node["outliers"])
        for i, r in enumerate(records[:_OUTLIERS_SHOWN]):
            unit = r.get("unit") or ""
            z = r.get("z")
            cells = [_link_cell(node, link) if i == 0 else _cell("″", "muted node", str(node.get("name")))]
            if several:
                cells.append(_cell(classes.get((node.get("name"), r.get("check"), r.get("subject"), r.get("metric")),
                                          ""), "node"))
            cells += [str(r.get("check")), str(r.get("subject")), str(r.get("metric")),
                      _cell(_fmt(r.get("value"), unit), "num mismatch"), _cell(_fmt(r.get("median"), unit), "num"),
                      _cell("— (MAD 0)" if z is None else f"{z:+.1f}", "num"), str(r.get("rule")),
                      _cell(_worse_by(r), "num")]
            rows.append(cells)
        if len(records) > _OUTLIERS_SHOWN:
            more = "\n".join(_outlier_phrase(r) for r in records[_OUTLIERS_SHOWN:])
            rows.append([_cell("″", "muted node", str(node.get("name"))), *([""] if several else []),
                         _cell(f"+{len(records) - _OUTLIERS_SHOWN} more measurement(s) of this node", "note", more),
                         *[""] * 7])
    header = ["Node", *(["Machine class"] if several else []), "Check", "Subject", "Metric", "Value", "Fleet median",
              "Robust z", "Rule", "Worse by"]
    return _join(Html(f"<h3>Outliers among the passing nodes ({len(flagged):,})</h3><p>Accepted on their own, but "
                      "worse than their siblings of the same machine class; the worst first.</p>"),
                 _table(header, rows), _rest(flagged[_DETAIL_ROWS:], link, "outlier node(s)"))


def _drift(document: dict, link: _Links) -> Html:
    nodes = [n for n in document.get("nodes") or [] if n.get("drift")]
    failing = set((document.get("settings") or {}).get("fail_on_drift") or [])
    parts = []
    if nodes:
        rows = []
        for node in nodes[:_DETAIL_ROWS]:
            for i, d in enumerate(node["drift"]):
                css = "mismatch" if d.get("field") in failing else "unknown"
                rows.append([_link_cell(node, link) if i == 0 else _cell("″", "muted node", str(node.get("name"))),
                             str(d.get("field")), _cell(str(d.get("value")), css), str(d.get("majority"))])
        parts += [Html(f"<h3>Inventory drift ({len(nodes):,})</h3><p>Nodes whose inventory differs from the fleet's "
                       "majority" + (" (red: a field in fleet.fail_on_drift)" if failing else "") + ".</p>"),
                  _table(["Node", "Field", "Value", "Fleet majority"], rows),
                  _rest(nodes[_DETAIL_ROWS:], link, "drifted node(s)")]
    split = document.get("split_fields") or []
    if split:
        rows = [[str(s.get("field")), "; ".join(f"{value}: {count:,} node(s)" if isinstance(count, int)
                                                 else f"{value}: {count}"
                                                 for value, count in (s.get("values") or {}).items())]
                for s in split]
        parts += [Html("<h3>Split fields</h3><p>No value is held by most nodes, so no node is told as drifted:</p>"),
                  _table(["Field", "Values"], rows)]
    return _join(*parts)


def _duplicates(document: dict) -> Html:
    duplicates = document.get("duplicate_serials") or []
    if not duplicates:
        return Html("")
    rows = []
    for d in duplicates[:_DETAIL_ROWS]:
        owners = list(map(str, d.get("nodes") or []))
        text = ", ".join(owners[:_SERIAL_NODES]) + (f" and {len(owners) - _SERIAL_NODES:,} more"
                                                    if len(owners) > _SERIAL_NODES else "")
        rows.append([str(d.get("serial")), _cell(text, "", ", ".join(owners))])
    more = len(duplicates) - _DETAIL_ROWS
    return _join(Html(f"<h3>GPU serials on more than one node ({len(duplicates):,})</h3><p>One board cannot be in two "
                      "servers: the results were copied between folders, or a node reported another's.</p>"),
                 _table(["Serial", "Nodes"], rows),
                 Html(f"<p>{more:,} more in fleet-results.json.</p>" if more > 0 else ""))


def _flagged(document: dict, link: _Links) -> Html:
    nodes = document.get("nodes") or []
    parts = [_not_accepted(nodes, link), _missing(document),
             _outliers(nodes, document.get("metrics") or [], link), _drift(document, link),
             _duplicates(document)]
    unexpected = document.get("unexpected") or []
    if unexpected:
        parts += [Html(f"<h3>Not on the expected list ({len(unexpected):,})</h3>"), _plain_names(unexpected)]
    if not any(parts):
        parts = [Html("<p>No node is flagged: every node reported and was accepted, none is an outlier among its "
                      "siblings, none drifted from the fleet's inventory.</p>")]
    return _join(Html('<h2 id="flagged">Flagged nodes</h2>'), *parts)


# --- distributions --------------------------------------------------------------------------------------


def _values(metric: dict) -> list[float] | None:
    """The passing nodes' values of a measurement, where the document has them (``values``: a list, or
    {node: value}); None where it has only the summary."""
    values = metric.get("values")
    if isinstance(values, dict):
        values = list(values.values())
    if not isinstance(values, list):
        return None
    return [float(v) for v in values if _is_number(v)]


class _Plotter:
    """One small figure whose artists are made once and given each measurement's data in turn (a figure, an axes
    or a line per plot costs more than the drawing). ``png`` returns None without matplotlib."""

    def __init__(self) -> None:
        try:
            import numpy
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
            from matplotlib.ticker import MaxNLocator
        except ImportError:
            self.figure = None
            return
        self.np = numpy
        self.figure = Figure(figsize=(5, 1.6), dpi=80)
        FigureCanvasAgg(self.figure)
        ax = self.axes = self.figure.add_axes((0.02, 0.24, 0.96, 0.72))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_yticks([])
        ax.tick_params(axis="x", labelsize=7, pad=1)
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        ax.grid(True, axis="x", alpha=0.3)
        self.bars = ax.stairs([0], [0, 1], fill=True, color="#adb5bd")
        self.points = ax.scatter([], [], s=9, color="#6c757d", alpha=0.7, linewidths=0)
        (self.range,) = ax.plot([], [], color="#adb5bd", linewidth=6, solid_capstyle="butt")
        self.median = ax.axvline(0, color="#212529", linewidth=1.2)
        self.mad = ax.axvline(0, color="#dc3545", linestyle="--", linewidth=1)
        self.fraction = ax.axvline(0, color="#fd7e14", linestyle=":", linewidth=1.4)
        self.flags = ax.scatter([], [], s=22, color="#dc3545", marker="D", zorder=5, clip_on=False)
        self.labels: list = []

    def _offsets(self, xs: list[float], ys: list[float]):
        return self.np.column_stack([xs, ys]) if xs else self.np.empty((0, 2))

    def png(self, metric: dict, flagged: list[tuple[str, float]]) -> bytes | None:
        if self.figure is None:
            return None
        ax, np = self.axes, self.np
        for label in self.labels:
            label.remove()
        self.labels = []
        median = metric.get("median")
        limits = metric.get("limits") or {}
        values = _values(metric)
        low_x, high_x = metric.get("min"), metric.get("max")
        extent = [v for v in (low_x, high_x, median, limits.get("mad"), limits.get("fraction"),
                              *(v for _, v in flagged)) if _is_number(v)]
        histogram = values is not None and len(values) > _HISTOGRAM_ABOVE
        top = 1
        self.bars.set_visible(histogram)
        self.points.set_visible(values is not None and not histogram)
        self.range.set_visible(values is None and _is_number(low_x) and _is_number(high_x))
        if histogram:
            counts, edges = np.histogram(np.asarray(values, dtype=float), bins=50)
            self.bars.set_data(counts, edges)
            top = int(counts.max()) or 1
            ax.set_ylim(0, top * 1.2)
            marks_y = [0.0] * len(flagged)
        else:
            if values is not None:
                self.points.set_offsets(self._offsets(values, [((i * 0.6180339887) % 1.0) - 0.5
                                                               for i in range(len(values))]))
            elif self.range.get_visible():
                self.range.set_data([low_x, high_x], [0, 0])
            ax.set_ylim(-1.0, 1.0)
            # on the range bar where there is no strip of points to stand out from
            marks_y = [((i * 0.3819660113) % 1.0) - 0.5 if values is not None else 0.0 for i in range(len(flagged))]
        for line, x in ((self.median, median), (self.mad, limits.get("mad")),
                        (self.fraction, limits.get("fraction"))):
            line.set_visible(_is_number(x))
            if _is_number(x):
                line.set_xdata([x, x])
        self.flags.set_offsets(self._offsets([v for _, v in flagged], marks_y))
        low = high = 0.0
        if extent:
            low, high = min(extent), max(extent)
            pad = (high - low) * 0.06 or abs(high) * 0.01 or 1.0
            ax.set_xlim(low - pad, high + pad)
        for i, (value, names) in enumerate(_label_groups(flagged, high - low)):
            right = high > low and (value - low) / (high - low) > 0.7  # labelled on its left, inside the plot
            text = ", ".join(_truncated(n, 24) for n in names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "")
            y = top * (0.14 + 0.1 * i) if histogram else 0.82 - 0.17 * i
            self.labels.append(ax.annotate(text, (value, y), xytext=(-4 if right else 4, 0),
                                           textcoords="offset points", fontsize=6.5, color="#842029", zorder=6,
                                           ha="right" if right else "left", va="center"))
        ax.set_xlabel(str(metric.get("unit") or ""), fontsize=7, labelpad=1)
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=80)
        return buffer.getvalue()


def _label_groups(flagged: list[tuple[str, float]], span: float) -> list[tuple[float, list[str]]]:
    """The flagged nodes' labels, at most _LABELS: nodes within 4 % of the plot's width of each other share one
    (a rack of equally slow nodes is one label, not a pile of overlapping ones); the worst first."""
    groups: list[tuple[float, list[str]]] = []
    for name, value in flagged:
        near = next((g for g in groups if abs(g[0] - value) <= 0.04 * span), None)
        if near is not None:
            near[1].append(name)
        elif len(groups) < _LABELS:
            groups.append((value, [name]))
    return groups


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _flagged_values(nodes: list[dict]) -> dict[tuple, list[tuple[str, float]]]:
    """(check, subject, metric) -> [(node, value)] of the outliers, the worst first."""
    out: dict[tuple, list[tuple[str, float, float]]] = {}
    for node in nodes:
        for r in node.get("outliers") or []:
            if isinstance(r.get("value"), (int, float)):
                out.setdefault((r.get("check"), r.get("subject"), r.get("metric")), []).append(
                    (str(node.get("name")), float(r["value"]), r.get("worse_by") or 0))
    return {key: [(n, v) for n, v, _ in sorted(found, key=lambda f: -f[2])] for key, found in out.items()}


def _draw(jobs: list[tuple[dict, list[tuple[str, float]]]]) -> list[bytes | None]:
    """Each measurement's PNG (None without matplotlib), all drawn in one figure: some 15-30 ms a plot. (Drawing
    them in two forked processes was measured on 2 cores: 0 to 0.8 s saved of 1.5 to 3.4 s for 75 plots and
    10,000 nodes, not worth a fork in a library.)"""
    plotter = _Plotter()
    return [plotter.png(metric, flagged) for metric, flagged in jobs]


def _caption(metric: dict, flagged: list[str], has_values: bool) -> Html:
    unit = str(metric.get("unit") or "")
    title = f"{metric.get('check')} · {metric.get('subject')} · {metric.get('metric')}"
    stats = (f"{metric.get('class') or ''}: n={metric.get('n')}, {metric.get('better', '?')} is better, median "
             f"{_fmt(metric.get('median'), unit)}, MAD {_fmt(metric.get('mad'), unit)}, range "
             f"{_fmt(metric.get('min'), unit)} to {_fmt(metric.get('max'), unit)}")
    if not has_values:
        stats += " (bar: the range; the nodes' own values are not in the document)"
    parts = [Html("<figcaption><strong>"), title, Html("</strong><br/>"), stats]
    if flagged:
        shown = ", ".join(flagged[:_LABELS]) + (f" and {len(flagged) - _LABELS:,} more" if len(flagged) > _LABELS
                                                 else "")
        parts += [Html('<br/><span class="flag">'), f"flagged: {shown}", Html("</span>")]
    parts.append(Html("</figcaption>"))
    return _join(*parts)


def _distributions(document: dict) -> Html:
    metrics = list(document.get("metrics") or [])
    head = Html('<h2 id="distributions">Distributions</h2>')
    if not metrics:
        return _join(head, Html("<p>No measurement was taken by enough passing nodes to compare them.</p>"))
    metrics.sort(key=lambda m: not m.get("flagged"))  # the measurements that flag a node first
    flagged_values = _flagged_values(document.get("nodes") or [])
    jobs = []
    for metric in metrics:
        names = set(map(str, metric.get("flagged") or []))
        key = (metric.get("check"), metric.get("subject"), metric.get("metric"))
        jobs.append((metric, [(n, v) for n, v in flagged_values.get(key, []) if n in names]))
    pngs = _draw(jobs)
    figures = []
    for (metric, flagged), png in zip(jobs, pngs, strict=True):
        names = [n for n, _ in flagged] or sorted(map(str, metric.get("flagged") or []))
        caption = _caption(metric, names, isinstance(metric.get("values"), (list, dict)))
        alt = f"{metric.get('check')} {metric.get('subject')} {metric.get('metric')}"
        image = Html("") if png is None else Html(
            f'<img alt="{escape(alt, quote=True)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"/>')
        figures.append(_join(Html("<figure>"), image, caption, Html("</figure>")))
    intro = ("Each measurement across the passing nodes of one machine class: grey, the nodes "
             f"(a histogram above {_HISTOGRAM_ABOVE} nodes); black line, the fleet's median; dashed red, the MAD "
             "limit; dotted orange, the fraction-of-median limit; red diamonds, the flagged nodes (up to "
             f"{_LABELS} named). Measurements that flag a node come first.")
    if all(png is None for png in pngs):
        intro += " (matplotlib is not installed here: the figures are their captions only.)"
    return _join(head, Html("<p>"), intro, Html("</p>"), Html('<div class="plots">'), *figures, Html("</div>"))


# --- nodes ----------------------------------------------------------------------------------------------


def _node_row(node: dict, link: _Links) -> list:
    verdict = _verdict_text(node)
    outliers = _worst_first(node.get("outliers") or [])
    drift = node.get("drift") or []
    burn_in = node.get("burn_in")
    if burn_in:
        wrong = sum(int(c or 0) for c in (burn_in.get("wrong_elements") or {}).values())
        burn = _cell(f"{burn_in.get('chunks', 0)} chunk(s), {wrong:,} wrong", "mismatch" if wrong else "")
    else:
        burn = _cell("—")
    failed = len(node.get("failed") or [])
    return [
        _link_cell(node, link),
        _cell(verdict, _VERDICT_CSS.get(verdict, "unknown"), str(node.get("reason") or "")),
        str(node.get("profile") or "—"),
        _cell(str(failed), "num mismatch" if failed else "num"),
        _cell(str(len(outliers)), "num unknown" if outliers else "num",
              "\n".join(_outlier_phrase(r) for r in outliers[:_OUTLIERS_SHOWN])),
        _cell(", ".join(str(d.get("field")) for d in drift) or "—", "unknown" if drift else "",
              "; ".join(f"{d.get('field')}: {d.get('value')} (majority {d.get('majority')})" for d in drift)),
        burn,
    ]


_NODE_HEADER = ["Node", "Verdict", "Profile", "Failed checks", "Outliers", "Drift", "Burn-in"]


def _nodes(document: dict, link: _Links) -> Html:
    nodes = document.get("nodes") or []
    head = Html(f'<h2 id="nodes">Nodes ({len(nodes):,})</h2>')
    if not nodes:
        return _join(head, Html("<p>No node results were found.</p>"))
    if len(nodes) <= _FULL_TABLE:
        return _join(head, Html("<p>Every node that has a folder; a name links to the node's own report where it "
                                "wrote one. Hover a cell for its detail.</p>"),
                     _table(_NODE_HEADER, [_node_row(n, link) for n in nodes]))
    remarkable = [n for n in nodes if _remarkable(n)]
    remarkable.sort(key=lambda n: (n.get("verdict") == "ACCEPTED", not n.get("outliers")))
    plain = [n for n in nodes if not _remarkable(n)]
    parts = [head, Html(f"<p>{len(remarkable):,} node(s) not accepted, outlying or drifted first; then the "
                        f"{len(plain):,} accepted node(s) with nothing flagged, by name. A name links to the node's "
                        "own report where it wrote one.</p>")]
    if remarkable:
        parts.append(_table(_NODE_HEADER, [_node_row(n, link) for n in remarkable]))
    if plain:
        parts += [Html(f"<h3>Accepted, nothing flagged ({len(plain):,})</h3>"), _names(plain, link)]
    return _join(*parts)


# --- the page -------------------------------------------------------------------------------------------


#: past this many nodes the heatmap shows the named nodes' rows only (a 1,000 x 1,000 table is no page)
_HEATMAP_NODES = 64


def _heat_cell(value: float | None, median: float | None, fraction: float) -> Html:
    """A pair's busbw, shaded from white (at or above the fleet's median) to red (at the slow line and below)."""
    if value is None:
        return _cell("-", "num")
    share = value / median if median else 1.0
    depth = min(1.0, max(0.0, (1.0 - share) / (1.0 - fraction))) if fraction < 1 else 0.0
    red = f"rgb(255,{int(255 - 150 * depth)},{int(255 - 150 * depth)})"
    return Html(f'<td class="num" style="background:{red}" title="{share:.0%} of the median pair">'
                f"{escape(f'{value:.3g}')}</td>")


def _fabric(document: dict) -> Html:
    """The fabric between the nodes: the all-node collective against its floors, the slow node or pair named,
    and the node x node busbw of the pairwise rounds as a heatmap."""
    fabric = document.get("fabric")
    if not fabric:
        return Html("")
    parts = [Html('<h2 id="fabric">Fabric between the nodes</h2>'),
             Html("<p>"), f"Verdict: {fabric['verdict']}. {len(fabric['nodes'])} node(s); every pair measured in "
             f"{fabric['rounds']} round(s) of disjoint pairs ({fabric['backend']}, {fabric['pair_size']:,} bytes each "
             f"way); a pair below {fabric['min_fraction_of_median']:g} of the median pair "
             f"({_fmt(fabric['pair_median'], 'GB/s')}) is slow; {fabric['line_rate']}. From {fabric['source']}.",
             Html("</p>")]
    if fabric["problems"]:
        parts.append(_join(Html("<ul>"), *[_join(Html('<li class="mismatch">'), problem, Html("</li>"))
                                           for problem in fabric["problems"]], Html("</ul>")))
    if fabric["checks"]:
        rows = [[c["op"], f"{c['size']:,} B", c["expected"], _fmt(c["busbw"], "GB/s"),
                 _cell(c["verdict"], "mismatch" if c["verdict"] == "failed" else "match")] for c in fabric["checks"]]
        parts.append(_table(["Collective", "Size", "Floor", "busbw", "Result"], rows))
    named = {s["node"] for s in fabric["slow_nodes"]} | {n for p in fabric["slow_pairs"] for n in (p["a"], p["b"])}
    nodes = fabric["nodes"] if len(fabric["nodes"]) <= _HEATMAP_NODES else [n for n in fabric["nodes"] if n in named]
    if nodes:
        matrix = fabric["matrix"]
        rows = [[_cell(a, "node"), *[_heat_cell(matrix.get(a, {}).get(b), fabric["pair_median"],
                                                fabric["min_fraction_of_median"]) if a != b else _cell("X", "num")
                                     for b in nodes]] for a in nodes]
        parts.append(_join(Html("<p>busbw of each pair, GB/s each way (sendrecv): white at the fleet's median, red at "
                                "the slow line and below"), "" if nodes == fabric["nodes"] else
                           f"; the {len(nodes)} named node(s) of {len(fabric['nodes'])} only", Html(".</p>"),
                           _table(["", *nodes], rows, "heatmap")))
    if fabric.get("nccl"):
        rows = [[node, ", ".join(f"{k} x{v}" for k, v in sorted((view or {}).get("transports", {}).items())) or "-",
                 "; ".join((view or {}).get("net", [])) or "-"] for node, view in sorted(fabric["nccl"].items())]
        parts.append(_join(Html("<h3>NCCL transports (NCCL_DEBUG=INFO)</h3>"),
                           _table(["Node", "Connections via", "Network"], rows)))
    return _join(*parts)


def fleet_html(document: dict, out_dir: Path | str) -> str:
    """The whole fleet.html page for a fleet-results document (fleet/analysis.py); ``out_dir`` is where it is
    written, so each node's report is linked by a relative path."""
    link = _Links(out_dir)
    verdict = document.get("verdict")
    title = f"GPU fleet acceptance: {verdict or 'no verdict'}"
    page = _join(
        Html('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/>'
             '<meta name="viewport" content="width=device-width, initial-scale=1"/><title>'), title,
        Html("</title>"), _STYLE, _FLEET_STYLE, Html('</head><body><div class="gpufabric fleet">'),
        _summary(document),
        _flagged(document, link),
        _fabric(document),
        _distributions(document),
        _nodes(document, link),
        Html('<p class="muted">Written by <code>gpufabric fleet report</code>; the same verdict as fleet-results.json '
             "and fleet-junit.xml beside this page.</p></div></body></html>"),
    )
    return str(page)
