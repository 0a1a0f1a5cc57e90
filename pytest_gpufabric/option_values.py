"""argparse ``type`` functions for the numbers `gpufabric` subcommands take: a value out of range, not finite or
not a number is argparse's usage error (exit 2) naming the option and the value, never a traceback later."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in [low, high] in ASCII digits; anything else is argparse's usage error
    (exit 2) naming the option and the value, never a traceback later."""
    def parse(text: str) -> int:
        if not re.fullmatch(r"-?[0-9]{1,12}", text.strip()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from {low} to {high}")
        return int(text)

    return parse


def finite_number(low: float, high: float, *, above_low: bool = False, below_high: bool = False,
                  ) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in [low, high] (``above_low``/``below_high``: the bound excluded);
    nan, inf and numbers out of range are argparse's usage error (exit 2)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        inside = (math.isfinite(value) and (low < value if above_low else low <= value)
                  and (value < high if below_high else value <= high))
        if not inside:
            interval = f"{'(' if above_low else '['}{low:g}, {high:g}{')' if below_high else ']'}"
            raise argparse.ArgumentTypeError(f"{text!r}: give a number in {interval}")
        return value

    return parse
