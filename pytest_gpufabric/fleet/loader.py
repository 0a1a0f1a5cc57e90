"""The one reader of a node's results file for the fleet: bounded, strict, validated, and judged again.

A fleet report reads thousands of files written on machines the operator does not fully control: a node that
crashed mid-copy, a full disk, a hand edit, a file from a newer tool. Each of them is read here, and anything that
is not a whole, valid results document becomes ``Unreadable`` with the reason, for that node alone:

- **bounded**: at most ``max_bytes`` (64 MiB by default; a results file of a ten-minute burn-in is 0.4 MB), and
  no run of more than 64 opening brackets, checked before anything is parsed (nesting that deep spread over lines
  fails the parser or the schema in the parts that are read);
- **strict**: UTF-8 throughout, no NaN or Infinity token anywhere, the whole document there (a file cut short does
  not end where its top-level object closes);
- **versioned**: results formats 1 and 2; a newer one is refused with its number, an older reader must not guess;
- **validated**: the parts the fleet reads against the shipped JSON Schema (compiled once: fastjsonschema);
- **judged again** (by the caller, rejudge.py): the node's verdict is derived from its tests, checks and promise
  list by the rules of a node run, never taken from the file's own summary.

Only the parts the fleet needs are parsed (a long burn-in's health timeline is most of a file and is only
scanned), so ten thousand nodes fit in memory and in seconds.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import stat
from pathlib import Path

__all__ = ["KNOWN_VERSIONS", "MAX_BYTES", "Unreadable", "load_results"]

#: the results formats this reader knows (report/results.schema.json: 3; 2 before the promise list came from the
#: profile; 1 before the verdict had promises)
KNOWN_VERSIONS = (1, 2, 3)
MAX_BYTES = 64 << 20
MAX_DEPTH = 64

#: what the fleet reads of a results document; the rest (the health timeline, the burn-in's chunks, per-test
#: durations) is most of a long run's file and is only scanned
WANTED = ("schema_version", "plugin_version", "started_at", "finished_at", "run", "profile", "machine",
          "machine_error", "software", "checks", "tests", "skip_reasons", "promises", "not_run", "waivers", "summary",
          "promised", "collection_errors")
_KEY_NAME = re.compile(r'"([A-Za-z_]+)": ')
#: a NaN or Infinity token where JSON has a value (after ':', '[' or ','): Python writes them, JSON has none
_NON_FINITE = re.compile(rb"[:\[,]\s*-?(?:NaN|Infinity)\b")
#: nesting past MAX_DEPTH levels in a row, as a hostile or broken file holds it ("[[[[..."): refused before any
#: parsing; deep nesting spread over lines fails the parser (RecursionError) or the schema in the parts that are read
_TOO_DEEP = (b"[" * (MAX_DEPTH + 1), b"{" * (MAX_DEPTH + 1))


class Unreadable(ValueError):
    """A results file that is not a whole, valid results document; the message says why, for the operator."""


#: the keys load_results adds to the parts it returns: the sha256 of the file's bytes as read, and whether the file
#: carries a signature
FILE_SHA256 = "_file_sha256"
FILE_SIGNED = "_file_signed"


def load_results(path: Path, max_bytes: int = MAX_BYTES) -> dict:
    """The wanted parts of the results document at ``path``, checked as the module says; raises Unreadable or
    FileNotFoundError (the node never wrote one)."""
    data = read_results_bytes(path, max_bytes)
    document = parse_results(data, path.name)
    document[FILE_SHA256] = hashlib.sha256(data).hexdigest()  # what --require-signed's check must find again
    document[FILE_SIGNED] = _carries_signature(data)
    return document


def _carries_signature(data: bytes) -> bool:
    """Whether the file's integrity block (its last key) holds a signature: the fleet counts the unsigned nodes
    (whether a signature is good is --require-signed's to check, with the key)."""
    block = data.rfind(b'"integrity": {')
    return block >= 0 and data.find(b'"signature": {', block) >= 0


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
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise Unreadable(f"cannot read {path.name}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise Unreadable(f"{path.name} grew past {max_bytes / 1e6:,.0f} MB while it was read")
    return data


def parse_results(data: bytes, name: str = "results") -> dict:
    """The wanted parts of a results document given as bytes (see load_results)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{name} is not UTF-8 at byte {exc.start:,} of {len(data):,}") from None
    # substring searches first (C speed over megabytes); the pattern only where one of the words is there
    if (b"NaN" in data or b"Infinity" in data) and (m := _NON_FINITE.search(data)):
        raise Unreadable(f"{name} holds a number that is not finite ({m.group().decode().lstrip(':[, ')!s} at byte "
                         f"{m.start():,}): not a results file this tool wrote")
    for run in _TOO_DEEP:
        if (at := data.find(run)) >= 0:
            raise Unreadable(f"{name} nests deeper than {MAX_DEPTH} levels (at byte {at:,})")
    document = _wanted_parts(text, name)
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise Unreadable(f"{name} has no results format version (schema_version): not a gpufabric results file")
    if version not in KNOWN_VERSIONS:
        newer = version > max(KNOWN_VERSIONS)
        raise Unreadable(f"{name} is results format {version}" + (
            f", newer than this pytest-gpufabric reads (up to {max(KNOWN_VERSIONS)}): update it to judge this node"
            if newer else ", which no version of pytest-gpufabric wrote"))
    try:
        error = _validator(version)(document)
    except RecursionError:
        error = "nested too deep to check"
    if error:
        raise Unreadable(f"{name} is not a valid results document (format {version}): {error}")
    return document


def _wanted_parts(text: str, name: str) -> dict:
    """Parse what the fleet reads. A file as the plugin writes it (indent 2: each top-level key at the start of a
    line, two spaces in) is cut at its top-level keys and only the wanted values are parsed, after checking that
    it ends where its top-level object closes; any other layout is parsed whole."""
    def refuse(token: str):
        raise Unreadable(f"{name} holds {token}, which JSON does not have")

    try:
        if not text.startswith('{\n  "'):
            document = json.loads(text, parse_constant=refuse)
            if not isinstance(document, dict):
                raise Unreadable(f"{name} is not a JSON object")
            return {k: v for k, v in document.items() if k in WANTED}
        if not text.rstrip().endswith("\n}"):
            raise Unreadable(f"{name} is cut short: it does not end where its top-level object closes (a copy or a "
                             "write that stopped part way)")
        keys, position = [], text.find('\n  "')
        while position >= 0:
            m = _KEY_NAME.match(text, position + 3)
            if m is None:
                raise Unreadable(f"{name}: unexpected text at character {position + 3:,}")
            keys.append((m.group(1), m.end()))
            if len(keys) > 1 and keys[-2][0] == "summary":
                break  # the plugin writes the summary last of what is read: the health timeline is not walked
            position = text.find('\n  "', m.end())
        ends = [text.rfind("\n", 0, start) for _, start in keys[1:]]
        if len(ends) < len(keys):
            ends.append(text.rstrip().rindex("\n}"))
        document = {}
        for (key, start), end in zip(keys, ends, strict=True):
            if key in WANTED:
                document[key] = json.loads(text[start:end].rstrip().rstrip(","), parse_constant=refuse)
        return document
    except RecursionError:
        raise Unreadable(f"{name} nests too deep to read") from None
    except ValueError as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"{name} is not valid JSON ({exc})") from None


@functools.lru_cache(maxsize=2)
def _validator(version: int):
    """A compiled validator of the wanted parts of a results document of ``version``: the shipped schema with only
    those parts required (and, for format 1, the summary and keys format 1 had). Returns a function giving the
    first problem as text, or None."""
    import fastjsonschema

    from ..report.results import results_schema

    schema = copy.deepcopy(results_schema())
    schema["required"] = [key for key in schema["required"] if key in WANTED]
    if version == 2:  # before the promise list and collection errors were written
        schema["required"] = [key for key in schema["required"] if key not in ("promised", "collection_errors")]
    if version == 1:  # what every file of format 1 has (skip_reasons, durations and the reason came later in it)
        schema["properties"]["schema_version"] = {"const": 1}
        schema["required"] = ["schema_version", "profile", "machine", "checks", "tests", "summary"]
        summary = schema["properties"]["summary"]
        summary["required"] = ["passed", "failed", "skipped", "error", "verdict"]
        summary["properties"]["verdict"] = {"enum": ["ACCEPTED", "REJECTED", "INCOMPLETE", None]}
    check = fastjsonschema.compile(schema)

    def problem(document: dict) -> str | None:
        try:
            check(document)
        except fastjsonschema.JsonSchemaException as exc:
            return str(exc.message)[:300]
        return None

    return problem
