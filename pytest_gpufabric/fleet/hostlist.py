"""Slurm's hostlist syntax (``node[01-64]``, ``gpu[1-3,7],login1``, ``rack[1-2]-n[01-02]``), expanded as
``scontrol show hostnames`` expands it: ranges keep their zero padding, several bracket groups multiply out."""

from __future__ import annotations

import re

__all__ = ["expand_hostlist"]

_MAX_HOSTS = 1_000_000  # a typo such as node[1-99999999] must not take the machine's memory


def _split_top(text: str) -> list[str]:
    """Split at the commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {text!r}: ']' without '['")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise ValueError(f"hostlist {text!r}: '[' without ']'")
    parts.append("".join(current))
    return parts


def _range(spec: str, whole: str) -> list[str]:
    values: list[str] = []
    for item in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
        if not m:
            raise ValueError(f"hostlist {whole!r}: {item!r} is not a number or a range such as 01-64")
        low, high = m.group(1), m.group(2) or m.group(1)
        if int(high) < int(low):
            raise ValueError(f"hostlist {whole!r}: range {item!r} runs backwards")
        if int(high) - int(low) >= _MAX_HOSTS:
            raise ValueError(f"hostlist {whole!r}: range {item!r} names more than {_MAX_HOSTS} hosts")
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        values += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return values


def _expand_one(pattern: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", pattern)
    if m is None:
        if re.search(r"\s", pattern):
            raise ValueError(f"hostlist {whole!r}: blank in host name {pattern!r}")
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end():]
    return [head + value + rest for value in _range(m.group(1), whole) for rest in _expand_one(tail, whole)]


def expand_hostlist(text: str) -> list[str]:
    """The host names, in order, duplicates kept once. Raises ValueError naming what is wrong."""
    hosts: list[str] = []
    seen: set[str] = set()
    for part in _split_top(text.strip()):
        if not part.strip():
            raise ValueError(f"hostlist {text!r}: an empty host name")
        for host in _expand_one(part.strip(), text):
            if host not in seen:
                seen.add(host)
                hosts.append(host)
            if len(hosts) > _MAX_HOSTS:
                raise ValueError(f"hostlist {text!r} names more than {_MAX_HOSTS} hosts")
    return hosts
