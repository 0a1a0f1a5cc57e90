"""Which GPUs the quick tier may run its workloads on: never one another job still holds.

- In a Slurm prolog or epilog the job's GPUs are named by ``SLURM_JOB_GPUS`` (NVML indexes: slurmd sets it for the
  prolog and epilog of a job with GPUs); a job step's by ``SLURM_STEP_GPUS``; anything else by
  ``CUDA_VISIBLE_DEVICES`` (indexes or GPU UUIDs, as CUDA reads it). The first of the three that is set decides,
  even when empty (a job without GPUs: the quick tier runs on none); none set (a check outside any job): every GPU.
- A GPU with a compute process on it (NVML's running compute processes, other than this check's own) is skipped
  whatever the variables say; one whose processes could not be read is skipped too (it may be held).
- A record that predates the process list (an old bundle replayed on CPU stand-ins) is said in a note.

A skipped GPU is never judged healthy: its quick checks are could-not-tell in the metrics (2), the result document
lists it under ``quick_skipped``, a note says why, the HEALTHY line counts it ("quick tier skipped 1"); a held
quick-tier drain on it stays (state.reconcile). A quick tier that ran on no GPU at all outside a Slurm job's
prolog, epilog or step (CUDA_VISIBLE_DEVICES set empty, every GPU held) is could-not-tell (``none_exercised``).
"""

from __future__ import annotations

import os
import re

from ..remedy_classes import SOFTWARE
from .finding import UNKNOWN, Finding
from .record import NodeHealthRecord

#: the variables that name the job's GPUs, the first one set deciding
JOB_GPU_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES")
#: those slurmd sets for a job's prolog, epilog or step: a job without GPUs names none, and that is no fault
SLURM_GPU_VARIABLES = JOB_GPU_VARIABLES[:2]


def _named(value: str, node: NodeHealthRecord) -> tuple[set[int], list[str]]:
    """The NVML indexes a variable's value names, and its entries that name no GPU here."""
    named, strangers = set(), []
    for entry in (part.strip() for part in value.split(",") if part.strip()):
        if re.fullmatch(r"\d+", entry):
            found = [g.index for g in node.gpus if g.index == int(entry)]
        elif entry.upper().startswith("GPU-") and len(entry) > 4:
            found = [g.index for g in node.gpus if (g.uuid or "").upper().startswith(entry.upper())]
        else:
            found = []
        if len(found) == 1:
            named.add(found[0])
        else:
            strangers.append(entry)
    return named, strangers


def quick_gpus(node: NodeHealthRecord, env: dict[str, str] | None = None, own_pid: int | None = None) \
        -> tuple[list[int], list[dict], list[str]]:
    """(the NVML indexes the quick tier runs on, the GPUs skipped as {gpu, serial, why}, notes)."""
    env = os.environ if env is None else env
    own_pid = os.getpid() if own_pid is None else own_pid
    present = [g for g in node.gpus if g.lost is None and "handle" not in g.unreadable]
    notes: list[str] = []
    variable = next((name for name in JOB_GPU_VARIABLES if name in env), None)
    if variable is None:
        chosen = {g.index for g in present}
        notes.append(f"quick tier GPUs: every GPU (none of {', '.join(JOB_GPU_VARIABLES)} is set)")
    else:
        chosen, strangers = _named(env[variable], node)
        notes.append(f"quick tier GPUs: {variable}={env[variable]!s} names "
                     + (", ".join(f"GPU{i}" for i in sorted(chosen)) or "none")
                     + (f" ({', '.join(strangers)}: no GPU of this node)" if strangers else ""))
    skipped: list[dict] = []
    selected: list[int] = []
    unrecorded = []
    for gpu in present:
        why = None
        if gpu.index not in chosen:
            why = f"not the job's GPU ({variable} does not name it)"
        elif "compute_processes" in gpu.values:
            others = [pid for pid in gpu.values["compute_processes"] if pid != own_pid]
            if others:
                why = f"compute process(es) {', '.join(map(str, others[:5]))} on it: another job holds it"
        elif "compute_processes" in gpu.unreadable:
            why = f"its compute processes could not be read ({gpu.unreadable['compute_processes']}): it may be held"
        elif "compute_processes" in gpu.not_recorded:
            unrecorded.append(gpu.index)
        if why is None:
            selected.append(gpu.index)
        else:
            skipped.append({"gpu": gpu.index, "serial": gpu.serial, "why": why})
    if unrecorded:
        notes.append(f"the record holds no compute process list (GPU{', GPU'.join(map(str, unrecorded))}): "
                     f"{node.source} predates it; other jobs' processes were not looked for")
    for skip in skipped:
        notes.append(f"GPU{skip['gpu']} skipped by the quick tier, not judged: {skip['why']}")
    return selected, skipped, notes


def none_exercised(selected: list[int], skipped: list[dict], env: dict[str, str] | None = None) -> Finding | None:
    """Could not tell, where the quick tier was asked for and ran on none of the node's GPUs outside a Slurm job
    (a job without GPUs, SLURM_JOB_GPUS set empty, runs on none by design): nothing was exercised, so nothing is
    shown healthy. None where it ran on some GPU, or the node has none to run on."""
    env = os.environ if env is None else env
    if selected or not skipped or any(name in env for name in SLURM_GPU_VARIABLES):
        return None
    whys = sorted({skip["why"] for skip in skipped})
    return Finding("quick-tier", UNKNOWN, "quick tier ran on no GPU", remedy=SOFTWARE,
                   evidence={"skipped": [skip["gpu"] for skip in skipped]},
                   detail=f"the quick tier's workloads ran on none of the {len(skipped)} GPUs ({'; '.join(whys)}): "
                          f"nothing was exercised; run it where {', '.join(JOB_GPU_VARIABLES)} are unset or name "
                          "the GPUs, and no other job holds them")
