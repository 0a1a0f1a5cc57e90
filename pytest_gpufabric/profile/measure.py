"""`gpufabric profile init --measure`: floors from what this machine measures, with the spread beside them.

On a golden machine every measurement it supports runs (copies, collectives where there are two GPUs or more, HBM
bandwidth, the GEMM rate of the burn-in, the power hold, the PCIe link under load, memory behaviour), the cheap ones
``repeats`` times to see their spread, and each floor is set at ``margin`` times the lowest value measured (each
ceiling at the highest over ``margin``). Every floor carries, as a YAML comment beside it, the values it came from,
their spread, the date and the margin, so whoever reads the profile later knows what normal was. With ``--replay``
the recordings of a bundle stand for one repeat each.

What cannot be measured alone (ib_write_bw needs a peer) is said in the comments, not promised.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..fabric.bundle import load_bandwidth_recording, load_json_recording
from ..units import GIB, MIB, format_bytes, parse_bytes
from ..workloads.bandwidth import run_collectives, run_copy
from ..workloads.burn_in import LOG_FILE, gemm_command, read_log
from ..workloads.environment import gpu_environment, promised_boards
from ..workloads.memory import SPARE_IMPORTS as MEMORY_SPARE_IMPORTS
from ..workloads.memory import measure_memory
from ..workloads.runner import SPARES, TORCH_ONLY, run_workload, spare_count

#: the memory suite's workload as the shipped profiles run it (GoogLeNet at 3x1200x1200) at a quarter of their size,
#: so that it takes seconds: a batch of 4 that fits its 4 GiB only by offloading (docs/margins.md: why these sizes)
MEMORY_TEMPLATE = {"budget": "4 GiB", "model": "auto", "mode": "train", "input": [4, 3, 1200, 1200],
                   "fit_batch": 1, "probe_batches": [2], "expect": "oom", "estimate_tolerance": 0.10,
                   "lms": [{"threshold": "8 MiB", "usage_fraction": 0.0},
                           {"threshold": "64 MiB", "usage_fraction": 0.5}]}
COLLECTIVE_SIZES = (MIB, 256 * MIB, GIB)
#: the order the measurements run in and their sections are written (a per-GPU diagnostic by its descriptor's
#: ``measure_as``; one not named here runs after these)
_ORDER = ("copy", "collectives", "hbm", "power", "pcie", "gemm", "memory", "pattern")
#: a latency-bound time (all_reduce at 1 MiB) moves more from run to run than a bandwidth does: its ceiling is the
#: highest measured times this, whatever the margin
LATENCY_ALLOWANCE = 1.5
#: an offloading slowdown is held against one short batch-1 step whose time moves from run to run, so its ceiling is
#: the measured ratio times this (every recorded ratio lies within 1.92x of the lowest: docs/margins.md)
OFFLOAD_ALLOWANCE = 2.0


@dataclass
class Measured:
    """The measured profile sections and, per section, the comment lines saying where each number came from."""

    sections: dict = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    not_measured: list[str] = field(default_factory=list)

    def note(self, section: str, text: str) -> None:
        self.notes.setdefault(section, []).append(text)

    @staticmethod
    def figures(values: list[float], unit: str, digits: int = 1) -> str:
        """'3301.2, 3298.7 GB/s (spread 0.1%)': the values a floor came from, for its note."""
        return _figures(values, unit, digits)


def _spread(values: list[float]) -> str:
    median = statistics.median(values)
    return f"spread {(max(values) - min(values)) / median:.1%}" if median else "spread ?"


def _figures(values: list[float], unit: str, digits: int = 1) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values) + f" {unit} ({_spread(values)})"


class _Runs:
    """The workloads, live: each called with how many times to measure returns that many result dicts (as the
    registry's entries would record them); the repeats of one measurement run in its one set of processes."""

    def __init__(self, fabric, name: str, diagnostics: Sequence):
        self.fabric = fabric
        self.boards = promised_boards(fabric, len(fabric.gpus), name)
        self.env = gpu_environment(self.boards)
        # the collectives' ranks, each diagnostic's processes (a worker per GPU, or one) and one process for each of
        # the copies, the GEMM and the memory workload, as far as the cores allow
        gpus = len(self.boards)
        wanted = gpus + sum(gpus if m.diagnostic.per_gpu else 1 for m in diagnostics) + 3
        SPARES.prestart(self.env, [TORCH_ONLY] * spare_count(wanted))

    def copy(self, times: int) -> list[dict]:
        cpus = {g.index: g.cpu_affinity for g in self.fabric.gpus if isinstance(g.cpu_affinity, str)}
        affinity = {cuda: cpus[b["index"]] for cuda, b in enumerate(self.boards) if b["index"] in cpus}
        return _repeats(run_copy(GIB, iters=10, warmup=3, cpu_affinity=affinity, env=self.env, repeats=times,
                                 gpus=len(self.boards)), times)

    def collectives(self, times: int) -> list[dict]:
        return _repeats(run_collectives(len(self.boards), ["all_reduce"], list(COLLECTIVE_SIZES), iters=20,
                                        env=self.env, repeats=times), times, key="ops")

    def diagnostic(self, measurement, times: int) -> list[dict]:
        """A per-GPU diagnostic as its kind runs it for ``--measure`` (its descriptor's ``measure_section``)."""
        section = dict(measurement.diagnostic.measure_section)
        return measurement.launch(section, self.env, self.boards, self.fabric, repeats=times)

    def gemm(self, times: int) -> list[dict]:
        # the memory workload comes next: its spare (torchvision too, 14 s on an H100) imports during the GEMM,
        # whose rate the GPU bounds, rather than being taken early by a torch-only workload
        SPARES.prestart(self.env, [MEMORY_SPARE_IMPORTS])
        return [run_workload(gemm_command(10, {}, None, len(self.boards)), timeout_s=300, env=self.env)
                for _ in range(times)]

    def memory(self, times: int) -> list[dict]:
        return [measure_memory(_memory_section(self.fabric), self.env) for _ in range(times)]


def _repeats(result: dict, times: int, key: str | None = None) -> list[dict]:
    """A workload's result of ``times`` repeats in one run (its ``repeats`` list) as that many results, each as one
    run of it writes it: the repeat's figures in place of the first's (under ``key`` where they sit there)."""
    if times == 1:
        return [result]
    shared = {k: v for k, v in result.items() if k != "repeats"}
    return [{**shared, **({key: figures} if key else figures)} for figures in result["repeats"]]


def _memory_section(fabric) -> dict:
    """The template; on a GPU of less than 8 GiB, half its memory (the batch of 4 must still not fit)."""
    smallest = min((g.memory_bytes for g in fabric.gpus if isinstance(g.memory_bytes, int)), default=None)
    section = {k: v for k, v in MEMORY_TEMPLATE.items() if k != "lms"}
    section["lms"] = [dict(spec) for spec in MEMORY_TEMPLATE["lms"]]
    if smallest is not None and smallest < 8 * GIB:
        section["budget"] = format_bytes(smallest // 2)
    return section


def _recorded(directory: Path, diagnostics: Sequence) -> dict[str, Callable[[int], list[dict]]]:
    """A bundle's recordings, in the shapes the live workloads return (one repeat each; none when not recorded)."""
    def bandwidth(part: str):
        def read():
            recording = load_bandwidth_recording(directory)
            return getattr(recording, part) if recording is not None else None
        return read

    def gemm():
        chunks = [r for r in read_log(directory / LOG_FILE) if r.get("type") == "gemm"]
        return chunks[-1]["result"] if chunks else None

    def json_file(name: str, what: str):
        return lambda: load_json_recording(directory, name, what=what)

    readers = {"copy": bandwidth("copy"), "collectives": bandwidth("collectives"), "gemm": gemm,
               "memory": json_file("memory.json", "memory"),
               **{d.measure_as: json_file(d.record_file, d.recording) for d in (m.diagnostic for m in diagnostics)}}

    def once(read: Callable[[], dict | None]) -> Callable[[int], list[dict]]:
        return lambda times: [result] if (result := read()) is not None else []

    return {key: once(read) for key, read in readers.items()}


def measure_machine(fabric, name: str, *, repeats: int = 3, margin: float = 0.9, bundle: Path | None = None,
                    say: Callable[[str], None] = lambda line: None, diagnostics: Sequence = ()) -> Measured:
    """Every measurement this machine (or ``bundle``) supports, turned into profile sections with their notes;
    ``diagnostics``: the per-GPU diagnostics' measurements (kinds.base.Measurement: kinds.diagnostics() gives
    them), in promise order."""
    diagnostics = [m for m in diagnostics if m.measure is not None]
    measured = Measured()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    if bundle is not None:
        runs, repeats, where = _recorded(bundle, diagnostics), 1, f"recorded in {bundle.name}"
    else:
        live = _Runs(fabric, name, diagnostics)
        runs = {"copy": live.copy, "collectives": live.collectives, "gemm": live.gemm, "memory": live.memory,
                **{m.diagnostic.measure_as: functools.partial(live.diagnostic, m) for m in diagnostics}}
        where = f"measured on {fabric.hostname or 'this machine'} on {stamp}"
    gpus = len(fabric.gpus)

    def each(key: str, times: int) -> list[dict]:
        if bundle is not None:
            say(f"reading {key} from the bundle {bundle.name}")
        else:
            say(f"measuring {key}" + (f" ({times} times in one run)" if times > 1 else ""))
        results = runs[key](times)
        if not results:
            measured.not_measured.append(f"{key}: not recorded")
            if bundle is not None:
                say(f"{key}: not recorded in the bundle {bundle.name}: no floor for it")
        return results

    # live, a diagnostic that runs beside another in the acceptance (Measurement.runs_beside) runs beside it here too
    partners = {m.diagnostic.measurement: m for m in diagnostics}
    beside = {} if bundle is not None else {
        m.diagnostic.measure_as: partners[m.runs_beside] for m in diagnostics
        if m.runs_beside in partners and not m.beside_refused(dict(m.diagnostic.measure_section),
                                                             dict(partners[m.runs_beside].diagnostic.measure_section),
                                                             fabric)}

    def diagnostic(measurement) -> None:
        d = measurement.diagnostic
        if d.measure_as in beside:  # measured in its partner's step
            return
        companions = [m for m in diagnostics if beside.get(m.diagnostic.measure_as) is measurement]
        with ThreadPoolExecutor() as pool:  # the pair ends together
            started = [(m, pool.submit(each, m.diagnostic.measure_as, repeats if m.diagnostic.spread else 1))
                       for m in companions]
            results = each(d.measure_as, repeats if d.spread else 1)
        for m, found in [(measurement, results), *((m, future.result()) for m, future in started)]:
            if found:
                m.measure(measured, found, margin, where)

    def collectives() -> None:
        if gpus >= 2:
            _collectives(measured, each("collectives", repeats), margin, where)
        else:
            measured.not_measured.append("collective bandwidth: one GPU (nothing to reduce between)")

    steps = {"copy": lambda: _copies(measured, each("copy", repeats), gpus, margin, where),
             "collectives": collectives, "gemm": lambda: _gemm(measured, each("gemm", 1), margin, where),
             "memory": lambda: _memory(measured, each("memory", 1), fabric, margin, where),
             **{m.diagnostic.measure_as: functools.partial(diagnostic, m) for m in diagnostics}}
    try:
        for step in [*_ORDER, *(key for key in steps if key not in _ORDER)]:
            steps[step]()
    finally:
        if bundle is None:
            SPARES.disable()
    measured.not_measured.append("ib_write_bw: needs a peer machine (rdma.ib_write_bw.peer), not measured alone")
    return measured


def _copies(measured: Measured, results: list[dict], gpus: int, margin: float, where: str) -> None:
    if not results:
        return
    copy: dict = {"size": "1 GiB"}
    for kind in ("host_to_device", "device_to_host"):
        lows = [min(row[kind]["gbps"] for row in result["host_device"]) for result in results]
        copy[kind] = {"min": f"{margin * min(lows):.1f} GB/s"}
        measured.note("bandwidth", f"copy {kind}, slowest GPU of each run, {where}: {_figures(lows, 'GB/s')}; floor "
                                   f"{margin:g} x the lowest")
    if gpus >= 2 and all(result.get("gpu_to_gpu") for result in results):
        lows = [min(row["gbps"] for row in result["gpu_to_gpu"]) for result in results]
        copy["gpu_to_gpu"] = {"min": f"{margin * min(lows):.1f} GB/s"}
        measured.note("bandwidth", f"copy gpu_to_gpu, slowest pair of each run, {where}: {_figures(lows, 'GB/s')}")
    measured.sections.setdefault("bandwidth", {})["copy"] = copy


def _collectives(measured: Measured, results: list[dict], margin: float, where: str) -> None:
    if not results:
        return
    floors = []
    for size in COLLECTIVE_SIZES:
        rows = [next((r for r in result["ops"]["all_reduce"] if r["size"] <= size and size - r["size"] < 4096), None)
                for result in results]
        if any(r is None for r in rows):
            continue
        label = format_bytes(size).replace(".00 ", " ")
        if size <= MIB:  # latency-bound: a ceiling on the time
            times = [r["time_us"] for r in rows]
            floors.append({"size": label, "max_time": f"{max(times) * LATENCY_ALLOWANCE:.0f} us"})
            measured.note("bandwidth", f"all_reduce {label} time, {where}: {_figures(times, 'us')}; ceiling "
                                       f"{LATENCY_ALLOWANCE:g} x the highest (latency moves more than bandwidth)")
        else:
            busbw = [r["busbw"] for r in rows]
            floors.append({"size": label, "min_busbw": f"{margin * min(busbw):.1f} GB/s"})
            measured.note("bandwidth", f"all_reduce {label} busbw, {where}: {_figures(busbw, 'GB/s')}")
    if floors:
        measured.sections.setdefault("bandwidth", {})["collectives"] = {"all_reduce": floors}


def _gemm(measured: Measured, results: list[dict], margin: float, where: str) -> None:
    if not results:
        return
    rates = [g["tflops"] for g in results[0]["gpus"]]
    measured.sections["burn_in"] = {"chunk_s": 60, "min_tflops": round(margin * min(rates))}
    measured.note("burn_in", f"burn_in: bf16 8192^3 GEMM per GPU, {where}: {', '.join(f'{r:.0f}' for r in rates)} "
                             f"TFLOP/s; floor {margin:g} x the lowest")


def _bound_partial_offload(measured: Measured, specs: list[dict]) -> None:
    """A partial offload (tensors past a share of the budget) costs what the step had used when it began to
    offload, which moves from run to run (on 2x H100 SXM: 1.58x and 1.97x under init, 4.0x and 10.8x in the
    acceptances after it: tests/data/results/acceptance-time-h100-x2); offloading every tensor of a smaller or
    equal threshold bounds it. Its ceiling is at least that full offload's."""
    full = [s for s in specs if not s.get("usage_fraction") and "max_slowdown" in s]
    for spec in specs:
        if not spec.get("usage_fraction") or "max_slowdown" not in spec:
            continue
        bounds = [f["max_slowdown"] for f in full if parse_bytes(f["threshold"]) <= parse_bytes(spec["threshold"])]
        if bounds and max(bounds) > spec["max_slowdown"]:
            spec["max_slowdown"] = max(bounds)
            measured.note("memory", f"memory: offloading tensors >= {spec['threshold']} past "
                                    f"{spec['usage_fraction']:.0%} of the budget held to the ceiling of offloading "
                                    f"every tensor, {max(bounds)}x: how much it offloads moves from run to run")


def _memory(measured: Measured, results: list[dict], fabric, margin: float, where: str) -> None:
    if not results:
        return
    result = results[0]
    section = _memory_section(fabric)
    section["budget"] = format_bytes(result["budget_bytes"]).replace(".00 ", " ")
    for spec, run in zip(section["lms"], result.get("lms", []), strict=False):
        ratio = run.get("ratio_vs_baseline")
        if run.get("outcome") == "completed" and isinstance(ratio, (int, float)):
            spec["max_slowdown"] = round(ratio * OFFLOAD_ALLOWANCE, 2)
            measured.note("memory", f"memory: offloading tensors >= {spec['threshold']} past "
                                    f"{spec['usage_fraction']:.0%} of the budget, {where}: {ratio:.2f}x the batch-1 "
                                    f"time per image; ceiling {OFFLOAD_ALLOWANCE:g} x that (held against one short "
                                    "batch-1 step, which moves: on one H100 SXM the same step read 3.09x and "
                                    "4.98x minutes apart)")
    _bound_partial_offload(measured, section["lms"])
    section["lms"] = [spec for spec in section["lms"] if "max_slowdown" in spec]
    if not section["lms"]:
        del section["lms"]
    measured.sections["memory"] = section
