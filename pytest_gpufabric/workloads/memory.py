"""The memory suite's measurement: memory_step.py in a child process group, on CUDA device 0, with the profile's
budget."""

from __future__ import annotations

import sys
from pathlib import Path

from ..units import parse_bytes
from .environment import require_torch, workload_environment
from .runner import run_workload

MEMORY_SCRIPT = Path(__file__).with_name("memory_step.py")
MEMORY_FORMAT = "gpufabric-memory/1"
SPARE_IMPORTS = ("torch", "torchvision")  # memory_step.py's model is torchvision's where it is installed


def memory_command(section: dict) -> list[str]:
    command = [sys.executable, str(MEMORY_SCRIPT), "--budget", str(parse_bytes(section["budget"])),
               "--input", ",".join(map(str, section["input"])), "--model", section.get("model", "auto"),
               "--mode", section.get("mode", "train"), "--fit-batch", str(section.get("fit_batch", 1)),
               "--probe-batches", ",".join(map(str, section.get("probe_batches", [2, 4, 8])))]
    for run in section.get("lms", []):
        command += ["--lms", f"{parse_bytes(run['threshold'])}:{run.get('usage_fraction', 0.0)}"]
    return command


def measure_memory(section: dict, env: dict[str, str] | None = None) -> dict:
    """``env``: the workload's environment (environment.gpu_environment); the memory suite runs on its CUDA
    device 0, the first promised board in CUDA's order, and the result names that board."""
    require_torch("the memory suite")
    result = run_workload(memory_command(section), timeout_s=section.get("timeout_s", 900),
                          env=env or workload_environment(), spare_imports=SPARE_IMPORTS)
    result.pop("stdout_tail", None)
    return {"format": MEMORY_FORMAT, **result}
