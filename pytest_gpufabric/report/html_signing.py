"""The HTML report's integrity: the page carries the signed results document inside it and, after its last line, a
block of its own: the sha256 of the page, one digest per section the report drew (marked
``<!--gf:NAME-->...<!--/gf:NAME-->``) and the signature over them, made and checked as the results' are
(report/integrity.py).
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

from ..verdict import verdict_words
from .cover import VERDICT_CSS
from .integrity import (
    INTEGRITY_KEY,
    DuplicateKey,
    Verification,
    _check_signature,
    _dict,
    _judged_again,
    _sign,
    changed_parts,
    fleet_run_id,
    loads,
    sha256_hex,
    verify_document,
)

HTML_FORMAT = "gpufabric-html-integrity/1"
#: the HTML report's integrity block: one comment after </html>, the page's last line
HTML_MARK = "<!-- gpufabric-integrity "
HTML_END = " -->"
#: where the report embeds its results document
RESULTS_SCRIPT_ID = "gpufabric-results"
_PART = re.compile(r"<!--gf:([A-Za-z0-9_.:\[\]\-]+)-->(.*?)<!--/gf:\1-->", re.S)
_EMBEDDED = re.compile(r'<script type="application/json" id="' + RESULTS_SCRIPT_ID + r'">(.*?)</script>', re.S)


# --- the HTML report ------------------------------------------------------------------------------------


def embed_results_json(document: dict) -> str:
    """The results document as the text of a <script type="application/json">: '<', '>' and '&' written as JSON
    escapes, so no value can end the script or start markup."""
    return (json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            .replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


_OPEN = re.compile(r"<!--gf:([A-Za-z0-9_.:\[\]\-]+)-->")
OUTSIDE = "the page outside the report's sections (pytest-html's title, environment and results tables)"


def _spans(page: str) -> dict[str, tuple[int, int]]:
    """Each marked part's (start, end) in the page; parts nest (a promise's rows inside the promises section)."""
    spans = {}
    for match in _OPEN.finditer(page):
        name = match.group(1)
        end = page.find(f"<!--/gf:{name}-->", match.end())
        if end >= 0 and name not in spans:
            spans[name] = (match.end(), end)
    return spans


def _part_name(name: str) -> str:
    kind, _, rest = name.partition(":")
    return f"{kind} {rest}" if rest else f"section {name}"


def html_parts(page: str) -> dict[str, str]:
    """The digests of the parts the report marked (``<!--gf:NAME-->...<!--/gf:NAME-->``: its sections, each
    promise's rows) and of the rest of the page."""
    parts = {_part_name(name): sha256_hex(page[start:end].encode()) for name, (start, end) in _spans(page).items()}
    parts[OUTSIDE] = sha256_hex(_PART.sub("", page).encode())
    return parts


def _innermost(changed: list[str], page: str) -> list[str]:
    """The changed parts that hold no other changed part (a promise's row, not also the section around it)."""
    spans = {_part_name(name): span for name, span in _spans(page).items()}
    out = []
    for part in changed:
        name = part.rsplit(" ", 1)[0]
        span = spans.get(name)
        inner = span is not None and any(
            other != part and spans.get(other.rsplit(" ", 1)[0]) is not None
            and span[0] <= spans[other.rsplit(" ", 1)[0]][0] and spans[other.rsplit(" ", 1)[0]][1] <= span[1]
            for other in changed)
        if not inner:
            out.append(part)
    return out


def split_signed_html(text: str) -> tuple[str, dict | None]:
    """(the page, its integrity block or None)."""
    at = text.rfind("\n" + HTML_MARK)
    if at < 0:
        return text, None
    tail = text[at + 1 + len(HTML_MARK):].rstrip("\n")
    if not tail.endswith(HTML_END):
        return text, None
    try:
        block = loads(tail[: -len(HTML_END)])  # DuplicateKey goes to the caller: in a comment it could end it early
    except (ValueError, RecursionError):
        return text, None
    return text[:at], block if isinstance(block, dict) else None


def signed_page(page: str, private_key=None, results_sha256: str | None = None, kind: str = "report") -> str:
    """The page with its integrity block after its last line (signed with ``private_key`` where given).
    ``results_sha256``: the results the page shows, where they are not embedded in it (the fleet page's are in
    fleet-results.json beside it); ``kind``: "report" (an acceptance report, its results embedded) or "fleet"."""
    embedded = _embedded(page)
    if results_sha256 is None and embedded:
        results_sha256 = (embedded.get(INTEGRITY_KEY) or {}).get("results_sha256")
    block = {"format": HTML_FORMAT, "kind": kind, "html_sha256": sha256_hex(page.encode()),
             "results_sha256": results_sha256, "parts": html_parts(page)}
    block["signature"] = None if private_key is None else _sign(block, private_key)
    # "--" cannot end the comment early: the JSON has no "--" outside strings, and strings are escaped
    text = json.dumps(block, sort_keys=True, separators=(",", ":")).replace("--", "-\\u002d")
    return page + "\n" + HTML_MARK + text + HTML_END + "\n"


def sign_html(path: Path, private_key=None) -> dict:
    """Append the report's integrity block (signed with ``private_key`` where given) to the HTML file; a block
    already there is replaced. Returns the block."""
    page, _ = split_signed_html(path.read_text(encoding="utf-8"))
    text = signed_page(page, private_key)
    tmp = path.with_name(f".{path.name}.signing")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return split_signed_html(text)[1]


def _embedded(page: str) -> dict | None:
    match = _EMBEDDED.search(page)
    if match is None:
        return None
    try:
        document = loads(match.group(1))
    except (ValueError, RecursionError, DuplicateKey):
        return None
    return document if isinstance(document, dict) else None


_COVER_VERDICT = re.compile(r'<div class="verdict ([^"]*)">Verdict: ([^<]*)<')


def _cover_disagrees(page: str, embedded: dict) -> list[str]:
    """The verdict the cover shows, a signer reads and signs, against the embedded results' (judged again above):
    a page edited to show ACCEPTED over results that say REJECTED is not valid, whatever key signed it."""
    summary = _dict(embedded.get("summary"))
    if summary.get("verdict") is None:
        return []
    said = verdict_words(summary.get("verdict"), str(summary.get("scope") or ""))
    colour = VERDICT_CSS.get(summary.get("verdict") or "", "none")
    shown = [(m.group(1), html.unescape(m.group(2)).strip()) for m in _COVER_VERDICT.finditer(page)]
    if shown != [(colour, said)]:
        what = f"'Verdict: {shown[0][1]}' ({shown[0][0]})" if len(shown) == 1 else f"{len(shown)} verdicts"
        return [f"its cover shows {what}, but its embedded results say {said}"]
    return []


def verify_html(text: str, public_key=None, path: str = "report") -> Verification:
    result = Verification(path, "report")
    try:
        page, block = split_signed_html(text)
    except DuplicateKey as exc:
        result.problems.append(f"the report changed after it was written: in its integrity block {exc}")
        return result
    if block is None or block.get("format") != HTML_FORMAT:
        result.problems.append(
            "the report changed after it was written: its integrity block is damaged or followed by other text"
            if "\n" + HTML_MARK in text else
            "the report carries no integrity block (written without pytest-gpufabric's report sections, or cut "
            "short)")
        return result
    if sha256_hex(page.encode()) != block.get("html_sha256"):
        changed = _innermost(changed_parts(_dict(block.get("parts")), html_parts(page)), page)
        result.problems.append("the report changed after it was written: "
                               + ("; ".join(changed) if changed else "the digest differs"))
    embedded = _embedded(page)
    if block.get("kind") == "fleet":  # the fleet page's results are fleet-results.json, checked on their own
        result.run_id = fleet_run_id(block.get("results_sha256"))
        result.notes.append(f"the page shows the fleet results with sha256 {block.get('results_sha256')}; verify "
                            "fleet-results.json beside it too")
    elif embedded is None:
        result.problems.append("the report's embedded results document is missing or damaged")
    else:
        inner = verify_document(embedded, public_key, path, "the report's embedded results")
        result.run_id = inner.run_id
        result.problems += inner.problems + _judged_again({k: v for k, v in embedded.items() if k != INTEGRITY_KEY})
        result.notes += [n for n in inner.notes if "not signed" not in n or block.get("signature") is None]
        if _dict(embedded.get(INTEGRITY_KEY)).get("results_sha256") != block.get("results_sha256"):
            result.problems.append("the report's embedded results are not the ones its integrity block names")
        result.problems += _cover_disagrees(page, embedded)
    _check_signature(block, public_key, result, "the report")
    return result
