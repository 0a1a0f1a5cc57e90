"""The quantities of a profile, found from the schema: every value whose schema is one of the quantity ``$defs``
(size, bandwidth, bit rate, duration), wherever a section puts it, with its parsed number.

The schema's patterns refuse a malformed quantity; what a pattern cannot say (zero, a figure past anything a GPU
server has) is checked here for every field the schema types, so a new section is covered by its schema alone.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..units import parse_bytes, parse_gbit, parse_gbps, parse_seconds

SCHEMA_PATH = Path(__file__).with_name("profile.schema.json")

#: keys of the schema only this package reads: the most a quantity may be (in its own $def), and a field where
#: zero means something (next to its $ref)
AT_MOST_KEY, ZERO_ALLOWED_KEY = "x-at-most", "x-zero-allowed"


@dataclass(frozen=True)
class QuantityKind:
    what: str  # "a size"
    example: str
    units: str
    parse: Callable[[object], float | int]


#: each quantity $def of the schema: how it is said and parsed (bytes; GB/s; Gb/s; seconds)
KINDS = {
    "size": QuantityKind("a size", "80 GB", "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB", parse_bytes),
    "bandwidth": QuantityKind("a bandwidth", "300 GB/s", "GB/s, MB/s, TB/s", parse_gbps),
    "duration": QuantityKind("a time", "40 us", "ns, us, ms, s", parse_seconds),
    "bitrate": QuantityKind("a bit rate", "25 Gb/s", "Gb/s, Mb/s", parse_gbit),
}


@dataclass(frozen=True)
class Quantity:
    """One quantity a profile holds: where (keys from the root), its kind, the text as written, its number."""

    keys: tuple[str | int, ...]
    kind: str
    text: object
    zero_allowed: bool

    @property
    def json_path(self) -> str:
        return json_path(self.keys)

    @property
    def key(self) -> str:
        return next((k for k in reversed(self.keys) if isinstance(k, str)), "")

    @cached_property
    def parsed(self) -> float | int:
        """The number (bytes, GB/s, Gb/s or seconds), parsed once. Raises ValueError for a text that does not
        parse."""
        return KINDS[self.kind].parse(self.text)


def json_path(keys) -> str:
    text = "$"
    for part in keys:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


@functools.cache
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _ref_name(node: dict) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) and ref.startswith("#/$defs/") else None


def _resolve(node: dict) -> dict:
    name = _ref_name(node)
    return schema()["$defs"].get(name, {}) if name else node


def _children(node: dict, instance: object) -> Iterator[tuple[str | int, dict, object]]:
    """(key, its schema, its value) of what ``instance`` holds that ``node`` (resolved) describes."""
    if isinstance(instance, dict):
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, value in instance.items():
            child = properties.get(key, extra if isinstance(extra, dict) else None)
            if isinstance(child, dict):
                yield key, child, value
    elif isinstance(instance, list):
        prefix, items = node.get("prefixItems", []), node.get("items")
        for index, value in enumerate(instance):
            child = prefix[index] if index < len(prefix) else items
            if isinstance(child, dict):
                yield index, child, value


def walk(doc: object) -> Iterator[tuple[tuple[str | int, ...], dict, object]]:
    """(keys, schema node as written, value) of every value of ``doc`` the schema describes, depth first."""
    stack: list[tuple[tuple[str | int, ...], dict, object]] = [((), schema(), doc)]
    while stack:
        keys, node, value = stack.pop()
        yield keys, node, value
        resolved = _resolve(node)
        stack += [((*keys, key), child, item) for key, child, item in reversed(list(_children(resolved, value)))]


def quantities_in(doc: object) -> Iterator[Quantity]:
    """Every quantity ``doc`` holds where the schema puts one, in document order."""
    for keys, node, value in walk(doc):
        kind = _ref_name(node)
        if kind in KINDS:
            yield Quantity(keys, kind, value, bool(node.get(ZERO_ALLOWED_KEY)))


def numbers_in(doc: object) -> Iterator[tuple[tuple[str | int, ...], object]]:
    """(keys, value) of every value the schema types as a number or an integer."""
    for keys, node, value in walk(doc):
        if _resolve(node).get("type") in ("number", "integer"):
            yield keys, value


@functools.cache
def at_most(kind: str) -> tuple[float | int, str]:
    """The most a quantity of this kind may be, parsed and as the schema writes it."""
    text = schema()["$defs"][kind][AT_MOST_KEY]
    return KINDS[kind].parse(text), text


def quantity_problem(quantity: Quantity) -> str | None:
    """What is wrong with a quantity that matched its pattern: no number, zero, or past what any machine has."""
    try:
        amount = quantity.parsed
    except ValueError as exc:
        return str(exc)
    key, text = quantity.key, quantity.text
    if not math.isfinite(amount):
        return f"{key}: {text!r} is too large to be {KINDS[quantity.kind].what}"
    if amount < 0 or (amount == 0 and not quantity.zero_allowed):
        if quantity.kind == "duration":
            return (f"{key}: {text!r} is not above zero: a time limit of zero fails every measurement. Give a "
                    "positive time, or leave the key out")
        return not_above_zero(key, text, size=quantity.kind == "size" and key != "memory")
    most, most_text = at_most(quantity.kind)
    if amount > most:
        what = KINDS[quantity.kind].what
        return f"{key}: {text!r} is more than any GPU server has (at most {most_text} for {what}): check the unit"
    return None


def not_above_zero(key: str, value: object, *, size: bool = False) -> str:
    if size:
        return f"{key}: {value!r} is not above zero: a size of zero measures nothing. Give a positive size"
    return (f"{key}: {value!r} is not above zero: a floor at or below zero promises nothing (every figure passes it). "
            "Promise a positive figure, or leave the key out")


def non_finite_problem(keys: tuple[str | int, ...], value: object) -> str | None:
    """NaN passes every range of the schema (every comparison with it is false) and .inf passes a lower bound."""
    if isinstance(value, float) and not math.isfinite(value):
        key = next((k for k in reversed(keys) if isinstance(k, str)), "")
        return f"{key}: {value} is not a number a profile can promise: write a finite number"
    return None
