"""Property: a mutation that removes or corrupts evidence never leaves the verdict ACCEPTED (issue 29).

Hypothesis draws mutations of a whole acceptance run recorded on a real 2x H200 SXM machine (the shipped bundle
``h200-nvswitch-x2-acceptance``, ACCEPTED as it is): drop a measured row or sample, swap a board's serial, reorder
counter samples, put a non-finite, negative or out-of-range value where a judged figure is, cut the burn-in log
short or tear one of its lines. Each mutated copy is replayed against its profile; the verdict may be anything but
ACCEPTED (INCOMPLETE where the evidence no longer shows a promise, REJECTED where it shows one broken), and the run
never ends in a traceback. The bundle holds no kernel log: every run waives xid-events (NO_KERNEL_LOG).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gpufabric.fabric.bundle import bundle_directory

PROFILE = "h200-nvswitch-x2"
BUNDLE = "h200-nvswitch-x2-acceptance"
#: what replaces a judged figure: not finite, negative, or far beyond any physical link
BAD_NUMBERS = (math.nan, math.inf, -1.0, -1e-9, 1e15)
SIZES_PROMISED = (1 << 20, 256 << 20, 1 << 30, 4 << 30)  # the profile's all_reduce floors
#: the bundle holds no kernel log, so xid-events is never shown: waived in writing, so that the unmutated bundle is
#: ACCEPTED and the property still bites (else every run would be INCOMPLETE whatever the mutation)
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the mutation tests"


def _load(path: Path):
    return json.loads(path.read_text())


def _dump(path: Path, document) -> None:
    """Written as Python writes JSON: NaN and Infinity as the tokens a broken or hand-edited file holds."""
    path.write_text(json.dumps(document, indent=1))


def _collective_row(document: dict, op: str, size: int) -> dict:
    return next(r for r in document["collectives"]["ops"][op] if r["size"] == size)


def mutate_collective_figure(copy: Path, data) -> str:
    path = copy / "bandwidth.json"
    document = _load(path)
    size = data.draw(st.sampled_from(SIZES_PROMISED), "size")
    key = data.draw(st.sampled_from(["busbw", "time_us", "algbw", "wrong"]), "key")
    value = data.draw(st.sampled_from(BAD_NUMBERS + (None,)), "value")
    _collective_row(document, "all_reduce", size)[key] = value
    _dump(path, document)
    return f"bandwidth.json all_reduce {size} {key}={value}"


def mutate_drop_collective_row(copy: Path, data) -> str:
    path = copy / "bandwidth.json"
    document = _load(path)
    size = data.draw(st.sampled_from(SIZES_PROMISED), "size")
    document["collectives"]["ops"]["all_reduce"].remove(_collective_row(document, "all_reduce", size))
    _dump(path, document)
    return f"bandwidth.json: all_reduce row at {size} dropped"


def mutate_copy_rows(copy: Path, data) -> str:
    path = copy / "bandwidth.json"
    document = _load(path)
    kind = data.draw(st.sampled_from(["host_device", "gpu_to_gpu"]), "kind")
    rows = document["copy"][kind]
    index = data.draw(st.integers(0, len(rows) - 1), "row")
    if data.draw(st.booleans(), "drop"):
        del rows[index]
        what = "dropped"
    else:
        value = data.draw(st.sampled_from(BAD_NUMBERS), "value")
        target = rows[index] if kind == "gpu_to_gpu" else rows[index]["host_to_device"]
        target["gbps"] = value
        what = f"gbps={value}"
    _dump(path, document)
    return f"bandwidth.json copy {kind}[{index}] {what}"


def mutate_nvlink_samples(copy: Path, data) -> str:
    path = copy / "nvlink-traffic.json"
    document = _load(path)
    samples = document["samples"]
    how = data.draw(st.sampled_from(["reverse", "last lower", "drop a GPU", "negative", "units"]), "how")
    if how == "reverse":
        samples.reverse()
    elif how == "last lower":
        link = samples[-1]["gpus"]["0"]["links"]["0"]
        link["tx_bytes"] = samples[-2]["gpus"]["0"]["links"]["0"]["tx_bytes"] - 1
    elif how == "drop a GPU":
        for sample in samples:
            sample["gpus"].pop("1", None)
    elif how == "negative":
        samples[-1]["gpus"]["1"]["links"]["3"]["rx_bytes"] = -1
    else:
        for sample in samples:
            sample["units"] = "furlongs"
    _dump(path, document)
    return f"nvlink-traffic.json: {how}"


def mutate_burn_in_log(copy: Path, data) -> str:
    path = copy / "gpufabric-burnin.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    how = data.draw(st.sampled_from(["cut", "torn line", "no serials", "NaN temperature", "foreign serial"]), "how")
    if how == "cut":
        keep = data.draw(st.integers(1, len(lines) - 1), "lines kept")
        path.write_text("".join(lines[:keep]))
    elif how == "torn line":
        index = data.draw(st.integers(1, len(lines) - 2), "line")
        lines[index] = lines[index][: len(lines[index]) // 2] + "\n"
        path.write_text("".join(lines))
    else:
        records = [json.loads(line) for line in lines]
        if how == "no serials":
            records[0]["serials"] = {}
        elif how == "foreign serial":
            records[0]["serials"]["1"] = "1111111111111"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        if how == "NaN temperature":  # a health reading of a chunk, as a broken reader would log it
            text = path.read_text()
            at = text.index('"temperature_c": ')
            end = text.index(",", at)
            path.write_text(text[:at] + '"temperature_c": NaN' + text[end:])
    return f"gpufabric-burnin.jsonl: {how}"


def mutate_machine_serial(copy: Path, data) -> str:
    """The board's serial in the machine's own record (nvml.json and -q -x) swapped for another's: the recorded
    measurements are then of a board this machine does not have."""
    index = data.draw(st.sampled_from([0, 1]), "gpu")
    nvml = _load(copy / "nvml.json")
    old = nvml["gpus"][index]["serial"]
    nvml["gpus"][index]["serial"] = "1999999999999"
    _dump(copy / "nvml.json", nvml)
    q = copy / "nvidia-smi-q.xml"
    q.write_text(q.read_text().replace(old, "1999999999999"))
    return f"GPU{index} serial {old} -> 1999999999999 in the machine's record"


def mutate_memory_record(copy: Path, data) -> str:
    path = copy / "memory.json"
    document = _load(path)
    how = data.draw(st.sampled_from(["smaller budget", "negative time", "no baseline", "NaN peak"]), "how")
    if how == "smaller budget":
        document["budget_bytes"] = document["budget_bytes"] // 4
    elif how == "negative time":
        document["baseline"]["time_per_image_s"] = -document["baseline"]["time_per_image_s"]
    elif how == "no baseline":
        document.pop("baseline")
    else:
        document["probes"][0]["peak_bytes"] = math.nan
    _dump(path, document)
    return f"memory.json: {how}"


_EXAMPLES = itertools.count()

MUTATIONS = [mutate_collective_figure, mutate_drop_collective_row, mutate_copy_rows, mutate_nvlink_samples,
             mutate_burn_in_log, mutate_machine_serial, mutate_memory_record]


@pytest.fixture(scope="module")
def source() -> Path:
    return bundle_directory(BUNDLE)


def test_the_unmutated_bundle_is_accepted(pytester: pytest.Pytester, source: Path):
    copy = pytester.path / "bundle"
    shutil.copytree(source, copy)
    result = pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", str(copy), "--gpu-waive", NO_KERNEL_LOG)
    assert result.ret == 0


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_removed_or_corrupted_evidence_is_never_accepted(pytester: pytest.Pytester, source: Path, data):
    mutation = data.draw(st.sampled_from(MUTATIONS), "mutation")
    copy = pytester.path / f"bundle-{next(_EXAMPLES)}"
    shutil.copytree(source, copy)
    said = mutation(copy, data)
    report_dir = copy.parent / f"{copy.name}-reports"
    result = pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", str(copy), "--gpu-waive", NO_KERNEL_LOG,
                                "--gpu-report-dir", str(report_dir), "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, said
    document = json.loads((report_dir / "gpufabric-results.json").read_text()) \
        if (report_dir / "gpufabric-results.json").exists() else None
    verdict = document["summary"]["verdict"] if document else None
    assert result.ret != 0 and verdict != "ACCEPTED", f"{said}: {verdict}, exit {result.ret}"
