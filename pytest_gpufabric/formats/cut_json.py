"""A JSON document that may have been cut off (a paste, a log truncated at a size limit), read as far as it is
whole: the reader the DCGM and nvbandwidth parsers share."""

from __future__ import annotations

import json
from typing import Any

from .paste import paste_noise
from .strict import refuse_duplicate_keys

__all__ = ["CUT_ARRAY", "CUT_OBJECT", "read_cut_json"]

#: The key :func:`read_cut_json` adds to an object, and the element it appends to an array, that the cut left open.
CUT_OBJECT = "__cut__"
CUT_ARRAY = "__CUT__"


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def read_cut_json(text: str) -> tuple[Any, list[str]]:
    """The JSON document at the start of ``text`` (after blanks), and what of it could not be read.

    A whole document comes back as ``json.loads`` gives it, with an empty list. A document that was cut off (or that
    turns into something else partway) comes back as far as its values are whole: the last value that was still
    being written is dropped, every object the cut left open gets the key :data:`CUT_OBJECT` and every such array
    ends with the element :data:`CUT_ARRAY`, so that a reader can tell a short list from a cut one. The list names
    the line of the cut. Raises ValueError when not even the opening of a document can be read.
    """
    body = text.lstrip()
    offset = len(text) - len(body)
    decoder = json.JSONDecoder(object_pairs_hook=refuse_duplicate_keys)  # a key given twice: StrictReadError
    try:
        value, end = decoder.raw_decode(body)
        rest = body[end:].strip()
        notes = []
        if rest and not all(paste_noise(ln) is not None or not ln.strip() for ln in rest.splitlines()):
            notes.append(f"line {_line_of(text, offset + end)}: text after the JSON document was not read")
        return value, notes
    except json.JSONDecodeError as exc:
        failed_at = exc.pos
    prefix = body[:failed_at]
    repaired = _close_cut(prefix)
    if repaired is None:
        raise ValueError(f"line {_line_of(text, offset + failed_at)}: the JSON document cannot be read from its "
                         "start")
    try:
        value = json.loads(repaired, object_pairs_hook=refuse_duplicate_keys)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"line {_line_of(text, offset + failed_at)}: the JSON document cannot be read") from None
    cut_line = _line_of(text, offset + failed_at)
    what = "ends" if not body[failed_at:].strip() else "stops being JSON"
    return value, [f"line {cut_line}: the JSON document {what} here (cut); the values left open there were not read"]


def _close_cut(prefix: str) -> str | None:
    """``prefix`` (a valid start of a JSON document) cut back to its last whole value, its open containers closed
    with the cut markers; None when no container was opened."""
    stack: list[str] = []  # "{" or "["
    expect_key: list[bool] = []
    safe: tuple[int, tuple[str, ...], bool] | None = None  # (cut position, open containers, container is empty)
    i, n = 0, len(prefix)
    while i < n:
        ch = prefix[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if ch in "{[":
            stack.append(ch)
            expect_key.append(ch == "{")
            i += 1
            safe = (i, tuple(stack), True)
            continue
        if ch in "}]":
            if not stack:
                return None
            stack.pop()
            expect_key.pop()
            i += 1
            if not stack:
                return prefix[:i]
            safe = (i, tuple(stack), False)
            continue
        if ch == ",":
            if stack and stack[-1] == "{":
                expect_key[-1] = True
            i += 1
            continue
        if ch == ":":
            if expect_key:
                expect_key[-1] = False
            i += 1
            continue
        if ch == '"':
            j = i + 1
            while j < n and prefix[j] != '"':
                j += 2 if prefix[j] == "\\" else 1
            if j >= n:
                break  # a string the cut went through
            i = j + 1
            if stack and not (stack[-1] == "{" and expect_key[-1]):
                safe = (i, tuple(stack), False)
            continue
        j = i
        while j < n and prefix[j] not in " \t\r\n,]}":
            j += 1
        if j >= n:
            break  # a number or literal the cut may have shortened
        i = j
        if stack:
            safe = (i, tuple(stack), False)
    if safe is None:
        return None
    pos, open_, empty = safe
    out = prefix[:pos]
    for depth, kind in enumerate(reversed(open_)):
        first = empty and depth == 0
        if kind == "{":
            out += ("" if first else ", ") + f'"{CUT_OBJECT}": true}}'
        else:
            out += ("" if first else ", ") + f'"{CUT_ARRAY}"]'
    return out
