"""The per-GPU diagnostics of the depth ``dcgmi diag`` gives: HBM bandwidth (hbm.py) and the memory pattern test
(mem_pattern.py), each a child process group with the profile section's settings.

Profile sections (keys optional, defaults as shown; sizes may be written "4 GiB"):

- HBM bandwidth: ``{size: 4 GiB, iters: 20, warmup: 3, timeout_s: 600}``
- memory pattern: ``{fraction: 0.9, seconds: 60, patterns: [walking_ones, walking_zeros, address, random], seed: 1,
  timeout_s: seconds x 3 + 300, bytes: (no cap), chunk_bytes: 1 GiB}``

Both scripts see the GPUs ``env`` shows them (environment.gpu_environment: the promised boards by UUID) and name
every row by its board (NVML index, UUID, serial). The HBM test runs as one worker per GPU, all at once
(runner.run_workers); the pattern test drives every GPU from one process, a thread each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..units import parse_bytes
from .environment import require_torch, workload_environment
from .runner import run_workers, run_workload

HBM_SCRIPT = Path(__file__).with_name("hbm.py")
MEM_PATTERN_SCRIPT = Path(__file__).with_name("mem_pattern.py")
HBM_FORMAT = "gpufabric-hbm/1"
MEM_PATTERN_FORMAT = "gpufabric-mem-pattern/1"
DEFAULT_PATTERNS = ("walking_ones", "walking_zeros", "address", "random")


def hbm_command(section: dict, device: str = "cuda") -> list[str]:
    """hbm.py's command line (without the runner's --handshake/--result) for a profile section."""
    return [sys.executable, str(HBM_SCRIPT), "--size", str(parse_bytes(section.get("size", "4 GiB"))),
            "--iters", str(int(section.get("iters", 20))), "--warmup", str(int(section.get("warmup", 3))),
            "--device", device]


def mem_pattern_command(section: dict, plant_fault: int | None = None, device: str = "cuda") -> list[str]:
    """mem_pattern.py's command line for a profile section; ``plant_fault``: a CUDA index whose memory gets one
    flipped bit after the first write (tests and demonstrations only: it proves the failing path)."""
    patterns = section.get("patterns", DEFAULT_PATTERNS)
    if isinstance(patterns, str):
        patterns = [patterns]
    command = [sys.executable, str(MEM_PATTERN_SCRIPT), "--fraction", repr(float(section.get("fraction", 0.9))),
               "--seconds", repr(float(section.get("seconds", 5))), "--patterns", ",".join(patterns),
               "--seed", str(int(section.get("seed", 1))), "--device", device]
    for key in ("bytes", "chunk_bytes"):
        if section.get(key) is not None:
            command += [f"--{key.replace('_', '-')}", str(parse_bytes(section[key]))]
    if plant_fault is not None:
        command += ["--plant-fault", str(int(plant_fault))]
    return command


def _checked(result: dict, expected_format: str, cmd: list[str]) -> dict:
    if result.get("format") != expected_format:  # the script and this module are one release: a bug, not the GPU
        raise RuntimeError(f"{cmd[1]} wrote format {result.get('format')!r}, not {expected_format}")
    result.pop("stdout_tail", None)
    return result


def measure_hbm(section: dict, env: dict[str, str] | None = None, *, gpus: int, device: str = "cuda") -> dict:
    """hbm.py on the ``gpus`` GPUs ``env`` shows, one worker each, all at once: the ``gpufabric-hbm/1`` result, a
    row per GPU in CUDA's order (copy/read/write/best GB/s, NVML's peak and the fraction of it), as one process
    measuring them one after another writes it, with the runner's timing. ``device="cpu"``: the same code on CPU
    stand-ins (tests). Raises ToolMissing without torch, WorkloadError when a worker fails or they time out."""
    return hbm_repeats(section, env, gpus=gpus, device=device)[0]


def hbm_repeats(section: dict, env: dict[str, str] | None = None, *, gpus: int, device: str = "cuda",
                repeats: int = 1) -> list[dict]:
    """measure_hbm ``repeats`` times over, each worker measuring its GPU that often in its one process (profile
    init --measure's spread without a start-up per repeat): one result per repeat."""
    require_torch("the HBM bandwidth diagnostic")
    base = hbm_command(section, device) + (["--workers", str(gpus)] if device == "cpu" else [])
    base += ["--repeats", str(repeats)] if repeats != 1 else []
    results, timing = run_workers([[*base, "--gpu", str(gpu)] for gpu in range(gpus)],
                                  timeout_s=float(section.get("timeout_s", 600)), env=env or workload_environment())
    for result in results:
        _checked(result, HBM_FORMAT, base)
    merged = []
    for repeat in range(repeats):
        rows = [row for result in results for row in (result["repeats"][repeat] if repeats > 1 else result["gpus"])]
        merged.append({**{k: v for k, v in results[0].items() if k != "repeats"}, "gpus": rows, "runner": timing})
    return merged


def measure_mem_pattern(section: dict, env: dict[str, str] | None = None, plant_fault: int | None = None, *,
                        device: str = "cuda") -> dict:
    """Run mem_pattern.py on every visible GPU at once: the ``gpufabric-mem-pattern/1`` result, a row per GPU
    (free and tested bytes, coverage, passes, mismatches and the first of them). The timeout defaults to three
    times the time box plus five minutes (allocating and the first whole pattern cycle come on top of the box).
    ``device="cpu"`` needs ``section["bytes"]``. Raises ToolMissing without torch, WorkloadError when the child
    fails or times out."""
    require_torch("the memory pattern diagnostic")
    cmd = mem_pattern_command(section, plant_fault, device)
    timeout_s = float(section.get("timeout_s", 3 * float(section.get("seconds", 60)) + 300))
    result = run_workload(cmd, timeout_s=timeout_s, env=env or workload_environment())
    return _checked(result, MEM_PATTERN_FORMAT, cmd)
