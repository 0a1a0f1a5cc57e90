"""The recordings of the per-GPU diagnostics (hbm.json, memory-pattern.json, power-hold.json, pcie-load.json), the
memory suite (memory.json) and the burn-in (gpufabric-burnin.jsonl), read in one place each, typed.

Each file kind declares its shape (formats/typed.py): its format tag, every number's kind (finite, in its
physical range, in the unit its key names) and one row per GPU. Reading never raises on content: a file that
cannot be read, or a value that does not fit, is kept as a problem naming the file, the key and the value, and
the checks say it (the promise is not checked) instead of judging it. A problem inside one GPU's row stops that
GPU's verdict only.

The format tags are the workload scripts' own (each standalone script spells its FORMAT out too).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .typed import Field, Opt, check_shape

HBM_FILE = "hbm.json"
PATTERN_FILE = "memory-pattern.json"
POWER_FILE = "power-hold.json"
PCIE_FILE = "pcie-load.json"
MEMORY_FILE = "memory.json"
BURN_IN_FILE = "gpufabric-burnin.jsonl"

_TEXT = Field("text")
_NOTE = Field("text", required=False, nullable=True)  # optional words: a name, an error, a reason
_ANY = Field("any", required=False, nullable=True)


def _n(kind: str, required: bool = True, nullable: bool = False) -> Field:
    return Field(kind, required, nullable)


def _read(kind: str) -> Field:
    """A reading NVML may not give (null, its reason under the row's ``unread``)."""
    return Field(kind, required=False, nullable=True)


#: who a row measured: the board's NVML index, UUID and serial (workloads/identity.py)
_BOARD = {"index": _n("index"), "cuda": _n("index", False, True), "uuid": _NOTE, "serial": _NOTE, "name": _NOTE}

_HBM = {
    "format": _TEXT, "size_bytes": _n("bytes"), "iters": _n("count"), "warmup": _n("count", False),
    "gpus": [{**_BOARD, "copy_gbps": _n("gbps"), "read_gbps": _n("gbps"), "write_gbps": _n("gbps"),
              "best_gbps": _n("gbps"), "peak_gbps": _read("gbps"), "bus_width_bits": _read("count"),
              "max_mem_clock_mhz": _read("mhz"), "fraction_of_peak": _read("ratio")}],
}
_PATTERN = {
    "format": _TEXT, "fraction": _n("fraction", False), "seconds": _n("seconds", False),
    "patterns": Opt([_TEXT]), "chunk_bytes": _n("bytes", False, True),
    "gpus": [{**_BOARD, "free_bytes": _n("bytes"), "total_bytes": _n("bytes"), "tested_bytes": _n("bytes"),
              "coverage": _read("fraction"), "chunks": _read("count"), "allocation_stopped": _NOTE,
              "passes": [{"pattern": _TEXT, "bytes": _n("bytes"), "seconds": _n("seconds"),
                          "mismatches": _n("count")}],
              "mismatches": _n("count"), "seconds": _n("seconds"), "planted": Field("flag", False), "error": _NOTE,
              "first_mismatches": Opt([{"offset_bytes": _n("bytes"), "pattern": _TEXT, "expected": _ANY,
                                        "found": _ANY, "xor_bits": Opt([_n("count")])}])}],
}
_POWER = {
    "format": _TEXT, "seconds": _n("seconds"), "interval_s": _n("seconds"), "warmup_s": _n("seconds", False),
    "gpus": [{**_BOARD, "power_limit_w": _read("watts"), "max_sm_clock_mhz": _read("mhz"),
              "thresholds_c": Opt({"*": _read("celsius")}), "tflops": _read("tflops"),
              "iterations": _n("count", False), "unread": Opt({"*": _ANY}),
              "samples": [{"t_s": _n("seconds"), "power_w": _read("watts"), "sm_clock_mhz": _read("mhz"),
                           "temperature_c": _read("celsius"), "margin_c": _read("celsius"),
                           "reasons": Opt([_TEXT])}]}],
}
_LINK = Opt({"gen": _read("generation"), "width": _read("lanes")})
_PCIE = {
    "format": _TEXT, "size": _n("bytes"), "seconds": _n("seconds"), "read_interval_s": _n("seconds", False),
    "gpus": [{**_BOARD, "h2d_gbps": _read("gbps"), "d2h_gbps": _read("gbps"),
              "copies": {"h2d": _n("count"), "d2h": _n("count")},
              "link": Opt({"idle": _LINK, "after": _LINK,
                           "max": Opt({"gen": _read("generation"), "width": _read("lanes"),
                                       "gpu_gen": _read("generation")}),
                           "under_load": Opt({"gen_min": _read("generation"), "width_min": _read("lanes"),
                                              "gen_max": _read("generation"), "width_max": _read("lanes"),
                                              "reads": _n("count"), "gen_reads": Opt({"*": _n("count")}),
                                              "width_reads": Opt({"*": _n("count")})})}),
              "replay_counter": Opt({"before": _read("count"), "after": _read("count"), "rise": _read("count")}),
              "unread": Opt({"*": _ANY})}],
}
_LMS_RUN = {"threshold_bytes": _n("bytes"), "usage_fraction": _n("fraction"), "outcome": _TEXT,
            "batch": _n("count", False), "seconds": _n("seconds", False), "time_per_image_s": _n("seconds", False),
            "peak_bytes": _n("bytes", False), "ratio_vs_baseline": _n("ratio", False), "error": _NOTE,
            "offloaded_tensors": _n("count"), "offloaded_bytes": _n("bytes"), "kept_tensors": _n("count", False)}
_OVERSIZED = {"batch": _n("count"), "outcome": _TEXT, "recovered": Field("flag"), "error": _NOTE,
              "allocated_after_bytes": _n("bytes"), "baseline_allocated_bytes": _n("bytes"),
              "healthy_after": Opt({"batch": _read("count"), "ok": Field("flag", False), "loss": _read("number"),
                                    "error": _NOTE})}
_MEMORY = {
    "format": _TEXT, "device": _NOTE, "total_bytes": _n("bytes"), "budget_bytes": _n("bytes"), "model": _TEXT,
    "mode": _TEXT, "input": [_n("count")], "fit_batch": _n("count"),
    "board": Opt({"uuid": _NOTE, "serial": _NOTE, "name": _NOTE, "nvml_index": _read("index"),
                  "cuda_index": _read("index")}),
    "estimate": {"activation_bytes_per_image": _n("bytes"), "saved_bytes_per_image": _n("bytes", False),
                 "union_bytes_per_image": _n("bytes"), "param_bytes": _n("bytes"),
                 "largest_activation_bytes_per_image": _n("bytes"),
                 "per_layer": Opt([{"layer": _TEXT, "type": _TEXT, "output_shape": Opt([_n("count")]),
                                    "output_bytes": _n("bytes", False), "new_bytes": _n("bytes")}])},
    "baseline": {"batch": _n("count"), "seconds": _n("seconds"), "time_per_image_s": _n("seconds"),
                 "loss": _n("number", False), "peak_bytes": _n("bytes")},
    "probes": Opt([{"batch": _n("count"), "outcome": _TEXT, "peak_bytes": _n("bytes", False, True)}]),
    "oversized": _OVERSIZED, "lms": Opt([_LMS_RUN]),
    "equality": Opt({"batch": _n("count"), "loss_without": _n("number"), "loss_with": _n("number"),
                     "loss_equal": Field("flag"), "max_grad_abs_diff": _n("ratio"), "max_grad_abs": _n("ratio"),
                     "offloaded_tensors": _n("count")}),
}

#: file -> (its format tag, its shape, what it is in words)
KINDS = {
    HBM_FILE: ("gpufabric-hbm/1", _HBM, "HBM bandwidth"),
    PATTERN_FILE: ("gpufabric-mem-pattern/1", _PATTERN, "memory pattern test"),
    POWER_FILE: ("gpufabric-power-hold/1", _POWER, "power hold"),
    PCIE_FILE: ("gpufabric-pcie-load/1", _PCIE, "PCIe under load"),
    MEMORY_FILE: ("gpufabric-memory/1", _MEMORY, "memory"),
}

_ROW = re.compile(r"^gpus\[(\d+)\]")


@dataclass(frozen=True)
class RecordProblem:
    text: str  # names the file, the key and the value
    row: int | None = None  # the position in ``gpus`` of the row it is in; None: the whole file


class Recording(dict):
    """A recording as its file holds it (a dict, for whoever reads it as one), with what of it cannot be judged.

    ``name``: the file kind (hbm.json ...); ``source``: the file read, or "this machine" for a live run's result
    (not read from a file: not typed here, its checks refuse what is not finite); ``unreadable``: why the file
    could not be read at all (the dict is then empty)."""

    def __init__(self, data: dict, *, name: str, source: str, problems: list[RecordProblem] | None = None,
                 unreadable: str | None = None) -> None:
        super().__init__(data)
        self.name, self.source = name, source
        self.problems = list(problems or [])
        self.unreadable = unreadable

    def problems_of(self, row: dict | None = None) -> list[str]:
        """What stops ``row`` (one of ``self["gpus"]``; None: the whole file) being judged: the file's problems
        and that row's own."""
        if self.unreadable:
            return [self.unreadable]
        position = next((i for i, r in enumerate(self.get("gpus") or []) if r is row), None)
        return [p.text for p in self.problems if p.row is None or p.row == position]


def read_record(name: str, data: object, source: str) -> Recording:
    """``data`` (a file kind's JSON, parsed) typed: every value that does not fit its shape, a format tag this
    plugin does not read and two rows for one GPU become problems naming ``name``, the key and the value."""
    fmt, shape, _ = KINDS[name]
    if not isinstance(data, dict):
        return Recording({}, name=name, source=source, unreadable=f"{source}: not a JSON object")
    problems = [RecordProblem(f"{name}: format = {data.get('format')!r}: this plugin reads {fmt!r}")
                ] if data.get("format") != fmt else []
    for problem in check_shape(data, shape):
        row = _ROW.match(problem.path)
        problems.append(RecordProblem(f"{name}: {problem.text}", int(row.group(1)) if row else None))
    problems += _duplicate_rows(name, data.get("gpus"))
    return Recording(data, name=name, source=source, problems=problems)


def _duplicate_rows(name: str, rows: object) -> list[RecordProblem]:
    """One row per GPU: two rows with the same index, serial or UUID make the file unusable (which is the GPU's?)."""
    if not isinstance(rows, list):
        return []
    problems = []
    for key in ("index", "serial", "uuid"):
        seen: dict[object, int] = {}
        for position, row in enumerate(rows):
            value = row.get(key) if isinstance(row, dict) else None
            if value is None:
                continue
            if value in seen:
                problems.append(RecordProblem(f"{name}: gpus[{seen[value]}] and gpus[{position}] both have {key} "
                                              f"{value!r}: one row per GPU"))
            seen.setdefault(value, position)
    return problems


def load_record(directory: Path, name: str) -> Recording | None:
    """The bundle's file of this kind, typed; None when it has none. An unreadable file (not UTF-8, not JSON) is a
    Recording that says so, never an exception."""
    path = directory / name
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        return Recording({}, name=name, source=str(path),
                         unreadable=f"{path}: not a readable {KINDS[name][2]} recording ({why})")
    return read_record(name, data, str(path))


def live_record(name: str, data: dict) -> Recording:
    """A live run's result of this kind, as the suites take it (its own checks refuse what is not finite)."""
    return Recording(data, name=name, source="this machine")


# --- the burn-in's log: one JSON object a line ---------------------------------------------------------------

_BURN_IN_HEALTH = {"serial": _NOTE, "rose": Opt({"*": _n("count")}), "temperature_c": _read("celsius"),
                   "peak_temperature_c": _read("celsius"), "power_w": _read("watts"), "peak_power_w": _read("watts"),
                   "throttle": Opt([_TEXT]), "throttle_seen": Opt([_TEXT])}
#: line type -> its shape
LINE_SHAPES = {
    "start": {"duration_s": _n("seconds"), "serials": Opt({"*": _NOTE}), "plant_fault": _read("index"),
              "started_at": _n("seconds", False)},
    "gemm": {"seconds": _n("seconds"), "wall_s": _n("seconds", False), "time": _n("seconds", False),
             "result": {"seconds": _n("seconds", False),
                        "gpus": [{"gpu": _n("index"), "serial": _NOTE, "name": _NOTE, "iterations": _n("count"),
                                  "checks": _n("count"), "errors_self": _n("count"), "errors_cross": _n("count"),
                                  "tflops": _n("tflops")}]},
             "health": Opt({"*": _BURN_IN_HEALTH})},
    "all_reduce": {"row": Opt({"size": _n("bytes"), "busbw": _n("gbps"), "algbw": _n("gbps"), "wrong": _n("count"),
                               "time_us": _n("ratio", False)}),
                   "error": _NOTE, "wall_s": _n("seconds", False)},
    "memory": {"oversized": Opt(_OVERSIZED), "lms": Opt([_LMS_RUN]), "error": _NOTE, "wall_s": _n("seconds", False),
               "budget_bytes": _n("bytes", False, True), "input": Opt([_n("count")]), "device": _NOTE,
               "board": Opt({"uuid": _NOTE, "serial": _NOTE, "name": _NOTE})},
    "error": {"error": _TEXT},
    "end": {"elapsed_s": _n("seconds")},
}


@dataclass(frozen=True)
class LogProblem:
    text: str  # "gpufabric-burnin.jsonl line 2: health.0.temperature_c = nan: not a finite number (C)"
    gpu: int | None = None  # the GPU it concerns; None: every GPU's verdict


@dataclass
class LogReading:
    """A burn-in log as far as it could be read: the records before the first line that is not one (a line torn
    by a crash), and what stops them being judged."""

    records: list[dict] = field(default_factory=list)
    problems: list[LogProblem] = field(default_factory=list)
    torn_line: int | None = None  # the number (from 1) of the line reading stopped at


def read_burn_in_log(path: Path) -> LogReading:
    """The log's records, typed. Reading stops at the first line that is not a JSON object of a known type (a
    crash tears the line being written): the problem names it and how many lines after it were not read, so that
    nothing is dropped unsaid. A resumed burn-in (workloads/burn_in.py) takes the records before it."""
    reading = LogReading()
    if not path.is_file():
        return reading
    name = path.name
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reading.problems.append(LogProblem(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})"))
        reading.torn_line = 1
        return reading
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or record.get("type") not in LINE_SHAPES:
            after = len(lines) - number
            what = ("not a JSON object (a line torn by a crash, or edited)" if not isinstance(record, dict)
                    else f"a record of unknown type {record.get('type')!r}")
            reading.problems.append(LogProblem(
                f"{name} line {number} is {what}: reading stopped there"
                + (f", {after} line(s) after it not read" if after else "")))
            reading.torn_line = number
            break
        reading.records.append(record)
        for problem in check_shape(record, LINE_SHAPES[record["type"]]):
            reading.problems.append(LogProblem(f"{name} line {number} ({record['type']}): {problem.text}",
                                               _problem_gpu(record, problem.path)))
    return reading


def _problem_gpu(record: dict, path: str) -> int | None:
    """The GPU a problem in a log line concerns: a GEMM result's row, or a health entry; None for the line."""
    row = re.match(r"^result\.gpus\[(\d+)\]", path)
    if row:
        rows = record["result"]["gpus"]
        gpu = rows[int(row.group(1))].get("gpu") if isinstance(rows[int(row.group(1))], dict) else None
        return gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None
    health = re.match(r"^health\.(\d+)\b", path)
    return int(health.group(1)) if health else None
