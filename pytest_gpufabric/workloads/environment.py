"""The environment every workload's child process starts with."""

from __future__ import annotations

import os


def workload_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The pytest process's environment (so NCCL_* settings a user exports reach the ranks), with NVLink
    multicast off unless set: NVLS on shared machines can take the host's GPUs out of service."""
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.update(extra or {})
    return env
