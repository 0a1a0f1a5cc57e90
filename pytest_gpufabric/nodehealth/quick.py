"""The quick tier (`gpufabric health --quick`): a few seconds of work on every GPU at once, judged against the
profile's floors. The same workloads as the acceptance, each a child process group (workloads/runner.py), sized
for a check between jobs:

- the burn-in's cross-checked GEMM (workloads/gemm_burn.py) for QUICK_GEMM_S seconds on every GPU: one wrong element
  drains the board (the same inputs must give the same bits);
- HBM bandwidth (workloads/hbm.py) with QUICK_HBM buffers, the best of a few runs, against the profile's
  memory_bandwidth floor (or the GPU model's fraction of NVML's peak, as the acceptance holds it);
- the memory pattern test (workloads/mem_pattern.py) over a slice of each GPU's memory (QUICK_PATTERN_BYTES), every
  pattern once: a word read back wrong drains the board. A slice is not the whole memory: its coverage is shown,
  not judged (the acceptance's full test judges that).

The three interpreters import torch at once before the first runs (runner.SpareInterpreters), so the imports are
paid once. The profile's ``burn_in.device: cpu`` runs the same code on CPU stand-ins (tests, a machine without
GPUs): the rows then measured no board, and say so.
"""

from __future__ import annotations

import math
import time

from ..checks.hbm import check_hbm_bandwidth
from ..checks.result import FAILED, NOT_CHECKED
from ..diagnostics.hbm import HBM
from ..diagnostics.memory_pattern import MEMORY_PATTERN
from ..errors import ToolMissing, WorkloadError
from ..kinds.burn_in import SECTION as BURN_IN_SECTION
from ..reference import hbm_fraction_floor
from ..remedy_classes import RERUN, RESET, RMA, SOFTWARE
from ..units import format_bytes
from ..workloads.burn_in import gemm_command
from ..workloads.diagnostics import hbm_command, mem_pattern_command
from ..workloads.environment import require_torch, workload_environment
from ..workloads.runner import SPARES, TORCH_ONLY, run_workload
from .finding import DRAIN, UNKNOWN, WARN, Finding
from .model import Baseline
from .record import NodeHealthRecord

QUICK_GEMM_S = 3.0
QUICK_HBM = {"size": "1 GiB", "iters": 5, "warmup": 2}
QUICK_PATTERN_BYTES = "1 GiB"
#: the same, on CPU stand-ins: sizes a CI machine does in a second
CPU_GEMM_SIZE, CPU_HBM = 256, {"size": "8 MiB", "iters": 3, "warmup": 1}
CPU_PATTERN_BYTES = "1 MiB"
WORKLOAD_TIMEOUT_S = 120.0


def _on_cpu(profile) -> bool:
    return (profile.data.get(BURN_IN_SECTION) or {}).get("device") == "cpu"


def quick_commands(profile, *, plant_fault: int | None = None, workers: int | None = None) -> dict[str, list[str]]:
    """The three workloads' command lines for this profile (without the runner's --handshake/--result);
    ``workers``: the CPU stand-ins' count (default: the profile's GPU count)."""
    workers = profile.gpu_count if workers is None else workers
    burn = dict(profile.data.get(BURN_IN_SECTION) or {})
    device = burn.get("device", "cuda")
    if device == "cpu":
        burn["gemm_size"] = CPU_GEMM_SIZE
    hbm = CPU_HBM if device == "cpu" else QUICK_HBM
    pattern_section = {**(profile.data.get(MEMORY_PATTERN.key) or {}), "seconds": 0.5,
                       "bytes": CPU_PATTERN_BYTES if device == "cpu" else QUICK_PATTERN_BYTES}
    pattern_section.pop("chunk_bytes", None)
    commands = {"gemm": gemm_command(QUICK_GEMM_S, burn, plant_fault, workers),
                "hbm": hbm_command(hbm, device),
                MEMORY_PATTERN.name: mem_pattern_command(pattern_section, plant_fault, device)}
    if device == "cpu":
        for name in ("hbm", MEMORY_PATTERN.name):
            commands[name] += ["--workers", str(workers)]
    return commands


def run_quick(node: NodeHealthRecord, baseline: Baseline, *, plant_fault: int | None = None,
              gpus: list[int] | None = None) -> tuple[list[Finding], list[str], dict]:
    """Run the three workloads on ``gpus`` (NVML indexes, quick_gpus.py; None: every GPU that answers) and judge
    them: (findings, notes, {workload: its result or None}). ``plant_fault``: a CUDA index among those GPUs."""
    profile = baseline.profile
    findings: list[Finding] = []
    answering = [g for g in node.gpus if g.lost is None and "handle" not in g.unreadable]
    gpus = [g.index for g in answering] if gpus is None else sorted(gpus)
    if not gpus:
        return [], ["quick tier workloads not run: no GPU of this node is free to run them on"], {}
    try:
        require_torch("gpufabric health --quick")
    except ToolMissing as exc:
        return [Finding("quick-tier", UNKNOWN, "quick tier needs torch", remedy=SOFTWARE, detail=str(exc))], [], {}
    uuids = [g.uuid for g in answering if g.index in gpus]
    if _on_cpu(profile) or (None in uuids and len(gpus) == len(answering)):
        env = workload_environment()
    elif None in uuids:
        return [Finding("quick-tier", UNKNOWN, "GPU UUIDs not readable", remedy=RERUN,
                        detail="the quick tier runs on some GPUs only (the others are held) and shows CUDA those by "
                               "UUID; a GPU's UUID could not be read")], [], {}
    else:  # CUDA sees exactly the GPUs run on, in this order: its device i is gpus[i]
        env = workload_environment({"CUDA_VISIBLE_DEVICES": ",".join(uuids)})
    commands = quick_commands(profile, plant_fault=plant_fault, workers=len(gpus))
    results: dict[str, dict | None] = {}
    seconds: dict[str, float] = {}
    SPARES.prestart(env, [TORCH_ONLY] * len(commands))
    try:
        for name, command in commands.items():
            started = time.monotonic()
            try:
                results[name] = run_workload(command, timeout_s=WORKLOAD_TIMEOUT_S, env=env)
            except WorkloadError as exc:
                results[name] = None
                findings.append(Finding(f"quick-{name}", UNKNOWN, f"{name} workload failed", remedy=RERUN,
                                        evidence={"command": " ".join(command[1:]), "exit": exc.returncode},
                                        detail=str(exc)[-1500:]))
            seconds[name] = round(time.monotonic() - started, 3)
    finally:
        SPARES.disable()
    if _on_cpu(profile):  # CPU stand-in i stands for the i-th GPU run on
        for name, index_key in (("gemm", "gpu"), ("hbm", "index"), (MEMORY_PATTERN.name, "index")):
            for row in (results.get(name) or {}).get("gpus") or []:
                if isinstance(row.get(index_key), int) and 0 <= row[index_key] < len(gpus):
                    row[index_key] = gpus[row[index_key]]
    judge = _QuickJudge(node, baseline, findings, gpus)
    if results.get("gemm") is not None:
        judge.gemm(results["gemm"])
    if results.get("hbm") is not None:
        judge.hbm(results["hbm"])
    if results.get(MEMORY_PATTERN.name) is not None:
        judge.pattern(results[MEMORY_PATTERN.name])
    judge.notes.append("quick tier workload seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    return findings, judge.notes, results


class _QuickJudge:
    def __init__(self, node: NodeHealthRecord, baseline: Baseline, findings: list[Finding], gpus: list[int]) -> None:
        self.node, self.profile, self.findings = node, baseline.profile, findings
        self.notes: list[str] = []
        self.gpus = {g.index: g for g in node.gpus if g.lost is None and g.index in gpus}

    def _rows(self, result: dict, name: str, index_key: str) -> dict[int, dict]:
        """The rows of a workload's result bound to this machine's GPUs: by NVML index, and by serial where the
        row measured a GPU (a CPU stand-in names none); each GPU without a row it can be judged on is unknown."""
        rows: dict[int, dict] = {}
        cpu = result.get("device") == "cpu"
        for row in result.get("gpus") or []:
            index = row.get(index_key)
            gpu = self.gpus.get(index)
            if gpu is None:
                continue
            if not cpu and not (row.get("serial") or row.get("uuid")):
                self._unknown(name, gpu, f"the {name} row of GPU{index} does not say which board it measured")
            elif not cpu and gpu.serial and row.get("serial") != gpu.serial:
                self._unknown(name, gpu, f"the {name} workload measured serial {row.get('serial')} as GPU{index}, "
                                         f"which NVML reads as serial {gpu.serial}")
            else:
                rows[index] = row
        judged = {f.gpu for f in self.findings if f.check == f"quick-{name}"}
        for index, gpu in self.gpus.items():
            if index not in rows and index not in judged:
                self._unknown(name, gpu, f"the {name} workload returned no result for GPU{index} (CUDA saw "
                                         f"{len(result.get('gpus') or [])} device(s))")
        if cpu:
            self.notes.append(f"{name}: CPU stand-ins (profile burn_in.device: cpu), not the GPUs")
        return rows

    def _unknown(self, name: str, gpu, why: str) -> None:
        self.findings.append(Finding(f"quick-{name}", UNKNOWN, f"{name} not judged", gpu.index, gpu.serial, RERUN,
                                     {"why": why}, why))

    def _add(self, check: str, severity: str, what: str, gpu, remedy: str | None, detail: str, **evidence) -> None:
        self.findings.append(Finding(check, severity, what, gpu.index, gpu.serial, remedy, evidence, detail))

    def gemm(self, result: dict) -> None:
        floor = (self.profile.data.get(BURN_IN_SECTION) or {}).get("min_tflops")
        planted = result.get("plant_fault")
        for index, row in self._rows(result, "gemm", "gpu").items():
            gpu = self.gpus[index]
            figures = {k: row.get(k) for k in ("iterations", "checks", "errors_self", "errors_cross", "tflops")}
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in figures.values()) or not row["checks"]:
                self._unknown("gemm", gpu, f"the GEMM row of GPU{index} holds no checked result ({figures})")
                continue
            wrong = row["errors_self"] + row["errors_cross"]
            note = " (a fault planted on purpose by --plant-fault)" if planted == row.get("cuda_index") else ""
            if wrong:
                self._add("quick-gemm", DRAIN, f"{wrong} wrong GEMM elements", gpu, RMA,
                          f"{wrong} element(s) differed from the same product computed before or on GPU0, in "
                          f"{row['checks']} checks over {result['seconds']:.1f} s{note}: the board computes wrong "
                          "results", seconds=result["seconds"], size=result["size"], dtype=result["dtype"], **figures)
            elif floor is not None and row["tflops"] < floor:
                self._add("quick-gemm", WARN, f"GEMM {row['tflops']:.0f} TFLOP/s, floor {floor:g}", gpu, None,
                          f"below the burn-in's floor over {result['seconds']:.1f} s (a few seconds from a cold start "
                          "are not the burn-in's average: shown, not judged)", min_tflops=floor, **figures)

    def hbm(self, result: dict) -> None:
        section = self.profile.data.get(HBM.key) or {}
        floor = {k: section[k] for k in ("min", "min_fraction_of_peak") if k in section}
        for index, row in self._rows(result, "hbm", "index").items():
            gpu = self.gpus[index]
            model = hbm_fraction_floor(row.get("name") or gpu.name)
            if not floor and model is None:
                self.notes.append(f"GPU{index}: HBM bandwidth not judged: the profile states no memory_bandwidth "
                                  "floor and the GPU model has no reference fraction")
                continue
            checked = check_hbm_bandwidth(row, floor, model, f"quick tier, {format_bytes(result['size_bytes'])} "
                                                            f"buffers, best of {result['iters']}")
            figures = {k: row.get(k) for k in ("best_gbps", "peak_gbps", "fraction_of_peak")}
            if checked.verdict == FAILED:
                self._add("quick-hbm", DRAIN, f"HBM {row['best_gbps']:.0f} GB/s below floor", gpu, SOFTWARE,
                          checked.message, expected=checked.expected, **figures)
            elif checked.verdict == NOT_CHECKED:
                self._unknown("hbm", gpu, checked.message)

    def pattern(self, result: dict) -> None:
        for index, row in self._rows(result, MEMORY_PATTERN.name, "index").items():
            gpu = self.gpus[index]
            tested, passes = row.get("tested_bytes"), row.get("passes") or []
            figures = {"tested_bytes": tested, "passes": len(passes), "mismatches": row.get("mismatches"),
                       "first_mismatches": (row.get("first_mismatches") or [])[:3], "free_bytes": row.get("free_bytes")}
            planted = " (a fault planted on purpose by --plant-fault)" if row.get("planted") else ""
            if row.get("error"):
                self._add("quick-memory-pattern", DRAIN, "memory test stopped by a device error", gpu, RESET,
                          f"{row['error']}{planted}", **figures)
            elif row.get("mismatches"):
                first = (row.get("first_mismatches") or [{}])[0]
                self._add("quick-memory-pattern", DRAIN, f"{row['mismatches']} memory words read back wrong", gpu, RMA,
                          f"first at offset {first.get('offset_bytes')} in {first.get('pattern')}, bit(s) "
                          f"{first.get('xor_bits')} flipped{planted}: failing device memory", **figures)
            elif not tested or not passes:
                self._unknown(MEMORY_PATTERN.name, gpu, f"the memory pattern test tested nothing on GPU{index} "
                                                     f"({row.get('allocation_stopped') or 'no pass'})")
            else:
                self.notes.append(f"GPU{index}: memory pattern over {format_bytes(tested)} "
                                  f"({len(passes)} passes), no mismatch")
