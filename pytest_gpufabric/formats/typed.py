"""Typed reading of recorded values: each value of the type and unit its key says, every number finite and in its
physical range, and the sentence that says what does not fit. Two readers, for two kinds of file:

- one value at a time (``Reader``): the NVML record (``nvml.json``) and ``nvidia-smi -q -x`` hand the model strings
  and numbers that a check compares with a promise. A value of the wrong type, out of its physical range or not
  finite (``1e400`` reads as infinity), or a version that is no version (``"Unknown Error"``) must not reach a
  comparison: ``"Unknown Error" >= "550"`` holds as text, ``inf >= 80 GB`` holds as a number. Each reader returns
  the value, or raises ``Unreadable`` whose message names the file, the key and the value; the caller records that
  message where the model keeps what could not be read (``Gpu.unreadable``, ``Fabric.damaged``) and the check says
  it instead of judging;
- a recording against a declared shape (``check_shape``, the suites' recordings: counts, bytes and times never
  negative, temperatures of this world). A shape is a ``Field`` (one value), a dict (an object: its keys' shapes;
  ``"*"`` for any key), a one-element list (an array of that shape), or ``Opt(shape)`` for an object or array that
  may be absent or null. What does not fit is a ``Problem`` naming the path, the value and why; nothing is raised,
  so a reader collects every problem of a file and its checks say each one instead of judging it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .clean import clean_line

_VERSION = re.compile(r"^\d+(?:\.\d+)+$")  # a driver: 580.159.04, 535.309.01, 560.94; CUDA: 13.0
_HEX_VERSION = re.compile(r"^[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){3,}$")  # a VBIOS: 96.00.A5.00.1A
_CPU_LIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
_BUS_ID = re.compile(r"^(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


class Unreadable(ValueError):
    """A recorded value that cannot be used; the message names file, key and value."""


class RawFloat(float):
    """A JSON number with a fraction or an exponent, keeping the text it was written as (``1e400`` reads as
    infinity; a message must show what the file says)."""

    text: str

    def __new__(cls, text: str) -> RawFloat:
        value = super().__new__(cls, text)
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text


def load_json(text: str):
    """``json.loads`` keeping each non-integer number's text (``NaN``, ``Infinity`` and ``1e400`` included); a key
    named twice in one object is refused (StrictReadError, a ValueError: formats/strict.py)."""
    from .strict import load_json_text

    return load_json_text(text, parse_float=RawFloat, parse_constant=RawFloat)


def show(value: object) -> str:
    """A value as the file holds it: ``'Unknown Error'``, ``1e400``, ``[9, 'x']``."""
    return repr(value)


class Reader:
    """Reads one file's values: ``where`` names the file ("nvml.json", "nvidia-smi-q.xml", "NVML")."""

    def __init__(self, where: str) -> None:
        self.where = where

    def _refuse(self, what: str, value: object, key: str, expected: str) -> Unreadable:
        return Unreadable(f"{what} {show(value)} in {self.where} ({key}) is not {expected}")

    def whole(self, value: object, key: str, what: str, low: int, high: int, unit: str = "") -> int:
        """A whole number in [low, high] (a JSON integer; true/false and fractions refused)."""
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and not math.isfinite(value):
                raise self._refuse(what, value, key, f"a finite whole number{unit}")
            raise self._refuse(what, value, key, f"a whole number{unit}")
        if not low <= value <= high:
            raise self._refuse(what, value, key, f"in the range {low} to {high}")
        return value

    def text(self, value: object, key: str, what: str) -> str:
        """Non-empty text, cleaned (formats/clean.py): a name or serial can hold no terminal control."""
        if not isinstance(value, str) or not value.strip():
            raise self._refuse(what, value, key, "text")
        return clean_line(value)

    def version(self, value: object, key: str, what: str, hexadecimal: bool = False) -> str:
        """A dotted version: numbers (a driver, CUDA), or hexadecimal pairs (a VBIOS)."""
        pattern = _HEX_VERSION if hexadecimal else _VERSION
        if not isinstance(value, str) or not pattern.match(value.strip()):
            raise self._refuse(what, value, key, "a version")
        return value.strip()

    def cpu_list(self, value: object, key: str, what: str) -> str:
        if not isinstance(value, str) or not _CPU_LIST.match(value.strip()):
            raise self._refuse(what, value, key, "a CPU or NUMA node list (such as 0-31,64-95)")
        return value.strip()

    def bus_id(self, value: object, key: str, what: str) -> str:
        if not isinstance(value, str) or not _BUS_ID.match(value.strip()):
            raise self._refuse(what, value, key, "a PCI bus id (such as 00000000:17:00.0)")
        return value.strip()

    def choice(self, value: object, key: str, what: str, choices: tuple) -> object:
        if isinstance(value, bool) or value not in choices:
            raise self._refuse(what, value, key, "one of " + ", ".join(show(c) for c in choices))
        return value


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
