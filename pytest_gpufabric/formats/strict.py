"""Strict readers for every JSON and YAML file the tool reads from outside (profiles, references, bundle files,
results files, fleet folders, evidence): one place that refuses what the standard readers let through.

- A key named twice in one object or mapping is refused: ``json.loads`` and ``yaml.safe_load`` keep the last copy
  silently, so a profile with ``topology:`` twice was judged by whichever copy came last, while a person (or
  another reader) sees the first.
- A YAML alias (``*name``) is refused: none of the tool's files needs one, and nested aliases ("billion laughs",
  541 bytes) expand to more nodes than any walk over the document ends on. A merge key (``<<:``) is refused too:
  the keys it brings in are overridden silently by keys of the same name.

The error is ``StrictReadError`` (a ``ValueError``, so callers that catch a reader's ``ValueError`` keep working),
whose message names the file (``where``), the key and the line; each caller raises it again as its own class
(ProfileError, a bundle's error, the fleet's Unreadable).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StrictReadError", "load_json_text", "load_yaml_text", "refuse_duplicate_keys", "strict_yaml_loader"]


class StrictReadError(ValueError):
    """A JSON or YAML text refused by a strict reader; ``key`` and ``line`` (1-based) where known."""

    def __init__(self, message: str, *, key: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.line = line


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def load_json_text(text: str, where: str = "", **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)`` refusing a key named twice in one object. ``where`` names the file in the
    message; ``kwargs`` are json.loads's (parse_float, parse_constant, ...), object_pairs_hook excepted."""
    try:
        return json.loads(text, object_pairs_hook=refuse_duplicate_keys, **kwargs)
    except StrictReadError as exc:
        raise _duplicate_error(text, where, exc.key or "", kwargs) from None


def refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """An ``object_pairs_hook`` for json: the object as a dict, or StrictReadError naming a key given twice."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        key = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise StrictReadError(f"the key {json.dumps(key)} appears twice in one object", key=key)
    return document


def _duplicate_error(text: str, where: str, key: str, kwargs: dict) -> StrictReadError:
    """The message for a JSON key named twice, with the line of its second copy where it can be found."""
    needle = json.dumps(key)
    try:
        line = _second_copy_line(text, kwargs)
    except (ValueError, RecursionError):
        line = None
    at = f" (line {line})" if line else ""
    prefix = f"{where}: " if where else ""
    return StrictReadError(f"{prefix}the key {needle} appears twice in one object{at}: a file states each key once "
                           "(readers differ on which copy they keep)", key=key, line=line)


def _second_copy_line(text: str, kwargs: dict) -> int | None:
    """The line of the second copy of the first key found twice. The C scanner gives no positions, so the text is
    decoded again (only when a duplicate was found) by the pure-Python scanner, which says where each object
    starts and ends; the object's own keys are then found at its top level."""
    from json.decoder import JSONObject
    from json.scanner import py_make_scanner

    found: list[tuple[int, int, str]] = []

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):  # noqa: ANN001, ANN202
        pairs, end = JSONObject(s_and_end, strict, scan_once, None, lambda p: p, memo)
        keys = [key for key, _ in pairs]
        if not found and len(set(keys)) != len(keys):
            seen: set[str] = set()
            found.append((s_and_end[1], end, next(k for k in keys if k in seen or seen.add(k))))
        return dict(pairs), end

    decoder = json.JSONDecoder(**kwargs)
    decoder.parse_object = parse_object
    decoder.scan_once = py_make_scanner(decoder)
    decoder.decode(text)
    if not found:
        return None
    start, end, key = found[0]
    positions = [i for i, name in _top_level_keys(text, start, end) if name == key]
    return _line_of(text, positions[1]) if len(positions) > 1 else None


def _top_level_keys(text: str, start: int, end: int):
    """(index, key) of each key of the object whose text runs from ``start`` (after its "{") to ``end``."""
    depth, i = 0, start
    while i < end:
        char = text[i]
        if char == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            rest = text[j + 1:end].lstrip()
            if depth == 0 and rest.startswith(":"):
                yield i, json.loads(text[i:j + 1])
            i = j + 1
            continue
        depth += char in "{["
        depth -= char in "}]"
        i += 1


# --- YAML --------------------------------------------------------------------------------------------------------


_LOADERS: dict[tuple[int, type], type] = {}


def strict_yaml_loader(base: type | None = None) -> type:
    """A subclass of ``base`` (default: yaml.SafeLoader) refusing aliases and keys named twice in one mapping."""
    import yaml

    base = base or yaml.SafeLoader
    cache_key = (id(yaml), base)
    if cache_key in _LOADERS:
        return _LOADERS[cache_key]

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        def compose_node(self, parent, index):  # noqa: ANN001, ANN202
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                line = event.start_mark.line + 1
                raise StrictReadError(f"a YAML alias (*{event.anchor}) on line {line}: aliases are refused; write "
                                      "the value out where it is used", key=event.anchor, line=line)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN202
            seen: dict[object, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = key_node.value
                line = key_node.start_mark.line + 1
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` states keys a later key may override
                    raise StrictReadError(f"a YAML merge key (<<) on line {line}: merge keys are refused; write the "
                                          "keys out where they are used", key=key, line=line)
                if key in seen:
                    raise StrictReadError(f"the key {key!r} appears twice in one mapping (lines {seen[key]} and "
                                          f"{line}): a file states each key once", key=key, line=line)
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    _LOADERS[cache_key] = StrictLoader
    return StrictLoader


def load_yaml_text(text: str, where: str = "", loader: type | None = None) -> Any:
    """``yaml.load`` with a strict subclass of ``loader`` (default: yaml.SafeLoader). A refused alias or duplicate
    key raises StrictReadError naming ``where``; YAML syntax errors stay yaml.YAMLError."""
    import yaml

    try:
        return yaml.load(text, Loader=strict_yaml_loader(loader))  # noqa: S506 (a SafeLoader subclass)
    except StrictReadError as exc:
        if not where:
            raise
        raise StrictReadError(f"{where}: {exc}", key=exc.key, line=exc.line) from None
