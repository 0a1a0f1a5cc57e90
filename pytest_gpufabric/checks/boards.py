"""Which row of a per-GPU recording is this machine's board: a recording is evidence of a GPU only where it names
the board it measured (serial, UUID) and that board is the one this machine has at that index.

The rows of hbm.json, memory-pattern.json, power-hold.json and pcie-load.json each carry the NVML index, UUID and
serial the workload read before it measured (workloads/identity.py). A row is bound to the machine's GPU<i> by
identity, never by position: a bundle put together from two machines, or a GPU swapped since, shows here.
"""

from __future__ import annotations

from ..formats.records import Recording


def _board(serial: object, uuid: object) -> str:
    parts = [f"serial {serial}" if serial else "", str(uuid) if uuid else ""]
    return ", ".join(p for p in parts if p) or "no serial or UUID"


def board_row(recording: Recording, index: int, machine_gpu, what: str) -> tuple[dict | None, str | None]:
    """(the row of ``recording`` that measured this machine's GPU<index>, None), or (None, why there is none that
    can be judged). ``machine_gpu``: the machine's fabric.Gpu at that index; None where the evidence records no
    GPUs (a bundle of recordings alone): the row is then judged on the identity it names itself. The row's own
    typed-reading problems (formats/records.py) are reasons too."""
    name = recording.name
    whole_file = recording.problems_of(None)  # unreadable, another format, two rows for one GPU
    if whole_file:
        return None, "; ".join(whole_file)
    rows = [r for r in recording.get("gpus") or [] if isinstance(r, dict)]
    at_index = next((r for r in rows if r.get("index") == index), None)
    machine = (getattr(machine_gpu, "serial", None), getattr(machine_gpu, "uuid", None))
    if machine_gpu is not None and any(machine):
        # by identity: the row whose serial or UUID is this board's
        row = next((r for r in rows if (machine[0] and r.get("serial") == machine[0])
                    or (machine[1] and r.get("uuid") == machine[1])), None)
        if row is None:
            if at_index is None:
                return None, _no_row(what, name, index, rows)
            if not (at_index.get("serial") or at_index.get("uuid")):
                return None, f"{name}: GPU{index}: the record does not say which board it measured (no serial or UUID)"
            return None, (f"{name}: GPU{index} of the record is {_board(at_index.get('serial'), at_index.get('uuid'))}"
                          f": this machine has no such board (its GPU{index} is {_board(*machine)}); the record is "
                          "another machine's, or the GPU was swapped since")
        for key, mine in zip(("serial", "uuid"), machine, strict=True):
            if mine and row.get(key) != mine:
                theirs = f"{key} {row.get(key)}" if row.get(key) else f"no {key}"
                return None, (f"{name}: the row of {_board(row.get('serial'), row.get('uuid'))} names {theirs}; "
                              f"this machine's GPU{index} is {_board(*machine)}: the record contradicts the machine")
        if row.get("index") != index:
            return None, (f"{name}: measured {_board(*machine)} as GPU{row.get('index')}; this machine has it as "
                          f"GPU{index}")
    else:
        if at_index is None:
            return None, _no_row(what, name, index, rows)
        if not (at_index.get("serial") or at_index.get("uuid")):
            return None, f"{name}: GPU{index}: the record does not say which board it measured (no serial or UUID)"
        if machine_gpu is not None:
            return None, (f"{name}: GPU{index} of the record is {_board(at_index.get('serial'), at_index.get('uuid'))}"
                          f", but this machine's GPU{index} is recorded without a serial or UUID: nothing binds the "
                          "record to it")
        row = at_index
    problems = recording.problems_of(row)
    if problems:
        return None, "; ".join(problems)
    return row, None


def _no_row(what: str, name: str, index: int, rows: list[dict]) -> str:
    seen = ", ".join(f"GPU{r.get('index')}" for r in rows) or "none"
    return f"the {what} has no result for GPU{index} (the GPUs {name} saw: {seen})"
