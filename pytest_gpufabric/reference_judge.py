"""Judge another tool's numbers against normal: a GPU model's published peak and what this project's runs reached.

``gpufabric parse KIND FILE --reference [MODEL]`` calls these pure functions (no I/O: the caller reads the file and
the catalogue). Each takes the parser's JSON and returns a copy with a ``reference`` block and a fraction beside each
figure, plus one plain-words line per judged figure for the terminal.

What "normal" means, and where each threshold comes from: reference_normal.py.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from .formats.nccl_tests import row_groups, row_problems, wrong_count
from .formats.perftest import row_disagreement
from .reference import Reference, find_reference
from .reference_normal import (
    ABOVE_LINE_RATE,
    BASIS_WORDS,
    INCONSISTENT,
    LINE_RATE,
    LOOK_AT,
    LOW,
    MEMORY,
    NORMAL,
    NOT_JUDGED,
    NVLINK,
    PCIE,
    PEAK_FIELDS,
    PERFTEST_NORMAL_OF_LINE_RATE,
    WRONG_RESULTS,
    _floor,
    _pct,
    format_size,
    judge,
    peak_sources,
    recorded_samples,
)

# --- the catalogue -------------------------------------------------------------------------------------------


def known_models_line(references: dict[str, Reference]) -> str:
    """'a100-pcie-80gb, ..., v100-sxm2-32gb': the catalogue's model ids, for a message that says what is known."""
    return ", ".join(sorted(references))


def unknown_model_message(name: str, references: dict[str, Reference]) -> str:
    return (f"unknown GPU model {name!r}; known: {known_models_line(references)} (or an NVML name such as "
            "'NVIDIA H100 80GB HBM3', or an alias such as h100; `gpufabric reference` lists them)")


def resolve_model(given: str | None, names: list[str], references: dict[str, Reference],
                  tool: str) -> tuple[Reference | None, str | None, str | None]:
    """(reference, where the model came from: 'given' or 'output', why there is none).

    `given` is the MODEL the user named (None or '' for "take it from the output"); raises ValueError for a given
    name the catalogue does not know, since that is a usage error, not a fact about the file."""
    if given:
        ref = find_reference(given, references)
        if ref is None:
            raise ValueError(unknown_model_message(given, references))
        return ref, "given", None
    distinct = sorted({n for n in names if n})
    if not distinct:
        return None, None, (f"the {tool} output names no GPU model; name one: --reference MODEL "
                            f"({known_models_line(references)})")
    found = {n: find_reference(n, references) for n in distinct}
    models = {ref.model for ref in found.values() if ref is not None}
    missing = [n for n, ref in found.items() if ref is None]
    if missing and not models:
        return None, None, (f"{', '.join(missing)} is not in the reference catalogue (known: "
                            f"{known_models_line(references)}); name a model with --reference MODEL to judge anyway")
    if len(models) > 1 or missing:
        return None, None, (f"the output names several GPU models ({', '.join(distinct)}); name the one to judge "
                            "against with --reference MODEL")
    return references[models.pop()], "output", None



def fabric_basis(ref: Reference) -> tuple[str | None, str]:
    """The peak that GPU-to-GPU traffic is held against, and why: NVLink when the model has NVLink, else PCIe."""
    if ref.nvlink_supported and ref.nvlink_gbps_per_direction is not None:
        return NVLINK, ("the model has NVLink; whether these GPUs were NVLink-connected is not in the output, so the "
                        "NVLink peak per direction is the basis")
    if ref.pcie_gbps_per_direction is not None:
        why = ("the catalogue has no NVLink figure for this model" if ref.nvlink_supported
               else "the model has no NVLink")
        return PCIE, f"{why}; the PCIe peak per direction is the basis"
    return None, "the catalogue has neither an NVLink nor a PCIe figure for this model (its notes say why)"


def _reference_block(ref: Reference, model_from: str, basis: str) -> dict[str, Any]:
    field_name = PEAK_FIELDS[basis]
    return {"model": ref.model, "name": ref.name, "model_from": model_from, "basis": basis,
            "peak_gbps": getattr(ref, field_name), "peak": f"{BASIS_WORDS[basis]} per direction ({field_name})",
            "sources": peak_sources(ref, field_name)}


def no_reference(result: dict, reason: str) -> dict:
    """The parser's JSON with ``reference: null`` and the reason beside it."""
    out = copy.deepcopy(result)
    out["reference"] = None
    out["reference_reason"] = reason
    return out




# --- nccl-tests ----------------------------------------------------------------------------------------------


def _runs(result: dict) -> list[dict]:
    return result["runs"] if "runs" in result else [result]


def nccl_tests_device_names(result: dict) -> list[str]:
    """The GPU names of the output's own ``#  Rank ... device N [bus] NAME`` lines, every run."""
    return [d.get("name") or "" for run in _runs(result) for d in run.get("devices", [])]


def _row_busbw(row: dict) -> float | None:
    group = row.get("oop") or row.get("ip")
    return group.get("busbw") if group else None


def _row_flags(row: dict, op: str | None, nranks: int | None) -> tuple[str | None, str]:
    """(verdict, words) for a row that is no measurement to judge, (None, "") for one that is: wrong elements in
    either group, or numbers that contradict each other (formats/nccl_tests.row_problems: a time ten times too long
    for its busbw, a negative time, ...)."""
    wrong = [f"{wrong_count(g)} wrong element(s) {label}".strip() for label, g in row_groups(row) if wrong_count(g)]
    if wrong:
        return WRONG_RESULTS, f"{'; '.join(wrong)}: the collective computed wrong results, whatever its speed"
    problems = row_problems(row, op, nranks)
    if problems:
        return INCONSISTENT, f"not a measurement to judge: {'; '.join(problems)}"
    return None, ""


def judge_nccl_tests(result: dict, ref: Reference, references: dict[str, Reference],
                     model_from: str) -> tuple[dict, list[str]]:
    """nccl-tests' JSON with a ``reference`` block and each row's ``fraction_of_peak`` (out-of-place busbw, in-place
    where a row has only that, over the peak); the judgement of each run at its largest size, as data in
    ``reference.judgements`` and as lines. Any row of any run with wrong elements, or whose numbers contradict each
    other, is judged too ("wrong results", "inconsistent"), never called normal."""
    basis, why = fabric_basis(ref)
    if basis is None:
        return no_reference(result, f"{ref.name}: {why}"), []
    out = copy.deepcopy(result)
    block = _reference_block(ref, model_from, basis)
    block["basis_why"] = why
    block["fraction_of"] = "busbw (out-of-place; in-place where a row has only that)"
    peak = block["peak_gbps"]
    samples = recorded_samples(references)
    runs = _runs(out)
    judgements, lines = [], []
    for index, run in enumerate(runs, 1):
        for row in run["rows"]:
            busbw = _row_busbw(row)
            row["fraction_of_peak"] = round(busbw / peak, 4) if busbw is not None else None
        judged = [r for r in run["rows"] if r["fraction_of_peak"] is not None]
        if not judged:
            continue
        row = max(judged, key=lambda r: r["size"])
        op = run.get("op")
        label = op or "the test (the output does not name it; --op does)"
        label = label if len(runs) == 1 else f"{label} (run {index})"
        busbw = _row_busbw(row)
        hosts = sorted({d.get("host") for d in run.get("devices", []) if d.get("host")})
        if len(hosts) > 1:
            floor = {"why": f"ranks on {len(hosts)} hosts ({', '.join(hosts)}): the network between them bounds "
                            f"busbw, not {BASIS_WORDS[basis]}, and the output does not name its rate"}
        elif run.get("nranks") == 1:
            floor = {"why": "one rank: no traffic between GPUs"}
        else:
            floor = _floor(samples, ref, "busbw", op, basis, row["size"])
        for other in run["rows"]:
            flag, words = _row_flags(other, op, run.get("nranks"))
            if flag and other is not row:
                text = f"{label} at {format_size(other['size'])}: {flag}: {words}"
                judgements.append({"run": index, "op": op, "size_bytes": other["size"],
                                   "busbw_gbps": _row_busbw(other), "fraction_of_peak": other["fraction_of_peak"],
                                   "verdict": flag, "recorded": None, "text": text})
                lines.append(text)
        verdict, words = judge(row["fraction_of_peak"], busbw, floor, basis, ref, busbw=True, op=op)
        flag, flag_words = _row_flags(row, op, run.get("nranks"))
        if flag:
            verdict, words = flag, flag_words
        elif run.get("unfinished"):  # a died run's largest size is not the run's: never called normal
            verdict, words = (NOT_JUDGED, f"not judged: {run['unfinished']}") if verdict == NORMAL \
                else (verdict, f"{words}; {run['unfinished']}")
        text = (f"{label} at {format_size(row['size'])}: {busbw:.1f} GB/s busbw, {_pct(row['fraction_of_peak'])} of "
                f"the {BASIS_WORDS[basis]} peak of {ref.name} ({peak:g} GB/s per direction): {words}")
        judgements.append({"run": index, "op": op, "size_bytes": row["size"], "busbw_gbps": busbw,
                           "fraction_of_peak": row["fraction_of_peak"], "verdict": verdict,
                           "recorded": {k: v for k, v in floor.items() if k != "why"} or None, "text": text})
        lines.append(text)
    block["judgements"] = judgements
    out["reference"] = block
    return out, lines


# --- nvbandwidth ---------------------------------------------------------------------------------------------


def nvbandwidth_device_names(result: dict) -> list[str]:
    return [d.get("name") or "" for d in result.get("devices", [])]


def _nvbandwidth_kind(test: dict) -> tuple[str | None, str | None, str | None]:
    """(basis group 'host'|'device', recorded copy op, why not judged) of one nvbandwidth test case."""
    name = test.get("name") or ""
    if test.get("unit") != "GB/s":
        return None, None, "not a bandwidth"
    if "local_copy" in name:
        return None, None, "a copy inside one GPU's memory"
    if name.startswith(("host_to_device", "host_to_all")):
        return "host", "host_to_device", None
    if name.startswith(("device_to_host", "all_to_host")):
        return "host", "device_to_host", None
    if {test.get("row_label"), test.get("column_label")} == {"GPU"}:
        return "device", "gpu_to_gpu", None
    return None, None, "its endpoints are not a host and a GPU or two GPUs"


def judge_nvbandwidth(result: dict, ref: Reference, references: dict[str, Reference],
                      model_from: str) -> tuple[dict, list[str]]:
    """nvbandwidth's JSON with a ``reference`` block and, per bandwidth test case, ``fraction_of_peak`` (its matrix
    over the peak: host<->device copies over the PCIe peak, device<->device over NVLink when the model has it);
    each test judged at its lowest cell, the weakest pair or GPU."""
    fabric, fabric_why = fabric_basis(ref)
    out = copy.deepcopy(result)
    samples = recorded_samples(references)
    bases: dict[str, dict] = {}
    judgements, lines = [], []
    for test in out.get("testcases", []):
        group, op, why_not = _nvbandwidth_kind(test)
        if group is None or test.get("status") not in ("passed", "incomplete"):
            continue
        basis = PCIE if group == "host" else fabric
        if basis is None or getattr(ref, PEAK_FIELDS[basis]) is None:
            continue
        peak = getattr(ref, PEAK_FIELDS[basis])
        if basis not in bases:
            bases[basis] = _reference_block(ref, model_from, basis)
            if group == "device":
                bases[basis]["basis_why"] = fabric_why
        bidirectional = "bidirectional" in (test.get("name") or "")
        total = bidirectional and any((m.get("label") or "").lower() == "total" for m in test.get("matrices", []))
        scale = 2 if total else 1  # a Total matrix adds both directions up
        test["fraction_of_peak"] = [[None if v is None else round(v / (peak * scale), 4) for v in row]
                                    for row in test.get("matrix", [])]
        cells = [v for row in test.get("matrix", []) for v in row if v is not None]
        if not cells:
            continue
        lowest, highest = min(cells), max(cells)
        fraction = lowest / (peak * scale)
        if bidirectional:
            floor = {"why": "both directions at once; this project recorded one-way copies only"}
        else:
            floor = _floor(samples, ref, "copy", op, basis, None)
        verdict, words = judge(fraction, lowest, floor, basis, ref, host=group == "host")
        if test.get("status") == "incomplete" and verdict == NORMAL:  # cut or died mid-matrix: never called normal
            verdict, words = NOT_JUDGED, "not judged: the test did not finish (its matrix or SUM line is missing)"
        spread = f"{lowest:.1f} GB/s" if lowest == highest else f"{lowest:.1f}-{highest:.1f} GB/s"
        per = "both directions" if total else "per direction"
        text = (f"{test['name']}: {spread}, {_pct(fraction)} of the {BASIS_WORDS[basis]} peak of {ref.name} "
                f"({peak * scale:g} GB/s {per}) at the lowest: {words}")
        judgements.append({"test": test["name"], "lowest_gbps": lowest, "highest_gbps": highest,
                           "fraction_of_peak": round(fraction, 4), "verdict": verdict,
                           "recorded": {k: v for k, v in floor.items() if k != "why"} or None, "text": text})
        lines.append(text)
    if not bases:
        return no_reference(result, f"no bandwidth test case of this output has a peak in the catalogue entry "
                                    f"of {ref.name} to hold it against"), []
    out["reference"] = {"model": ref.model, "name": ref.name, "model_from": model_from,
                        "peaks": list(bases.values()), "judgements": judgements}
    return out, lines


# --- dcgmi diag ----------------------------------------------------------------------------------------------

#: nvvs memory_bandwidth plugin (NVIDIA/DCGM MemoryBandwidth.cpp): its info line, and DCGM_FR_MEMORY_BANDWIDTH_MSG
_DCGM_MEMBW = (re.compile(r"Device (?P<gpu>\d+)'s bandwidth was (?P<gbps>[0-9.]+) GB/s"),
               re.compile(r"GPU (?P<gpu>\d+) only achieved a memory bandwidth of (?P<gbps>[0-9.]+) GB/s"))
#: nvvs pcie plugin info lines: "GPU 0 GPU to Host bandwidth:\t\t13.08 GB/s" (tests/data/captures/public/dcgm/)
_DCGM_PCIE = re.compile(r"GPU (?P<gpu>\d+) (?P<what>GPU to Host|Host to GPU|bidirectional) bandwidth:\s*"
                        r"(?P<gbps>[0-9.]+) GB/s")


def dcgm_figures(result: dict) -> list[dict[str, Any]]:
    """The bandwidths DCGM printed in its messages: memory bandwidth per GPU (memory_bandwidth test) and host<->GPU
    per GPU (pcie test), each once, in the order printed."""
    figures, seen = [], set()
    for test in result.get("tests", []):
        texts = [m.get("text") or "" for m in test.get("messages", [])]
        texts += [g.get("message") or "" for g in test.get("gpus", [])]
        for text in texts:
            found = []
            if test.get("name") == "memory_bandwidth":
                found = [("memory", None, m) for pattern in _DCGM_MEMBW for m in pattern.finditer(text)]
            elif test.get("name") == "pcie":
                ops = {"GPU to Host": "device_to_host", "Host to GPU": "host_to_device", "bidirectional": None}
                found = [("pcie", ops[m.group("what")], m) for m in _DCGM_PCIE.finditer(text)]
            for kind, op, m in found:
                key = (test.get("name"), op, int(m.group("gpu")))
                if key in seen:
                    continue
                seen.add(key)
                status = next((g.get("status") for g in test.get("gpus", []) if g.get("gpu") == key[2]),
                              test.get("status"))
                figures.append({"test": test.get("name"), "status": status, "kind": kind, "op": op,
                                "gpu": int(m.group("gpu")), "gbps": float(m.group("gbps")), "text": m.group(0)})
    return figures


def judge_dcgm_diag(result: dict, ref: Reference, references: dict[str, Reference],
                    model_from: str) -> tuple[dict, list[str]]:
    """dcgmi diag's JSON with ``reference.figures``: each bandwidth DCGM printed (memory bandwidth against
    ``memory_bandwidth_gbps``, host<->GPU against the PCIe peak, bidirectional against twice it) as a fraction."""
    out = copy.deepcopy(result)
    samples = recorded_samples(references)
    figures, lines, peaks = [], [], {}
    for figure in dcgm_figures(result):
        basis = MEMORY if figure["kind"] == "memory" else PCIE
        peak = getattr(ref, PEAK_FIELDS[basis])
        if peak is None:
            continue
        peaks.setdefault(basis, _reference_block(ref, model_from, basis))
        scale = 2 if figure["kind"] == "pcie" and figure["op"] is None else 1
        fraction = figure["gbps"] / (peak * scale)
        if scale == 2:
            floor = {"why": "both directions at once; this project recorded one-way copies only"}
        elif basis == MEMORY:
            floor = _floor(samples, ref, "memory", None, basis, None)
        else:
            floor = _floor(samples, ref, "copy", figure["op"], basis, None)
        verdict, words = judge(fraction, figure["gbps"], floor, basis, ref, host=basis == PCIE)
        label = {"memory": "memory bandwidth", "host_to_device": "host to GPU", "device_to_host": "GPU to host",
                 None: "bidirectional"}[figure["op"] if basis == PCIE else "memory"]
        text = (f"{figure['test']} GPU {figure['gpu']} {label}: {figure['gbps']:g} GB/s, {_pct(fraction)} of the "
                f"{BASIS_WORDS[basis]} peak of {ref.name} ({peak * scale:g} GB/s"
                f"{' both directions' if scale == 2 else ''}), DCGM said {figure['status']}: {words}")
        figures.append({**figure, "fraction_of_peak": round(fraction, 4), "verdict": verdict,
                        "recorded": {k: v for k, v in floor.items() if k != "why"} or None, "judgement": text})
        lines.append(text)
    if not figures:
        return no_reference(result, "DCGM printed no bandwidth figure to hold against a peak (its memory bandwidth "
                                    "and PCIe tests print one per GPU when they run; pass/fail alone has none)"), []
    out["reference"] = {"model": ref.model, "name": ref.name, "model_from": model_from,
                        "peaks": list(peaks.values()), "figures": figures}
    return out, lines


# --- perftest ------------------------------------------------------------------------------------------------


def judge_perftest(result: dict, line_rate_gbit: float | None, line_rate_from: str) -> tuple[dict, list[str]]:
    """perftest's JSON with ``reference`` (the port's line rate, Gb/s) and each result row's ``fraction_of_peak``
    (``bw_avg_gbps`` over the line rate; twice it for a bidirectional test, whose figures add both directions up).
    perftest prints no port speed, so without `line_rate_gbit` the reference is null with that reason."""
    if line_rate_gbit is None:
        return no_reference(result, "perftest does not print the port's line rate; give it: --line-rate 25Gb/s "
                                    "(`ibv_devinfo -v` active_speed x active_width, or `ethtool` on RoCE)"), []
    if not (line_rate_gbit > 0 and math.isfinite(line_rate_gbit)):
        raise ValueError(f"--line-rate {line_rate_gbit:g}: give a port rate above 0, e.g. 25Gb/s")
    out = copy.deepcopy(result)
    scale = 2 if result.get("bidirectional") else 1
    peak = line_rate_gbit * scale
    for row in out["results"]:
        row["fraction_of_peak"] = round(row["bw_avg_gbps"] / peak, 4)
    row = max(out["results"], key=lambda r: r["bytes"])
    fraction = row["fraction_of_peak"]
    seen = (f"this project holds RDMA ports to {_pct(PERFTEST_NORMAL_OF_LINE_RATE)} of line rate; its A100/E810 "
            "capture ran at 93 %")
    disagreement = row_disagreement(row, str(result.get("units_printed") or "Gb/sec"), scale == 2)
    if fraction > 1:
        verdict, words = ABOVE_LINE_RATE, ("above the line rate: more than the port can carry, an impossible reading "
                                           "(check --line-rate, and whether the run was bidirectional)")
    elif disagreement:
        verdict, words = INCONSISTENT, f"not a measurement to judge: {disagreement}"
    elif fraction >= PERFTEST_NORMAL_OF_LINE_RATE:
        verdict, words = NORMAL, f"normal ({seen})"
    else:
        verdict, words = LOW, f"low ({seen}); {LOOK_AT[LINE_RATE]}"
    test = result.get("test") or "perftest"
    text = (f"{test} at {format_size(row['bytes'])}: {row['bw_avg_gbps']:g} Gb/s average, {_pct(fraction)} of the "
            f"{peak:g} Gb/s line rate{' (both directions)' if scale == 2 else ''}: {words}")
    out["reference"] = {"basis": LINE_RATE, "line_rate_gbit": line_rate_gbit, "line_rate_from": line_rate_from,
                        "peak_gbit": peak, "fraction_of": "bw_avg_gbps" + (" (both directions)" if scale == 2 else ""),
                        "judgements": [{"bytes": row["bytes"], "bw_avg_gbps": row["bw_avg_gbps"],
                                        "fraction_of_peak": fraction, "verdict": verdict, "text": text}]}
    return out, [text]
