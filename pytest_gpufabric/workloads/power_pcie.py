"""The launchers of the power hold and the PCIe load: sustained power and thermal under a GEMM load
(power_hold.py) and the PCIe link under copies (pcie_load.py: a worker per GPU, started together, copying one at a
time where GPUs share a path), each in child process groups that its timeout kills whole.

They read the profile's ``power`` and ``pcie_load`` sections, with the defaults profile.schema.json states for
what a section leaves out (diagnostics/: POWER_HOLD.settings, PCIE_LOAD.settings), and pass every setting to the
standalone script, which cannot read the schema itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..diagnostics.pcie_load import PCIE_LOAD
from ..diagnostics.power_hold import POWER_HOLD
from ..fabric.sysfs_pci import parse_pci_path, pci_device_path, pci_numa_node
from ..units import parse_bytes
from .environment import require_torch, workload_environment
from .runner import run_workers, run_workload

POWER_HOLD_SCRIPT = Path(__file__).with_name(POWER_HOLD.script)
PCIE_LOAD_SCRIPT = Path(__file__).with_name(PCIE_LOAD.script)
POWER_HOLD_FORMAT = POWER_HOLD.format
PCIE_LOAD_FORMAT = PCIE_LOAD.format

#: beyond the load itself: start-up, CUDA contexts, matrices or pinned buffers, NVML
_START_UP_S = 120.0


def power_hold_command(section: dict, *, device: str = "cuda", workers: int | None = None) -> list[str]:
    """The power_hold.py command line for a profile's ``power`` section; ``device="cpu"`` runs it on CPU
    ``workers`` (tests)."""
    s = POWER_HOLD.settings(section)
    command = [sys.executable, str(POWER_HOLD_SCRIPT), "--seconds", str(float(s["seconds"])),
               "--warmup", str(float(s["warmup_s"])), "--size", str(int(s["size"])), "--dtype", str(s["dtype"]),
               "--interval", str(float(s["interval_s"])), "--device", device]
    if workers is not None:
        command += ["--workers", str(workers)]
    return command


def pcie_load_command(section: dict, *, device: str = "cuda", workers: int | None = None) -> list[str]:
    """The pcie_load.py command line for a profile's ``pcie_load`` section (``size`` in bytes or as '1 GiB')."""
    s = PCIE_LOAD.settings(section)
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
    require_torch("the power and thermal diagnostic")
    s = POWER_HOLD.settings(section)
    timeout_s = section.get("timeout_s", float(s["seconds"]) + float(s["warmup_s"]) + _START_UP_S)
    result = run_workload(power_hold_command(section, device=device), timeout_s=timeout_s,
                          env=env or workload_environment())
    return _checked(result, POWER_HOLD_FORMAT)


def measure_pcie_load(section: dict, env: dict[str, str] | None = None, *, gpus: int, device: str = "cuda",
                      rounds: list[list[int]] | None = None) -> dict:
    """Every GPU ``env`` shows (``gpus`` of them, CUDA's order): pinned copies both ways with the PCIe link read
    before, during and after; the ``gpufabric-pcie-load/1`` result, a row per GPU, with ``rounds`` (the GPUs, by
    NVML index, that copied at the same time). One worker per GPU (pcie_load.py --gpu), all started at once so
    that their set-up (CUDA context, pinned buffer) overlaps; ``rounds`` (lists of CUDA indexes, from
    pcie_rounds) say which copy at once, default one GPU at a time, so that no GPU's copies share its root
    complex or host memory with another's. The schema's default timeout (300 s) covers 8 GPUs at the default 2 x 3 s of
    copies each with room to spare; a profile that copies for longer sets ``timeout_s``."""
    require_torch("the PCIe diagnostic")
    rounds = rounds or [[gpu] for gpu in range(gpus)]
    base = pcie_load_command(section, device=device, workers=gpus if device == "cpu" else None)
    results, timing = run_workers([[*base, "--gpu", str(gpu)] for gpu in range(gpus)],
                                  timeout_s=PCIE_LOAD.settings(section)["timeout_s"],
                                  env=env or workload_environment(),
                                  rounds=rounds)
    record = _merged(results, PCIE_LOAD_FORMAT, timing)
    index = [row["index"] for row in record["gpus"]]  # worker i measured CUDA device i
    record["rounds"] = [[index[gpu] for gpu in group] for group in rounds]
    return record


def launch_power_hold(section: dict, env: dict[str, str], boards: list[dict], fabric, *, repeats: int = 1,
                      plant_fault: int | None = None) -> list[dict]:
    """The power hold as its kind launches it (kinds/power_hold/): ``repeats`` holds, one after
    another."""
    return [measure_power_hold(section, env) for _ in range(repeats)]


def launch_pcie_load(section: dict, env: dict[str, str], boards: list[dict], fabric, *, repeats: int = 1,
                     plant_fault: int | None = None) -> list[dict]:
    """The PCIe load as its kind launches it (kinds/pcie_load/): ``boards`` (the promised GPUs, CUDA's
    order) copying in the rounds their places on ``fabric``'s PCIe tree allow, ``repeats`` times."""
    buses = {gpu.index: gpu.pci_bus_id for gpu in fabric.gpus if isinstance(gpu.pci_bus_id, str)}
    rounds = live_pcie_rounds([buses.get(board["index"]) for board in boards])
    return [measure_pcie_load(section, env, gpus=len(boards), rounds=rounds) for _ in range(repeats)]


def _merged(results: list[dict], expected_format: str, timing: dict) -> dict:
    """The workers' results (one GPU's row each, in CUDA order) as the one record a single process wrote."""
    for result in results:
        _checked(result, expected_format)
    return {**results[0], "gpus": [row for result in results for row in result["gpus"]], "runner": timing}


def pcie_rounds(places: list[tuple[str | None, int | None]]) -> list[list[int]]:
    """Which GPUs (positions in ``places``: each GPU's sysfs device path and NUMA node, None where unknown) may copy
    at the same time: only GPUs whose paths start at different PCIe root complexes and whose NUMA nodes are known
    and differ (their copies then share no PCIe switch, root port or host memory). The rest copy alone, one after
    another; a machine whose placement cannot be read (a VM's flat PCI tree, no sysfs) copies one GPU at a time,
    as before."""
    def root(path: str | None) -> str | None:
        try:
            return parse_pci_path(path)[0] if path else None
        except ValueError:
            return None

    roots = [root(path) for path, _ in places]
    nodes = [node if isinstance(node, int) and node >= 0 else None for _, node in places]

    def apart(a: int, b: int) -> bool:
        return None not in (roots[a], roots[b], nodes[a], nodes[b]) and roots[a] != roots[b] and nodes[a] != nodes[b]

    rounds: list[list[int]] = []
    for gpu in range(len(places)):
        fits = next((group for group in rounds if all(apart(gpu, other) for other in group)), None)
        if fits is None:
            rounds.append([gpu])
        else:
            fits.append(gpu)
    return rounds


def live_pcie_rounds(bus_ids: list[str | None], root: str = "/") -> list[list[int]]:
    """pcie_rounds for the GPUs of these PCI bus ids (CUDA's order), placed as this machine's sysfs says."""
    places = []
    for bus_id in bus_ids:
        try:
            places.append((pci_device_path(bus_id, root), pci_numa_node(bus_id, root)) if bus_id else (None, None))
        except ValueError:
            places.append((None, None))
    return pcie_rounds(places)
