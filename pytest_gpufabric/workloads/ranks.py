"""The workload side of a distributed job: which rank this is, on which device (standard library and torch).

Shared by the workload scripts (imported through their folder on sys.path, as run by torchrun). Any launcher that
sets the standard torch environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) can start them:
torchrun on one or several nodes; Slurm's srun and Open MPI's mpirun, whose rank variables are mapped.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

try:  # run as a script's sibling: its folder is on sys.path; imported as a module (tests): relative
    from identity import cuda_boards
except ImportError:
    from .identity import cuda_boards

_LAUNCHER_RANKS = (  # (rank, world size, local rank) as other launchers name them
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)


def standard_environment() -> None:
    """Map srun/mpirun rank variables to torch's, so any launcher can start the harness."""
    if "RANK" in os.environ:
        return
    for rank, size, local in _LAUNCHER_RANKS:
        if rank in os.environ and size in os.environ:
            os.environ["RANK"], os.environ["WORLD_SIZE"] = os.environ[rank], os.environ[size]
            os.environ.setdefault("LOCAL_RANK", os.environ.get(local, "0"))
            return


def init_distributed(backend: str) -> tuple[int, int, torch.device]:
    """Join the job: (rank, world size, this rank's device: its GPU with NCCL, the CPU with gloo)."""
    standard_environment()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and torch.get_num_threads() != int(threads):
        # a rank started in a spare interpreter imported torch before its launcher set the thread count (torchrun
        # sets 1 for several ranks): the count the launcher asked for, as a rank started cold would have it
        torch.set_num_threads(int(threads))
    dist.init_process_group(backend=backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), device


def rank_boards(device: torch.device) -> list[dict | None]:
    """Every rank's board (CUDA device mapped to NVML's index, UUID and serial), in rank order; None on CPUs.
    Raises identity.IdentityError on the rank whose devices cannot be named: nothing is measured then."""
    board = cuda_boards(torch)[device.index] if device.type == "cuda" else None
    boards: list = [None] * dist.get_world_size()
    dist.all_gather_object(boards, board)
    return boards
