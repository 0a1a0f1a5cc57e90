"""Typed reading of a recorded JSON value against a declared shape: every number finite and in its physical range
(counts, bytes and times never negative, temperatures of this world), of the type and unit its key says.

A shape is a ``Field`` (one value), a dict (an object: its keys' shapes; ``"*"`` for any key), a one-element list
(an array of that shape), or ``Opt(shape)`` for an object or array that may be absent or null. What does not fit is
a ``Problem`` naming the path, the value and why; nothing is raised, so a reader collects every problem of a file
and its checks say each one instead of judging it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: kind -> (what it is, lowest, highest, unit): the physical range of each kind of number a recording holds
NUMBER_KINDS = {
    "index": ("an index", 0, None, ""),
    "count": ("a count", 0, None, ""),
    "bytes": ("a size", 0, None, "bytes"),
    "seconds": ("a time", 0, None, "s"),
    "gbps": ("a rate", 0, None, "GB/s"),
    "tflops": ("a rate", 0, None, "TFLOP/s"),
    "watts": ("a power", 0, None, "W"),
    "mhz": ("a clock", 0, None, "MHz"),
    "celsius": ("a temperature", -60, 200, "C"),
    "fraction": ("a fraction", 0, 1, ""),
    "ratio": ("a ratio", 0, None, ""),
    "generation": ("a PCIe generation", 1, 7, ""),
    "lanes": ("a PCIe width", 1, 32, "lanes"),
    "number": ("a number", None, None, ""),  # finite, either sign (a loss)
}
#: the kinds that hold whole numbers only
WHOLE = {"index", "count", "bytes", "generation", "lanes"}


@dataclass(frozen=True)
class Field:
    kind: str  # a NUMBER_KINDS key, "text", "flag" (a JSON boolean) or "any"
    required: bool = True
    nullable: bool = False  # null stands for "not read" (NVML's NOT_SUPPORTED, a CPU run)


@dataclass(frozen=True)
class Opt:
    """An object or array that may be absent or null."""

    shape: Any


TEXT = Field("text")
NOTE = Field("text", required=False, nullable=True)  # optional words: a name, an error, a reason
ANY = Field("any", required=False, nullable=True)


def value(kind: str, required: bool = True, nullable: bool = False) -> Field:
    return Field(kind, required, nullable)


def reading(kind: str) -> Field:
    """A reading NVML may not give (null, its reason under the row's ``unread``)."""
    return Field(kind, required=False, nullable=True)


#: who a row measured: the board's NVML index, UUID and serial (workloads/identity.py)
BOARD = {"index": value("index"), "cuda": value("index", False, True), "uuid": NOTE, "serial": NOTE, "name": NOTE}


@dataclass(frozen=True)
class Problem:
    path: str  # "gpus[0].samples[3].power_w"
    text: str  # "gpus[0].samples[3].power_w = nan: not a finite number (W)"


def _describe(value: object) -> str:
    return repr(value) if not isinstance(value, str) else f"'{value}'"


def check_value(value: object, field: Field, path: str) -> str | None:
    """Why ``value`` is not a ``field``, or None."""
    if value is None:
        return None if field.nullable else f"{path} is null"
    if field.kind == "any":
        return None
    if field.kind == "text":
        return None if isinstance(value, str) else f"{path} = {_describe(value)}: not text"
    if field.kind == "flag":
        return None if isinstance(value, bool) else f"{path} = {_describe(value)}: not true or false"
    what, low, high, unit = NUMBER_KINDS[field.kind]
    units = f" ({unit})" if unit else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{path} = {_describe(value)}: not a number{units}"
    if not math.isfinite(value):
        return f"{path} = {value}: not a finite number{units}"
    if field.kind in WHOLE and not isinstance(value, int):
        return f"{path} = {value!r}: {what} is a whole number"
    if low is not None and value < low:
        return f"{path} = {value!r}: {what} below {low}{units}"
    if high is not None and value > high:
        return f"{path} = {value!r}: {what} above {high}{units}"
    return None


def check_shape(value: object, shape: Any, path: str = "") -> list[Problem]:
    """Every place ``value`` does not fit ``shape`` (keys the shape does not name are not looked at)."""
    if isinstance(shape, Opt):
        return [] if value is None else check_shape(value, shape.shape, path)
    if isinstance(shape, Field):
        why = check_value(value, shape, path or "the value")
        return [Problem(path, why)] if why else []
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [Problem(path, f"{path} = {_describe(value)}: not a list")]
        problems = []
        for position, item in enumerate(value):
            problems += check_shape(item, shape[0], f"{path}[{position}]")
        return problems
    if not isinstance(value, dict):
        return [Problem(path, f"{path or 'the file'} = {_describe(value)}: not an object")]
    problems = []
    for key, sub in shape.items():
        keys = list(value) if key == "*" else [key]
        for name in keys:
            where = f"{path}.{name}" if path else str(name)
            if name not in value:
                if isinstance(sub, Field) and sub.required or isinstance(sub, (dict, list)):
                    problems.append(Problem(where, f"{where} is missing"))
                continue
            problems += check_shape(value[name], sub, where)
    return problems
