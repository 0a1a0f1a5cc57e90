"""Bandwidth acceptance: each collective at each size the profile names, judged by its bus bandwidth (as
nccl-tests defines it) against the threshold and the link's peak; nccl-tests' own all_reduce_perf when it is
there; GPU-to-GPU and host<->device copies.

All measurements are made once per run, in child process groups (torchrun for the collectives, one rank per
GPU); in replay, the bundle's bandwidth.json and nccl-tests output are judged the same way.
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks.bandwidth import check_collective, check_copy, link_peak, pcie_peak, size_label
from pytest_gpufabric.promise import not_checked, promise
from pytest_gpufabric.units import parse_bytes


def _row_at(rows: list[dict], size: int) -> dict | None:
    """The measured row for a threshold's size (sizes are rounded down to whole elements per rank)."""
    candidates = [r for r in rows if r["size"] <= size and size - r["size"] < 4 * 1024]
    return max(candidates, key=lambda r: r["size"]) if candidates else None


def _nccl_tests_rows(bandwidth, op: str) -> list[dict]:
    """nccl-tests rows of an op, out-of-place figures (nccl-tests' headline), the last run winning."""
    rows = {}
    for run in bandwidth.nccl_tests:
        if run["op"] == op:
            for row in run["rows"]:
                oop = row["oop"]
                rows[row["size"]] = {"size": row["size"], "busbw": oop["busbw"], "algbw": oop["algbw"],
                                     "time_us": oop["time_us"], "wrong": oop["wrong"]}
    return list(rows.values())


def _tables(check) -> list[dict]:
    found = check.found if isinstance(check.found, dict) else {}
    return [{"caption": "measured", "header": ["", ""], "rows": [[str(k), str(v)] for k, v in found.items()]},
            {"caption": "threshold", "header": ["", ""],
             "rows": [[str(k), str(v)] for k, v in check.expected.items()]}]


def _explained(check, request):
    """A failing check names the platform findings that explain it (ACS redirect, IOMMU translation, no
    peer-memory module, ...: fabric/platform.py, read only when a check fails)."""
    if check.verdict == "failed":
        findings = request.getfixturevalue("platform_findings")
        if findings:
            check.message += "\nPlatform findings that explain it:\n  " + "\n  ".join(findings)
            check.details = [*check.details, *findings]
    return check


def _measurement(request, gpu_profile, what: str, promise):
    """The run's bandwidth measurement, asked for only when the profile promises ``what`` (so nothing is
    measured for nothing)."""
    if promise is None:
        pytest.skip(f"profile {gpu_profile.name} promises no {what}")
    return request.getfixturevalue("bandwidth")


#: torch.distributed and nccl-tests measure the same floors: one promise each, judged by whichever evidence is there
collective_promise = promise("collective-bandwidth")


@collective_promise
def test_collective_bandwidth(gpu_profile, fabric, collective_threshold, request, gpufabric_check,
                              gpufabric_extra):
    bandwidth = _measurement(request, gpu_profile, "collective bandwidth", collective_threshold)
    op, threshold = collective_threshold
    if "collectives" in bandwidth.errors:
        pytest.fail(bandwidth.errors["collectives"], pytrace=False)
    if bandwidth.collectives is None:
        not_checked(bandwidth.tools_missing.get("collectives")
                    or f"{bandwidth.source} holds no torch.distributed collective measurements")
    size = parse_bytes(threshold["size"])
    rows = bandwidth.collectives["ops"].get(op, [])
    world = bandwidth.collectives["world_size"]
    peak, peak_what = link_peak(fabric, list(range(gpu_profile.gpu_count)))
    check = check_collective(op, threshold, _row_at(rows, size), world, peak, peak_what,
                             f"torch.distributed {bandwidth.collectives.get('backend', '')}".strip())
    gpufabric_extra(tables=_tables(check), name=f"{op} {size_label(size)}")
    gpufabric_check(_explained(check, request))


@collective_promise
def test_nccl_tests_bandwidth(gpu_profile, fabric, collective_threshold, request, gpufabric_check):
    bandwidth = _measurement(request, gpu_profile, "collective bandwidth", collective_threshold)
    op, threshold = collective_threshold
    for part in ("nccl_tests", f"nccl_tests:{op}"):
        if part in bandwidth.errors:
            pytest.fail(bandwidth.errors[part], pytrace=False)
    rows = _nccl_tests_rows(bandwidth, op)
    if not rows:
        unnamed = sum(1 for run in bandwidth.nccl_tests if run.get("op") is None)
        where = bandwidth.nccl_tests_missing.get(op) or (
            f"no nccl-tests {op}_perf output: none configured (bandwidth.nccl_tests.binary), on PATH, or in the bundle")
        not_checked(where + (f"; {unnamed} nccl-tests run(s) there do not say which test they are (name the file "
                             "nccl-tests-<op>_perf.txt)" if unnamed else ""))
    peak, peak_what = link_peak(fabric, list(range(gpu_profile.gpu_count)))
    gpufabric_check(_explained(check_collective(op, threshold, _row_at(rows, parse_bytes(threshold["size"])),
                                                gpu_profile.gpu_count, peak, peak_what, f"nccl-tests {op}_perf"),
                               request))


@promise("copy-bandwidth")
def test_copy_bandwidth(gpu_profile, fabric, copy_kind, request, gpufabric_check):
    bandwidth = _measurement(request, gpu_profile, "copy bandwidth", copy_kind)
    if "copy" in bandwidth.errors:
        pytest.fail(bandwidth.errors["copy"], pytrace=False)
    if bandwidth.copy is None:
        not_checked(bandwidth.tools_missing.get("copy") or f"{bandwidth.source} holds no copy measurements")
    copy = bandwidth.copy
    if copy_kind in ("host_to_device", "device_to_host"):
        rows = [{"label": f"GPU{r['gpu']}", "gpu": r["gpu"], **r[copy_kind]} for r in copy["host_device"]]

        def peak_of(row):
            gpu = fabric.gpu(row["gpu"])
            return pcie_peak([gpu]) if gpu is not None else (None, "unknown")
    elif copy_kind == "gpu_to_gpu":
        rows = [{**r, "label": f"GPU{r['src']}->GPU{r['dst']} ({r['path']})"} for r in copy["gpu_to_gpu"]]

        def peak_of(row):
            return link_peak(fabric, [row["src"], row["dst"]])
    else:
        rows = [{**r, "label": f"GPU{r['gpus'][0]}<->GPU{r['gpus'][1]}"} for r in copy["gpu_to_gpu_bidirectional"]]

        def peak_of(row):
            peak, what = link_peak(fabric, row["gpus"])
            return (2 * peak if peak else None), f"{what}, both directions"
    if not rows and gpu_profile.gpu_count < 2 and copy_kind.startswith("gpu_to_gpu"):
        pytest.skip(f"profile {gpu_profile.name} has one GPU: no GPU pair to copy between")
    gpufabric_check(_explained(check_copy(copy_kind, gpu_profile.copy_thresholds()[copy_kind], rows, peak_of,
                                          bandwidth.source), request))
