"""pytest-html sections: the customer's acceptance report.

At the top of the report (moved above pytest-html's Environment table): a cover with the verdict and its reason,
the customer, the system (hostname, DMI serials where recorded), the evidence (live, or the replay of a bundle named
by its name) with the date the machine was measured, the profile and its sha256, the operator, the tool's version and
every GPU's identity; then one row per promise in words and units (expected, found, margin, result; the whole record
one click away), the plots (inline SVG, drawn from the results), the inventory and topology, health, the burn-in,
the skipped checks, and the digests and signature of the results.

The page is drawn from the results document the run wrote (reports/gpufabric-results.json, signed where
--gpu-sign-key was given), so the report and the JSON say the same thing, and the document itself is embedded in
the page for ``gpufabric verify``. Registered only when pytest-html is active (its hooks are unknown otherwise).

This module prepares plain data (str, numbers, lists, dicts); the Jinja2 templates in templates/ lay it out with
autoescaping on, so whatever a bundle, a profile, the customer or the machine says (a hostname, a GPU's name, a
serial, a message) is text: a GPU named ``<script>...`` shows as that name and never runs.
"""

from __future__ import annotations

import json
import os
import re
from html import escape
from pathlib import Path

from ..formats.topo import normalize_label
from ..units import format_bytes
from .phrases import format_value, margin, number, short  # noqa: F401  (format_value, margin: public here too)
from .results import nccl_versions

REPORT_ID = "gpufabric-report"
RESULTS_LABEL = {"passed": ("passed", "match"), "failed": ("failed", "mismatch"),
                 "not checked": ("not checked", "unknown"), "unknown": ("not checked", "unknown"),
                 "waived": ("waived", "unknown")}
_VERDICT_CSS = {"ACCEPTED": "accepted", "REJECTED": "rejected", "INCOMPLETE": "incomplete",
                "NOT TESTED": "not-tested"}


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
    they stay plain text (pytest-metadata's -v header, its JUnit properties). Paths are shown relative to where
    pytest was started, or by name: never a local absolute path."""
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return
    if metadata_key not in config.stash:
        return
    from .provenance import bundle_name, display_path

    base = config.invocation_params.dir
    facts: dict[str, str] = {}
    customer = customer_name(config)
    if customer:
        facts["Customer"] = customer
    profile = fabric_session.profile
    if profile is not None:
        facts["GPU profile"] = f"{profile.name} ({display_path(str(profile.path), base)})"
        facts["GPU profile sha256"] = profile.sha256
    fabric = fabric_session.fabric
    if fabric is not None:
        facts["Machine source"] = (f"bundle {bundle_name(fabric_session.replay, fabric_session.bundle_dir)}"
                                   if fabric_session.replay else fabric.source)
        facts["NVIDIA driver"] = str(fabric.driver_version or "not recorded")
        facts["CUDA driver"] = str(fabric.cuda_driver_version or "not recorded")
        facts["GPUs"] = ", ".join(f"{g.label} {g.name or '?'} (serial {g.serial or '?'})" for g in fabric.gpus)
    elif fabric_session.discovery_error is not None:
        facts["Machine"] = _relative_paths(str(fabric_session.discovery_error), base)
    as_html = config.pluginmanager.hasplugin("html") and bool(config.getoption("htmlpath", None))
    config.stash[metadata_key].update({key: escape(str(value), quote=False) if as_html else str(value)
                                       for key, value in facts.items()})


def _relative_paths(text: str, base: Path | None) -> str:
    """``text`` with the local folders it names (where pytest was started, the package, the home folder) written
    relative or left out."""
    from ..paths import SUITES_DIR

    folders = [(str(base) if base else None, ""), (str(SUITES_DIR.parent.parent), ""), (os.path.expanduser("~"), "~")]
    # the longest first (the package's folder may lie below where pytest started), each only where the path's own
    # component ends: /tmp/run is not the start of /tmp/run-venv
    for folder, instead in sorted((f for f in folders if f[0] and f[0] != "/"), key=lambda f: -len(f[0])):
        text = re.sub(re.escape(folder.rstrip(os.sep)) + r"(?:(" + re.escape(os.sep) + r")|(?![\w.\-]))",
                      lambda m, instead=instead: instead + m.group(1) if m.group(1) and instead
                      else "" if m.group(1) else instead or ".", text)
    return text


# --- values ---------------------------------------------------------------------------------------------


def _text(value: object, missing: str = "not recorded") -> str:
    return missing if value is None or value == "" else str(value)


def _when(stamp: object) -> str | None:
    """'2026-11-25T15:37:05+00:00' -> '2026-11-25 15:37 UTC'."""
    if not stamp:
        return None
    text = str(stamp)
    match = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]00:?00)?", text)
    if match is None:
        return text
    return f"{match.group(1)} {match.group(2)}" + (" UTC" if match.group(3) else "")


def _cell(text: str, css: str = "", title: str = "") -> dict:
    return {"text": text, "css": css, "title": title}


def _short_nodeid(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


# --- the cover ------------------------------------------------------------------------------------------


def _system_text(document: dict) -> str:
    system = document.get("system") or {}
    machine = document.get("machine") or {}
    host = system.get("hostname") or machine.get("hostname")
    parts = [f"host {host}" if host else "hostname not recorded"]
    dmi = system.get("dmi") or {}
    product = " ".join(v for v in (dmi.get("sys_vendor"), dmi.get("product_name")) if v)
    if product:
        parts.append(product)
    serials = [f"{label} {dmi[key]}" for key, label in (("product_serial", "system serial"),
                                                        ("chassis_serial", "chassis serial"),
                                                        ("board_serial", "board serial")) if dmi.get(key)]
    serials += [f"chassis serial {s} (per nvidia-smi)" for s in system.get("gpu_chassis_serials") or []
                if s != dmi.get("chassis_serial")]
    if serials:
        parts += serials
    elif system:
        live = (document.get("evidence") or {}).get("kind") == "live"
        parts.append("DMI serials not readable here (root reads /sys/class/dmi/id)" if live
                     else "DMI serials not recorded by this bundle")
    return "; ".join(parts)


def _evidence_text(document: dict) -> tuple[str, str | None, str | None]:
    """(evidence, measured, judged) as the cover says them."""
    evidence = document.get("evidence") or {}
    run = document.get("run") or {}
    if evidence.get("kind") == "replay" or run.get("mode") == "replay":
        from .provenance import bundle_name

        name = evidence.get("bundle") or bundle_name(run.get("replay"), None) or "a bundle"
        on = f", recorded on host {evidence['measured_on']}" if evidence.get("measured_on") else ""
        measured = _when(evidence.get("measured_at")) or "not recorded by the bundle (no manifest.json)"
        return (f"replay of bundle {name}{on} (judged here, not measured on this host)", measured,
                _when(evidence.get("judged_at") or document.get("finished_at")) or "not finished")
    machine = document.get("machine") or {}
    source = machine.get("source") or "NVML"
    return f"live: this machine, read through {source}", _when(evidence.get("measured_at")
                                                                or document.get("started_at")), None


def _gpus(machine: dict) -> tuple[dict | None, str]:
    gpus = machine.get("gpus") or []
    identity = ("name", "serial", "uuid", "vbios_version", "pci_bus_id")
    if gpus and all(g.get(k) is None for g in gpus for k in identity):
        return None, f"{len(gpus)} GPU(s); their serials, UUIDs and VBIOS versions are not recorded by this evidence."
    if not gpus:
        return None, ""
    rows = [[f"GPU{g.get('index')}", _text(g.get("name")), _text(g.get("serial")), _text(g.get("uuid")),
             _text(g.get("vbios_version")), _text(g.get("pci_bus_id"))] for g in gpus]
    return {"header": ["GPU", "Model", "Serial", "UUID", "VBIOS", "PCI bus id"], "rows": rows}, ""


#: the order a signer reads the open promises in: what failed first, then what could not be shown, then waivers
_OPEN_ORDER = {"failed": 0, "not checked": 1, "unknown": 1, "waived": 2}


def _checks_by_test(document: dict) -> dict[str, list[dict]]:
    by_test: dict[str, list[dict]] = {}
    for check in document.get("checks") or []:
        by_test.setdefault(str(check.get("test")), []).append(check)
    return by_test


def whole_reason(promise: dict, checks: list[dict]) -> str:
    """Why a promise ended as it did, whole: the messages of its checks that ended so (a message runs over several
    lines: the topology's cells that differ, then the usual causes), else the promise's reason, which the results
    keep to its first line."""
    outcome = promise.get("outcome")
    same = ("not checked", "unknown") if outcome in ("not checked", "unknown") else (outcome,)
    messages = [str(c["message"]) for c in checks if c.get("verdict") in same and c.get("message")]
    return "\n".join(dict.fromkeys(messages)) or str(promise.get("reason") or "")


def remedy_text(promise: dict | None, base: Path | None = None) -> str:
    """What to do next about a failed or not-checked promise, as the results hold it (remedy.py): 'reseat or
    recable: GPU0: 0 active NVLinks of 2: a bridge or cable not seated'; '' where it has none (passed, waived, or
    results written before remedies were)."""
    remedy = (promise or {}).get("remedy")
    if not isinstance(remedy, dict) or not remedy.get("class"):
        return ""
    return _relative_paths(f"{remedy['class']}: {remedy.get('why') or ''}".rstrip(": "), base)


def _open_promises(document: dict, base: Path | None = None) -> list[list]:
    """Every promise that failed, was not checked or was waived, with why in full and what to do next: what a
    customer must read first, failures first."""
    by_test = _checks_by_test(document)
    open_promises = sorted((p for p in document.get("promises") or [] if p.get("outcome") != "passed"),
                           key=lambda p: _OPEN_ORDER.get(str(p.get("outcome")), 1))
    rows = [[p["id"], _cell(*RESULTS_LABEL.get(p["outcome"], (p["outcome"], ""))),
             _relative_paths(whole_reason(p, [c for t in p.get("tests") or [] for c in by_test.get(t, [])]), base),
             _cell(remedy_text(p, base) or "—", "remedy")]
            for p in open_promises]
    by_id = {p.get("id"): p for p in document.get("promises") or []}
    not_run = [[f"{pid} (not run)", _cell("not checked", "unknown"), why,
                _cell(remedy_text(by_id.get(pid), base) or "—", "remedy")]
               for pid, why in (document.get("not_run") or {}).items()]
    failed = sum(1 for p in open_promises if p.get("outcome") == "failed")
    return rows[:failed] + not_run + rows[failed:] if not_run else rows


def _signature_text(document: dict) -> str:
    block = document.get("integrity") or {}
    signature = block.get("signature")
    if isinstance(signature, dict):
        return (f"signed with Ed25519 key {signature.get('key_id')}: `gpufabric verify` this file with the public "
                "key to see that nothing was changed")
    if block:
        return ("not signed (pytest --gpu-sign-key KEY.pem or gpufabric accept --sign-key KEY.pem signs it); digests "
                "on the last page")
    return "none: the run did not finish"


def _replay_banner(document: dict) -> str:
    """On the verdict's banner of a replay: whose machine was judged and when it was measured (the results' evidence
    block), so that a green banner is never read as this machine's."""
    evidence = document.get("evidence") or {}
    run = document.get("run") or {}
    if evidence.get("kind") != "replay" and run.get("mode") != "replay":
        return ""
    from .provenance import bundle_name

    name = evidence.get("bundle") or bundle_name(run.get("replay"), None) or "a bundle"
    on = f" on host {evidence['measured_on']}" if evidence.get("measured_on") else ""
    when = _when(evidence.get("measured_at"))
    measured = f"measured {when}{on}" if when else f"measured{on} on a date the bundle does not record"
    return f"Replay of bundle {name}, {measured}: judged here, not measured on this machine"


def cover_data(document: dict, customer: str | None, nccl: list[str], base: Path | None = None) -> dict:
    from ..verdict import verdict_words
    from .provenance import display_path

    summary = document.get("summary") or {}
    verdict = summary.get("verdict")
    tally = summary.get("promises") or {}
    counts = ", ".join(f"{tally[k]} {k.replace('_', ' ')}" for k in ("passed", "failed", "not_checked", "waived")
                       if tally.get(k))
    profile = document.get("profile") or {}
    machine = document.get("machine") or {}
    run = document.get("run") or {}
    evidence, measured, judged = _evidence_text(document)
    operator = run.get("operator") or run.get("user")
    facts = [
        ("Customer", customer or "not named (--gpu-customer NAME)"),
        ("System", _system_text(document) if machine or document.get("system")
         else f"not read: {document.get('machine_error') or 'unknown error'}"),
        ("Evidence", evidence),
        ("Measured", measured or "not recorded"),
    ]
    if judged:
        facts.append(("Judged", judged))
    facts += [
        ("Profile", f"{profile['name']} ({display_path(profile.get('path'), base)})" if profile
         else "none: nothing was promised"),
        ("Profile sha256", _cell(profile.get("sha256") or "—", "digest")),
        ("NVIDIA driver", _text(machine.get("driver_version"))),
        ("CUDA driver", _text(machine.get("cuda_driver_version"))),
        ("NCCL", ", ".join(nccl) if nccl else "not measured in this run"),
        ("Operator", (operator or "not recorded") + (f", on host {run['host']}" if run.get("host") else "")),
        ("Tool", f"pytest-gpufabric {_text(document.get('plugin_version'))}"),
        ("Signature", _signature_text(document)),
    ]
    gpus, gpus_note = _gpus(machine)
    waivers = [[w["promise"], w["reason"], w["source"], ", ".join(w.get("matched") or []) or "none"]
               for w in document.get("waivers") or []]
    return {"title": "GPU server acceptance" + (f": {customer}" if customer else ""),
            "verdict_css": _VERDICT_CSS.get(verdict or "", "none"),
            "verdict_text": f"Verdict: {verdict_words(verdict, summary.get('scope') or '')}" if verdict
            else "No verdict",
            "verdict_note": _replay_banner(document),
            "reason": summary.get("verdict_reason") or "", "counts": counts, "facts": facts, "gpus": gpus,
            "gpus_note": gpus_note, "open_promises": _open_promises(document, base), "waivers": waivers,
            "customer": customer, "sign": bool(verdict)}


# --- promises -------------------------------------------------------------------------------------------


def _part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:\[\]\-]", "_", name)[:200]


def _detail(checks: list[dict], promise: dict | None) -> tuple[str, str]:
    """(the summary a row shows folded, the whole record unfolded): every check's message, expected and found in
    full, its detail lines and the test that judged it."""
    lines = []
    for check in checks:
        lines.append(str(check.get("message") or ""))
        lines.append(f"expected: {format_value(check.get('expected'), check.get('unit'))}")
        lines.append(f"found: {format_value(check.get('found'), check.get('unit'))}")
        lines += [f"  {d}" for d in check.get("details") or []]
        if check.get("test"):
            lines.append(f"judged by {_short_nodeid(str(check['test']))}")
        lines.append("")
    if promise is not None and promise.get("reason") and promise.get("outcome") != "passed":
        lines.insert(0, f"{promise['outcome']}: {promise['reason']}")
    if not checks and promise is not None:
        lines += [f"judged by {_short_nodeid(t)}" for t in promise.get("tests") or []]
    full = "\n".join(lines).strip() or "no record"
    head = next((line for line in lines if line.strip()), "no record")
    return f"Detail: {short(head, 110)}", full


def _references_for(document: dict):
    """(reference_of(check) -> cell, why none) for the Reference column: each bandwidth check held against the
    published peak of the machine's GPU model (reference_normal.judge_check); one model per machine, else none."""
    from ..reference import ReferenceDataError, find_reference, load_references
    from ..reference_normal import BASIS_WORDS, judge_check, recorded_samples

    gpus = [g for g in (document.get("machine") or {}).get("gpus") or [] if isinstance(g, dict)]
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    if len(names) != 1:
        return None, "the machine's GPUs are of several models" if names else "no GPU recorded"
    try:
        references = load_references()
    except ReferenceDataError as exc:
        return None, f"the reference catalogue cannot be read: {exc}"
    ref = find_reference(names[0], references)
    if ref is None:
        return None, f"the reference catalogue has no entry for {names[0]}"
    samples = recorded_samples(references)
    nvlink = any(isinstance(g.get("nvlinks_active"), int) and g["nvlinks_active"] > 0 for g in gpus)

    def reference_of(check: dict) -> dict | None:
        judged = judge_check(check, ref, samples, nvlink)
        if judged is None:
            return None
        text = (f"{judged['fraction_of_peak'] * 100:.0f} % of the published {BASIS_WORDS[judged['basis']]} peak: "
                f"{judged['verdict']}")
        css = "reference " + ("low" if judged["verdict"] in ("low", "not on NVLink") else "")
        return _cell(text, css.strip(), judged["text"] + ". Published figure: " + ", ".join(judged["sources"]))

    return reference_of, None


def _break_points(identifier: str) -> list[str]:
    """A promise id in the pieces a narrow column may break it into: after '-', '_', '[' and ','
    (copy-bandwidth[host_to_device] -> copy-, bandwidth[, host_, to_, device])."""
    return [piece for piece in re.split(r"(?<=[\-_\[,])", identifier) if piece]


def _row(pid: str, checks: list[dict], outcome: str, promise: dict | None, base: Path | None = None,
         reference_of=None) -> dict:
    from .phrases import phrase

    if checks:
        phrased = [phrase(c) for c in checks]
        many = len(checks) > 1
        expected = "; ".join(dict.fromkeys(e for e, _ in phrased))
        found = "; ".join((f"{c.get('subject')}: {f}" if many else f) for c, (_, f) in zip(checks, phrased,
                                                                                          strict=True))
        margins = [m for m in (margin(c) for c in checks) if m is not None]
        worst = min(margins, key=lambda m: (m[2], m[0].startswith("+"))) if margins else None
    else:
        expected = "—"
        found = (promise or {}).get("reason") or "no measurement recorded"
        worst = None
    why = whole_reason(promise, checks) if promise is not None else ""
    label, css = RESULTS_LABEL.get(outcome, (outcome, ""))
    remedy = remedy_text(promise, base)
    summary, detail = _detail(checks, promise)
    expected, found, summary, detail = (_relative_paths(t, base) for t in (expected, found, summary, detail))
    references = [r for r in (reference_of(c) for c in checks) if r is not None] if reference_of else []
    # the row's reference: the check furthest below normal first, else the first
    reference = next((r for r in references if r["css"].endswith("low")), references[0] if references else None)
    return {"id": pid, "id_parts": _break_points(pid), "part": _part(f"promise:{pid}"), "expected": expected,
            "found": found,
            "reference": reference or _cell(""),
            "margin": _cell("") if worst is None else _cell(worst[0], "num" if worst[2] else "num mismatch",
                                                             worst[1]),
            "result": _cell(label, f"result {css}".strip(), _relative_paths(why, base)),
            "remedy": remedy, "summary": summary, "detail": detail}


def promise_rows(document: dict, base: Path | None = None) -> dict:
    """One row per promise (and per check no promise judged: a user's own test's), in the document's order."""
    checks = document.get("checks") or []
    by_test = _checks_by_test(document)
    reference_of, no_reference = _references_for(document)
    rows, used = [], set()
    for promise in document.get("promises") or []:
        mine = [c for t in promise.get("tests") or [] for c in by_test.get(t, [])]
        used.update(id(c) for c in mine)
        rows.append(_row(promise["id"], mine, promise.get("outcome", "not checked"), promise, base, reference_of))
    by_id = {p.get("id"): p for p in document.get("promises") or []}
    for pid, why in (document.get("not_run") or {}).items():
        remedy = (by_id.get(pid) or {}).get("remedy")
        rows.append(_row(pid, [], "not checked", {"id": pid, "outcome": "not checked", "reason": why,
                                                  **({"remedy": remedy} if remedy else {})}, base))
    for check in checks:
        if id(check) not in used:
            rows.append(_row(f"{check.get('name')} {check.get('subject')}", [check],
                             str(check.get("verdict")), None, base, reference_of))
    why = "no profile was given" if not document.get("profile") else "no test judged a promise"
    note = ("Reference: the measured figure as a share of the GPU model's published peak (gpufabric reference "
            "MODEL lists it, with its sources), and whether that is normal: at least 0.9 of the lowest share this "
            "project's recorded runs of the model reached (hover for the figures)." if reference_of else
            f"No reference column: {no_reference}.")
    return {"rows": rows, "why": why, "reference_note": note}


# --- the machine ----------------------------------------------------------------------------------------


def _recorded(value: object) -> str:
    """A value of the inventory as text; None (the evidence does not have it): 'not recorded'. A value that is
    the text 'None' (a GPU so named) stays 'None'."""
    return "not recorded" if value is None else str(value)


def inventory_data(fabric) -> dict:
    if fabric is None:
        return {"error": "not read"}
    rows = [
        [g.label, _recorded(g.name), _recorded(g.serial), _recorded(g.uuid), _recorded(g.pci_bus_id),
         _recorded(None if g.memory_bytes is None else format_bytes(g.memory_bytes)),
         _recorded(None if g.pcie_gen_max is None and g.pcie_width_max is None
                   else f"gen {g.pcie_gen_max} x{g.pcie_width_max}"),
         _recorded(g.vbios_version),
         _recorded(None if g.nvlinks is None else len(g.active_nvlinks()))]
        for g in fabric.gpus
    ]
    header = ["GPU", "Name", "Serial", "UUID", "PCI bus id", "Memory", "PCIe max", "VBIOS", "NVLinks active"]
    return {"error": None, "header": header, "rows": rows,
            "nics": [[n.label, _text(n.device)] for n in fabric.nics]}


def topology_data(expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]) -> dict:
    """The matrix as `topo -m` lays it out, each cell 'found' or 'expected → found' where they differ."""
    devices = list(dict.fromkeys([*expected, *found]))
    rows = []
    for row in devices:
        cells: list = [row]
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
    return {"header": ["", *devices], "rows": rows}


# --- health and burn-in ---------------------------------------------------------------------------------


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
_WINDOW_COLUMNS = ["Counters that rose", "Hottest °C", "Peak power W", "Clock events"]


def _window_cells(window: dict | None) -> list:
    """One GPU's health over a stretch of work (a test, a burn-in chunk: fabric.health.window_record), as table
    cells: the counters that rose (each link's figure in the title), the hottest read, the highest power and the
    clock-event reasons seen. Recordings without background peaks show their closing read; None: not read."""
    if window is None:
        return ["not read", "-", "-", "-"]
    rose = window.get("rose", {})
    per_link = ", ".join(f"{name} +{delta}" for name, delta in sorted(rose.items(), key=_counter_order))
    hottest = window.get("peak_temperature_c", window.get("temperature_c"))
    power = window.get("peak_power_w", window.get("power_w"))
    seen = window.get("throttle_seen", window.get("throttle")) or []
    return [_cell(_counters_risen(rose), title=per_link), "-" if hottest is None else str(hottest),
            "-" if power is None else f"{power:.0f}", ", ".join(map(str, seen)) or "-"]


def health_data(health: dict, replay: bool = False) -> dict:
    """The watchdog's table: per test and GPU, the counters that rose, the hottest temperature and highest power
    read during it, and the clock-event reasons seen; the temperature and power through the run."""
    from .figures import health_charts

    rows = [[_short_nodeid(nodeid), f"GPU{gpu}", *_window_cells(record)]
            for nodeid, gpus in (health.get("tests") or {}).items() for gpu, record in sorted(gpus.items())]
    if replay:
        why = ("No health reads in a replay: the watchdog reads every GPU around each test of a live run (that run's "
               "results JSON keeps them). A burn-in's own reads are under Burn-in.")
    else:
        why = "No health reads: the watchdog runs around each test of a live run."
    xid = health.get("xid_events") or []
    return {"rows": rows, "why": why, "xid": f"{len(xid)} ({health.get('xid_watch', 'not watched')})",
            "header": ["Test", "GPU", "Counters that rose during the test", *_WINDOW_COLUMNS[1:]],
            "charts": health_charts(health.get("timeline") or [], "The run") if rows else []}


def health_html(health: dict, replay: bool = False) -> str:
    """The Health section alone, as HTML (for tests and tools that show it without a whole report)."""
    from .render import render

    return render("report/health.html.j2", health=health_data(health, replay))


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


def burn_in_data(burn_in: dict | None, base: Path | None = None) -> dict | None:
    """The burn-in chunk by chunk: per GPU its rate, checks and wrong elements, the hottest read, the highest power,
    the clock events and the counters that rose; the workloads run between the chunks; and temperature and power
    through it, from the reads each chunk logged (so a replayed burn-in log shows them too)."""
    if not burn_in:
        return None
    from .figures import health_charts
    from .provenance import display_path

    gemm_s = burn_in.get("gemm_s", burn_in["elapsed_s"])
    minutes = f"{burn_in['elapsed_s'] / 60:.1f} of {burn_in['duration_s'] / 60:.1f} minutes of GEMM burn"
    if abs(gemm_s - burn_in["elapsed_s"]) >= 3:  # a log with wall-clock times: both said
        minutes = (f"{gemm_s / 60:.1f} minutes of GEMM burn in {burn_in['elapsed_s'] / 60:.1f} of "
                   f"{burn_in['duration_s'] / 60:.1f} minutes")
    state = "finished" if burn_in["finished"] else "not finished: a rerun with the same profile and duration resumes it"
    summary = f"{minutes} on every GPU ({state})" + (
        f", resumed at {burn_in['resumed_from_s'] / 60:.1f} min" if burn_in.get("resumed_from_s") else "")
    planted = ""
    if burn_in.get("plant_fault") is not None:
        board = burn_in.get("plant_fault_board")
        where = (f"CUDA device {burn_in['plant_fault']}, which is GPU{board['index']} (serial "
                 f"{board.get('serial') or 'not recorded'})" if board else f"GPU{burn_in['plant_fault']}")
        planted = (f"A fault was planted on {where} (--gpu-burn-in-plant-fault): its products were corrupted on "
                   "purpose, to show that the check catches a wrong result. This run accepts nothing.")
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
    return {"summary": summary, "log": display_path(str(burn_in["log"]), base), "planted": planted,
            "header": ["Chunk", "s", "GPU", "TFLOP/s", "GEMMs", "Checks", "Wrong elements", *_WINDOW_COLUMNS],
            "rows": rows, "between": between, "charts": health_charts(points, "The burn-in")}


def skipped_data(skip_reasons: dict[str, str], tests: dict[str, str], base: Path | None = None) -> dict:
    skipped = [nodeid for nodeid, outcome in tests.items() if outcome == "skipped"]
    skipped += [nodeid for nodeid in skip_reasons if nodeid not in tests]
    return {"rows": [[_cell(_short_nodeid(n), title=n), _cell(_relative_paths(skip_reasons.get(n) or
                                                                               "no reason recorded", base), "note")]
                     for n in skipped]}


def integrity_data(document: dict) -> dict:
    block = document.get("integrity") or {}
    evidence = document.get("evidence") or {}
    signature = block.get("signature") if isinstance(block.get("signature"), dict) else None
    facts = [("Results sha256", _cell(block.get("results_sha256") or "not computed: the run did not finish",
                                      "digest")),
             ("Profile sha256", _cell(block.get("profile_sha256") or "no profile", "digest")),
             ("Bundle", evidence.get("bundle") or "none: a live run"),
             ("Bundle sha256", _cell(block.get("bundle_sha256") or "—", "digest")),
             ("Signature", f"Ed25519, key {signature.get('key_id')}" if signature else "not signed")]
    how = ("Check them with `gpufabric verify REPORT.html --key PUB.pem` (or the results JSON): it names any part "
           "changed since the run, and any other key." if signature else
           "Without --gpu-sign-key the digests show a change, but not who made the file.")
    return {"facts": facts, "how": how}


# --- the whole section ----------------------------------------------------------------------------------


def report_html(document: dict, *, fabric=None, expected_matrix: dict | None = None, customer: str | None = None,
                nccl: list[str] | None = None, base: Path | None = None, embed: bool = True) -> str:
    """The report's sections (a fragment pytest-html's page holds) for a results document; ``fabric``: the
    machine read (its inventory and topology), None where it could not be read."""
    from .figures import report_figures
    from .html_signing import embed_results_json
    from .render import render, trusted

    nccl = nccl if nccl is not None else list((document.get("software") or {}).get("nccl") or [])
    error = document.get("machine_error")
    inventory = inventory_data(fabric) if fabric is not None else {"error": error or "not read"}
    topology = topology_data(expected_matrix or {}, fabric.matrix) if fabric is not None else {"rows": []}
    replay = (document.get("run") or {}).get("mode") == "replay"
    return render(
        "report.html.j2", page=False, page_id=REPORT_ID, css_class="", title="GPU acceptance report",
        cover=cover_data(document, customer, nccl, base), promises=promise_rows(document, base),
        figures=report_figures(document), inventory=inventory, topology=topology,
        health=health_data(document.get("health") or {}, replay), burn_in=burn_in_data(document.get("burn_in"), base),
        skipped=skipped_data(document.get("skip_reasons") or {}, document.get("tests") or {}, base),
        integrity=integrity_data(document),
        results_json=trusted(embed_results_json(document)) if embed and document.get("integrity") else "")


# --- pytest-html ----------------------------------------------------------------------------------------


def _report_path(config) -> Path | None:
    """Where pytest-html writes the report (as it works it out: the --html path below the working folder)."""
    path = config.getoption("htmlpath", None)
    if not path:
        return None
    return Path.cwd() / Path(os.path.expandvars(path)).expanduser()


class HtmlSections:
    """pytest-html hook implementations, bound to the run's FabricSession."""

    def __init__(self, fabric_session) -> None:
        self.fabric_session = fabric_session
        self.written = False

    def pytest_html_report_title(self, report) -> None:
        profile = self.fabric_session.profile
        report.title = f"GPU acceptance report: {profile.name}" if profile else "GPU fabric report"

    def pytest_html_results_table_row(self, report, cells) -> None:
        """pytest-html's results table: a test by its file and name, not the path the suites were loaded from."""
        for index, cell in enumerate(cells):
            if 'class="col-testId"' in cell:
                inner = _unescape(re.sub(r"^<td[^>]*>|</td>$", "", cell))
                cells[index] = f'<td class="col-testId">{escape(_relative_paths(inner, self._base))}</td>'

    def pytest_html_results_table_html(self, report, data) -> None:
        """A skipped test's log is its reason, not pytest's raw (path, line, reason) tuple; local paths in any log
        are written relative."""
        from .recorder import skip_reason

        base = self._base
        if report.skipped:
            data[:] = [escape(f"Skipped: {_relative_paths(skip_reason(report), base)}") + "\n"]
            return
        data[:] = [escape(_relative_paths(_unescape(part), base)) for part in data]

    @property
    def _base(self) -> Path | None:
        return getattr(self, "_invocation_dir", None)

    def pytest_sessionstart(self, session) -> None:
        self._invocation_dir = session.config.invocation_params.dir

    def _document(self, session) -> dict:
        """The results document the run wrote; what the session knows where it could not be read."""
        recorder = session.config.pluginmanager.get_plugin("gpufabric-recorder")
        path = getattr(recorder, "results_path", None)
        if path is not None:
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        # the results are on no disk (a full report folder): the page says so, and shows no verdict of its own
        profile, error = self.fabric_session.profile, self.fabric_session.discovery_error
        unwritten = getattr(recorder, "write_error", None) or "the run wrote no results"
        return {"profile": None if profile is None else {"name": profile.name, "path": str(profile.path),
                                                         "sha256": profile.sha256},
                "run": {"mode": self.fabric_session.mode, "replay": self.fabric_session.replay},
                "machine_error": None if error is None else str(error), "checks": self.fabric_session.results,
                "summary": {"verdict": None, "verdict_reason": f"no verdict: {unwritten}, so this page has no "
                                                               "verdict to show; rerun where the report folder "
                                                               "can be written"}}

    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        document = self._document(session)
        fabric = self.fabric_session.fabric
        nccl = (document.get("software") or {}).get("nccl") or nccl_versions(
            getattr(self.fabric_session, "_measured", {}) or {})
        profile = self.fabric_session.profile
        if fabric is None and not document.get("machine_error") and self.fabric_session.discovery_error:
            document["machine_error"] = str(self.fabric_session.discovery_error)
        prefix.append(report_html(document, fabric=fabric, expected_matrix=profile.matrix if profile else {},
                                  customer=customer_name(session.config), nccl=list(nccl),
                                  base=session.config.invocation_params.dir))
        self.written = True  # pytest-html writes it unescaped (`{{ p|safe }}`)

    def pytest_unconfigure(self, config) -> None:
        """After pytest-html wrote the page: its integrity block (signed with --gpu-sign-key)."""
        path = _report_path(config)
        if not self.written or path is None or not path.is_file():
            return
        from .html_signing import sign_html

        recorder = config.pluginmanager.get_plugin("gpufabric-recorder")
        try:
            sign_html(path, getattr(recorder, "sign_key", None))
        except OSError as exc:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"gpufabric: could not sign {path}: {exc.strerror or exc}", red=True)


def _unescape(text: str) -> str:
    from html import unescape

    return unescape(text)
