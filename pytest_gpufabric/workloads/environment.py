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


#: the devices through which CUDA reaches the NVIDIA driver: its control device on Linux, the GPU paravirtualization
#: device under WSL2; one exists only where the driver is there
NVIDIA_DRIVER_DEVICES = ("/dev/nvidiactl", "/dev/dxg")


def nvidia_driver_loaded() -> bool:
    """Whether the NVIDIA driver is there to run workloads (no NVML call: this answers in microseconds)."""
    return any(os.path.exists(device) for device in NVIDIA_DRIVER_DEVICES)


def workload_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The pytest process's environment (so NCCL_* settings a user exports reach the ranks), with NVLink
    multicast off unless set (NVLS on shared machines can take the host's GPUs out of service), CUDA's device
    order set to NVML's (workloads/identity.py says why) and host memory pinned the faster way (FAST_PINNING)."""
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env["CUDA_DEVICE_ORDER"] = ORDER
    with_fast_pinning(env, installed_torch_version())
    env.update(extra or {})
    return env


#: torch's pinned host allocator page-locking with cudaHostRegister from 8 threads, several times faster than
#: cudaHostAlloc with copies as fast (docs/recorded-evidence.md, "Pinned host memory"); torch >= 2.2 has the keys.
FAST_PINNING = (("pinned_use_cuda_host_register", "True"), ("pinned_num_register_threads", "8"))
_ALLOC_CONF_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # the newer name first


def with_fast_pinning(env: dict[str, str], torch_version: str | None) -> None:
    """Add FAST_PINNING to the allocator settings of ``env`` (in the variable the user set, else
    PYTORCH_CUDA_ALLOC_CONF, which every torch since 2.2 reads), keeping the user's own settings. Nothing changes
    where the user already chose how to pin, set both variables (which one torch reads depends on its version),
    or where torch (``torch_version``, None when not installed) is older than 2.2 or a ROCm build (not tried)."""
    if not torch_version or "rocm" in torch_version:
        return
    try:
        major, minor = (int(part) for part in torch_version.split("+")[0].split(".")[:2])
    except ValueError:
        return
    if (major, minor) < (2, 2):
        return
    set_by_user = [name for name in _ALLOC_CONF_NAMES if name in env]
    if len(set_by_user) > 1:
        return
    name = set_by_user[0] if set_by_user else "PYTORCH_CUDA_ALLOC_CONF"
    # torch skips spaces but not empty items: "a:1, " would reach it as "a:1,,b:2", an unknown option ","
    items = [item.strip() for item in env.get(name, "").split(",") if item.strip()]
    if {item.split(":")[0] for item in items} & {key for key, _ in FAST_PINNING}:
        return
    env[name] = ",".join([*items, *(f"{key}:{value}" for key, value in FAST_PINNING)])


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
