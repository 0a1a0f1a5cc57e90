"""How many ranks an nccl-tests run had, from its ``#  Rank N ...`` device lines: counted only where the lines
show ranks 0 to N-1. A paste that cut the list (a 72-rank run showing ranks 8-71, or only its last line) leaves the
count unknown, said with the least it can be; the visible lines are never taken for the count."""

from __future__ import annotations

from typing import Any


def rank_count(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"nranks": N, "devices": devices}`` for a whole device list, else ``{"nranks_unknown": why, "devices":
    devices}``; ``{}`` for no list."""
    ranks = sorted({d["rank"] for d in devices})
    if not ranks:
        return {}
    if ranks == list(range(len(ranks))) and len(ranks) == len(devices):
        return {"nranks": len(ranks), "devices": devices}
    return {"nranks_unknown": f"the device list is cut or repeats: {len(devices)} line(s) for ranks {ranks[0]} to "
                              f"{ranks[-1]}, so at least {ranks[-1] + 1} ranks, the count unknown",
            "devices": devices}
