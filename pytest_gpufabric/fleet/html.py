"""``fleet.html``: the fleet's verdict as one self-contained page (inline CSS, plots as inline SVG).

Summary first: the verdict and its reason, the counts, the fleet run(s), when and by which settings it was judged.
Then the flagged nodes (not accepted, never reported, outliers with the measurement that flagged them, inventory
drift, split fields, GPU serials on two nodes), one small plot per measurement of its distribution across the
passing nodes, and every node in one table, linked to its own report.

A fleet can be 10,000 nodes: nothing on the page is drawn per node (one plot per measurement), the detail tables
stop at ``_DETAIL_ROWS`` rows and name the rest (flagged.py), and past ``_FULL_TABLE`` nodes the accepted,
unremarkable ones are a list of names rather than table rows.

As in the node report, this module (with flagged.py and html_cells.py) prepares plain data and the templates
(report/templates/fleet*.j2, on the report's base: the same style, print rules and cover) lay it out with
autoescaping on: node names are folder names, messages, profile names and inventory values all come from machines
and files, and none of it can become markup.
"""

from __future__ import annotations

from pathlib import Path

from ..report.charts import distribution_chart
from ..report.render import render
from ..units import is_number
from .flagged import _flagged
from .html_cells import (
    _OUTLIERS_SHOWN,
    _VERDICT_CSS,
    _burn_in_gpus,
    _cell,
    _fmt,
    _Links,
    _outlier_phrase,
    _remarkable,
    _remedy_cell,
    _verdict_text,
    _where,
    _worst_first,
)

__all__ = ["fleet_html"]

_FULL_TABLE = 2000  # nodes up to which the Nodes table lists every node; past it accepted plain ones are names
_LABELS = 10  # flagged nodes named under a plot
_HISTOGRAM_ABOVE = 200  # nodes above which a distribution is a histogram, not a strip of points


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
