"""The report's promises: one row per promise in words and units (expected, found, reference, margin, result, what
to do next; the whole record one click away), and per check no promise judged.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..checks.result import is_measurement
from ..reference import ReferenceDataError, find_reference, load_references
from ..reference_normal import BASIS_WORDS, judge_check, recorded_samples
from .cells import _cell, _relative_paths, _short_nodeid
from .check_words import margin, phrase
from .phrases import format_value, short

RESULTS_LABEL = {"passed": ("passed", "match"), "failed": ("failed", "mismatch"),
                 "not checked": ("not checked", "unknown"), "unknown": ("not checked", "unknown"),
                 "waived": ("waived", "unknown")}


def _measurements(document: dict) -> list[dict]:
    """The checks that measured something (a record of "not checked" or "failed" without one shows as its
    promise's reason: records.NO_MEASUREMENT)."""
    return [check for check in document.get("checks") or [] if is_measurement(check)]


def _checks_by_test(document: dict) -> dict[str, list[dict]]:
    by_test: dict[str, list[dict]] = {}
    for check in _measurements(document):
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
         reference_of=None, site_kinds: tuple = ()) -> dict:
    if checks:
        phrased = [phrase(c, site_kinds) for c in checks]
        many = len(checks) > 1
        expected = "; ".join(dict.fromkeys(e for e, _ in phrased))
        found = "; ".join((f"{c.get('subject')}: {f}" if many else f) for c, (_, f) in zip(checks, phrased,
                                                                                          strict=True))
        margins = [m for m in (margin(c, site_kinds) for c in checks) if m is not None]
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


def promise_rows(document: dict, base: Path | None = None, site_kinds: tuple = ()) -> dict:
    """One row per promise (and per check no promise judged: a user's own test's), in the document's order;
    ``site_kinds``: the kinds a site's plugin added to the run, whose rules phrase its checks."""
    checks = _measurements(document)
    by_test = _checks_by_test(document)
    reference_of, no_reference = _references_for(document)
    rows, used = [], set()
    for promise in document.get("promises") or []:
        mine = [c for t in promise.get("tests") or [] for c in by_test.get(t, [])]
        used.update(id(c) for c in mine)
        rows.append(_row(promise["id"], mine, promise.get("outcome", "not checked"), promise, base, reference_of,
                         site_kinds))
    by_id = {p.get("id"): p for p in document.get("promises") or []}
    for pid, why in (document.get("not_run") or {}).items():
        remedy = (by_id.get(pid) or {}).get("remedy")
        rows.append(_row(pid, [], "not checked", {"id": pid, "outcome": "not checked", "reason": why,
                                                  **({"remedy": remedy} if remedy else {})}, base))
    for check in checks:
        if id(check) not in used:
            rows.append(_row(f"{check.get('name')} {check.get('subject')}", [check],
                             str(check.get("verdict")), None, base, reference_of, site_kinds))
    why = "no profile was given" if not document.get("profile") else "no test judged a promise"
    note = ("Reference: the measured figure as a share of the GPU model's published peak (gpufabric reference "
            "MODEL lists it, with its sources), and whether that is normal: at least 0.9 of the lowest share this "
            "project's recorded runs of the model reached (hover for the figures)." if reference_of else
            f"No reference column: {no_reference}.")
    return {"rows": rows, "why": why, "reference_note": note}
