"""Units at the edges: parse what tools and profiles write, compute in bytes, seconds and plain numbers.

Conventions (the names say the unit): ``*_bytes``; ``*_gbps`` is GB/s (1e9 bytes/s, what nvidia-smi and
nccl-tests print); ``*_gbit`` is Gb/s (1e9 bits/s, what perftest and port rates use).
"""

from __future__ import annotations

import math
import re

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_BYTE_UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB,
    # nvidia-smi writes binary sizes with the short names ("143771 MiB" in -q, "KBytes" in nvlink -g)
    "k": KIB, "m": MIB, "g": GIB, "kbytes": KIB,
}

_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z/]+)?\s*$")


class NAType(str):
    """The answer "not supported / not available" from the machine: data, not an error. Prints as N/A."""

    _instance: NAType | None = None

    def __new__(cls) -> NAType:
        if cls._instance is None:
            cls._instance = super().__new__(cls, "N/A")
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NA"

    # one instance: copies (dataclasses.asdict deep-copies) and pickles are the same sentinel
    def __reduce__(self) -> tuple:
        return (NAType, ())

    def __copy__(self) -> NAType:
        return self

    def __deepcopy__(self, memo: dict) -> NAType:
        return self


NA = NAType()


def is_na(value: object) -> bool:
    return value is NA or value == "N/A"


def memory_as_sold(expected: object, found: object) -> int | None:
    """The bytes a board sold as ``expected >> 30`` GB has (1e9 bytes each), where a promise written in whole GiB
    fails a board that has them (an H100 "80 GB" shows 79.65 GiB): the profile's unit, not the board, is wrong.
    None where that is not the difference."""
    if not isinstance(expected, int) or expected % (1 << 30) or not isinstance(found, int) or is_na(found):
        return None
    as_sold = expected // (1 << 30) * 10**9
    return as_sold if found >= as_sold else None


def parse_bytes(text: str | int | float) -> int:
    """'24 GiB' -> 25769803776, '143771 MiB' -> bytes, a bare number is bytes. Raises ValueError."""
    if isinstance(text, (int, float)):
        return int(text)
    m = _QUANTITY.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (write e.g. '24 GiB' or '256 MiB')")
    number, unit = float(m.group(1)), (m.group(2) or "b").lower()
    if unit not in _BYTE_UNITS:
        raise ValueError(f"unknown size unit {m.group(2)!r} in {text!r} (use B, KiB, MiB, GiB, KB, MB, GB)")
    size = number * _BYTE_UNITS[unit]
    if not math.isfinite(size):  # "1e309 MiB": a float that rounds to infinity is no size
        raise ValueError(f"not a size: {text!r} (too large)")
    return int(round(size))


_RATE_UNITS = {"gb/s": 1.0, "gbps": 1.0, "mb/s": 1e-3, "tb/s": 1e3}


def parse_gbps(text: str | int | float) -> float:
    """'26.562 GB/s' -> 26.562 (GB/s, 1e9 bytes/s)."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _QUANTITY.match(str(text))
    if not m or (m.group(2) or "").lower() not in _RATE_UNITS:
        raise ValueError(f"not a bandwidth: {text!r} (write e.g. '300 GB/s')")
    return float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]


_BIT_RATE_UNITS = {"gb/s": 1.0, "mb/s": 1e-3, "gbit/s": 1.0}


def parse_gbit(text: str | int | float) -> float:
    """'25 Gb/s' -> 25.0 (Gb/s, 1e9 bits/s: port rates and perftest's --report_gbits)."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _QUANTITY.match(str(text))
    unit = m.group(2) if m else None
    if not m or unit not in ("Gb/s", "Mb/s", "Gbit/s"):
        raise ValueError(f"not a bit rate: {text!r} (write e.g. '25 Gb/s'; GB/s is bytes)")
    return float(m.group(1)) * _BIT_RATE_UNITS[unit.lower()]


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_seconds(text: str | int | float) -> float:
    """'40 us' -> 4e-05."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _QUANTITY.match(str(text))
    if not m or (m.group(2) or "") not in _DURATION_UNITS:
        raise ValueError(f"not a duration: {text!r} (write e.g. '40 us' or '2 ms')")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


#: PCIe transfer rate per lane (GT/s) and line-code efficiency, by generation (PCI-SIG specifications)
_PCIE_GEN = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130),
             6: (64.0, 242 / 256)}


def pcie_peak_gbps(gen: int, width: int) -> float:
    """Raw PCIe bandwidth per direction in GB/s, after line coding, before packet overhead:
    gen 5 x16 = 63.0 GB/s. Real copies reach about 80-90 % of it (TLP headers, flow control)."""
    rate, efficiency = _PCIE_GEN[gen]
    return rate * efficiency * width / 8


def format_bytes(n: int | None) -> str:
    if n is None or is_na(n):
        return "N/A"
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def parse_cpu_list(text: str) -> frozenset[int]:
    """'0-17,36-53' -> the set of CPU ids. Raises ValueError."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: set[int] | frozenset[int]) -> str:
    """The inverse of parse_cpu_list, as nvidia-smi prints it: '0-17,36-53'."""
    ordered = sorted(cpus)
    ranges: list[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(ranges)


def is_number(value: object) -> bool:
    """An int or float that is a real, finite number: what a figure must be before anything judges or draws it
    (bool is no figure; NaN and ±Infinity compare false with anything, so they would pass a floor)."""
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def non_finite(value: object, where: str = "found", limit: int = 5, _depth: int = 0) -> list[str]:
    """Where ``value`` holds a number that is not finite (NaN, ±Infinity: what a broken timer, a division by a
    zero time or a hand-edited recording leaves), as 'found.busbw_gbps = nan'; at most ``limit`` of them. A
    comparison with NaN is always false (``nan < floor`` passes a floor), so nothing holding one may be judged."""
    import math

    found: list[str] = []
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where} = {value}"]
    if _depth > 8:
        return found
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found += non_finite(item, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]", limit - len(found),
                            _depth + 1)
        if len(found) >= limit:
            break
    return found[:limit]


def finite_or_none(value: object) -> object:
    """A copy of a JSON-like value with every non-finite number as None: what is written to JSON (strict parsers,
    jq, Go, JavaScript, refuse the NaN and Infinity tokens Python would write)."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value
