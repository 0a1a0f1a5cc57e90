"""The launchers of HBM bandwidth (hbm.py) and the memory pattern test (mem_pattern.py), each a child process
group with the profile section's settings.

They read the profile's ``memory_bandwidth`` and ``memory_pattern`` sections, with the defaults
profile.schema.json states for what a section leaves out (diagnostics/: HBM.settings, MEMORY_PATTERN.settings;
sizes may be written "4 GiB"), and pass every setting to the standalone script, which cannot read the schema
itself. The pattern test's timeout, unless the section sets one, is three times its seconds plus five minutes;
without ``bytes`` it tests ``fraction`` of the free memory, in chunks of ``chunk_bytes`` (the script's 1 GiB).

Both scripts see the GPUs ``env`` shows them (environment.gpu_environment: the promised boards by UUID) and name
every row by its board (NVML index, UUID, serial). The HBM test runs as one worker per GPU, all at once
(runner.run_workers); the pattern test drives every GPU from one process, a thread each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..diagnostics.hbm import HBM
from ..diagnostics.memory_pattern import MEMORY_PATTERN
from ..units import parse_bytes
from .environment import require_torch, workload_environment
from .runner import run_workers, run_workload

HBM_SCRIPT = Path(__file__).with_name(HBM.script)
MEM_PATTERN_SCRIPT = Path(__file__).with_name(MEMORY_PATTERN.script)
HBM_FORMAT = HBM.format
MEM_PATTERN_FORMAT = MEMORY_PATTERN.format


def hbm_command(section: dict, device: str = "cuda") -> list[str]:
    """hbm.py's command line (without the runner's --handshake/--result) for a profile section."""
    s = HBM.settings(section)
    return [sys.executable, str(HBM_SCRIPT), "--size", str(parse_bytes(s["size"])), "--iters", str(int(s["iters"])),
            "--warmup", str(int(s["warmup"])), "--device", device]


def mem_pattern_command(section: dict, plant_fault: int | None = None, device: str = "cuda") -> list[str]:
    """mem_pattern.py's command line for a profile section; ``plant_fault``: a CUDA index whose memory gets one
    flipped bit after the first write (tests and demonstrations only: it proves the failing path)."""
    s = MEMORY_PATTERN.settings(section)
    patterns = [s["patterns"]] if isinstance(s["patterns"], str) else s["patterns"]
    command = [sys.executable, str(MEM_PATTERN_SCRIPT), "--fraction", repr(float(s["fraction"])),
               "--seconds", repr(float(s["seconds"])), "--patterns", ",".join(patterns),
               "--seed", str(int(s["seed"])), "--device", device]
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
                                  timeout_s=float(HBM.settings(section)["timeout_s"]),
                                  env=env or workload_environment())
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
    times the time box (the section's seconds, or the schema's) plus five minutes (allocating and the first whole
    pattern cycle come on top of the box).
    ``device="cpu"`` needs ``section["bytes"]``. Raises ToolMissing without torch, WorkloadError when the child
    fails or times out."""
    require_torch("the memory pattern diagnostic")
    cmd = mem_pattern_command(section, plant_fault, device)
    timeout_s = float(section.get("timeout_s", 3 * float(MEMORY_PATTERN.settings(section)["seconds"]) + 300))
    result = run_workload(cmd, timeout_s=timeout_s, env=env or workload_environment())
    return _checked(result, MEM_PATTERN_FORMAT, cmd)


def launch_hbm(section: dict, env: dict[str, str], boards: list[dict], fabric, *, repeats: int = 1,
               plant_fault: int | None = None) -> list[dict]:
    """HBM bandwidth as its kind launches it (kinds/hbm/): one worker per promised board, each measuring
    its GPU ``repeats`` times in its one process."""
    return hbm_repeats(section, env, gpus=len(boards), repeats=repeats)


def launch_mem_pattern(section: dict, env: dict[str, str], boards: list[dict], fabric, *, repeats: int = 1,
                       plant_fault: int | None = None) -> list[dict]:
    """The memory pattern test as its kind launches it (kinds/memory_pattern/), ``repeats`` times;
    ``plant_fault``: a CUDA index whose memory gets one flipped bit (mem_pattern_command)."""
    return [measure_mem_pattern(section, env, plant_fault=plant_fault) for _ in range(repeats)]
