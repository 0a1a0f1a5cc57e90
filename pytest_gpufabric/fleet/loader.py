"""The one reader of a node's results file for the fleet: bounded, strict, validated, and judged again.

A fleet report reads thousands of files written on machines the operator does not fully control: a node that
crashed mid-copy, a full disk, a hand edit, a file from a newer tool. Each of them is read here, and anything that
is not a whole, valid results document becomes ``Unreadable`` with the reason, for that node alone:

- **bounded**: at most ``max_bytes`` (64 MiB by default; a results file of a ten-minute burn-in is 0.3 MB), and
  no run of more than 64 opening brackets, checked before anything is parsed (nesting that deep spread over lines
  fails the parser or the schema in the parts that are read);
- **strict**: UTF-8 throughout, no NaN or Infinity token anywhere, the whole document there (a file cut short does
  not end where its top-level object closes);
- **versioned**: results formats 1 to 4; a newer one is refused with its number, an older reader must not guess
  (which formats can be judged again, and how: report/versions.py);
- **validated**: the parts the fleet reads against the shipped JSON Schema (each part by its own compiled
  validator: fastjsonschema);
- **checked** as ``gpufabric verify`` checks a file: its digests against its content and its signature against
  the key it names (report/integrity.py); what fails is the caller's to refuse (FILE_INTEGRITY);
- **judged again** (by the caller, report/versions.py): the node's verdict is derived from its tests, checks and promise
  list by the rules of a node run, never taken from the file's own summary; the profile the file embeds must be
  the one its sha256 names (catalogue.embedded_profile).

Only the parts the fleet needs are parsed (a long burn-in's health timeline is most of a file and is only
scanned), and a part whose bytes are those of a part already read (the profile, the promise list and the test
outcomes are alike across a fleet) is neither parsed, validated nor judged twice: its value, checked once, is
shared. So ten thousand nodes fit in memory and in seconds. The values a document holds may be shared with other
documents this reader returned: read them, never change them.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..catalogue import embedded_profile
from ..formats.strict import load_json_text
from ..report.integrity import INTEGRITY_KEY, DuplicateKey, loads, verify_document
from ..report.results import RESULTS_SCHEMA_VERSION, results_schema

__all__ = ["EMBEDDED_PROFILE", "FILE_INTEGRITY", "KNOWN_VERSIONS", "MAX_BYTES", "Unreadable", "load_results",
           "parse_results"]

#: the results formats this reader knows (report/results.schema.json: 4; 3 before a live run named its boot; 2
#: before the promise list came from the profile; 1 before the verdict had promises)
KNOWN_VERSIONS = (1, 2, 3, RESULTS_SCHEMA_VERSION)
MAX_BYTES = 64 << 20
MAX_DEPTH = 64

#: what the fleet reads of a results document; the rest (the health timeline, the burn-in's chunks, per-test
#: durations) is most of a long run's file and is only scanned
WANTED = ("schema_version", "plugin_version", "started_at", "finished_at", "run", "evidence", "profile", "machine",
          "machine_error", "software", "checks", "tests", "skip_reasons", "promises", "not_run", "waivers", "summary",
          "promised", "collection_errors")
#: a top-level key as the plugin writes it (indent 2): at the start of a line, two spaces in
_PART = re.compile(b'\n  "')
_KEY_NAME = re.compile(rb'"([A-Za-z_]+)": ')
#: the evidence part's key as the plugin writes it (a string holds no newline: only a top-level key is found)
_EVIDENCE = b'\n  "evidence": '
#: a NaN or Infinity token where JSON has a value (after ':', '[' or ','): Python writes them, JSON has none
_NON_FINITE = re.compile(rb"[:\[,]\s*-?(?:NaN|Infinity)\b")
#: nesting past MAX_DEPTH levels in a row, as a hostile or broken file holds it ("[[[[..."): refused before any
#: parsing; deep nesting spread over lines fails the parser (RecursionError) or the schema in the parts that are read
_TOO_DEEP = (b"[" * (MAX_DEPTH + 1), b"{" * (MAX_DEPTH + 1))
#: the parts that differ from node to node (measurements, serials, times): never remembered
_PER_NODE = frozenset({"checks", "machine", "run", "evidence", "started_at", "finished_at"})
#: a part of at most this many bytes is remembered by its bytes (a fleet's shared parts are a few kilobytes; a
#: bound, so that files of huge parts cannot fill the memory through the memo)
_SHARED_MAX_BYTES = 256 << 10


class Unreadable(ValueError):
    """A results file that is not a whole, valid results document; the message says why, for the operator."""


#: the keys load_results adds to the parts it returns: the sha256 of the file's bytes as read (when asked), whether
#: the file carries a signature that verifies against the key it names, what its integrity check found wrong (its
#: digests against its content, its signature: a list of problems, empty when none), and the profile it embeds,
#: checked against its sha256 (catalogue.embedded_profile: the Profile, or None when it is not the one the sha256
#: names; absent where the file embeds none)
FILE_SHA256 = "_file_sha256"
FILE_SIGNED = "_file_signed"
FILE_INTEGRITY = "_file_integrity"
EMBEDDED_PROFILE = "_embedded_profile"


def load_results(path: Path, max_bytes: int = MAX_BYTES, digest: bool = False) -> dict:
    """The wanted parts of the results document at ``path``, checked as the module says; raises Unreadable or
    FileNotFoundError (the node never wrote one). ``digest``: also the sha256 of the file's bytes (FILE_SHA256),
    which --require-signed's check must find again."""
    data = read_results_bytes(path, max_bytes)
    document = parse_results(data, path.name)
    if digest:
        document[FILE_SHA256] = hashlib.sha256(data).hexdigest()
    document[FILE_SIGNED], document[FILE_INTEGRITY], whole = _integrity(data, path.name)
    if whole is not None and "evidence" in whole:  # as every JSON reader sees it, not as its layout suggests
        document["evidence"] = _valid(document["schema_version"], "evidence", whole["evidence"], path.name)
    return document


def _integrity(data: bytes, name: str) -> tuple[bool, list[str], dict | None]:
    """(whether the file's signature verifies against the key it names, what is wrong with its digests or
    signature), checked as `gpufabric verify` checks a file without --key (report/integrity.py): a signed node
    changed after it was signed is found here, whether or not the fleet was given a key. An unsigned file is
    counted as unsigned and not checked here: its digests, which anyone can recompute, show nothing (its verdict
    is judged again from its content all the same; --require-signed refuses it). The third value: the whole
    document as parsed for the check (None where it was not)."""
    if not _carries_signature(data):
        return False, [], None
    try:
        document = loads(data.decode("utf-8-sig").replace("\r\n", "\n"))
    except DuplicateKey as exc:
        return False, [f"its results changed after they were written: {exc}"], None
    except (ValueError, RecursionError) as exc:
        return False, [f"its integrity cannot be checked ({type(exc).__name__})"], None
    if not isinstance(document, dict) or not isinstance(document.get(INTEGRITY_KEY), dict):
        return False, [], None
    result = verify_document(document, None, name, "its results")
    # a signature over other content signs nothing
    return result.signed and not result.problems, result.problems, document


def _carries_signature(data: bytes) -> bool:
    """Whether the file's integrity block (its last key) holds a signature entry."""
    block = data.rfind(f'"{INTEGRITY_KEY}": {{'.encode())
    signature = data.rfind(b'"signature": ', block) if block >= 0 else -1  # its last key: found from the end
    return signature >= 0 and data.startswith(b"{", signature + len(b'"signature": '))


def read_results_bytes(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """A node's results file, read whole only when it is a regular file of at most ``max_bytes`` (a FIFO or
    /dev/zero would be read forever, a huge file costs its size); raises Unreadable, or FileNotFoundError."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise
    except OSError as exc:  # a symlink loop (ELOOP), no permission, an I/O error: unreadable, not "never reported"
        raise Unreadable(f"cannot read {path.name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise Unreadable(f"{path.name} is not a regular file")
    if info.st_size > max_bytes:
        raise Unreadable(f"{path.name} is {info.st_size / 1e6:,.1f} MB, over the {max_bytes / 1e6:,.0f} MB a "
                         "results file may have (--max-node-mb)")
    try:
        with open(path, "rb", buffering=0) as handle:
            # its size as stat said, in one read (a read of max_bytes would allocate 64 MiB for each file), then
            # whatever it grew by while it was read, up to the bound
            data = handle.read(info.st_size + 1)
            if len(data) > info.st_size:
                data += _read_up_to(handle, max_bytes + 1 - len(data))
    except OSError as exc:
        raise Unreadable(f"cannot read {path.name}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise Unreadable(f"{path.name} grew past {max_bytes / 1e6:,.0f} MB while it was read")
    return data


def _read_up_to(handle, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0 and (chunk := handle.read(min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def parse_results(data: bytes, name: str = "results") -> dict:
    """The wanted parts of a results document given as bytes (see load_results)."""
    _check_text(data, name)
    parts = _split(data, name)
    if parts is None:  # not the plugin's layout: parsed whole, each part validated
        document = _parse_whole(data, name)
        version = _version(document.get("schema_version"), name)
        _require(version, document, name)
        return {key: _valid(version, key, value, name) for key, value in document.items()}
    version = _version(_part(0, "schema_version", parts["schema_version"], name)
                       if "schema_version" in parts else None, name)
    _require(version, parts, name)
    checked = {key: _part(version, key, raw, name) for key, raw in parts.items()}
    profile = checked.get("profile")
    if isinstance(profile, dict) and isinstance(profile.get("data"), dict) and \
            len(parts["profile"]) <= _SHARED_MAX_BYTES:
        checked[EMBEDDED_PROFILE] = _embedded_profile(version, parts["profile"])
    return checked


def _require(version: int, parts: dict, name: str) -> None:
    """Every part the results format requires is there (as the schema's ``required`` says it)."""
    missing = [key for key in _schema(version).required if key not in parts]
    if missing:
        raise Unreadable(f"{name} is not a valid results document (format {version}): data must contain "
                         f"{sorted(missing)} properties")


def _check_text(data: bytes, name: str) -> None:
    """UTF-8 throughout, no NaN or Infinity token, no run of brackets past MAX_DEPTH: over the whole file, before
    any parsing (substring searches first, at C speed over megabytes; the pattern only where a word is there)."""
    try:
        if not data.isascii():  # as the plugin writes them (json.dumps escapes the rest): nothing to decode
            data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{name} is not UTF-8 at byte {exc.start:,} of {len(data):,}") from None
    if (_holds(data, b"NaN") or _holds(data, b"Infinity")) and (m := _NON_FINITE.search(data)):
        raise Unreadable(f"{name} holds a number that is not finite ({m.group().decode().lstrip(':[, ')!s} at byte "
                         f"{m.start():,}): not a results file this tool wrote")
    for run in _TOO_DEEP:
        if (at := data.find(run)) >= 0:
            raise Unreadable(f"{name} nests deeper than {MAX_DEPTH} levels (at byte {at:,})")


def _holds(data: bytes, word: bytes) -> bool:
    """Whether ``word`` is in ``data``: found from each place its first letter is (memchr: capitals are rare in a
    results file, and a search for a short word is ten times slower), the plain search past the 256th of them."""
    at = data.find(word[:1])
    for _ in range(256):
        if at < 0:
            return False
        if data.startswith(word, at):
            return True
        at = data.find(word[:1], at + 1)
    return data.find(word, at) >= 0


def _split(data: bytes, name: str) -> dict[str, bytes] | None:
    """The bytes of each wanted part of a file as the plugin writes it (indent 2: each top-level key at the start of
    a line, two spaces in), after checking that it ends where its top-level object closes; None for any other
    layout. The summary is the last part read: the health timeline after it is not walked."""
    if not data.startswith(b'{\n  "'):
        return None
    if not data.rstrip().endswith(b"\n}"):
        raise Unreadable(f"{name} is cut short: it does not end where its top-level object closes (a copy or a "
                         "write that stopped part way)")
    keys: list[tuple[str, int]] = []
    for part in _PART.finditer(data):  # the regular expression's search for a literal: four times bytes.find's speed
        m = _KEY_NAME.match(data, part.end() - 1)
        if m is None:
            raise Unreadable(f"{name}: unexpected text at byte {part.end() - 1:,}")
        keys.append((m.group(1).decode(), m.end()))
        if len(keys) > 1 and keys[-2][0] == "summary":
            break
    if len({key for key, _ in keys}) != len(keys):  # a part given twice: readers differ on which copy they keep
        seen: set[str] = set()
        twice = next(key for key, _ in keys if key in seen or seen.add(key))
        raise Unreadable(f"{name}: the key {twice!r} appears twice at the top level: a file states each key once")
    evidence = data.rfind(_EVIDENCE)  # written after the health timeline: found from the end, never walked to
    if evidence >= 0 and all(key != "evidence" for key, _ in keys):
        following = _PART.search(data, evidence + len(_EVIDENCE))
        keys.append(("evidence", evidence + len(_EVIDENCE)))
        if following is not None:  # the key after it: where its part ends
            keys.append(("", following.end() - 1))
    ends = [data.rfind(b"\n", 0, start) for _, start in keys[1:]]
    if len(ends) < len(keys):
        ends.append(data.rstrip().rindex(b"\n}"))
    parts = {}
    for (key, start), end in zip(keys, ends, strict=True):
        if key in WANTED:
            raw = data[start:end].rstrip()
            parts[key] = raw[:-1] if raw.endswith(b",") else raw  # the one comma between two parts
    return parts


def _parse_whole(data: bytes, name: str) -> dict:
    def refuse(token: str):
        raise Unreadable(f"{name} holds {token}, which JSON does not have")

    try:
        document = load_json_text(data.decode("utf-8"), parse_constant=refuse)
    except RecursionError:
        raise Unreadable(f"{name} nests too deep to read") from None
    except ValueError as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"{name} is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise Unreadable(f"{name} is not a JSON object")
    return {k: v for k, v in document.items() if k in WANTED}


def _version(version, name: str) -> int:
    if not isinstance(version, int) or isinstance(version, bool):
        raise Unreadable(f"{name} has no results format version (schema_version): not a gpufabric results file")
    if version not in KNOWN_VERSIONS:
        newer = version > max(KNOWN_VERSIONS)
        raise Unreadable(f"{name} is results format {version}" + (
            f", newer than this pytest-gpufabric reads (up to {max(KNOWN_VERSIONS)}): update it to judge this node"
            if newer else ", which no version of pytest-gpufabric wrote"))
    return version


def _part(version: int, key: str, raw: bytes, name: str):
    """The value of one part given as its bytes, parsed and valid in format ``version`` (0: parsed only). A part of
    bytes already read is the value read then (one object, shared)."""
    try:
        if key not in _PER_NODE and len(raw) <= _SHARED_MAX_BYTES:
            return _shared_part(version, key, raw)
        return _checked_part(version, key, raw)
    except _Invalid as exc:
        raise Unreadable(f"{name} is not a valid results document (format {version}): {exc}") from None
    except _NotJson as exc:
        raise Unreadable(f"{name} {exc}") from None


def _valid(version: int, key: str, value, name: str):
    problem = _problem(version, key, value)
    if problem:
        raise Unreadable(f"{name} is not a valid results document (format {version}): {problem}")
    return value


class _Invalid(ValueError):
    """A part that the schema refuses (its first problem)."""


class _NotJson(ValueError):
    """A part that is not JSON (why, as the sentence's end)."""


def _checked_part(version: int, key: str, raw: bytes):
    def refuse(token: str):
        raise _NotJson(f"holds {token}, which JSON does not have")

    try:
        value = load_json_text(raw.decode("utf-8"), parse_constant=refuse)
    except RecursionError:
        raise _NotJson("nests too deep to read") from None
    except ValueError as exc:
        if isinstance(exc, _NotJson):
            raise
        raise _NotJson(f"is not valid JSON ({exc})") from None
    if version and (problem := _problem(version, key, value)):
        raise _Invalid(problem)
    return value


#: a fleet's shared parts stay (they are used by every node); each node's own (its checks, its machine) pass
_shared_part = functools.lru_cache(maxsize=128)(_checked_part)


@functools.lru_cache(maxsize=16)
def _embedded_profile(version: int, raw: bytes):
    """The profile a profile part of these bytes embeds, checked against its sha256 once for every file holding
    them (catalogue.embedded_profile)."""
    return embedded_profile(_shared_part(version, "profile", raw))


def _problem(version: int, key: str, value) -> str | None:
    """The first problem the schema of format ``version`` finds in a part, or None."""
    check = _schema(version).parts.get(key)
    if check is None:
        return None
    try:
        check(value, name_prefix=f"data.{key}")
    except ValueError as exc:
        # fastjsonschema's JsonSchemaException is a ValueError: caught as one, it is caught whichever import of
        # fastjsonschema compiled the cached validator (pytester's in-process runs drop the modules they imported)
        return str(getattr(exc, "message", exc))[:300]
    except RecursionError:
        return "nested too deep to check"
    return None


class _Schema(NamedTuple):
    """The shipped results schema as the fleet checks a document of one format: the parts it must have, and a
    compiled validator of each wanted part (the document's schema is an object of these parts, and nothing else)."""

    required: list[str]
    parts: dict[str, Callable]


@functools.lru_cache(maxsize=4)
def _schema(version: int) -> _Schema:
    """The wanted parts of a results document of ``version``: the shipped schema with only those parts required
    (and, for format 1, the summary and keys format 1 had)."""
    import fastjsonschema

    schema = copy.deepcopy(results_schema())
    required = [key for key in schema["required"] if key in WANTED]
    if version == 2:  # before the promise list and collection errors were written
        required = [key for key in required if key not in ("promised", "collection_errors")]
    if version == 1:  # what every file of format 1 has (skip_reasons, durations and the reason came later in it)
        schema["properties"]["schema_version"] = {"const": 1}
        required = ["schema_version", "profile", "machine", "checks", "tests", "summary"]
        summary = schema["properties"]["summary"]
        summary["required"] = ["passed", "failed", "skipped", "error", "verdict"]
        summary["properties"]["verdict"] = {"enum": ["ACCEPTED", "REJECTED", "INCOMPLETE", None]}
    # each part's schema with the document's definitions beside it, so its references resolve as in the whole
    root = {key: schema[key] for key in ("$schema", "$id", "$defs")}
    parts = {key: fastjsonschema.compile({**root, **schema["properties"][key]})
             for key in WANTED if key in schema["properties"]}
    return _Schema(required, parts)


def prepare() -> None:
    """Compile the validators of the current format now (before worker processes start, which then share them)."""
    _schema(max(KNOWN_VERSIONS))
