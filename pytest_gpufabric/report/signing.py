"""Tamper evidence for the results JSON and the HTML report: digests, an Ed25519 signature, and their check.

Every results document the run finishes carries an ``integrity`` block: the sha256 of the results (the document
without the block, as canonical JSON), of the profile (its resolved content, as the cover shows it) and of the
replayed bundle (its files), and one digest per part of the results (each check's fields, each promise, the
verdict, each GPU's identity, ...). With a key (``--gpu-sign-key KEY.pem``: an Ed25519 private key in PEM, as
``openssl genpkey -algorithm ed25519 -out KEY.pem`` writes it) the block is signed; the signature covers the digests,
so it covers the document.

The HTML report carries the signed results document inside it and, after its last line, a block of its own: the
sha256 of the page, one digest per section the report drew (marked ``<!--gf:NAME-->...<!--/gf:NAME-->``), and the
signature over them.

:func:`verify_path` checks either file: the digests against the content, the signature against the key given. Where
something was changed it names the part (``checks[3] hbm-bandwidth GPU0 ...: found``, ``section promise
hbm-bandwidth[GPU0]``), since the per-part digests say which part no longer matches what was signed.

Signing goes through ``cryptography`` (pyca), never hand-rolled. Digests work without it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GpuFabricError

FORMAT = "gpufabric-integrity/1"
#: a file `gpufabric verify` reads whole at the most (a 10,000-node fleet's results are tens of MB)
MAX_VERIFY_BYTES = 1_000_000_000
HTML_FORMAT = "gpufabric-html-integrity/1"
INTEGRITY_KEY = "integrity"
#: the HTML report's integrity block: one comment after </html>, the page's last line
HTML_MARK = "<!-- gpufabric-integrity "
HTML_END = " -->"
#: where the report embeds its results document
RESULTS_SCRIPT_ID = "gpufabric-results"
_PART = re.compile(r"<!--gf:([A-Za-z0-9_.:\[\]\-]+)-->(.*?)<!--/gf:\1-->", re.S)
_EMBEDDED = re.compile(r'<script type="application/json" id="' + RESULTS_SCRIPT_ID + r'">(.*?)</script>', re.S)

#: how deep each top-level key of a results document is split into parts of their own (1: the key is one part)
_PART_DEPTH = {"checks": 3, "promises": 2, "summary": 2, "machine": 3, "run": 2, "profile": 2, "evidence": 2,
               "system": 3, "waivers": 2, "not_run": 2, "tests": 2, "skip_reasons": 2, "software": 2,
               # a fleet's results (fleet-results.json)
               "nodes": 3, "counts": 2, "settings": 2, "fabric": 2}
_MAX_SPLIT = 400  # a list or map longer than this is one part (a burn-in's timeline is thousands of points)


class SigningError(GpuFabricError):
    """A key that cannot be read or used; the message names the file and what is wrong."""


# --- digests --------------------------------------------------------------------------------------------


def canonical(value: object) -> bytes:
    """The one byte form a value is digested in: JSON, keys sorted, no spaces, UTF-8, finite numbers only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(value: object) -> str:
    """sha256 of ``value`` as canonical JSON. A value with NaN or Infinity in it (never in a document a run wrote:
    it writes them as null; only in one edited since) is digested with them spelled out, which no canonical form
    has, so it matches no signed digest and verification names its part instead of failing."""
    try:
        return sha256_hex(canonical(value))
    except ValueError:
        return sha256_hex(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


class DuplicateKey(Exception):
    """A JSON object that names one key twice: readers disagree on which value counts, so it is refused."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise DuplicateKey(f"the key {json.dumps(twice)} appears twice in one object (a run writes each key once; "
                           "readers differ on which of the two they show)")
    return document


def loads(text: str) -> object:
    """JSON as verification reads it: a key named twice in one object raises DuplicateKey (its first value could
    be what another reader shows, while the digest covers the last); RecursionError where it nests too deep."""
    return json.loads(text, object_pairs_hook=_no_duplicates)


def _plain(document: dict) -> dict:
    """The document as its JSON file holds it (NA as "N/A", paths as text, non-finite numbers as null)."""
    from .results import json_text

    return json.loads(json_text(document, indent=None))


def results_digest(document: dict) -> str:
    """sha256 of the results: the document without its integrity block, as canonical JSON."""
    return _digest({k: v for k, v in document.items() if k != INTEGRITY_KEY})


def _flatten(prefix: str, value: object, depth: int, out: dict[str, str]) -> None:
    if depth > 1 and isinstance(value, dict) and 0 < len(value) <= _MAX_SPLIT:
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, depth - 1, out)
    elif depth > 1 and isinstance(value, list) and 0 < len(value) <= _MAX_SPLIT:
        for index, item in enumerate(value):
            _flatten(f"{prefix}[{index}]", item, depth - 1, out)
    else:
        out[prefix] = _digest(value)


def part_digests(document: dict) -> dict[str, str]:
    """One digest per part of a results document: ``checks[3].found``, ``summary.verdict``, ``machine.gpus[0]``,
    ``health``, ... (how deep each key is split: _PART_DEPTH)."""
    out: dict[str, str] = {}
    for key, value in document.items():
        if key != INTEGRITY_KEY:
            _flatten(key, value, _PART_DEPTH.get(key, 1), out)
    return out


def bundle_digest(path: Path | str | None) -> str | None:
    """sha256 of a bundle: of each file's path and content (a folder; links by their target), or of the archive
    (a .tar.gz). None when there is no bundle."""
    if path is None:
        return None
    path = Path(path)
    if path.is_file():
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    lines = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = Path(root, name)
            relative = full.relative_to(path).as_posix()
            if relative.startswith("__pycache__"):
                continue
            if full.is_symlink():
                content = f"link:{os.readlink(full)}".encode()
            else:
                content = full.read_bytes()
            lines.append(f"{relative}\0{sha256_hex(content)}\n")
    return sha256_hex("".join(lines).encode())


# --- keys -----------------------------------------------------------------------------------------------


def load_private_key(path: Path | str):
    """The Ed25519 private key in a PEM file (unencrypted PKCS#8, as `openssl genpkey -algorithm ed25519` writes)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path}: a {type(key).__name__.replace('_', '')}, not an Ed25519 key (make one with "
                           "`openssl genpkey -algorithm ed25519 -out KEY.pem`)")
    return key


def load_public_key(path: Path | str):
    """The Ed25519 public key in a PEM file (`openssl pkey -in KEY.pem -pubout`); a private key file gives its
    public half."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    data = _read_key(path)
    if b"PRIVATE KEY" in data:
        key = load_private_key(path)
        return key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path}: a {type(key).__name__.replace('_', '')}, not an Ed25519 key")
    return key


def _read_key(path: Path | str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"cannot read key {path}: {exc.strerror or exc}") from None


def _raw_public(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key) -> str:
    """A short name of a public key: 'sha256:' and the first 16 hex digits of the sha256 of its 32 raw bytes."""
    return "sha256:" + sha256_hex(_raw_public(public_key))[:16]


def _sign(block: dict, private_key) -> dict:
    """The signature entry over ``block`` (without a signature) made with ``private_key``."""
    public = private_key.public_key()
    value = private_key.sign(canonical(block))
    return {"algorithm": "ed25519", "key_id": key_id(public),
            "public_key": base64.b64encode(_raw_public(public)).decode("ascii"),
            "value": base64.b64encode(value).decode("ascii")}


# --- the results document -------------------------------------------------------------------------------


def integrity_block(document: dict, profile_sha256: str | None, bundle: str | None, bundle_sha256: str | None,
                    private_key=None) -> dict:
    """The ``integrity`` block of a finished results document (signed where ``private_key`` is given)."""
    plain = _plain({k: v for k, v in document.items() if k != INTEGRITY_KEY})
    block = {"format": FORMAT, "results_sha256": results_digest(plain), "profile_sha256": profile_sha256,
             "bundle": bundle, "bundle_sha256": bundle_sha256, "parts": part_digests(plain)}
    block["signature"] = None if private_key is None else _sign(block, private_key)
    return block


def sign_document(document: dict, private_key) -> dict:
    """The document with its integrity block (re)signed by ``private_key``; digests recomputed from its content."""
    old = document.get(INTEGRITY_KEY) or {}
    document = {k: v for k, v in document.items() if k != INTEGRITY_KEY}
    document[INTEGRITY_KEY] = integrity_block(document, old.get("profile_sha256"), old.get("bundle"),
                                              old.get("bundle_sha256"), private_key)
    return document


@dataclass
class Verification:
    """What a check of a file found: ``problems`` empty means valid (untouched, and signed by the key given)."""

    path: str
    kind: str  # "results" or "report"
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    signed_by: str | None = None  # the key id the file says signed it
    signed: bool = False  # a signature that matches its digests (against the key given, where one was)
    run_id: str | None = None  # the run the file is of (results' run.id; a report's embedded results')

    @property
    def valid(self) -> bool:
        return not self.problems


def _labels(document: dict) -> dict[str, str]:
    """A reader's name for the parts that have one: checks[3] -> 'checks[3] hbm-bandwidth GPU0 (serial ...)'."""
    labels = {}
    for index, check in enumerate(_list(document.get("checks"))):
        if isinstance(check, dict):
            labels[f"checks[{index}]"] = f"checks[{index}] {check.get('name')} {check.get('subject')}"
    for index, promise in enumerate(_list(document.get("promises"))):
        if isinstance(promise, dict):
            labels[f"promises[{index}]"] = f"promises[{index}] {promise.get('id')}"
    for index, node in enumerate(_list(document.get("nodes"))):
        if isinstance(node, dict):
            labels[f"nodes[{index}]"] = f"nodes[{index}] {node.get('name')}"
    return labels


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _named(part: str, labels: dict[str, str]) -> str:
    head = re.match(r"(checks|promises|nodes)\[\d+\]", part)
    if head and head.group(0) in labels:
        rest = part[len(head.group(0)):].lstrip(".")
        return labels[head.group(0)] + (f": {rest}" if rest else "")
    return part


def changed_parts(signed: dict[str, str], now: dict[str, str], labels: dict[str, str] | None = None) -> list[str]:
    """The parts whose digest differs from the signed one, added or removed, named for a reader."""
    labels = labels or {}
    changed = [f"{_named(p, labels)} changed" for p in signed if p in now and now[p] != signed[p]]
    changed += [f"{_named(p, labels)} removed" for p in signed if p not in now]
    changed += [f"{_named(p, labels)} added" for p in now if p not in signed]
    return changed


def _check_signature(block: dict, public_key, result: Verification, what: str) -> None:
    """The signature over ``block`` against ``public_key`` (None: against the key the block names, which proves
    only that it is whole, not who signed it)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    signature = block.get("signature")
    if not isinstance(signature, dict):
        if public_key is not None:
            result.problems.append(f"{what} {_are(what)} not signed (no signature in its integrity block)")
        else:
            result.notes.append(f"{what} {_are(what)} not signed")
        return
    result.signed_by = str(signature.get("key_id"))
    unsigned = {k: v for k, v in block.items() if k != "signature"}
    try:
        value = base64.b64decode(str(signature.get("value")), validate=True)
        embedded = Ed25519PublicKey.from_public_bytes(base64.b64decode(str(signature.get("public_key")),
                                                                       validate=True))
    except (ValueError, TypeError):
        result.problems.append(f"{what}: its signature entry is damaged")
        return
    # the entry is not under the signature: each of its fields must be what signing wrote, no more
    if set(signature) != _SIGNATURE_FIELDS or signature.get("algorithm") != "ed25519" \
            or signature.get("key_id") != key_id(embedded):
        result.problems.append(f"{what}: its signature entry was edited (it holds other fields than algorithm "
                               "ed25519, key_id, public_key and value, or a key_id that is not its public key's)")
        return
    if public_key is not None and _raw_public(public_key) != _raw_public(embedded):
        result.problems.append(f"{what} {_were(what)} signed by key {signature.get('key_id')}, not by the key given "
                               f"({key_id(public_key)})")
        return
    try:
        (public_key or embedded).verify(value, canonical(unsigned))
    except (InvalidSignature, ValueError):  # ValueError: NaN or Infinity in the block, which signing never writes
        result.problems.append(f"{what}: the signature does not match its digests (the integrity block was "
                               "edited, or signed by another key)")
        return
    result.signed = True
    if public_key is None:
        result.notes.append(f"{what} {_are(what)} signed by key {signature.get('key_id')}; give --key to check "
                            "that it is the key you trust")


_SIGNATURE_FIELDS = {"algorithm", "key_id", "public_key", "value"}


def _are(what: str) -> str:
    return "are" if what.endswith("results") else "is"


def _were(what: str) -> str:
    return "were" if what.endswith("results") else "was"


def verify_document(document: dict, public_key=None, path: str = "results", what: str = "the results") \
        -> Verification:
    """Check a results document's integrity block against its content and, with ``public_key``, its signer."""
    result = Verification(path, "results")
    block = document.get(INTEGRITY_KEY)
    if not isinstance(block, dict) or block.get("format") != FORMAT:
        carry = "carry" if _are(what) == "are" else "carries"
        result.problems.append(f"{what} {carry} no integrity block (written by a run that did not finish, or by an "
                               "older pytest-gpufabric)")
        return result
    plain = {k: v for k, v in document.items() if k != INTEGRITY_KEY}
    result.run_id = _run_id(plain)
    if results_digest(plain) != block.get("results_sha256"):
        changed = changed_parts(_dict(block.get("parts")), part_digests(plain), _labels(plain))
        result.problems.append(f"{what} changed after {'they were' if _are(what) == 'are' else 'it was'} written: "
                               + ("; ".join(changed) if changed else "the digest differs"))
    _check_signature(block, public_key, result, what)
    if what == "the results":
        result.problems += _judged_again(plain)
    return result


def _run_id(document: dict) -> str | None:
    run = document.get("run")
    return str(run["id"]) if isinstance(run, dict) and run.get("id") else None


def _judged_again(document: dict) -> list[str]:
    """The verdict a results document's own tests, checks and promise list give (rejudge.py), where its summary
    says another: digests anyone can recompute do not make an edited verdict true."""
    from ..rejudge import derive_verdict

    if document.get("schema_version") not in (2, 3) or "tests" not in document:
        return []
    claimed = _dict(document.get("summary")).get("verdict")
    if claimed is None and document.get("profile") is None:
        return []
    try:
        verdict, reason, _ = derive_verdict(document)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return [f"its promises cannot be judged again ({type(exc).__name__}: {exc})"]
    if verdict != claimed:
        return [f"its summary says {claimed}, but its own tests, checks and promises say {verdict} ({reason})"]
    return []


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
    _check_signature(block, public_key, result, "the report")
    return result


def verify_path(path: Path | str, public_key=None) -> Verification:
    """Check RESULTS.json or REPORT.html (told apart by their content). Raises GpuFabricError for a file that is
    neither."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise GpuFabricError(f"cannot read {path}: not a regular file")
        if info.st_size > MAX_VERIFY_BYTES:
            raise GpuFabricError(f"{path}: {info.st_size / 1e6:,.1f} MB, larger than any results file or report "
                                 f"({MAX_VERIFY_BYTES / 1e6:,.0f} MB): not read")
        data = path.read_bytes()
    except OSError as exc:
        raise GpuFabricError(f"cannot read {path}: {exc.strerror or exc}") from None
    return verify_bytes(data, public_key, path)


def verify_bytes(data: bytes, public_key=None, path: Path | str = "results") -> Verification:
    """verify_path on a file's bytes already read (the fleet checks and then judges the very bytes it read once)."""
    path = Path(path)
    try:
        # utf-8-sig: a byte-order mark an editor put first is not content, as CRLF line endings are not (read
        # as LF, as Python's text mode reads them): neither changes what a browser or a JSON reader shows
        text = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise GpuFabricError(f"cannot read {path}: {exc}") from None
    try:
        if text.lstrip().startswith("{"):
            try:
                document = loads(text)
            except DuplicateKey as exc:
                return Verification(str(path), "results", [f"the results changed after they were written: {exc}"])
            except ValueError as exc:
                raise GpuFabricError(f"{path}: not JSON ({exc})") from None
            if not isinstance(document, dict) or "schema_version" not in document:
                raise GpuFabricError(f"{path}: not a gpufabric results document")
            return verify_document(document, public_key, str(path))
        if "<html" in text[:4096].lower() or HTML_MARK in text:
            return verify_html(text, public_key, str(path))
    except RecursionError:
        raise GpuFabricError(f"{path}: its JSON nests too deep to read (no run writes that)") from None
    raise GpuFabricError(f"{path}: neither a results JSON nor an HTML report")


# --- `gpufabric verify` ---------------------------------------------------------------------------------


def verify_command(paths: list[str], key: str | None, allow_unsigned: bool = False) -> tuple[int, list[str]]:
    """`gpufabric verify FILE... [--key PUB.pem] [--allow-unsigned]`: (exit code, lines to print).

    0: every file is whole and signed (by the key given, where one was), and results and reports given together
    are of one run; 1: a file changed, is unsigned (unless ``allow_unsigned``: the caller accepts that its digests,
    which anyone can recompute, show only that it is whole), is signed by another key, says a verdict its own
    promises do not give, or is of another run than its partner; 2: a file or key that cannot be read."""
    public_key = load_public_key(key) if key else None
    code, lines, runs = 0, [], []
    if key and b"PRIVATE KEY" in _read_key(key):
        lines.append(f"note: {key} is a private key: its public half was used. Give a customer only the public half "
                     f"(openssl pkey -in {key} -pubout -out PUB.pem); the private key signs, and stays with you")
    for path in paths:
        result = verify_path(path, public_key)
        runs.append((path, result))
        if not result.valid:
            code = 1
            lines.append(f"{path}: INVALID")
            lines += [f"  {problem}" for problem in result.problems]
        elif not result.signed:
            state = "its digests match, but it is unsigned: digests anyone can recompute show nothing of who wrote it"
            if allow_unsigned:
                lines.append(f"{path}: whole, unsigned: {state} (accepted: --allow-unsigned)")
            else:
                code = 1
                lines.append(f"{path}: UNSIGNED: {state}; sign with --gpu-sign-key, or give --allow-unsigned to "
                             "accept an unsigned file")
        else:
            who = f", signed by key {result.signed_by}" if public_key is not None else ""
            state = "the results are as the run wrote them" if result.kind == "results" else \
                "the report is as the run wrote it"
            lines.append(f"{path}: valid: {state}{who}")
        lines += [f"  note: {note}" for note in result.notes if "not signed" not in note]
    mismatch = _other_runs(runs)
    if mismatch:
        code = 1
        lines += mismatch
    return code, lines


def _other_runs(runs: list[tuple[str, Verification]]) -> list[str]:
    """Results and reports given together must be of one run (the run id each carries under its signature)."""
    results = [(path, r) for path, r in runs if r.kind == "results"]
    reports = [(path, r) for path, r in runs if r.kind == "report" and r.run_id is not None]
    if not results or not reports:
        return []
    lines = []
    result_runs = {r.run_id for _, r in results}
    report_runs = {r.run_id for _, r in reports}
    for path, r in results + reports:
        partners = report_runs if r.kind == "results" else result_runs
        if r.run_id is None:
            lines.append(f"{path}: OF ANOTHER RUN?: it names no run id (written before run ids were): cannot tell "
                         "whether the files given are of one run")
        elif r.run_id not in partners:
            other = "report" if r.kind == "results" else "results"
            lines.append(f"{path}: OF ANOTHER RUN: run {r.run_id}, and no {other} given is of that run "
                         f"({', '.join(sorted(str(p) for p in partners))})")
    return lines


def check_node_signatures(paths: list[Path], key: str, exclude: list[Path] | None = None,
                          max_bytes: int | None = None) -> tuple[dict, list[tuple[str, str]], dict[str, str]]:
    """`gpufabric fleet report --require-signed --key PUB.pem`: every node folder's results checked as `verify`
    checks them. Returns ({key_id, verified}, [(node, why refused)]); a folder without results is not refused here
    (the fleet report names it as never reported); one larger than ``max_bytes`` is refused unread. The third value:
    each verified file's folder -> the sha256 of the bytes that were verified, which the fleet's own reading must
    find again (fleet/report.py): a node that rewrites its file between the two reads is refused, not judged on
    bytes no signature covered."""
    from ..fleet.loader import MAX_BYTES, Unreadable, read_results_bytes
    from ..fleet.nodes import RESULTS_FILE, find_node_dirs

    public_key = load_public_key(key)
    directories, _ = find_node_dirs(paths, exclude=exclude)
    verified, refused, digests = 0, [], {}
    for directory in directories:
        results = directory / RESULTS_FILE
        if not results.exists() and not results.is_symlink():
            continue
        try:  # read as the fleet reads it: a regular file, bounded
            data = read_results_bytes(results, MAX_BYTES if max_bytes is None else max_bytes)
            result = verify_bytes(data, public_key, results)
        except FileNotFoundError as exc:  # a link to nothing
            refused.append((directory.name, f"unreadable: {exc.strerror or exc}"))
            continue
        except (Unreadable, GpuFabricError) as exc:
            refused.append((directory.name, f"unreadable: {exc}"))
            continue
        if not result.valid:
            refused.append((directory.name, "; ".join(result.problems)))
            continue
        report_problem = _node_report_problem(directory, public_key, result.run_id)
        if report_problem:
            refused.append((directory.name, report_problem))
            continue
        verified += 1
        digests[str(directory)] = sha256_hex(data)
    return {"key_id": key_id(public_key), "verified": verified}, refused, digests


def _node_report_problem(directory: Path, public_key, run_id: str | None) -> str | None:
    """Why the node's HTML report (which the fleet page links) cannot stand beside its verified results: not
    signed by the key, changed, or of another run. None when it can, or when there is none."""
    from ..fleet.nodes import node_report

    name = node_report(directory)
    if name is None:
        return None
    try:
        report = verify_path(directory / name, public_key)
    except GpuFabricError as exc:
        return f"its report {name}: {exc}"
    if not report.valid:
        return f"its report {name}: " + "; ".join(report.problems)
    if report.run_id != run_id:
        return (f"its report {name} is of another run ({report.run_id or 'no run id'}) than its results "
                f"({run_id or 'no run id'})")
    return None
