"""pytest-html sections: the customer's acceptance report.

At the top of the report (moved above pytest-html's Environment table): a cover with the verdict and its reason,
the customer, the machine's identity (host, driver, CUDA, NCCL, each GPU's serial, UUID and VBIOS), the profile
and its sha256, the run's dates and the plugin's version; then the inventory, the topology expected vs found,
every check against its threshold with the margin, the skipped checks with their reasons, and the plots.

The cover is drawn from the results document the run wrote (reports/gpufabric-results.json), so the report and
the JSON say the same thing. Registered only when pytest-html is active (its hooks are unknown otherwise).

Markup comes only from this module's own code, typed Html; every other str is text and is escaped where the parts
are joined (_table, _join). What a bundle, a profile, the customer or the machine says (a hostname, a GPU's
name, a serial, a message, a path) is such text: a GPU named `<script>...` shows as that name, never runs.
"""

from __future__ import annotations

import base64
import json
import math
from html import escape

from ..fabric.model import Fabric
from ..formats.topo import normalize_label
from ..units import format_bytes, parse_gbps, parse_seconds
from .results import nccl_versions

REPORT_ID = "gpufabric-report"


class Html(str):
    """HTML the report built itself. Where the report joins parts (_table, _join) an Html passes through as it is
    and any other str is text, escaped: a value read from a bundle, a profile, the customer or the machine never
    becomes markup, whatever it starts with. Build one only from literals and escaped or Html parts."""

    __slots__ = ()


def _join(*parts: str) -> Html:
    """The parts as one Html: Html parts as they are, any other str escaped as text."""
    return Html("".join(part if isinstance(part, Html) else escape(part) for part in parts))


_STYLE = Html(
    "<style>"
    ".gpufabric{color:#212529;font-size:13px;max-width:1240px}"
    ".gpufabric h2{font-size:18px;margin:22px 0 6px;border-bottom:2px solid #dee2e6;padding-bottom:3px}"
    ".gpufabric h3{font-size:14px;margin:14px 0 4px}"
    ".gpufabric p{margin:4px 0}"
    ".gpufabric table{border-collapse:collapse;margin:6px 0 14px}"
    ".gpufabric td,.gpufabric th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;"
    "font-family:monospace}"
    ".gpufabric th{background:#f1f3f5;font-family:Helvetica,Arial,sans-serif}"
    ".gpufabric .mismatch{background:#f8d7da;color:#842029;font-weight:bold}"
    ".gpufabric .match{background:#d1e7dd}"
    ".gpufabric .unknown{background:#fff3cd;color:#664d03}"
    ".gpufabric .num{text-align:right;white-space:nowrap}"
    ".gpufabric .note{font-family:Helvetica,Arial,sans-serif;color:#495057;max-width:460px;white-space:pre-line}"
    ".gpufabric .cover{border:1px solid #dee2e6;border-radius:6px;padding:14px 18px;margin:8px 0 18px}"
    ".gpufabric .cover h1{font-size:22px;margin:0 0 10px;color:#212529}"
    ".gpufabric .verdict{font-size:34px;font-weight:bold;color:#fff;padding:12px 18px;border-radius:6px;"
    "letter-spacing:1px;font-family:Helvetica,Arial,sans-serif}"
    ".gpufabric .verdict.accepted{background:#198754}"
    ".gpufabric .verdict.rejected{background:#dc3545}"
    ".gpufabric .verdict.none{background:#6c757d}"
    ".gpufabric .verdict.incomplete,.gpufabric .verdict.not-tested{background:#b45309}"
    ".gpufabric .reason{font-size:15px;margin:8px 0 12px}"
    ".gpufabric .facts th{width:150px}"
    ".gpufabric figure{display:inline-block;margin:6px 12px 12px 0;vertical-align:top}"
    ".gpufabric figure img{max-width:780px;width:100%;border:1px solid #dee2e6}"
    ".gpufabric figcaption{font-size:12px;color:#495057}"
    "</style>"
)

# pytest-html puts the summary below its Environment table; the cover belongs first, under the title.
_MOVE_TO_TOP = Html(
    "<script>(function(){var r=document.getElementById('" + REPORT_ID + "'),"
    "e=document.getElementById('environment-header');"
    "if(r&&e&&e.parentNode){e.parentNode.insertBefore(r,e);}})();</script>"
)

_TRUNCATE = 160  # characters of a value shown in a table cell (the whole value is in the cell's tooltip)
_MAX_PLOTS = 40
_VERDICTS = {"passed": ("PASS", "match"), "failed": ("FAIL", "mismatch"), "not checked": ("NOT CHECKED", "unknown"),
             "unknown": ("NOT CHECKED", "unknown"), "waived": ("WAIVED", "unknown")}


def customer_name(config) -> str | None:
    """--gpu-customer, else the gpu_customer ini value, else None."""
    try:
        return config.getoption("gpu_customer") or config.getini("gpu_customer") or None
    except (ValueError, KeyError):  # the option is not registered (an older plugin.py)
        return None


def add_environment(config, fabric_session) -> None:
    """Machine and profile facts for pytest-html's Environment table (via pytest-metadata).

    pytest-html 4.x draws that table in the browser, each value through innerHTML (`<div>${value}</div>` in its
    app.js): a value is HTML there. So where pytest-html writes a report (--html), the values are stored escaped
    (<, > and &; text without them is unchanged) and a GPU or host named with markup shows as its name. Otherwise
    they stay plain text (pytest-metadata's -v header, its JUnit properties)."""
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return
    if metadata_key not in config.stash:
        return
    facts: dict[str, str] = {}
    customer = customer_name(config)
    if customer:
        facts["Customer"] = customer
    profile = fabric_session.profile
    if profile is not None:
        facts["GPU profile"] = f"{profile.name} ({profile.path})"
        facts["GPU profile sha256"] = profile.sha256
    fabric = fabric_session.fabric
    if fabric is not None:
        facts["Machine source"] = fabric.source
        facts["NVIDIA driver"] = str(fabric.driver_version or "not recorded")
        facts["CUDA driver"] = str(fabric.cuda_driver_version or "not recorded")
        facts["GPUs"] = ", ".join(f"{g.label} {g.name or '?'} (serial {g.serial or '?'})" for g in fabric.gpus)
    elif fabric_session.discovery_error is not None:
        facts["Machine"] = str(fabric_session.discovery_error)
    as_html = config.pluginmanager.hasplugin("html") and bool(config.getoption("htmlpath", None))
    config.stash[metadata_key].update({key: escape(str(value), quote=False) if as_html else str(value)
                                       for key, value in facts.items()})


# --- tables and values ----------------------------------------------------------------------------------


def _cell(text: str, css: str = "", title: str = "") -> Html:
    """A <td> of text, escaped, with a CSS class and a tooltip (escaped as attribute values)."""
    attrs = f' class="{escape(css, quote=True)}"' if css else ""
    if title and title != text:
        attrs += f' title="{escape(title[:2000], quote=True)}"'
    return Html(f"<td{attrs}>{escape(text)}</td>")


def _table(header: list[str], rows: list[list[str]], css: str = "") -> Html:
    """A table: the header's cells are text; a row's cells are text (escaped into a <td>) or a <td> the report
    built (an Html, from _cell). A str that merely starts with '<td' is text like any other."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell if isinstance(cell, Html) else _cell(cell) for cell in row) + "</tr>"
                   for row in rows)
    attrs = f' class="{escape(css, quote=True)}"' if css else ""
    return Html(f"<table{attrs}><tr>{head}</tr>{body}</table>")


def _text(value: object, missing: str = "not recorded") -> str:
    return missing if value is None or value == "" else str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_SUFFIXES = (("_bytes", "bytes"), ("_gbps", "GB/s"), ("_gbit", "Gb/s"), ("_us", "us"), ("_s", "s"))


def _number(value: float, unit: str | None) -> str:
    if unit == "bytes":
        return format_bytes(int(value))
    if isinstance(value, int):
        text = str(value)
    else:
        text = f"{value:.5g}" if abs(value) < 1e5 else f"{value:.4g}"
    return f"{text} {unit}" if unit else text


def _matrix_text(matrix: dict) -> str:
    """{'GPU0': {'GPU1': 'NV2'}, ...} -> 'GPU0-GPU1 NV2, ...' (the diagonal and mirrored cells left out)."""
    cells, shown = [], {}
    for row, columns in matrix.items():
        for col, label in columns.items():
            if row == col or shown.get((col, row)) == label:
                continue
            shown[(row, col)] = label
            cells.append(f"{row}-{col} {label}")
    return ", ".join(cells)


def format_value(value: object, unit: str | None = None) -> str:
    """A check's expected/found value as compact text: numbers with their units, dicts as 'key: value; ...',
    topology matrices as 'GPU0-GPU1 NV2, ...'; never a Python repr."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if _is_number(value):
        return _number(value, unit)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if value and all(isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in value.values()):
            return _matrix_text(value)
        numeric = all(_is_number(v) for v in value.values())
        parts = []
        for key, item in value.items():
            key, item_unit = str(key), None
            for suffix, suffix_unit in _SUFFIXES:
                if key.endswith(suffix) and _is_number(item):
                    stripped = key[: -len(suffix)]
                    key = stripped if stripped and stripped not in value else key
                    item_unit = suffix_unit
                    break
            else:
                if numeric and "ratio" not in key and "fraction" not in key:
                    item_unit = unit  # a flat map of measurements, e.g. {'GPU0->GPU1 (p2p)': 393.1}
            parts.append(f"{key}: {format_value(item, item_unit)}")
        return "; ".join(parts) if parts else "—"
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        items = [format_value(v, unit) for v in value]
        return "[" + "], [".join(items) + "]" if any(isinstance(v, dict) for v in value) else ", ".join(items)
    return str(value)


def _truncated(text: str, limit: int = _TRUNCATE) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _value_cell(value: object, unit: str | None) -> Html:
    text = format_value(value, unit)
    return _cell(_truncated(text), title=text)


# --- margins --------------------------------------------------------------------------------------------


def _limits(check: dict) -> list[tuple[float, float, str, bool]]:
    """(limit, worst measured value, unit, higher is better) for each numeric threshold the record states
    in a form this knows; an empty list for everything else (the margin is left blank)."""
    expected, found, unit = check.get("expected"), check.get("found"), check.get("unit")
    limits = []
    if isinstance(expected, dict) and isinstance(found, dict):
        busbw, peak = found.get("busbw_gbps"), found.get("peak_gbps")
        if _is_number(busbw):
            if "min_busbw" in expected:
                limits.append((parse_gbps(expected["min_busbw"]), busbw, "GB/s", True))
            if _is_number(peak) and _is_number(expected.get("min_fraction_of_peak")):
                limits.append((expected["min_fraction_of_peak"] * peak, busbw, "GB/s", True))
        if _is_number(found.get("time_us")) and "max_time" in expected:
            limits.append((parse_seconds(expected["max_time"]) * 1e6, found["time_us"], "us", False))
        values = list(found.values())
        if "min" in expected and unit == "GB/s" and values and all(_is_number(v) for v in values):
            limits.append((parse_gbps(expected["min"]), min(values), "GB/s", True))
        moved = [found[k] for k in ("tx_bytes", "rx_bytes") if _is_number(found.get(k))]
        if _is_number(expected.get("min_bytes")) and moved:
            limits.append((expected["min_bytes"], min(moved), "bytes", True))
        if _is_number(expected.get("tx_bytes_at_least")) and _is_number(found.get("tx_bytes")):
            limits.append((expected["tx_bytes_at_least"], found["tx_bytes"], "bytes", True))
        floors = [f for f in expected.get("floors_gbit") or [] if _is_number(f)]
        if floors and _is_number(found.get("bw_avg_gbit")):
            limits.append((max(floors), found["bw_avg_gbit"], "Gb/s", True))
        if _is_number(expected.get("max_slowdown")) and _is_number(found.get("ratio_vs_baseline")):
            limits.append((expected["max_slowdown"], found["ratio_vs_baseline"], "x", False))
    elif _is_number(expected) and isinstance(found, dict) and isinstance(found.get("rows"), list):
        errors = [abs(r["error"]) for r in found["rows"] if isinstance(r, dict) and _is_number(r.get("error"))]
        if errors:  # an estimate within a relative tolerance (memory-estimate)
            limits.append((expected * 100, max(errors) * 100, "%", False))
    elif _is_number(expected) and _is_number(found) and unit == "bytes":
        limits.append((expected, found, "bytes", True))  # at least (gpu-memory)
    return limits


def _quantity(value: float, unit: str) -> str:
    return f"{value:.1f} %" if unit == "%" else _number(value, unit)


def _signed(value: float, unit: str) -> str:
    sign = "+" if value >= 0 else "−"
    if unit == "bytes":
        return f"{sign}{format_bytes(int(abs(value)))}"
    if unit == "%":
        return f"{sign}{abs(value):.1f} points"
    digits = 2 if unit in ("Gb/s", "x") else 1
    return f"{sign}{abs(value):.{digits}f} {unit}"


def margin(check: dict) -> tuple[str, str, bool] | None:
    """(margin text, how it was computed, within the limit) for the tightest numeric threshold of a check
    record, or None where the record states none this can compute."""
    try:
        limits = _limits(check)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    best = None
    for limit, value, unit, higher_is_better in limits:
        room = value - limit if higher_is_better else limit - value
        relative = room / abs(limit) if limit else None
        key = relative if relative is not None else room
        if best is None or key < best[0]:
            bound = "min" if higher_is_better else "max"
            what = f"worst {_quantity(value, unit)} vs {bound} {_quantity(limit, unit)}"
            text = _signed(room, unit)
            if relative is not None and unit != "%":
                text += f" ({'+' if relative >= 0 else '−'}{abs(relative):.1%})"
            best = (key, text, what, room >= 0)
    return None if best is None else best[1:]


# --- sections -------------------------------------------------------------------------------------------


def _recorded(value: object) -> str:
    """A value of the inventory as text; None (the evidence does not have it): 'not recorded'. A value that is
    the text 'None' (a GPU so named) stays 'None'."""
    return "not recorded" if value is None else str(value)


def inventory_html(fabric: Fabric) -> Html:
    rows = [
        [g.label, _recorded(g.name), _recorded(g.serial), _recorded(g.uuid), _recorded(g.pci_bus_id),
         _recorded(None if g.memory_bytes is None else format_bytes(g.memory_bytes)),
         _recorded(None if g.pcie_gen_max is None and g.pcie_width_max is None
                   else f"gen {g.pcie_gen_max} x{g.pcie_width_max}"),
         _recorded(g.vbios_version),
         _recorded(None if g.nvlinks is None else len(g.active_nvlinks()))]
        for g in fabric.gpus
    ]
    header = ["GPU", "name", "serial", "UUID", "PCI bus id", "memory", "PCIe max", "VBIOS", "NVLinks active"]
    nics = Html("")
    if fabric.nics:
        nics = _table(["NIC", "device"], [[n.label, _text(n.device)] for n in fabric.nics])
    return _join(Html("<h2>Inventory</h2>"), _table(header, rows), nics)


def topology_html(expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]) -> Html:
    """The matrix as `topo -m` lays it out, each cell 'found' or 'expected → found' where they differ."""
    devices = list(dict.fromkeys([*expected, *found]))
    rows = []
    for row in devices:
        cells = [row]
        for col in devices:
            want = expected.get(row, {}).get(col)
            have = found.get(row, {}).get(col)
            if want is None:
                cells.append(have or "")
            elif normalize_label(want) == normalize_label(have):
                cells.append(_cell(str(have), "match"))
            else:
                cells.append(_cell(f"expected {want}, found {have}", "mismatch"))
        rows.append(cells)
    if not devices:
        return Html("<h2>Topology: expected vs found</h2><p>No topology was promised or recorded.</p>")
    return _join(Html("<h2>Topology: expected vs found</h2>"), _table(["", *devices], rows))


def measurements_html(checks: list[dict]) -> Html:
    """Every check record: what was promised, what was found, the margin to the threshold, the verdict."""
    if not checks:
        return Html("<h2>Measurements</h2><p>No check recorded a measurement.</p>")
    rows = []
    for check in checks:
        verdict, css = _VERDICTS.get(check.get("verdict"), (str(check.get("verdict")), ""))
        unit = check.get("unit")
        found = margin(check)
        margin_cell = _cell("") if found is None else _cell(found[0], "num" if found[2] else "num mismatch", found[1])
        message = str(check.get("message") or "")
        note = "" if check.get("verdict") == "passed" else message
        rows.append([
            _cell(str(check.get("name", ""))), _cell(str(check.get("subject", ""))),
            _value_cell(check.get("expected"), unit), _value_cell(check.get("found"), unit), margin_cell,
            _cell(verdict, css, message), _cell(_truncated(note, 300), "note", note),
        ])
    header = ["Check", "Subject", "Expected", "Found", "Margin", "Result", "Note"]
    return _join(Html("<h2>Measurements</h2><p>Every check against what the profile promises. Margin: how far the "
                      "worst measured value is from its limit (negative: short of it); blank where the check has "
                      "no numeric limit. Hover a cell for the whole value.</p>"), _table(header, rows, "measurements"))


def _short_nodeid(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


def skipped_html(skip_reasons: dict[str, str], tests: dict[str, str]) -> Html:
    skipped = [nodeid for nodeid, outcome in tests.items() if outcome == "skipped"]
    skipped += [nodeid for nodeid in skip_reasons if nodeid not in tests]
    if not skipped:
        return Html("<h2>Skipped checks</h2><p>No test was skipped.</p>")
    rows = [[_cell(_short_nodeid(n), title=n), _cell(skip_reasons.get(n) or "no reason recorded", "note")]
            for n in skipped]
    return _join(Html(f"<h2>Skipped checks</h2><p>{len(skipped)} check(s) did not run: the profile does not promise "
                      "what they test, or the evidence does not record it. A skip is never a pass.</p>"),
                 _table(["Test", "Reason"], rows, "skipped"))


def plots_html(plots: list[tuple[str, str, str]]) -> Html:
    """The tests' PNG extras: a test's name for its plot and its content (base64 from any test) are text."""
    if not plots:
        return Html("")
    figures = "".join(
        f'<figure><img alt="{escape(name or nodeid, quote=True)}" '
        f'src="data:image/png;base64,{escape(content, quote=True)}"/>'
        f"<figcaption>{escape(name)}{' — ' if name else ''}{escape(_short_nodeid(nodeid))}</figcaption></figure>"
        for nodeid, name, content in plots[:_MAX_PLOTS]
    )
    return Html("<h2>Plots</h2>" + figures)


def _when(document: dict) -> str:
    def at(stamp: object) -> str:
        return str(stamp).replace("T", " ").replace("+00:00", " UTC") if stamp else "?"

    return f"{at(document.get('started_at'))} to {at(document.get('finished_at'))}"


def _open_promises_html(document: dict) -> Html:
    """On the cover: every promise that failed, was not checked or was waived, with why, and the waivers in
    force (who agreed to what): what a customer must read before signing."""
    rows = [[_cell(p["id"]), _cell(*_VERDICTS.get(p["outcome"], (p["outcome"], ""))), _cell(p.get("reason") or "")]
            for p in document.get("promises") or [] if p.get("outcome") != "passed"]
    rows += [[_cell(f"{pid} (not run)"), _cell("NOT CHECKED", "unknown"), _cell(why)]
             for pid, why in (document.get("not_run") or {}).items()]
    parts = []
    if rows:
        parts.append(_table(["promise", "outcome", "why"], rows, "promises"))
    waivers = document.get("waivers") or []
    if waivers:
        parts.append(Html("<h3>Waivers</h3>"))
        parts.append(_table(["promise", "agreed", "from", "waived in this run"],
                            [[_cell(w["promise"]), _cell(w["reason"]), _cell(w["source"]),
                              _cell(", ".join(w.get("matched") or []) or "none")] for w in waivers]))
    return _join(*parts)


def cover_html(document: dict, customer: str | None, nccl: list[str], verdict: str | None = None) -> Html:
    summary = document.get("summary") or {}
    verdict = summary.get("verdict", verdict)
    css = {"ACCEPTED": "accepted", "REJECTED": "rejected", "INCOMPLETE": "incomplete",
           "NOT TESTED": "not-tested"}.get(verdict or "", "none")
    reason = summary.get("verdict_reason") or ""
    tally = summary.get("promises") or {}
    counts = ", ".join(f"{tally[k]} {k.replace('_', ' ')}" for k in ("passed", "failed", "not_checked", "waived")
                       if tally.get(k))
    profile = document.get("profile") or {}
    machine = document.get("machine") or {}
    run = document.get("run") or {}
    if run.get("mode") == "replay":
        evidence = f"replay of {machine.get('source') or 'bundle ' + str(run.get('replay'))} (not this host)"
    elif machine:
        evidence = f"live: this machine ({machine.get('source')})"
    else:
        evidence = "live: this machine"
    facts = [
        ("Customer", customer or "not given (--gpu-customer)"),
        ("Profile", f"{profile['name']} ({profile.get('path')})" if profile else "none: nothing was promised"),
        ("Profile sha256", profile.get("sha256") or "—"),
        ("Machine", _text(machine.get("hostname"), "hostname not recorded") if machine
         else f"not read: {document.get('machine_error') or 'unknown error'}"),
        ("Evidence", evidence),
        ("NVIDIA driver", _text(machine.get("driver_version"))),
        ("CUDA driver", _text(machine.get("cuda_driver_version"))),
        ("NCCL", ", ".join(nccl) if nccl else "not measured in this run"),
        ("Date", _when(document)),
        ("Run on", f"{run.get('host') or '?'}" + (f" by {run['user']}" if run.get("user") else "")),
        ("pytest-gpufabric", _text(document.get("plugin_version"))),
    ]
    parts = [
        Html('<div class="cover">'),
        Html(f"<h1>GPU server acceptance{': ' + escape(customer) if customer else ''}</h1>"),
        Html(f'<div class="verdict {css}">{"Verdict: " + escape(verdict) if verdict else "No verdict"}</div>'),
        Html(f'<p class="reason">{escape(reason)}</p>' if reason else ""),
        Html(f"<p>Promises: {escape(counts)}</p>" if counts else ""),
        _open_promises_html(document),
        Html('<table class="facts">' + "".join(f"<tr><th>{escape(k)}</th>{_cell(v)}</tr>" for k, v in facts)
             + "</table>"),
    ]
    gpus = machine.get("gpus") or []
    identity = ("name", "serial", "uuid", "vbios_version", "pci_bus_id")
    if gpus and all(g.get(k) is None for g in gpus for k in identity):
        parts.append(Html(f"<p>{len(gpus)} GPU(s); their serials, UUIDs and VBIOS versions are not recorded by this "
                          "evidence.</p>"))
    elif gpus:
        rows = [[f"GPU{g.get('index')}", _text(g.get("name")), _text(g.get("serial")), _text(g.get("uuid")),
                 _text(g.get("vbios_version")), _text(g.get("pci_bus_id"))] for g in gpus]
        parts += [Html("<h3>GPUs</h3>"), _table(["GPU", "model", "serial", "UUID", "VBIOS", "PCI bus id"], rows)]
    parts.append(Html("</div>"))
    return _join(*parts)


def _counter_order(item: tuple[str, int]) -> tuple[str, int]:
    """'nvlink_ecc_data:10' after 'nvlink_ecc_data:9' (links in number order, not text order)."""
    name, _ = item
    base, _, link = name.partition(":")
    return base, int(link) if link.isdigit() else -1


def _counters_risen(rose: dict[str, int]) -> str:
    """One phrase per counter, its links summed: 'nvlink_ecc_data +53,886 on 18 links, pcie_replay +3'; the
    per-link figures go in the cell's title (36 links of two counters do not fit a table cell)."""
    totals: dict[str, list[int]] = {}
    links: dict[str, list[str]] = {}
    for name, delta in sorted(rose.items(), key=_counter_order):
        base, _, link = name.partition(":")
        totals.setdefault(base, []).append(delta)
        if link:
            links.setdefault(base, []).append(link)
    phrases = []
    for base, deltas in totals.items():
        where = links.get(base, [])
        if not where:
            on = ""
        elif len(where) <= 3:
            on = f" on link{'s' if len(where) > 1 else ''} {', '.join(where)}"
        else:
            on = f" on {len(where)} links"
        phrases.append(f"{base} +{sum(deltas):,}{on}")
    return ", ".join(phrases) or "none"


#: the columns _window_cells fills, after the caller's own
_WINDOW_COLUMNS = ["counters that rose", "hottest C", "peak power W", "clock events"]


def _window_cells(window: dict | None) -> list[Html]:
    """One GPU's health over a stretch of work (a test, a burn-in chunk: fabric.health.window_record), as table
    cells: the counters that rose (each link's figure in the title), the hottest read, the highest power and the
    clock-event reasons seen. Recordings without background peaks show their closing read; None: not read."""
    if window is None:
        return [_cell("not read"), _cell("-"), _cell("-"), _cell("-")]
    rose = window.get("rose", {})
    per_link = ", ".join(f"{name} +{delta}" for name, delta in sorted(rose.items(), key=_counter_order))
    hottest = window.get("peak_temperature_c", window.get("temperature_c"))
    power = window.get("peak_power_w", window.get("power_w"))
    seen = window.get("throttle_seen", window.get("throttle")) or []
    return [_cell(_counters_risen(rose), title=per_link), _cell("-" if hottest is None else str(hottest)),
            _cell("-" if power is None else f"{power:.0f}"), _cell(", ".join(map(str, seen)) or "-")]


def health_html(health: dict, replay: bool = False) -> Html:
    """The watchdog's table: per test and GPU, the counters that rose, the hottest temperature and highest power
    read during it, and the clock-event reasons seen."""
    rows = [[nodeid.rsplit("/", 1)[-1], f"GPU{gpu}", *_window_cells(record)]
            for nodeid, gpus in (health.get("tests") or {}).items() for gpu, record in sorted(gpus.items())]
    if not rows:
        if replay:
            return Html("<h2>Health</h2><p>No health reads in a replay: the watchdog reads every GPU around each "
                        "test of a live run (that run's results JSON keeps them). A burn-in's own reads are under "
                        "Burn-in.</p>")
        return Html("<h2>Health</h2><p>No health reads: the watchdog runs around each test of a live run.</p>")
    xid = health.get("xid_events") or []
    head = Html(f"<p>XID events: {len(xid)} ({escape(str(health.get('xid_watch', 'not watched')))}).</p>")
    from .plots import health_timeline_png

    plot = _png_figure(health_timeline_png(health.get("timeline") or []), "GPU health timeline")
    table = _table(["test", "GPU", "counters that rose during the test", *_WINDOW_COLUMNS[1:]], rows)
    return _join(Html("<h2>Health</h2>"), head, table, plot)


def _png_figure(png: bytes | None, caption: str) -> Html:
    if png is None:
        return Html("")
    content = base64.b64encode(png).decode("ascii")
    return Html(f'<figure><img alt="{escape(caption, quote=True)}" src="data:image/png;base64,{content}"/>'
                f"<figcaption>{escape(caption)}</figcaption></figure>")


def _between_chunks(chunk: dict) -> tuple[str, str, bool]:
    """(workload, result, went wrong) for a burn-in log line that is not a GEMM chunk."""
    if "error" in chunk:  # a workload that failed: the GEMM burn's own line, or an all_reduce or memory run
        return chunk.get("workload", chunk["type"]), f"failed: {chunk['error']}", True
    if chunk["type"] == "all_reduce":
        row = chunk["row"]
        wrong = row.get("wrong", 0)
        return (f"all_reduce {format_bytes(row['size'])}",
                f"busbw {row['busbw']:.1f} GB/s, {wrong} wrong element(s)", bool(wrong))
    oversized = chunk.get("oversized") or {}
    completed = [r for r in chunk.get("lms") or [] if r.get("outcome") == "completed"]
    recovered = "recovered" if oversized.get("recovered") else "NOT recovered"
    return ("memory", f"oversized batch: {oversized.get('outcome')}, {recovered}; "
            f"{len(completed)} of {len(chunk.get('lms') or [])} offload run(s) completed", False)


def _board_title(gpu: dict, serials: dict) -> str:
    """A burn-in row's board: its serial (the chunk's own, else the log's start line) and the CUDA device the
    GEMMs ran on, where the log says."""
    serial = gpu.get("serial") or serials.get(str(gpu["gpu"])) or "not recorded"
    return f"serial {serial}" + (f", CUDA device {gpu['cuda_index']}" if "cuda_index" in gpu else "")


def burn_in_html(burn_in: dict | None) -> Html:
    """The burn-in chunk by chunk: per GPU its rate, checks and wrong elements, the hottest read, the highest power,
    the clock events and the counters that rose; the workloads run between the chunks; and a plot of temperature
    and power through it, from the reads each chunk logged (so a replayed burn-in log shows them too)."""
    if not burn_in:
        return Html("")
    gemm_s = burn_in.get("gemm_s", burn_in["elapsed_s"])
    minutes = f"{burn_in['elapsed_s'] / 60:.1f} of {burn_in['duration_s'] / 60:.1f} minutes of GEMM burn"
    if abs(gemm_s - burn_in["elapsed_s"]) >= 3:  # a log with wall-clock times: both said
        minutes = (f"{gemm_s / 60:.1f} minutes of GEMM burn in {burn_in['elapsed_s'] / 60:.1f} of "
                   f"{burn_in['duration_s'] / 60:.1f} minutes")
    state = "finished" if burn_in["finished"] else "not finished: a rerun with the same profile and duration resumes it"
    parts = [Html(f"<h2>Burn-in</h2><p>{escape(minutes)} on every GPU ({escape(state)})"
                  + (f", resumed at {burn_in['resumed_from_s'] / 60:.1f} min" if burn_in.get("resumed_from_s") else "")
                  + f"; log: <code>{escape(str(burn_in['log']))}</code>.</p>")]
    if burn_in.get("plant_fault") is not None:
        board = burn_in.get("plant_fault_board")
        where = (f"CUDA device {burn_in['plant_fault']}, which is GPU{board['index']} (serial "
                 f"{board.get('serial') or 'not recorded'})" if board else f"GPU{burn_in['plant_fault']}")
        parts.append(_join(Html('<p class="mismatch">A fault was planted on '), where,
                           Html(" (--gpu-burn-in-plant-fault): its products were corrupted on purpose, to show that "
                                "the check catches a wrong result. This run accepts nothing.</p>")))
    serials = burn_in.get("serials") or {}
    rows, between, points = [], [], []
    chunk_number = 0
    for chunk in burn_in["chunks"]:
        if chunk["type"] != "gemm":
            workload, result, wrong = _between_chunks(chunk)
            between.append([str(chunk_number), str(workload), _cell(str(result), "mismatch" if wrong else "")])
            continue
        chunk_number += 1
        points += chunk.get("timeline") or []
        health = chunk.get("health") or {}
        for gpu in chunk["result"]["gpus"]:
            wrong = gpu["errors_self"] + gpu["errors_cross"]
            rows.append([
                str(chunk_number), f"{chunk['seconds']:.0f}",
                _cell(f"GPU{gpu['gpu']}", title=_board_title(gpu, serials)),
                _cell(f"{gpu['tflops']:.0f}", "num"), _cell(f"{gpu['iterations']:,}", "num"),
                _cell(f"{gpu['checks']:,}", "num"), _cell(f"{wrong:,}", "num mismatch" if wrong else "num"),
                *_window_cells(health.get(str(gpu["gpu"]))),
            ])
    parts.append(_table(["chunk", "s", "GPU", "TFLOP/s", "GEMMs", "checks", "wrong elements", *_WINDOW_COLUMNS],
                        rows))
    if between:
        parts += [Html("<h3>Between the chunks</h3>"), _table(["after chunk", "workload", "result"], between)]
    from .plots import health_timeline_png

    parts.append(_png_figure(health_timeline_png(points, "GPU health during the burn-in"),
                             "Temperature and power through the burn-in (background reads of each chunk)"))
    return _join(*parts)


class HtmlSections:
    """pytest-html hook implementations, bound to the run's FabricSession."""

    def __init__(self, fabric_session) -> None:
        self.fabric_session = fabric_session
        self.plots: list[tuple[str, str, str]] = []  # (node id, name, base64 PNG) of the tests' image extras

    def pytest_html_report_title(self, report) -> None:
        profile = self.fabric_session.profile
        report.title = f"GPU acceptance report: {profile.name}" if profile else "GPU fabric report"

    def pytest_runtest_logreport(self, report) -> None:
        # before pytest-html (trylast) turns the extras' content into data URIs or asset files
        if report.when != "call" or len(self.plots) >= _MAX_PLOTS:
            return
        for extra in getattr(report, "extras", None) or []:
            content = extra.get("content") if isinstance(extra, dict) else None
            if extra.get("mime_type") == "image/png" and isinstance(content, str) and not content.startswith("data:"):
                self.plots.append((report.nodeid, str(extra.get("name") or ""), content))

    def _document(self, session) -> dict:
        """The results document the run wrote; what the session knows where it could not be read."""
        recorder = session.config.pluginmanager.get_plugin("gpufabric-recorder")
        path = getattr(recorder, "results_path", None)
        if path is not None:
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        profile, error = self.fabric_session.profile, self.fabric_session.discovery_error
        return {"profile": None if profile is None else {"name": profile.name, "path": str(profile.path),
                                                         "sha256": profile.sha256},
                "machine_error": None if error is None else str(error), "checks": self.fabric_session.results,
                "summary": {"verdict": getattr(self.fabric_session, "verdict", None)}}

    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        document = self._document(session)
        fabric = self.fabric_session.fabric
        nccl = (document.get("software") or {}).get("nccl") or nccl_versions(
            getattr(self.fabric_session, "_measured", {}) or {})
        parts = [_STYLE, Html(f'<div class="gpufabric" id="{REPORT_ID}">'),
                 cover_html(document, customer_name(session.config), nccl)]
        if fabric is None:
            error = document.get("machine_error") or self.fabric_session.discovery_error
            parts.append(Html(f"<h2>Inventory</h2><p>No machine: {escape(str(error))}</p>"))
        else:
            parts.append(inventory_html(fabric))
            expected = self.fabric_session.profile.matrix if self.fabric_session.profile else {}
            parts.append(topology_html(expected, fabric.matrix))
        parts.append(measurements_html(document.get("checks") or []))
        parts.append(health_html(document.get("health") or {}, (document.get("run") or {}).get("mode") == "replay"))
        parts.append(burn_in_html(document.get("burn_in")))
        parts.append(skipped_html(document.get("skip_reasons") or {}, document.get("tests") or {}))
        parts.append(plots_html(self.plots))
        parts.append(Html("</div>"))
        parts.append(_MOVE_TO_TOP)
        prefix.append(str(_join(*parts)))  # pytest-html writes it unescaped (`{{ p|safe }}`)
