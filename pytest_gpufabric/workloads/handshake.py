"""The workload side of runner.py's handshake (standard library only, shared by the workload scripts).

Rank 0 writes ``ready`` (or ``done``) into the handshake directory and waits for the runner's ``go``
(or ``release``); every rank meets at a barrier before and after, so all ranks start and end the measured part
together.
"""

from __future__ import annotations

import time
from pathlib import Path

TIMEOUT_S = 300.0


def wait_for(path: Path, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path.name} from the runner within {timeout_s:.0f} s")
        time.sleep(0.005)


def handshake(barrier, rank: int, directory: Path | None, mine: str, theirs: str) -> None:
    """``barrier``: the process group's barrier (torch.distributed.barrier)."""
    barrier()
    if directory is not None and rank == 0:
        (directory / mine).touch()
        wait_for(directory / theirs)
    barrier()
