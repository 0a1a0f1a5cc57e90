"""The results document's integrity block: the sha256 of the results (the document without the block, as
canonical JSON), of the profile and of the replayed bundle, one digest per part of the results, the Ed25519
signature over them, and their check. report/signing.py says what the block is for; html_signing.py carries it
into the HTML report.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .results import json_text
from .versions import NotJudgeable, judge_again

FORMAT = "gpufabric-integrity/1"
INTEGRITY_KEY = "integrity"

#: how deep each top-level key of a results document is split into parts of their own (1: the key is one part)
_PART_DEPTH = {"checks": 3, "promises": 2, "summary": 2, "machine": 3, "run": 2, "profile": 2, "evidence": 2,
               "system": 3, "waivers": 2, "not_run": 2, "tests": 2, "skip_reasons": 2, "software": 2,
               # a fleet's results (fleet-results.json)
               "nodes": 3, "counts": 2, "settings": 2, "fabric": 2}
_MAX_SPLIT = 400  # a list or map longer than this is one part (a burn-in's timeline is thousands of points)


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


# --- signatures -------------------------------------------------------------------------------------------


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
    fleet = is_fleet_results(plain)
    result.run_id = fleet_run_id(block.get("results_sha256")) if fleet else _run_id(plain)
    if results_digest(plain) != block.get("results_sha256"):
        changed = changed_parts(_dict(block.get("parts")), part_digests(plain), _labels(plain))
        result.problems.append(f"{what} changed after {'they were' if _are(what) == 'are' else 'it was'} written: "
                               + ("; ".join(changed) if changed else "the digest differs"))
    _check_signature(block, public_key, result, what)
    if what == "the results" and not fleet:
        result.problems += _judged_again(plain)
        evidence = _dict(plain.get("evidence"))
        if evidence.get("kind") == "replay":
            digest = evidence.get("bundle_sha256")
            result.notes.append(f"its evidence is a replay of bundle {evidence.get('bundle')}"
                                + (f" (sha256 {str(digest)[:12]})" if digest else "")
                                + ": recorded evidence, not a live run of a machine")
    return result


def is_fleet_results(document: dict) -> bool:
    """Whether a document is a fleet report's results (fleet-results.json): its nodes and counts, and none of a
    node's tests, checks or summary. Its verdict is the fleet's over node files it does not hold: not judged again
    here (the fleet report judges each node file)."""
    return isinstance(document.get("nodes"), list) and isinstance(document.get("counts"), dict) and \
        not any(key in document for key in ("tests", "checks", "summary", "promises", "promised"))


def fleet_run_id(results_sha256: object) -> str:
    """What ties a fleet page to its fleet-results.json: the sha256 of the results the page names (it embeds none)."""
    return f"fleet results sha256:{str(results_sha256)[:16]}"


def _run_id(document: dict) -> str | None:
    run = document.get("run")
    return str(run["id"]) if isinstance(run, dict) and run.get("id") else None


def _judged_again(document: dict) -> list[str]:
    """The verdict a results document's own tests, checks and promise list give, by the rules of its format
    (versions.py), where its summary says another; a format that cannot be judged again is refused: digests anyone
    can recompute, and a version number the file states, do not make an edited verdict true."""
    claimed = _dict(document.get("summary")).get("verdict")
    try:
        verdict, reason, _ = judge_again(document)
    except NotJudgeable as exc:
        return [f"cannot be judged again: {exc}"]
    if verdict != claimed and not (claimed is None and document.get("profile") is None):
        return [f"its summary says {claimed}, but its own tests, checks and promises say {verdict} ({reason})"]
    return []
