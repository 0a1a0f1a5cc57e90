"""The promises that failed or were not checked, one line per cause: seven missing GPUs are one line naming them,
not 46 lines saying the same. The terminal summary and the report's "read first" block both use it."""

from __future__ import annotations

import re
from collections.abc import Iterable

_BOARD = re.compile(r"\bGPU(\d+)\b")
_SERIAL = re.compile(r" ?\(serial [^)]*\)")
_SERIAL_OF = re.compile(r"\(serial ([^)]*)\)")


def one_line(reason: str) -> str:
    """A reason of several lines on one line: "; " between them, a space after a line ending in ":"."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    return "".join(line + ("" if index == len(lines) - 1 else " " if line.endswith(":") else "; ")
                   for index, line in enumerate(lines))


def _cause(promise: dict) -> tuple[str, str, str]:
    """What promises share when one cause explains them: outcome, reason with its board and serial left out, remedy."""
    reason = _SERIAL.sub("(serial *)", _BOARD.sub("GPU*", one_line(promise.get("reason") or "")))
    remedy = (promise.get("remedy") or {}).get("class", "")
    return promise["outcome"], reason, remedy


def board_range(indices: Iterable[int]) -> str:
    """[1, 2, 3, 5] -> 'GPU1-GPU3, GPU5' (two in a row stay two: 'GPU0, GPU1' is not read as a pair)."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"GPU{r[0]}-GPU{r[-1]}" if len(r) > 2 else ", ".join(f"GPU{i}" for i in r) for r in runs)


def _kinds(ids: list[str]) -> str:
    """'gpu-model, gpu-memory, nvlinks' or 'collective-bandwidth x5, copy-bandwidth x3': the kinds, in order."""
    counts: dict[str, int] = {}
    for promise_id in ids:
        kind = promise_id.split("[", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(kind if n == 1 or len(counts) > 3 else f"{kind} x{n}" for kind, n in counts.items())


#: a cause shared by this many promises is said once; fewer keep a line each (a pair's two failures stay two)
MIN_GROUP = 3


def grouped(promises: list[dict], outcomes: tuple[str, ...] = ("failed", "not checked")) -> list[dict]:
    """The promises of ``outcomes`` (in that order) grouped by cause: each group's outcome, its one-line text (the
    boards it covers named as a range where its reason names a board), its promise ids, and its remedy class."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for outcome in outcomes:
        for promise in promises:
            if promise["outcome"] == outcome:
                groups.setdefault(_cause(promise), []).append(promise)
    split = [(cause, [member]) for cause, members in groups.items() for member in members
             if len(members) < MIN_GROUP]
    kept = [(cause, members) for cause, members in groups.items() if len(members) >= MIN_GROUP]
    order = {p["id"]: n for n, p in enumerate(promises)}
    rank = {outcome: n for n, outcome in enumerate(outcomes)}
    out = []
    for (outcome, _, remedy), members in sorted(split + kept, key=lambda g: (rank[g[0][0]], order[g[1][0]["id"]])):
        text = one_line(members[0].get("reason") or "")
        if len(members) > 1:
            boards = [int(m.group(1)) for p in members if (m := _BOARD.search(p.get("reason") or ""))]
            if len(set(boards)) > 1:
                serials = [m.group(1) for p in members if (m := _SERIAL_OF.search(p.get("reason") or ""))]
                named = board_range(boards) + (f" (serials {', '.join(dict.fromkeys(serials))})" if serials else "")
                text = _BOARD.sub(named, _SERIAL.sub("", text), count=1)
        out.append({"outcome": outcome, "text": text, "ids": [p["id"] for p in members], "remedy": remedy,
                    "first": members[0]})
    return out


def cause_lines(promises: list[dict], width: int = 500) -> list[str]:
    """The terminal's lines under the verdict: one per cause, failures first. A line keeps its remedy at its end
    whatever of its text the width keeps."""
    lines = []
    for group in grouped(promises):
        remedy = f" -> {group['remedy']}" if group["remedy"] else ""
        ids = group["ids"]
        if len(ids) == 1:
            line = f"  {group['outcome']}: {ids[0]}: {group['text']}"
        else:
            line = f"  {group['outcome']} ({len(ids)} promises: {_kinds(ids)}): {group['text']}"
        lines.append(line[:width - len(remedy)] + remedy)
    return lines


def tally_line(promises: list[dict]) -> str | None:
    """'  33 passed, 2 waived': what the cause lines do not name; None when nothing passed or was waived."""
    tally = {outcome: sum(p["outcome"] == outcome for p in promises) for outcome in ("passed", "waived")}
    said = [f"{n} {outcome}" for outcome, n in tally.items() if n]
    return f"  {', '.join(said)}" if said else None
