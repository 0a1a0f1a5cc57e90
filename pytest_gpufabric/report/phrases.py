"""A check record in words and units, as the report's promise table shows it.

``Expected`` says the promise ("≥ 312 GB/s all_reduce busbw at 1 GiB"), ``Found`` the figure that decides it
("326.2 GB/s"), ``Margin`` how far that figure is from its limit; the whole record (every value the check found, its
message, its detail lines) goes under the row, one click away. Every check the suites make has a phrase here; a
record of another shape gets the generic one (``format_value``: keys and values, units from the key names), never a
Python repr. Nothing here is cut: where the table shows a short form, ``short`` ends it at a word.
"""

from __future__ import annotations

from ..units import format_bytes, is_number, parse_bytes

GE, LE = "≥", "≤"


# --- numbers and generic values -------------------------------------------------------------------------


_SUFFIXES = (("_bytes", "bytes"), ("_gbps", "GB/s"), ("_gbit", "Gb/s"), ("_us", "µs"), ("_s", "s"),
             ("_mhz", "MHz"), ("_w", "W"), ("_c", "°C"))


def number(value: float, unit: str | None = None) -> str:
    """A quantity as text: bytes in binary units, others to 5 significant digits, the unit after a space."""
    if unit == "bytes":
        return format_bytes(int(value))
    if isinstance(value, int):
        text = f"{value:,}" if abs(value) >= 10_000 else str(value)
    else:
        text = f"{value:.5g}" if abs(value) < 1e5 else f"{value:.4g}"
    return f"{text} {unit}" if unit else text


def rate(value: float, unit: str = "GB/s") -> str:
    """A bandwidth as the table shows it: one decimal ('326.2 GB/s')."""
    return f"{value:,.1f} {unit}"


def limit_rate(value: float, unit: str = "GB/s") -> str:
    """A floor as the profile states it: '312 GB/s' for a round number, else one decimal ('239.1 GB/s')."""
    return f"{value:,.0f} {unit}" if float(value).is_integer() else rate(value, unit)


def size_text(size: object) -> str:
    """1073741824 -> '1 GiB'; 1536 -> '1.50 KiB'."""
    try:
        size = parse_bytes(size)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(size)
    for unit, value in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= value:
            return f"{size // value} {unit}" if size % value == 0 else format_bytes(size)
    return f"{size} B"


def matrix_text(matrix: dict) -> str:
    """{'GPU0': {'GPU1': 'NV2'}, ...} -> 'GPU0-GPU1 NV2, ...' (the diagonal and mirrored cells left out)."""
    cells, shown = [], {}
    for row, columns in matrix.items():
        for col, label in columns.items():
            if row == col or shown.get((col, row)) == label:
                continue
            shown[(row, col)] = label
            cells.append(f"{row}-{col} {label}")
    return ", ".join(cells)


def format_value(value: object, unit: str | None = None) -> str:
    """A check's expected/found value as compact text: numbers with their units, dicts as 'key: value; ...',
    topology matrices as 'GPU0-GPU1 NV2, ...'; never a Python repr."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if is_number(value):
        return number(value, unit)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if value and all(isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in value.values()):
            return matrix_text(value)
        numeric = all(is_number(v) for v in value.values())
        parts = []
        for key, item in value.items():
            key, item_unit = str(key), None
            for suffix, suffix_unit in _SUFFIXES:
                if key.endswith(suffix) and is_number(item):
                    stripped = key[: -len(suffix)]
                    key = stripped if stripped and stripped not in value else key
                    item_unit = suffix_unit
                    break
            else:
                if numeric and "ratio" not in key and "fraction" not in key:
                    item_unit = unit  # a flat map of measurements, e.g. {'GPU0->GPU1 (p2p)': 393.1}
            parts.append(f"{key}: {format_value(item, item_unit)}")
        return "; ".join(parts) if parts else "—"
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        items = [format_value(v, unit) for v in value]
        return "[" + "], [".join(items) + "]" if any(isinstance(v, dict) for v in value) else ", ".join(items)
    return str(value)


def short(text: str, limit: int = 90) -> str:
    """``text`` up to ``limit`` characters, ended at a word (never mid-word) with '…' where it was longer."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    at = max(cut.rfind(c) for c in " ;,")
    cut = cut[:at] if at > limit // 3 else cut[: cut.rfind(" ")] if " " in cut else cut
    return cut.rstrip(" ;,:") + " …"


# --- the phrases ----------------------------------------------------------------------------------------


def settings_phrase(check: dict) -> tuple[str, str]:
    """The platform checks and other small maps: {'min': x} as '≥ x', {'exact': x} as 'exactly x', 'a_b: c' as
    'a b: c'."""
    expected, found = check.get("expected"), check.get("found")
    if isinstance(expected, dict) and len(expected) == 1:
        (key, value), = expected.items()
        word = {"min": f"{GE} ", "max": f"{LE} ", "exact": "exactly "}.get(key)
        want = f"{word}{format_value(value)}" if word else f"{_words(key)}: {format_value(value)}"
    else:
        want = format_value(_worded(expected))
    return want, format_value(_worded(found), check.get("unit"))


def _words(key: object) -> str:
    return str(key).replace("_", " ")


def _worded(value: object) -> object:
    """A map's keys as words ('max_payload' -> 'max payload'), units kept where the key names one."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        text = str(key)
        suffix = next((s for s, _ in _SUFFIXES if text.endswith(s)), "")
        out[_words(text[: len(text) - len(suffix)]) + suffix if suffix else _words(text)] = item
    return out


def _figure_words(label: str) -> str:
    """'h2d_gbps' -> 'h2d': a limit's label without the unit its name ends in, in words."""
    suffix = next((s for s, _ in _SUFFIXES if label.endswith(s) and label != s), "")
    return _words(label[: len(label) - len(suffix)])
