"""Whether an nccl-tests run finished, and what stopped it when it did not.

A run finishes with its ``# Avg bus bandwidth`` line (nccl-tests 2.0 and later; ``# Collective test concluded`` too
from mid-2025). A rank that dies (a CUDA or NCCL error, a segmentation fault, the launcher killing the job) stops
the table where it is: the rows printed so far are real measurements and are kept, and the run says it did not
finish, naming the first line that says why. A paste that stops before the trailer is told the same way: from the
text alone a run that died and a paste that was cut look alike, so neither is ever taken for a whole run.
"""

from __future__ import annotations

import re

#: lines that end a run: nccl-tests' own failure lines (``host: Test NCCL failure common.cu:1204 '...'``, ``.. host
#: pid N: Test failure common.cu:915``), a crash, and Open MPI's / Slurm's report of a rank that exited
FATAL = re.compile(r"Test (?:NCCL |CUDA )?failure|Segmentation fault|Bus error|core dumped|terminate called|"
                   r"mpirun (?:noticed|detected) that|exited on signal|srun: error|Primary job\s+terminated")
#: NCCL's own warning (``host:pid:tid [dev] file.cc:N NCCL WARN ...``): a cause where the run then stopped
WARN = re.compile(r"\bNCCL WARN\b")


def fatal_at(line: str) -> int | None:
    """Where a failure line starts in ``line`` (its host prefix included: ``node0: Test CUDA failure``), or None."""
    m = FATAL.search(line)
    if m is None:
        return None
    host = re.search(r"(?:^|\s)(\S+:\s*(?:\.\.\s+)?)$", line[:m.start()])
    return host.start(1) if host else m.start()


def unfinished(sizes: list[int], cause: str | None) -> str:
    """Why a run with these measured sizes is not whole: 'the run died after 5 sizes (the last 17179869184 B): ...'."""
    last = f" (the last {sizes[-1]} B)" if sizes else ""
    count = f"{len(sizes)} size{'s' if len(sizes) != 1 else ''}"
    if cause:
        return f"the run died after {count}{last}: {cause[:200]}"
    return (f"the run did not finish: no '# Avg bus bandwidth' line after its {count}{last}; it died or its text "
            "was cut")
