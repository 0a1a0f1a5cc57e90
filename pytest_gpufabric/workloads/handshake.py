"""The workload side of runner.py's handshake (standard library only, shared by the workload scripts).

Rank 0 writes ``ready`` (or ``done``) into the handshake directory and waits for the runner's ``go``
(or ``release``); every rank meets at a barrier before and after, so all ranks start and end the measured part
together.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

TIMEOUT_S = 300.0
#: the file each failing rank leaves in the handshake directory (runner.py reads them back)
FAILURE_FILE = "failure-rank{rank}.txt"
_FAILURE_LINES = 6  # the innermost frames and the exception itself


def wait_for(path: Path, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path.name} from the runner within {timeout_s:.0f} s")
        time.sleep(0.005)


def handshake(barrier, rank: int, directory: Path | None, mine: str, theirs: str,
              timeout_s: float = TIMEOUT_S) -> None:
    """``barrier``: the process group's barrier (torch.distributed.barrier); ``timeout_s``: how long to wait for
    the runner (a worker whose turn comes after other GPUs' waits longer than one that goes at once)."""
    barrier()
    if directory is not None and rank == 0:
        (directory / mine).touch()
        wait_for(directory / theirs, timeout_s)
    barrier()


def reporting_failure(main) -> int:
    """Run a workload's ``main()``; when it raises, leave this rank's last error lines (the exception and the
    frames just above it) in the handshake directory before the launcher turns them into "exitcode: 1", and
    re-raise. The runner puts them into the failure's message."""
    try:
        return main()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        argv = sys.argv
        if "--handshake" in argv[:-1]:
            directory = Path(argv[argv.index("--handshake") + 1])
            lines = "".join(traceback.format_exception(exc)).strip().splitlines()[-_FAILURE_LINES:]
            try:
                (directory / FAILURE_FILE.format(rank=os.environ.get("RANK", "0"))).write_text("\n".join(lines))
            except OSError:
                pass  # the exception itself still reaches stderr
        raise
