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
    with_fast_pinning(env, installed_torch_version())
    env.update(extra or {})
    return env


#: torch's pinned host allocator set to page-lock with cudaHostRegister from 8 threads rather than with
#: cudaHostAlloc: on nvidia-h100-x1 (torch 2.11) 8 GiB were pinned in 1.23-1.29 s instead of 4.71-5.72 s and 1 GiB
#: in 0.18-0.20 s instead of 0.60-0.77 s, with host-to-device copies from either equally fast
#: (tests/data/results/pin-probe-h100-x1/). Pinning is the set-up of the copy, PCIe and memory workloads (the
#: memory suite's offloading pins gigabytes), never what they time. The keys exist from torch 2.1 on.
FAST_PINNING = (("pinned_use_cuda_host_register", "True"), ("pinned_num_register_threads", "8"))


def with_fast_pinning(env: dict[str, str], torch_version: str | None) -> None:
    """Add FAST_PINNING to the allocator settings of ``env`` (PYTORCH_ALLOC_CONF where the user set that newer
    name, else PYTORCH_CUDA_ALLOC_CONF), keeping the user's own settings; nothing where the user already chose
    how to pin, or where torch (``torch_version``, None when not installed) predates the keys or is a ROCm
    build (whose keys differ)."""
    if not torch_version or "rocm" in torch_version:
        return
    try:
        major, minor = (int(part) for part in torch_version.split("+")[0].split(".")[:2])
    except ValueError:
        return
    if (major, minor) < (2, 1):
        return
    name = "PYTORCH_ALLOC_CONF" if env.get("PYTORCH_ALLOC_CONF") else "PYTORCH_CUDA_ALLOC_CONF"
    current = env.get(name, "")
    chosen = {item.split(":")[0].strip() for item in current.split(",") if item.strip()}
    if chosen & {key for key, _ in FAST_PINNING}:
        return
    env[name] = ",".join([*([current.strip(",")] if current.strip(",") else []),
                          *(f"{key}:{value}" for key, value in FAST_PINNING)])


def installed_torch_version() -> str | None:
    """The installed torch's version, read from its metadata (torch itself is not imported here)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


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
