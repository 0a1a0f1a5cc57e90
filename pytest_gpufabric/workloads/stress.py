"""The stress diagnostics: sustained power and thermal under a GEMM load (power_hold.py) and the PCIe link under
copies (pcie_load.py), each in a child process group that its timeout kills whole.

Profile sections (the keys these read; the profile schema owns their validation)::

    power: {seconds: 20, size: 8192, interval_s: 0.25, warmup_s: 3, dtype: bfloat16, timeout_s: 180}
    pcie:  {size: "1 GiB", seconds: 3, timeout_s: 300}
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..units import parse_bytes
from .environment import workload_environment
from .runner import run_workload

POWER_HOLD_SCRIPT = Path(__file__).with_name("power_hold.py")
PCIE_LOAD_SCRIPT = Path(__file__).with_name("pcie_load.py")
POWER_HOLD_FORMAT = "gpufabric-power-hold/1"
PCIE_LOAD_FORMAT = "gpufabric-pcie-load/1"

#: what a profile section leaves out (the schema states the same defaults)
POWER_DEFAULTS = {"seconds": 20.0, "size": 8192, "interval_s": 0.25, "warmup_s": 3.0, "dtype": "bfloat16"}
PCIE_DEFAULTS = {"size": 1 << 30, "seconds": 3.0}
#: beyond the load itself: start-up, CUDA contexts, matrices or pinned buffers, NVML
_START_UP_S = 120.0


def power_hold_command(section: dict, *, device: str = "cuda", workers: int | None = None) -> list[str]:
    """The power_hold.py command line for a profile's ``power`` section; ``device="cpu"`` runs it on CPU
    ``workers`` (tests)."""
    s = {**POWER_DEFAULTS, **section}
    command = [sys.executable, str(POWER_HOLD_SCRIPT), "--seconds", str(float(s["seconds"])),
               "--warmup", str(float(s["warmup_s"])), "--size", str(int(s["size"])), "--dtype", str(s["dtype"]),
               "--interval", str(float(s["interval_s"])), "--device", device]
    if workers is not None:
        command += ["--workers", str(workers)]
    return command


def pcie_load_command(section: dict, *, device: str = "cuda", workers: int | None = None) -> list[str]:
    """The pcie_load.py command line for a profile's ``pcie`` section (``size`` in bytes or as '1 GiB')."""
    s = {**PCIE_DEFAULTS, **section}
    command = [sys.executable, str(PCIE_LOAD_SCRIPT), "--size", str(parse_bytes(s["size"])),
               "--seconds", str(float(s["seconds"])), "--device", device]
    if workers is not None:
        command += ["--workers", str(workers)]
    return command


def _checked(result: dict, expected_format: str) -> dict:
    if result.get("format") != expected_format:
        raise RuntimeError(f"the workload wrote format {result.get('format')!r}, not {expected_format}")
    result.pop("stdout_tail", None)  # the figures are in the result; the printed lines repeat them
    return result


def measure_power_hold(section: dict, env: dict[str, str] | None = None, *, device: str = "cuda") -> dict:
    """Every GPU ``env`` shows (environment.gpu_environment) under a GEMM load at once, NVML sampled throughout:
    the ``gpufabric-power-hold/1`` result. Raises ToolMissing without torch, WorkloadError when the workload
    fails or outlives ``timeout_s`` (default: the load plus two minutes)."""
    from .environment import require_torch

    require_torch("the power and thermal diagnostic")
    s = {**POWER_DEFAULTS, **section}
    timeout_s = section.get("timeout_s", float(s["seconds"]) + float(s["warmup_s"]) + _START_UP_S)
    result = run_workload(power_hold_command(section, device=device), timeout_s=timeout_s,
                          env=env or workload_environment())
    return _checked(result, POWER_HOLD_FORMAT)


def measure_pcie_load(section: dict, env: dict[str, str] | None = None, *, device: str = "cuda") -> dict:
    """Every GPU ``env`` shows, one after another: pinned copies both ways with the PCIe link read before, during
    and after; the ``gpufabric-pcie-load/1`` result. The default timeout (300 s) covers 8 GPUs at the default 2 x 3
    s of copies each with room to spare; a profile that copies for longer sets ``timeout_s``."""
    from .environment import require_torch

    require_torch("the PCIe diagnostic")
    result = run_workload(pcie_load_command(section, device=device), timeout_s=section.get("timeout_s", 300),
                          env=env or workload_environment())
    return _checked(result, PCIE_LOAD_FORMAT)
