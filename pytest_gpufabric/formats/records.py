"""The recordings of the per-GPU diagnostics (hbm.json, memory-pattern.json, power-hold.json, pcie-load.json: each
declared by its descriptor, diagnostics/), the memory suite (memory.json) and the burn-in
(gpufabric-burnin.jsonl), read in one place each, typed.

Each file kind declares its shape (formats/typed.py): its format tag, every number's kind (finite, in its
physical range, in the unit its key names) and one row per GPU. Reading never raises on content: a file that
cannot be read, or a value that does not fit, is kept as a problem naming the file, the key and the value, and
the checks say it (the promise is not checked) instead of judging it. A problem inside one GPU's row stops that
GPU's verdict only.

The format tags are the workload scripts' own (each standalone script spells its FORMAT out too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import recorded
from .strict import load_json_text
from .typed import NOTE, TEXT, Field, Opt, check_shape, reading, value

MEMORY_FILE = "memory.json"
BURN_IN_FILE = "gpufabric-burnin.jsonl"

_LMS_RUN = {"threshold_bytes": value("bytes"), "usage_fraction": value("fraction"), "outcome": TEXT,
            "batch": value("count", False), "seconds": value("seconds", False),
            "time_per_image_s": value("seconds", False), "peak_bytes": value("bytes", False),
            "ratio_vs_baseline": value("ratio", False), "error": NOTE, "offloaded_tensors": value("count"),
            "offloaded_bytes": value("bytes"), "kept_tensors": value("count", False)}
_OVERSIZED = {"batch": value("count"), "outcome": TEXT, "recovered": Field("flag"), "error": NOTE,
              "allocated_after_bytes": value("bytes"), "baseline_allocated_bytes": value("bytes"),
              "healthy_after": Opt({"batch": reading("count"), "ok": Field("flag", False), "loss": reading("number"),
                                    "error": NOTE})}
_MEMORY = {
    "format": TEXT, "device": NOTE, "total_bytes": value("bytes"), "budget_bytes": value("bytes"), "model": TEXT,
    "mode": TEXT, "input": [value("count")], "fit_batch": value("count"),
    "board": Opt({"uuid": NOTE, "serial": NOTE, "name": NOTE, "nvml_index": reading("index"),
                  "cuda_index": reading("index")}),
    "estimate": {"activation_bytes_per_image": value("bytes"), "saved_bytes_per_image": value("bytes", False),
                 "union_bytes_per_image": value("bytes"), "param_bytes": value("bytes"),
                 "largest_activation_bytes_per_image": value("bytes"),
                 "per_layer": Opt([{"layer": TEXT, "type": TEXT, "output_shape": Opt([value("count")]),
                                    "output_bytes": value("bytes", False), "new_bytes": value("bytes")}])},
    "baseline": {"batch": value("count"), "seconds": value("seconds"), "time_per_image_s": value("seconds"),
                 "loss": value("number", False), "peak_bytes": value("bytes")},
    "probes": Opt([{"batch": value("count"), "outcome": TEXT, "peak_bytes": value("bytes", False, True)}]),
    "oversized": _OVERSIZED, "lms": Opt([_LMS_RUN]),
    "equality": Opt({"batch": value("count"), "loss_without": value("number"), "loss_with": value("number"),
                     "loss_equal": Field("flag"), "max_grad_abs_diff": value("ratio"), "max_grad_abs": value("ratio"),
                     "offloaded_tensors": value("count")}),
}

#: file -> (its format tag, its shape, what it is in words): each shipped diagnostic's as its descriptor declares it
KINDS = {
    **{d.record_file: d.file_kind for d in recorded()},
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


def read_record(name: str, data: object, source: str, file_kind: tuple | None = None) -> Recording:
    """``data`` (a file kind's JSON, parsed) typed: every value that does not fit its shape, a format tag this
    plugin does not read and two rows for one GPU become problems naming ``name``, the key and the value.
    ``file_kind``: (format tag, shape, what) of a file KINDS does not hold (a diagnostic declared in its kind)."""
    fmt, shape, _ = file_kind or KINDS[name]
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


def load_record(directory: Path, name: str, file_kind: tuple | None = None) -> Recording | None:
    """The bundle's file of this kind, typed; None when it has none. An unreadable file (not UTF-8, not JSON) is a
    Recording that says so, never an exception."""
    path = directory / name
    if not path.is_file():
        return None
    try:
        data = load_json_text(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        return Recording({}, name=name, source=str(path),
                         unreadable=f"{path}: not a readable {(file_kind or KINDS[name])[2]} recording ({why})")
    return read_record(name, data, str(path), file_kind)


def live_record(name: str, data: dict) -> Recording:
    """A live run's result of this kind, as the suites take it (its own checks refuse what is not finite)."""
    return Recording(data, name=name, source="this machine")


# --- the burn-in's log: one JSON object a line ---------------------------------------------------------------

_BURN_IN_HEALTH = {"serial": NOTE, "rose": Opt({"*": value("count")}), "temperature_c": reading("celsius"),
                   "peak_temperature_c": reading("celsius"), "power_w": reading("watts"),
                   "peak_power_w": reading("watts"),
                   "throttle": Opt([TEXT]), "throttle_seen": Opt([TEXT])}
#: line type -> its shape
LINE_SHAPES = {
    "start": {"duration_s": value("seconds"), "serials": Opt({"*": NOTE}), "plant_fault": reading("index"),
              "started_at": value("seconds", False)},
    "gemm": {"seconds": value("seconds"), "wall_s": value("seconds", False), "time": value("seconds", False),
             "result": {"seconds": value("seconds", False),
                        "gpus": [{"gpu": value("index"), "serial": NOTE, "name": NOTE, "iterations": value("count"),
                                  "checks": value("count"), "errors_self": value("count"),
                                  "errors_cross": value("count"), "tflops": value("tflops")}]},
             "health": Opt({"*": _BURN_IN_HEALTH})},
    "all_reduce": {"row": Opt({"size": value("bytes"), "busbw": value("gbps"), "algbw": value("gbps"),
                               "wrong": value("count"), "time_us": value("ratio", False)}),
                   "error": NOTE, "wall_s": value("seconds", False)},
    "memory": {"oversized": Opt(_OVERSIZED), "lms": Opt([_LMS_RUN]), "error": NOTE, "wall_s": value("seconds", False),
               "budget_bytes": value("bytes", False, True), "input": Opt([value("count")]), "device": NOTE,
               "board": Opt({"uuid": NOTE, "serial": NOTE, "name": NOTE})},
    "error": {"error": TEXT},
    "end": {"elapsed_s": value("seconds")},
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
            record = load_json_text(line)
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
