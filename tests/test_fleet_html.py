"""fleet.html, the fleet's verdict as one page, drawn from a fleet of node folders holding real results files
(tests/data/results/, recorded on 2x H200 SXM 141GB and 4x H200 SXM 141GB): the summary comes first, then the flagged
nodes with what flagged them, the distributions, and every node; text from the nodes is never markup; a fleet of
thousands of nodes stays a page a browser opens."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import sys
import time
from datetime import datetime, timezone
from html import unescape
from pathlib import Path
from urllib.parse import unquote

import pytest
from fleet_nodes import derived, replayed, report_of, write_node
from test_report import _PAYLOAD, _assert_nothing_injected, _chromium, _text_of, needs_chromium

from pytest_gpufabric.fleet.analysis import FleetSettings, analyse, machine_class
from pytest_gpufabric.fleet.html import _NODE_HEADER, fleet_html
from pytest_gpufabric.fleet.nodes import Node
from pytest_gpufabric.fleet.report import build_fleet_document, judged_nodes
from pytest_gpufabric.report.phrases import number as _number

REPO = Path(__file__).resolve().parents[1]
RESULTS_DATA = REPO / "tests" / "data" / "results"
SCREENSHOT = REPO / "docs" / "fleet-report.png"

#: node folder -> (replay, speed factor): DERIVED hosts made of replays of real machines' bundles
#: (tests/fleet_nodes.py), each with its own hostname and GPU serials
NODES = {
    "gpu-a01": ("planted", 1.0),  # REJECTED: wrong GEMM results on GPU1 in its burn-in
    "gpu-a02": ("accepted", 1.0),
    "gpu-a03": ("accepted", 1.003),
    "gpu-a04": ("accepted", 0.997),
    "gpu-a05": ("accepted", 1.001),
    "gpu-a06": ("accepted", 0.999),
    "gpu-b01": ("x4", 1.0),  # ran h200-nvswitch-x4: not the fleet's profile
    "gpu-b02": ("x4", 1.002),
}
RECORDED = {"gpu-b03": "h200-nvswitch-x4-crc-data-forbidden-by-default-on-h200-x4"}  # REJECTED by its own tests
SILENT = "gpu-a07"  # a folder without results: the node started and never reported
ABSENT = "gpu-a08"  # expected, no folder at all
SLOW = "gpu-a10"
# DERIVED: a folder name with markup (a node's name is its folder's name; '/' cannot be in one)
MARKED_UP = "gpu-a11 <img src=x onerror=\"document.body.dataset.pwned='path'\">"
SLOWDOWN = 0.85


def _results(name: str) -> dict:
    return json.loads((RESULTS_DATA / f"{name}.json").read_text(encoding="utf-8"))


def _node(root: Path, name: str, document: dict, report: Path | None = None) -> Path:
    return write_node(root, name, document, report)


def _fleet(tmp_path: Path, marked_up: bool = True) -> tuple[dict, Path]:
    """The document of a fleet of nodes made of real runs (plus a slow one and, ``marked_up``, one whose texts are
    markup) and the folder fleet.html goes to."""
    root = tmp_path / "nodes"
    for name, (kind, factor) in NODES.items():
        _node(root, name, derived(replayed(kind), name, factor), report_of(kind) if name == "gpu-a02" else None)
    for name, recorded in RECORDED.items():
        _node(root, name, _results(recorded))
    (root / SILENT).mkdir()
    # DERIVED: 15 % slower than the others: passes every floor of its profile but is slower than its siblings (the
    # outlier the fleet report is for)
    _node(root, SLOW, derived(replayed("accepted"), SLOW, SLOWDOWN))

    # DERIVED: the planted-fault run with markup in its failed check's message and its driver's version (which then
    # drifts from the fleet's), below a folder whose name is markup too, on gpu-a02's boards (a serial on two
    # nodes); its report a copy of a real one
    if marked_up:
        marked = derived(replayed("planted"), "gpu-a11")
        failed = next(c for c in marked["checks"] if c["verdict"] == "failed")
        failed["message"] = _PAYLOAD + failed["message"]
        marked["machine"] = derived(replayed("accepted"), "gpu-a02")["machine"]
        marked["machine"]["driver_version"] = "580.159.04 " + _PAYLOAD
        _node(root, MARKED_UP, marked, report_of("planted"))

    expected = [*NODES, *RECORDED, SILENT, ABSENT, SLOW]  # the marked-up node is not on it: unexpected
    document = build_fleet_document([root], expected, allow_replays=True)
    return document, tmp_path / "fleet-out"


def _section(page: str, start: str, end: str | None = None) -> str:
    return page[page.index(start):page.index(end) if end else len(page)]


def _node_of(document: dict, name: str) -> dict:
    return next(n for n in document["nodes"] if n["name"] == name)


def test_fleet_page_summary_first_then_flagged_nodes_distributions_and_nodes(tmp_path: Path):
    document, out = _fleet(tmp_path)
    page = fleet_html(document, out)
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>")
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained, inert

    # summary first: the verdict, its reason, the counts, the settings and where they came from
    assert document["verdict"] == "REJECTED"
    order = [page.index(mark) for mark in ('class="verdict rejected"', 'class="tiles"', 'id="flagged"',
                                           'id="distributions"', 'id="nodes"')]
    assert order == sorted(order)
    summary = _text_of(page[:page.index('id="flagged"')])
    assert "Fleet verdict: REJECTED" in summary and document["reason"] in summary
    counts = document["counts"]
    assert counts["nodes"] == 12 and counts["missing"] == 1 and counts["outlier_nodes"] >= 1
    tiles = {label: n for n, label in re.findall(r'<span class="n">([^<]*)</span><span class="l">([^<]*)<', page)}
    for key, label in (("nodes", "node folders"), ("expected", "expected"), ("accepted", "accepted"),
                       ("rejected", "rejected"), ("unreadable", "unreadable"), ("missing", "missing"),
                       ("outlier_nodes", "with outliers"), ("drifted_nodes", "drifted")):
        assert tiles[label] == f"{counts[key]:,}", label
    assert document["settings_from"] in summary and document["generated_at"][:10] in summary
    read_from = re.search(r"<th>Results read from</th><td>(.*?)</td>", page).group(1)
    assert read_from == ", ".join(os.path.relpath(p, out) for p in document["inputs"]) + " (relative to this page)"
    assert str(tmp_path) not in read_from

    # flagged: the nodes not accepted with their failed checks' messages, the missing ones, the outlier with the
    # measurement that flagged it, the drift
    flagged = _section(page, 'id="flagged"', 'id="distributions"')
    not_accepted = _text_of(_section(flagged, "Not accepted", "Never reported"))
    for name in ("gpu-a01", "gpu-b01", "gpu-b02", "gpu-b03", SILENT, MARKED_UP):
        assert name in not_accepted, name
    assert "1682 wrong elements" in not_accepted  # as its results say
    assert "ran profile h200-nvswitch-x4" in not_accepted  # the 4-GPU nodes ran another profile
    assert "the node never reported" in not_accepted  # the silent folder's reason
    assert f"no gpufabric-results.json in ../nodes/{SILENT}: the node never reported" in not_accepted  # relative
    assert "gpu-a02" not in not_accepted
    message = _node_of(document, "gpu-a01")["failed"][0]["message"]
    assert len(message) > 160 and message not in not_accepted  # truncated on the page ...
    titles = [unescape(title) for title in re.findall(r' title="([^"]*)"', flagged)]
    assert any(message in title for title in titles)  # ... and whole in the cell's title
    assert ABSENT in _text_of(_section(flagged, "Never reported", "Outliers"))

    outliers = _text_of(_section(flagged, "Outliers among the passing nodes", "Inventory drift"))
    records = _node_of(document, SLOW)["outliers"]
    # 15 % slower is past 0.9 x the median at every size the fleet agrees on (1 MiB's latency spreads wider)
    assert {(r["subject"], r["metric"]) for r in records} >= {
        (f"all_reduce {size}", metric) for size in ("256MiB", "1GiB", "4GiB") for metric in ("busbw_gbps", "time_us")}
    # the DERIVED node is slower on every figure the fleet compares: each is flagged
    assert {r["check"] for r in records} == {"bandwidth-all_reduce", "bandwidth-sendrecv", "copy-gpu_to_gpu",
                                             "copy-host_to_device", "copy-device_to_host", "burn-in-gpu"}
    from pytest_gpufabric.fleet.html_cells import _OUTLIERS_SHOWN, _worst_first

    shown = _worst_first(records)[:_OUTLIERS_SHOWN]  # the worst first; the others in the last row's title
    for record in shown:
        for text in (record["subject"], record["metric"], _number(record["value"], record["unit"]),
                     _number(record["median"], record["unit"]), f"{record['worse_by']:.1%}", record["rule"]):
            assert text in outliers, text
    assert f"+{len(records) - len(shown)} more measurement(s) of this node" in outliers
    assert SLOW in outliers and "gpu-a05" not in outliers
    drift = _text_of(_section(flagged, "Inventory drift"))
    assert MARKED_UP in drift and "580.159.04 " + _PAYLOAD in drift
    assert "GPU serials on more than one node" in flagged  # the marked-up node is a run of gpu-a02's host
    assert MARKED_UP in _text_of(_section(flagged, "Not on the expected list"))

    # distributions: one plot per measurement, the outlier's named under its own
    distributions = _section(page, 'id="distributions"', 'id="nodes"')
    assert distributions.count("<figure>") == len(document["metrics"]) > 10
    assert distributions.count("<svg ") == len(document["metrics"])  # inline SVG: drawn on every install
    flagged_metrics = [m for m in document["metrics"] if m["flagged"]]
    assert flagged_metrics and all(m["flagged"] == [SLOW] for m in flagged_metrics)
    first = distributions.index("<figure>")
    assert f"flagged: {SLOW}" in distributions[first:distributions.index("</figure>", first)]  # flagged first

    # every node in the Nodes table; a node's own report linked relative to where fleet.html goes
    nodes = _section(page, 'id="nodes"')
    for node in document["nodes"]:
        assert node["name"] in _text_of(nodes), node["name"]
    assert '<a href="../nodes/gpu-a02/acceptance.html">gpu-a02</a>' in nodes
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert all(not href.startswith(("javascript:", "data:", "/")) for href in hrefs)
    marked_href = next(unescape(h) for h in hrefs if "gpu-a11" in h)
    assert "<" not in marked_href and " " not in marked_href  # percent-encoded
    assert (out / unquote(marked_href)).resolve() == (tmp_path / "nodes" / MARKED_UP / "acceptance.html").resolve()


def _node_rows(page: str) -> dict[str, list[tuple[str, str]]]:
    """The Nodes table as (text, title) cells per node name."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", _section(page, 'id="nodes"'), re.S):
        cells = [(_text_of(body), unescape(title or "")) for title, body in
                 re.findall(r'<td[^>]*?(?: title="([^"]*)")?>(.*?)</td>', row, re.S)]
        if cells:
            rows[cells[0][0]] = cells
    return rows


def test_the_burn_in_column_counts_each_nodes_wrong_results(tmp_path: Path):
    """The recorded planted-fault runs of three hosts (GPU1's GEMM results corrupted in every check) beside a
    healthy 10-minute acceptance: the Burn-in column sums the node's checks and wrong elements over its GPUs and
    names the GPU that made them; each GPU's figures in the cell's title; the Not accepted part says the count."""
    root = tmp_path / "nodes"
    recorded = {"host-1": "burn-in-planted-fault-on-h200-x2", "host-2": "burn-in-planted-fault-second-host-on-h200-x2",
                "host-3": "burn-in-planted-fault-third-host-on-h200-x2",
                "healthy": "acceptance-with-10min-burn-in-on-h200-x2"}
    for name, results in recorded.items():
        _node(root, name, _results(results))
    page = fleet_html(build_fleet_document([root], None, allow_replays=True), tmp_path / "out")
    burn_in = {name: cells[_NODE_HEADER.index("Burn-in")] for name, cells in _node_rows(page).items()}
    assert burn_in == {
        "host-1": ("1,682 check(s), 1,682 wrong (GPU1)", "GPU0: 841 check(s), 0 wrong, 616.11 TFLOP/s\n"
                                                         "GPU1: 841 check(s), 1,682 wrong, 616.11 TFLOP/s"),
        "host-2": ("1,680 check(s), 1,680 wrong (GPU1)", "GPU0: 840 check(s), 0 wrong, 615.58 TFLOP/s\n"
                                                         "GPU1: 840 check(s), 1,680 wrong, 615.58 TFLOP/s"),
        "host-3": ("1,658 check(s), 1,658 wrong (GPU1)", "GPU0: 829 check(s), 0 wrong, 607.66 TFLOP/s\n"
                                                         "GPU1: 829 check(s), 1,658 wrong, 607.66 TFLOP/s"),
        "healthy": ("33,280 check(s), 0 wrong", "GPU0: 16,640 check(s), 0 wrong, 609.81 TFLOP/s\n"
                                                "GPU1: 16,640 check(s), 0 wrong, 609.81 TFLOP/s"),
    }
    assert 'class="mismatch" title="GPU0: 841 check(s)' in page  # marked as a mismatch; the healthy one is not
    assert 'class="mismatch" title="GPU0: 16,640' not in page
    not_accepted = _text_of(_section(page, "Not accepted", 'id="distributions"'))
    for name, count in (("host-1", "1,682"), ("host-2", "1,680"), ("host-3", "1,658")):
        assert f"burn-in wrong elements: GPU1 {count}" in not_accepted, name


def test_text_from_the_nodes_is_never_markup(tmp_path: Path):
    document, out = _fleet(tmp_path)
    page = fleet_html(document, out)
    _assert_nothing_injected(page)
    for raw in ("<img src=x", "<script>document", "<b>bold</b>"):
        assert raw not in page
    text = _text_of(page)
    assert MARKED_UP in text and _PAYLOAD in text  # shown as the text it is


def test_a_folder_named_like_a_url_is_linked_as_a_relative_path(tmp_path: Path):
    """A node's folder name reaches the page as an href: one named 'javascript:...' stays a relative path."""
    root = tmp_path / "nodes"
    _node(root, "javascript:alert(1)", replayed("accepted"), report_of("accepted"))
    # fleet.html beside the node folders
    page = fleet_html(build_fleet_document([root], None, allow_replays=True), root)
    assert 'href="javascript%3Aalert%281%29/acceptance.html"' in page
    assert 'href="javascript:' not in page


def test_each_distribution_draws_its_own_measurement(tmp_path: Path):
    """A plot shows its own measurement: the flagged node's diamond at its value (named in the diamond's title),
    one point per passing node, and the median line where the document puts it; the same figure whatever was drawn
    before it."""
    from pytest_gpufabric.fleet.html import _flagged_values, distribution_figure

    document, _ = _fleet(tmp_path)
    flagged = _flagged_values(document["nodes"])
    jobs = [(m, [(n, v) for n, v in flagged.get((m["check"], m["subject"], m["metric"]), []) if n in m["flagged"]])
            for m in document["metrics"]]
    metric, found = next((m, f) for m, f in jobs if f)
    chart = distribution_figure(metric, found)["chart"]
    assert [flag["name"] for flag in chart["flags"]] == [SLOW]
    assert chart["flags"][0]["value"] == _number(found[0][1], metric["unit"])
    frame = chart["frame"]
    ticks = [t for t in chart["x_ticks"]]
    low, high = float(ticks[0]["label"].replace(",", "")), float(ticks[-1]["label"].replace(",", ""))

    def x_of(value: float) -> float:  # where the chart's own axis puts a value
        return frame["left"] + (value - low) / (high - low) * (frame["right"] - frame["left"])

    assert abs(chart["flags"][0]["x"] - x_of(found[0][1])) < 1.0
    median_line = next(line for line in chart["lines"] if line["label"] == "median")
    assert abs(median_line["x"] - x_of(metric["median"])) < 1.0
    values = metric.get("values")
    if values is not None:
        assert len(chart["points"]) == len(values if isinstance(values, list) else list(values.values()))
    forward = [distribution_figure(m, f) for m, f in jobs]
    backward = [distribution_figure(m, f) for m, f in jobs[::-1]][::-1]
    assert forward == backward


def test_without_matplotlib_the_page_has_its_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The base install has no matplotlib: the distributions are inline SVG all the same."""
    document, out = _fleet(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    page = fleet_html(document, out)
    distributions = _section(page, 'id="distributions"', 'id="nodes"')
    assert "<img" not in distributions and "not installed" not in page
    assert distributions.count("<svg ") == distributions.count("<figcaption>") == len(document["metrics"])


@needs_chromium
def test_fleet_page_renders_in_chromium(tmp_path: Path):
    """The DOM Chromium builds of the page with the marked-up node has no injected element and the summary on top.
    The screenshot, of the same fleet without that node, is docs/fleet-report.png when
    GPUFABRIC_WRITE_SCREENSHOTS=1 (else it stays in tmp_path)."""
    document, out = _fleet(tmp_path / "marked-up")
    out.mkdir()
    html = out / "fleet.html"
    html.write_text(fleet_html(document, out), encoding="utf-8")
    dom = _chromium(tmp_path / "chromium-dom", "--dump-dom", html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    _assert_nothing_injected(dom.stdout)
    assert "data-pwned" not in dom.stdout
    assert dom.stdout.index("Fleet verdict: REJECTED") < dom.stdout.index('id="flagged"') < dom.stdout.index(
        'id="distributions"') < dom.stdout.index('id="nodes"')
    assert MARKED_UP in _text_of(dom.stdout)

    document, out = _fleet(tmp_path / "plain", marked_up=False)
    out.mkdir()
    html = out / "fleet.html"
    html.write_text(fleet_html(document, out), encoding="utf-8")
    screenshot = SCREENSHOT if os.environ.get("GPUFABRIC_WRITE_SCREENSHOTS") == "1" else tmp_path / "fleet.png"
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    shot = _chromium(tmp_path / "chromium-shot", "--run-all-compositor-stages-before-draw",
                     f"--screenshot={screenshot}", "--window-size=1280,2000", html.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000


# --- a large fleet --------------------------------------------------------------------------------------


def synthetic_fleet(tmp_path: Path, count: int, slow_every: int = 500, with_values: bool = False) -> dict:
    """SYNTHETIC, not measured: a fleet of ``count`` nodes made of the real nodes' results (read_node of the
    folders _fleet writes), each copy under a new name with its own GPU serials and every measurement scaled by a
    small factor (about 0.5 % spread; every ``slow_every``-th node 20 % slower). Most are copies of the accepted
    h200-x2 nodes; every 20th is one of the h200-x4 nodes (a second machine class, drifted in its GPU count), every
    100th one of the rejected nodes; two expected nodes never report. ``with_values``: each measurement also lists
    the passing nodes' values (``values``), which the plots draw where the document has them."""
    _fleet(tmp_path)
    real = {n.name: n for n in judged_nodes([tmp_path / "nodes"], allow_replays=True)[0]}
    pools = [[real[name] for name in ("gpu-a02", "gpu-a03", "gpu-a05", "gpu-a06")],
             [real["gpu-b01"], real["gpu-b02"]], [real["gpu-a01"], real["gpu-b03"]]]
    rng = random.Random(7)
    nodes: list[Node] = []
    for i in range(count):
        pool = pools[1] if i % 20 == 10 else pools[2] if i % 100 == 55 else pools[0]
        base = pool[i % len(pool)]
        name = f"syn-{i:05d}"
        factor = 0.8 if i % slow_every == slow_every - 1 else rng.gauss(1.0, 0.005)
        metrics = {key: value * factor if key[2] != "time_us" else value / factor
                   for key, value in base.metrics.items()}
        nodes.append(dataclasses.replace(base, name=name, directory=str(tmp_path / "synthetic" / name),
                                         serials=[f"SYN{i}-{s}" for s in range(len(base.serials))],
                                         metrics=metrics, report=base.report or "acceptance.html"))
    expected = [n.name for n in nodes] + [f"syn-{count + 1:05d}", f"syn-{count + 2:05d}"]
    document = {"schema_version": 1, "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "inputs": [str(tmp_path / "synthetic")], "settings_from": "defaults (synthetic fleet)"}
    document.update(analyse(nodes, expected, FleetSettings()))
    if with_values:
        values: dict[tuple, list[float]] = {}
        for node in nodes:
            if node.verdict == "ACCEPTED":
                for (check, subject, metric), value in node.metrics.items():
                    values.setdefault((machine_class(node), check, subject, metric), []).append(value)
        for m in document["metrics"]:
            m["values"] = values[(m["class"], m["check"], m["subject"], m["metric"])]
    return document


def test_a_fleet_of_3000_nodes_stays_a_small_page(tmp_path: Path):
    document = synthetic_fleet(tmp_path, 3000)
    start = time.perf_counter()
    page = fleet_html(document, tmp_path / "out")
    elapsed = time.perf_counter() - start
    size = len(page.encode("utf-8"))
    print(f"3000 nodes, {len(document['metrics'])} measurements: {size / 1e6:.2f} MB in {elapsed:.2f} s")
    assert size < 20e6
    assert page.count("<figure>") == len(document["metrics"])
    nodes = _section(page, 'id="nodes"')
    assert "Accepted, nothing flagged" in nodes  # past 2,000 nodes the plain ones are names, not rows
    assert nodes.count("<tr>") < 1000
    for node in document["nodes"]:
        assert f">{node['name']}<" in nodes, node["name"]
    slow = [n["name"] for n in document["nodes"] if n["outliers"]]
    assert slow and all(name in _section(page, "Outliers among the passing nodes", 'id="distributions"')
                        for name in slow)
    assert "syn-03001" in _section(page, "Never reported", 'id="distributions"')


@pytest.mark.skipif(not os.environ.get("GPUFABRIC_FLEET_BENCH"), reason="timing run: GPUFABRIC_FLEET_BENCH=1")
def test_render_time_of_10000_nodes(tmp_path: Path):
    """Prints the time and size of fleet.html for 10,000 synthetic nodes (their per-node values added to each
    measurement, so every plot is drawn from all of them)."""
    document = synthetic_fleet(tmp_path, 10_000, with_values=True)
    start = time.perf_counter()
    page = fleet_html(document, tmp_path / "out")
    elapsed = time.perf_counter() - start
    print(f"10000 nodes, {len(document['metrics'])} measurements: {len(page.encode()) / 1e6:.2f} MB in "
          f"{elapsed:.2f} s")
    assert len(page.encode()) < 20e6
