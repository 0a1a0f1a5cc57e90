"""The environment every workload's child process starts with, and the boards its CUDA devices are."""

from __future__ import annotations

import os

from ..errors import GpuFabricError, ToolMissing
from .identity import ORDER, IdentityError, board_label, resolve_visible


class HiddenGpu(GpuFabricError):
    """A GPU the profile promises that CUDA_VISIBLE_DEVICES hides: no workload can measure it."""


def require_torch(what: str) -> None:
    """Raise ToolMissing, naming the extra that installs it, when torch is not importable: the workloads run it
    in child processes, where its absence would read as a failed measurement of the machine."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ToolMissing(f"{what} needs torch, which is not installed: pip install 'pytest-gpufabric[torch]' "
                          "(on a machine without a GPU, the CPU build: pip install torch --index-url "
                          "https://download.pytorch.org/whl/cpu)")


def workload_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The pytest process's environment (so NCCL_* settings a user exports reach the ranks), with NVLink
    multicast off unless set (NVLS on shared machines can take the host's GPUs out of service) and CUDA's
    device order set to NVML's (workloads/identity.py says why)."""
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env["CUDA_DEVICE_ORDER"] = ORDER
    env.update(extra or {})
    return env


def _board(gpu) -> dict:
    return {"index": gpu.index, "uuid": gpu.uuid if isinstance(gpu.uuid, str) else None,
            "serial": gpu.serial if isinstance(gpu.serial, str) else None}


def promised_boards(fabric, gpu_count: int, profile_name: str) -> list[dict]:
    """The GPUs a profile promises (NVML's GPU0 .. GPU<n-1>), in the order CUDA will number them under this
    process's CUDA_VISIBLE_DEVICES. Raises HiddenGpu naming every promised GPU that CUDA_VISIBLE_DEVICES hides:
    a promise the run cannot measure fails, it is not measured on whichever boards CUDA shows instead."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    boards = [_board(gpu) for gpu in fabric.gpus]
    try:
        shown = resolve_visible(visible, boards)
    except IdentityError as exc:
        raise HiddenGpu(str(exc)) from None
    promised = [b for b in boards if b["index"] < gpu_count]
    hidden = [b for b in promised if b not in shown]
    if hidden:
        them = "them" if len(hidden) > 1 else "it"
        raise HiddenGpu(
            f"{', '.join(board_label(b) for b in hidden)} promised by profile {profile_name} but hidden from CUDA by "
            f"CUDA_VISIBLE_DEVICES={visible or '(empty)'}: no workload can measure {them} "
            f"(CUDA sees {', '.join(board_label(b) for b in shown) or 'no GPU'}); unset it, or list every "
            "promised GPU"
        )
    return [b for b in shown if b in promised]


def gpu_environment(boards: list[dict]) -> dict[str, str]:
    """A workload's environment showing CUDA exactly ``boards``, in that order, by UUID: its CUDA device i is
    ``boards[i]`` whatever else the machine has, and the workload checks that it is (identity.cuda_boards)."""
    uuids = [b["uuid"] for b in boards]
    if not boards or None in uuids:
        return workload_environment()  # a fabric without UUIDs: the workload maps its devices itself
    return workload_environment({"CUDA_VISIBLE_DEVICES": ",".join(uuids)})
