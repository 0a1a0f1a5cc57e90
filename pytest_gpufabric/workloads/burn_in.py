"""Burn-in: the stress workloads in a loop for a duration, every chunk appended to a log as it ends.

The log (``reports/gpufabric-burnin.jsonl``) is one JSON object a line: a ``start`` line (profile, its sha256,
duration), one line per chunk (GEMM burn on every GPU, with the health counters read around it and the
background reads taken during it; the profile's all_reduce; once, the memory workload), and an ``end`` line.
Each line is flushed and fsync'ed when its chunk ends, so a crash or a power loss loses at most the chunk in
flight; a rerun with the same profile and duration resumes from the log. After each chunk the caller is told
(``progress``), so the results JSON can carry the burn-in as it goes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GpuFabricError
from ..fabric.health import HealthTimeline, window_record
from ..formats.records import BURN_IN_FILE, read_burn_in_log
from ..units import parse_bytes
from .bandwidth import run_collectives
from .environment import workload_environment
from .memory import measure_memory
from .runner import run_workload

GEMM_SCRIPT = Path(__file__).with_name("gemm_burn.py")
LOG_FILE = BURN_IN_FILE  # the log's reading lives with the other recordings (formats/records.py)
#: the log's records of work done ("error": a workload that failed, logged before the burn-in stopped)
CHUNK_TYPES = ("gemm", "all_reduce", "memory", "error")


#: the first chunk's allowance for a GEMM process's start-up (import torch, the CUDA context, the inputs on every
#: GPU): none, so a short burn-in still gets its whole first chunk; each later chunk leaves room for what the one
#: before it took beyond its GEMMs, so the whole burn-in ends within one start-up of its duration
STARTUP_GUESS_S = 0.0


MAX_DURATION_S = 7 * 86400


def parse_duration(text: str) -> float:
    """'10m' -> 600, '90s' -> 90, '2h' -> 7200, '45' -> 45 (seconds); at least one second, at most a week (a
    longer figure is a typo, and one past the clocks' range would fail deep inside the run)."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        seconds = None
    if seconds is None or not 1 <= seconds < float("inf"):
        raise ValueError(f"not a duration of at least a second: {text!r} (write e.g. 90s, 10m or 2h)")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{text!r} is longer than a week (168h): write the burn-in's duration, e.g. 10m or 2h")
    return seconds


def append_line(path: Path, record: dict) -> None:
    """One JSON line, on disk before this returns."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_log(path: Path) -> list[dict]:
    """The log's records up to the first line that is not one (a last line cut by a crash): what a resumed
    burn-in continues from. A replay judges the log through formats.records.read_burn_in_log, which says what
    stopped the reading."""
    return read_burn_in_log(path).records


@dataclass
class BurnIn:
    """The burn-in's records, from the log: what was run and what each GPU did."""

    duration_s: float
    records: list[dict] = field(default_factory=list)
    resumed_from_s: float = 0.0
    #: formats.records.LogProblem: what in the log as read (a replay's) cannot be judged, torn lines included
    problems: list = field(default_factory=list)

    @property
    def start(self) -> dict | None:
        """The start line (the plan: duration, boards), when the log begins with one."""
        return self.records[0] if self.records and self.records[0].get("type") == "start" else None

    @property
    def has_end(self) -> bool:
        return any(r.get("type") == "end" for r in self.records)

    @property
    def serials(self) -> dict[int, str]:
        start = next((r for r in self.records if r.get("type") == "start"), {})
        return {int(gpu): serial for gpu, serial in (start.get("serials") or {}).items()
                if serial and str(gpu).isdigit()}

    @property
    def chunks(self) -> list[dict]:
        return [r for r in self.records if r.get("type") in CHUNK_TYPES]

    @property
    def workload_errors(self) -> list[str]:
        """The GEMM workloads that failed (crashed, hung past their timeout), as logged, a resumed run's too."""
        return [r["error"] for r in self.records if r.get("type") == "error"]

    @property
    def elapsed_s(self) -> float:
        """Wall-clock seconds the burn-in has taken: each chunk's and each workload's between them, their start-up
        included (logs written before ``wall_s`` was recorded count their GEMM seconds). This is what --gpu-burn-in
        DURATION budgets and what the progress bar shows."""
        return sum(r.get("wall_s", r.get("seconds", 0.0) if r.get("type") == "gemm" else 0.0) for r in self.chunks)

    @property
    def gemm_s(self) -> float:
        """Seconds the GPUs spent multiplying (the chunks' own clocks): the burn proper."""
        return sum(r.get("seconds", 0.0) for r in self.chunks if r.get("type") == "gemm")

    @property
    def finished(self) -> bool:
        return any(r.get("type") == "end" for r in self.records) or self.duration_s - self.elapsed_s < 1.0

    def summary(self, log_path: Path | str) -> dict:
        """The burn-in as the results JSON carries it (``burn_in`` in results.schema.json): the plan, how far it
        got, and every chunk as logged."""
        start = next((r for r in self.records if r.get("type") == "start"), {})
        return {"log": str(log_path), "duration_s": self.duration_s, "elapsed_s": self.elapsed_s,
                "gemm_s": self.gemm_s,
                "resumed_from_s": self.resumed_from_s, "finished": self.finished,
                "started_at": start.get("started_at"), "plant_fault": start.get("plant_fault"),
                "plant_fault_board": start.get("plant_fault_board"),
                "serials": start.get("serials") or {},
                "chunks": self.chunks}

    def gpu_totals(self) -> dict[int, dict]:
        totals: dict[int, dict] = {}
        for chunk in self.chunks:
            if chunk["type"] != "gemm":
                continue
            # a value a replayed log holds wrongly is one of its problems (checks/burn_in.py says it), never a crash
            for g in (chunk.get("result") or {}).get("gpus") or []:
                if not isinstance(g, dict) or not isinstance(g.get("gpu"), int):
                    continue
                t = totals.setdefault(g["gpu"], {"gpu": g["gpu"], "name": g.get("name"), "serial": g.get("serial"),
                                                  "iterations": 0, "checks": 0,
                                                  "errors_self": 0, "errors_cross": 0, "tflops": [],
                                                  "health": {}, "max_temperature_c": None,
                                                  "throttle_seen": set()})
                for key in ("iterations", "checks", "errors_self", "errors_cross"):
                    t[key] += g[key] if isinstance(g.get(key), (int, float)) else 0
                if isinstance(g.get("tflops"), (int, float)):
                    t["tflops"].append(g["tflops"])
            for gpu, health in (chunk.get("health") or {}).items():
                t = totals.get(int(gpu)) if str(gpu).isdigit() and isinstance(health, dict) else None
                if t is None:
                    continue
                for counter, delta in (health.get("rose") or {}).items():
                    t["health"][counter] = t["health"].get(counter, 0) + delta
                # the chunk's hottest background read; logs written before those were taken hold the closing read
                temperature = health.get("peak_temperature_c", health.get("temperature_c"))
                if isinstance(temperature, (int, float)):
                    t["max_temperature_c"] = max(t["max_temperature_c"] or 0, temperature)
                t["throttle_seen"].update(health.get("throttle_seen", health.get("throttle")) or [])
        return totals


def progress_line(burn_in: BurnIn, record: dict | None) -> str:
    """The terminal's line at the start of the burn-in (``record`` None) and after each chunk: a bar of the time
    done, and each GPU's rate and wrong elements in the chunk."""
    done = 1.0 if burn_in.finished else min(burn_in.elapsed_s / burn_in.duration_s, 1.0)
    bar = "#" * int(done * 30) + "." * (30 - int(done * 30))
    minutes = f"{burn_in.elapsed_s / 60:5.1f}/{burn_in.duration_s / 60:.1f} min"
    if record is None:
        resumed = f", resuming at {burn_in.resumed_from_s / 60:.1f} min" if burn_in.resumed_from_s else ""
        what = f"GEMM burn on every GPU, results cross-checked{resumed}"
    elif record["type"] == "error":
        what = f"the GEMM workload failed: {record['error']}"
    elif record["type"] == "end":
        what = f"done: {burn_in.gemm_s / 60:.1f} min of GEMMs on every GPU"
    elif record["type"] == "all_reduce":
        what = ("all_reduce between chunks: " + (f"busbw {record['row']['busbw']:.0f} GB/s" if "row" in record
                                                  else f"failed: {record['error']}"))
    elif record["type"] == "memory":
        what = "memory workload between chunks: " + ("failed: " + record["error"] if "error" in record else "done")
    else:
        what = "  ".join(f"GPU{g['gpu']} {g['tflops']:.0f} TFLOP/s {g['errors_self'] + g['errors_cross']} wrong"
                         for g in record["result"]["gpus"])
    return f"[burn-in] [{bar}] {minutes}  {what}"


def gemm_command(seconds: float, section: dict, plant_fault: int | None, gpu_count: int) -> list[str]:
    command = [sys.executable, str(GEMM_SCRIPT), "--seconds", f"{seconds:.1f}",
               "--size", str(section.get("gemm_size", 8192)), "--dtype", section.get("dtype", "bfloat16")]
    if section.get("device", "cuda") == "cpu":
        command += ["--device", "cpu", "--workers", str(gpu_count)]
    if plant_fault is not None:
        command += ["--plant-fault", str(plant_fault)]
    return command


def run_burn_in(profile, duration_s: float, log_path: Path, *, plant_fault: int | None = None, health=None,
                progress=None, sha256: str = "", env: dict[str, str] | None = None,
                boards: list[dict] | None = None) -> BurnIn:
    """Run (or resume) the burn-in; ``health``: a HealthReader whose reads bracket each GEMM chunk and sample it
    in the background (for its peak temperature and clock events); ``progress(burn_in, line)`` is told at the
    start (line None) and after each chunk. ``env`` and ``boards``: the workloads' environment and the boards in
    their CUDA order (environment.promised_boards); ``plant_fault`` is a CUDA index, logged with its board.
    Raises GpuFabricError from a workload that failed, after its failure
    was logged."""
    section = profile.data.get("burn_in", {})
    chunk_s = float(section.get("chunk_s", 60))
    records = read_log(log_path)
    start = records[0] if records else None
    serials = {str(i): s for i, s in (health.serials.items() if health else [])}
    # resume only the same burn-in (profile, duration, planted fault) on the same GPUs: a reports/ folder copied
    # to another machine, or a GPU swapped since, starts afresh
    same = (start is not None and start.get("type") == "start" and start.get("profile_sha256") == sha256
            and start.get("duration_s") == duration_s and start.get("plant_fault") == plant_fault
            and not any(r.get("type") == "end" for r in records)
            and (not serials or start.get("serials") == serials))
    if same:
        # drop a line torn by the crash, so the lines appended now are read back after the good ones
        log_path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("", encoding="utf-8")
        records = []
        append_line(log_path, {"type": "start", "profile": profile.name, "profile_sha256": sha256,
                               "duration_s": duration_s, "plant_fault": plant_fault, "serials": serials,
                               "plant_fault_board": (boards[plant_fault] if plant_fault is not None and boards
                                                     and plant_fault < len(boards) else None),
                               "started_at": time.time()})
        records = read_log(log_path)
    burn_in = BurnIn(duration_s, records)
    burn_in.resumed_from_s = burn_in.elapsed_s
    if progress:
        progress(burn_in, None)
    env = env or workload_environment()
    all_reduce = [t for op, t in profile.collective_thresholds() if op == "all_reduce"]
    memory_done = any(r.get("type") == "memory" for r in records)
    # wall-clock budget: each chunk leaves room for the start-up the last one took beyond its GEMMs, so a burn-in
    # of D takes D; a remainder under a second is done (a chunk that short runs no GEMM: docs/evidence/burn-in.md)
    startup_s = STARTUP_GUESS_S
    while duration_s - burn_in.elapsed_s - startup_s >= 1.0:
        seconds = min(chunk_s, duration_s - burn_in.elapsed_s - startup_s)
        before = health.read() if health else None
        began = time.monotonic()
        sampler = HealthTimeline(health, profile.data.get("health", {}).get("interval_s", 2.0)) if health else None
        if sampler:
            sampler.start()
        try:
            result = run_workload(gemm_command(seconds, section, plant_fault, profile.gpu_count),
                                  timeout_s=seconds + 300, env=env)
        except GpuFabricError as exc:
            failure = {"type": "error", "workload": "gemm_burn", "error": str(exc), "time": time.time()}
            append_line(log_path, failure)
            burn_in.records.append(failure)
            if progress:
                progress(burn_in, failure)
            raise
        finally:
            if sampler:
                sampler.stop()
        result.pop("stdout_tail", None)
        wall_s = time.monotonic() - began
        startup_s = max(1.0, wall_s - result["seconds"])
        record = {"type": "gemm", "seconds": result["seconds"], "wall_s": wall_s, "result": result,
                  "time": time.time()}
        if health:
            record["health"] = window_record(before, health.read(), sampler.points)
            record["timeline"] = sampler.points  # the report's health plot of the burn-in, live or replayed
        append_line(log_path, record)
        burn_in.records.append(record)
        if progress:
            progress(burn_in, record)
        between = []
        if all_reduce and profile.gpu_count > 1 and section.get("device", "cuda") == "cuda":
            between.append(_all_reduce_chunk(profile, all_reduce, log_path, env))
        # the memory workload (a minute and more) runs once past half the time, where enough of it is left
        wants_memory = "memory" in profile.data and section.get("memory", True)
        remaining = duration_s - burn_in.elapsed_s
        if (wants_memory and not memory_done and burn_in.elapsed_s >= duration_s / 2
                and remaining >= float(section.get("memory_min_remaining_s", 120))):
            between.append(_memory_chunk(profile, log_path, env))
            memory_done = True
        for other in between:
            burn_in.records.append(other)
            if progress:
                progress(burn_in, other)
    end = {"type": "end", "elapsed_s": burn_in.elapsed_s, "time": time.time()}
    append_line(log_path, end)
    burn_in.records.append(end)
    if progress:
        progress(burn_in, end)
    return burn_in


def _all_reduce_chunk(profile, thresholds: list[dict], log_path: Path, env: dict[str, str]) -> dict:
    size = max(parse_bytes(t["size"]) for t in thresholds)
    began = time.monotonic()
    try:
        result = run_collectives(profile.gpu_count, ["all_reduce"], [size], warmup=2, iters=10, timeout_s=300,
                                 env=env)
        record = {"type": "all_reduce", "row": result["ops"]["all_reduce"][0]}
    except GpuFabricError as exc:
        record = {"type": "all_reduce", "error": str(exc)}
    record.update(wall_s=time.monotonic() - began, time=time.time())
    append_line(log_path, record)
    return record


def _memory_chunk(profile, log_path: Path, env: dict[str, str]) -> dict:
    began = time.monotonic()
    try:
        result = measure_memory(profile.data["memory"], env)
        # what it ran and on which board, so that the log shows the memory workload the profile promises
        record = {"type": "memory", "oversized": result["oversized"], "lms": result.get("lms", []),
                  **{key: result.get(key) for key in ("budget_bytes", "input", "device", "board")}}
    except GpuFabricError as exc:
        record = {"type": "memory", "error": str(exc)}
    record.update(wall_s=time.monotonic() - began, time=time.time())
    append_line(log_path, record)
    return record
