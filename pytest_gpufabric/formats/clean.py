"""The one cleaning layer for text that came from a machine, a bundle or a user (a GPU's name or serial, a host
name, a fleet folder's name, a tool's output line): no byte of it can drive a terminal.

Each terminal control character is made visible as its escape written out in text: ESC (0x1b) becomes the four
characters ``\\x1b``, a carriage return ``\\x0d``, a C1 control such as CSI (U+009B) ``\\x9b``, a bidirectional
override (U+202E) ``\\u202e``. What is escaped: C0 controls (U+0000 to U+001F) except tab and, in multi-line text,
newline; DEL (U+007F); C1 controls (U+0080 to U+009F); the line and paragraph separators U+2028 and U+2029; and
the bidirectional marks, embeddings, overrides and isolates (U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069).
Printable text, backslashes included, is kept as it is, so a clean text stays readable and cleaning it again
changes nothing.

``clean_line`` is for a one-line value (a name, a serial, a terminal line: a newline in it is escaped too);
``clean_text`` for text of several lines; ``clean_values`` cleans every string in a JSON-like value.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["clean_line", "clean_text", "clean_values", "has_control", "yaml_comment"]

_BIDI_AND_SEPARATORS = "\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")
_CONTROL_IN_LINE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(text: str) -> str:
    """``text`` with every terminal control character but newline and tab written out (``\\x1b``)."""
    return _CONTROL_IN_TEXT.sub(_visible, text)


def clean_line(text: str) -> str:
    """``text`` as one line: every control character but tab written out, newlines included (``\\x0a``)."""
    return _CONTROL_IN_LINE.sub(_visible, text)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character clean_line would write out (a newline included)."""
    return _CONTROL_IN_LINE.search(text) is not None


def clean_values(value: Any) -> Any:
    """``value`` with every string in it (keys of objects too) passed through clean_line."""
    if isinstance(value, str):
        return clean_line(value)
    if type(value) is dict:
        return {clean_values(k): clean_values(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(clean_values(v) for v in value)
    return value


def yaml_comment(text: str, indent: str = "") -> str:
    """``text`` as YAML comment lines, each starting with ``indent + "# "``, cleaned: whatever the text holds, what
    is written is comments only (a newline in a value cannot start a key)."""
    return "".join(f"{indent}# {clean_line(line)}\n" for line in text.split("\n"))
