"""The checks of one nccl-tests result row: wrong elements, and numbers that contradict each other (a time too long
for its busbw, a negative time). Pure; formats/nccl_tests.py reads the rows."""

from __future__ import annotations

import math

#: busbw over (size / time) per op, nccl-tests' doc/PERFORMANCE.md. Releases before 2.13 split it differently between
#: algbw and busbw (a 2020 all_gather printed algbw = busbw = size / time x (n - 1) / n), but busbw over size / time
#: is the same in every release, so that is what a row is held to. workloads/collectives.py (a standalone script)
#: spells out the same factors; a test pins them equal.
_BUS_FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
                "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
#: where op or rank count is unknown, the time must give the printed algbw within this factor either way: wide
#: enough for the old releases' (n - 1) / n, narrow enough for a time ten times too long
_LOOSE_FACTOR = 1.5


def bus_factor(op: str | None, nranks: int | None) -> float | None:
    """busbw / (size / time) for ``op`` on ``nranks`` ranks; None when either is unknown."""
    if op not in _BUS_FACTORS or not isinstance(nranks, int) or nranks < 1:
        return None
    return _BUS_FACTORS[op](nranks)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def wrong_count(group: dict | None) -> int | None:
    """A group's wrong elements as a count, None where the data was not checked (N/A, null, an old release's
    deviation) or the value is no count (then ``group_problems`` says so)."""
    value = (group or {}).get("wrong")
    if _is_number(value) and value >= 0 and value == int(value):
        return int(value)
    return None


def row_groups(row: dict) -> list[tuple[str, dict]]:
    """(label, group) of a row's results: nccl-tests' out-of-place and in-place groups, or the row itself for the
    torch.distributed harness (one group, nccl-tests' out-of-place layout)."""
    if "oop" in row or "ip" in row:
        return [(label, row[key]) for key, label in (("oop", "out-of-place"), ("ip", "in-place")) if row.get(key)]
    return [("", row)]


def group_problems(size: object, group: dict, op: str | None, nranks: int | None) -> list[str]:
    """Why one result group cannot be judged (empty: it can): times above 0, bandwidths finite and not negative,
    a wrong count that is a count, and a time that gives the printed bandwidth (busbw = size / time x the op's bus
    factor where op and ranks are known, else algbw within a factor of 1.5). Tolerances allow for the printed
    digits (time to 0.01 or 0.1 us, bandwidth to 0.01 GB/s)."""
    problems = []
    time_us, algbw, busbw = group.get("time_us"), group.get("algbw"), group.get("busbw")
    if not _is_number(time_us) or time_us <= 0:
        problems.append(f"time {time_us!r} us is not a time above 0")
    for name, value in (("algbw", algbw), ("busbw", busbw)):
        if not _is_number(value) or value < 0:
            problems.append(f"{name} {value!r} GB/s is not a bandwidth (finite, not negative)")
    wrong = group.get("wrong")
    if wrong is not None and wrong_count(group) is None:
        problems.append(f"#wrong {wrong!r} is not a count of elements")
    if problems or not _is_number(size) or size <= 0:
        return problems
    rate = size / time_us / 1e3  # GB/s the size and the time give
    factor = bus_factor(op, nranks)
    rounding = 0.06 / time_us
    if factor is not None:
        expected = rate * factor
        if abs(busbw - expected) > 0.01 + (0.01 + rounding) * expected:
            problems.append(f"busbw {busbw:g} GB/s disagrees with its time: {size} B in {time_us:g} us is "
                            f"{expected:.2f} GB/s of bus bandwidth for {op} on {nranks} ranks")
    elif algbw >= 0.1 and not (1 / _LOOSE_FACTOR <= rate / algbw <= _LOOSE_FACTOR):
        problems.append(f"algbw {algbw:g} GB/s disagrees with its time: {size} B in {time_us:g} us is "
                        f"{rate:.2f} GB/s")
    return problems


def row_problems(row: dict, op: str | None, nranks: int | None) -> list[str]:
    """Every group's problems, each prefixed with the group's label (nccl-tests rows) and the row's size."""
    out = []
    size = row.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        out.append(f"size {size!r} is not a byte count")
    groups = row_groups(row)
    if not groups:
        out.append(f"size {size}: no result")
    for label, group in groups:
        out += [f"size {size}{' ' + label if label else ''}: {p}" for p in group_problems(size, group, op, nranks)]
    return out
