"""Typed reading of one recorded value: what each kind of fact may be, and the sentence that says it is not.

The NVML record (``nvml.json``) and ``nvidia-smi -q -x`` hand the model strings and numbers that a check compares
with a promise. A value of the wrong type, out of its physical range or not finite (``1e400`` reads as infinity),
or a version that is no version (``"Unknown Error"``) must not reach a comparison: ``"Unknown Error" >= "550"``
holds as text, ``inf >= 80 GB`` holds as a number. Each reader here returns the value, or raises ``Unreadable``
whose message names the file, the key and the value; the caller records that message where the model keeps what
could not be read (``Gpu.unreadable``, ``Fabric.damaged``) and the check says it instead of judging.
"""

from __future__ import annotations

import json
import math
import re

__all__ = ["RawFloat", "Unreadable", "load_json", "show"]

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
    """``json.loads`` keeping each non-integer number's text (``NaN``, ``Infinity`` and ``1e400`` included)."""
    return json.loads(text, parse_float=RawFloat, parse_constant=RawFloat)


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
        """Non-empty text."""
        if not isinstance(value, str) or not value.strip():
            raise self._refuse(what, value, key, "text")
        return value

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
