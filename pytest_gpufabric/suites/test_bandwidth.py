"""Bandwidth acceptance: each collective at each size the profile names, judged by its bus bandwidth (as
nccl-tests defines it) against the threshold and the link's peak; nccl-tests' own all_reduce_perf when it is
there; GPU-to-GPU and host<->device copies.

All measurements are made once per run, in child process groups (torchrun for the collectives, one rank per
GPU); in replay, the bundle's bandwidth.json and nccl-tests output are judged the same way.
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks.bandwidth import (
    CollectiveRun,
    check_collective_runs,
    check_copy,
    in_network_reduction,
    link_peak,
    nccl_tests_boards,
    pcie_peak,
    size_label,
)
from pytest_gpufabric.kinds.bandwidth import COLLECTIVE_BANDWIDTH, COPY_BANDWIDTH
from pytest_gpufabric.parametrize import over, promised_profile
from pytest_gpufabric.promise import fail_promise, not_checked, promise
from pytest_gpufabric.units import format_bytes, is_number, parse_bytes


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A collective test per operation and size the profile gives a threshold for; a copy test per copy kind."""
    profile = promised_profile(metafunc.config)
    if "collective_threshold" in metafunc.fixturenames:
        thresholds = profile.collective_thresholds() if profile else []
        over(metafunc, "collective_threshold", thresholds,
             [f"{op}-{size_label(parse_bytes(t['size']))}" for op, t in thresholds])
    if "copy_kind" in metafunc.fixturenames:
        kinds = list(profile.copy_thresholds()) if profile else []
        over(metafunc, "copy_kind", kinds, kinds)


def _names_not_here(names: list, fabric) -> str | None:
    """Why GPU names a measurement recorded are not this machine's (None: they are, or either side is unknown)."""
    mine = {str(g.name) for g in fabric.gpus if g.name} if fabric is not None and fabric.gpus_recorded else set()
    theirs = sorted({str(n) for n in names or [] if n} - mine)
    if not mine or not theirs:
        return None
    return f"it ran on {', '.join(theirs)}; this machine has {', '.join(sorted(mine))}"


def _torch_run(collectives: dict, op: str, fabric) -> CollectiveRun:
    """torch.distributed's measurement as one run: its world size, host and GPU names bound to this machine."""
    world = collectives.get("world_size")
    ranks = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None
    hosts = sorted({str(n) for n in collectives.get("nodes") or []})
    not_evidence = (None if ranks is not None else f"world_size {world!r} is not a rank count") or (
        f"its ranks ran on {len(hosts)} hosts ({', '.join(hosts)}), not on this machine alone" if len(hosts) > 1
        else None) or _names_not_here(collectives.get("devices"), fabric)
    ops = collectives.get("ops") if isinstance(collectives.get("ops"), dict) else {}
    rows = ops.get(op) if isinstance(ops.get(op), list) else []
    return CollectiveRun([r for r in rows if isinstance(r, dict)], ranks, not_evidence=not_evidence)


def _in_network(fabric, op: str) -> str | None:
    """Why this machine's busbw of `op` may pass its link peak (NVLink SHARP on GB200/GB300 trays), or None."""
    return in_network_reduction([g.name for g in fabric.gpus], op) if fabric is not None else None


def _nccl_tests_runs(bandwidth, op: str, fabric, gpu_count: int) -> list[CollectiveRun]:
    """Every nccl-tests run of an op in the evidence (a log may hold several), each with the ranks and boards its
    `#  Rank` lines name, labelled as `gpufabric parse` numbers them ("run 2 of nccl-tests.txt")."""
    runs = [run for run in bandwidth.nccl_tests if run.get("op") == op]
    files = {run.get("source") for run in runs}
    out = []
    for position, run in enumerate(runs, start=1):
        label = ""
        if len(runs) > 1:
            label = f"run {run.get('run', position)}" + (f" of {run['source']}" if len(files) > 1 else "")
        devices = run.get("devices") or []
        out.append(CollectiveRun(run["rows"], len(devices) or None, label,
                                 not_evidence=nccl_tests_boards(devices, fabric, gpu_count),
                                 notes=list(run.get("unreadable") or []), unfinished=run.get("unfinished")))
    return out


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


#: the measurement these tests ask for by name, only where the profile promises it (plugin.fixtures_asked)
ASKED_BY_NAME = ("bandwidth",)


def _measurement(request, gpu_profile, what: str, promise):
    """The run's bandwidth measurement, asked for only when the profile promises ``what`` (so nothing is
    measured for nothing)."""
    if promise is None:
        pytest.skip(f"profile {gpu_profile.name} promises no {what}")
    return request.getfixturevalue("bandwidth")


#: torch.distributed and nccl-tests measure the same floors: one promise each, judged by whichever evidence is there
collective_promise = promise(COLLECTIVE_BANDWIDTH.name)


@collective_promise
def test_collective_bandwidth(gpu_profile, fabric, collective_threshold, request, gpufabric_check,
                              gpufabric_extra):
    bandwidth = _measurement(request, gpu_profile, "collective bandwidth", collective_threshold)
    op, threshold = collective_threshold
    if "collectives" in bandwidth.errors:
        fail_promise(bandwidth.errors["collectives"])
    if bandwidth.collectives is None:
        not_checked(bandwidth.tools_missing.get("collectives")
                    or f"{bandwidth.source} holds no torch.distributed collective measurements")
    size = parse_bytes(threshold["size"])
    peak, peak_what = link_peak(fabric, list(range(gpu_profile.gpu_count)))
    check = check_collective_runs(op, threshold, [_torch_run(bandwidth.collectives, op, fabric)],
                                  gpu_profile.gpu_count, peak, peak_what,
                                  f"torch.distributed {bandwidth.collectives.get('backend', '')}".strip(),
                                  in_network=_in_network(fabric, op))
    gpufabric_extra(tables=_tables(check), name=f"{op} {size_label(size)}")
    gpufabric_check(_explained(check, request))


@collective_promise
def test_nccl_tests_bandwidth(gpu_profile, fabric, collective_threshold, request, gpufabric_check):
    bandwidth = _measurement(request, gpu_profile, "collective bandwidth", collective_threshold)
    op, threshold = collective_threshold
    for part in ("nccl_tests", f"nccl_tests:{op}"):
        if part in bandwidth.errors:
            fail_promise(bandwidth.errors[part])
    runs = _nccl_tests_runs(bandwidth, op, fabric, gpu_profile.gpu_count)
    unreadable = "; ".join(f"{name}: {why}" for name, why in bandwidth.unreadable.items())
    if not runs:
        unnamed = sum(1 for run in bandwidth.nccl_tests if run.get("op") is None)
        where = bandwidth.nccl_tests_missing.get(op) or (
            f"no nccl-tests {op}_perf output: none configured (bandwidth.nccl_tests.binary), on PATH, or in the bundle")
        not_checked((f"nccl-tests output that cannot be read: {unreadable}" if unreadable else where)
                    + (f"; {unnamed} nccl-tests run(s) there do not say which test they are (name the file "
                       "nccl-tests-<op>_perf.txt)" if unnamed else ""))
    peak, peak_what = link_peak(fabric, list(range(gpu_profile.gpu_count)))
    check = check_collective_runs(op, threshold, runs, gpu_profile.gpu_count, peak, peak_what,
                                  f"nccl-tests {op}_perf", in_network=_in_network(fabric, op))
    if unreadable and check.verdict == "passed":
        not_checked(f"{check.message}; but nccl-tests output that cannot be read may hold more runs: {unreadable}")
    gpufabric_check(_explained(check, request))


def _copy_rows(copy: dict, kind: str, source: str) -> list[dict]:
    """copy_bw.py's rows of one kind, labelled; a recording not in that shape leaves the promise not checked."""
    try:
        if kind in ("host_to_device", "device_to_host"):
            return [{"label": f"GPU{r['gpu']}", "gpu": r["gpu"], "bytes": r.get("bytes"), **r[kind]}
                    for r in copy["host_device"]]
        if kind == "gpu_to_gpu":
            return [{**r, "label": f"GPU{r['src']}->GPU{r['dst']} ({r.get('path')})"} for r in copy["gpu_to_gpu"]]
        return [{**r, "label": f"GPU{r['gpus'][0]}<->GPU{r['gpus'][1]}"} for r in copy["gpu_to_gpu_bidirectional"]]
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        not_checked(f"{source}: its {kind} copy rows are not in the recording's shape ({exc!r})")


@promise(COPY_BANDWIDTH.name)
def test_copy_bandwidth(gpu_profile, fabric, copy_kind, request, gpufabric_check):
    bandwidth = _measurement(request, gpu_profile, "copy bandwidth", copy_kind)
    if "copy" in bandwidth.errors:
        fail_promise(bandwidth.errors["copy"])
    if bandwidth.copy is None:
        not_checked(bandwidth.tools_missing.get("copy") or f"{bandwidth.source} holds no copy measurements")
    copy = bandwidth.copy
    if _names_not_here(copy.get("devices"), fabric):
        not_checked(f"{bandwidth.source}: not evidence of this machine: {_names_not_here(copy.get('devices'), fabric)}")
    rows = _copy_rows(copy, copy_kind, bandwidth.source)
    _covers_the_promised_size(copy, rows, gpu_profile.quantity("bandwidth", "copy", "size"), bandwidth.source)
    if copy_kind in ("host_to_device", "device_to_host"):
        def peak_of(row):
            gpu = fabric.gpu(row["gpu"])
            return pcie_peak([gpu]) if gpu is not None else (None, "unknown")
    elif copy_kind == "gpu_to_gpu":
        def peak_of(row):
            return link_peak(fabric, [row["src"], row["dst"]])
    else:
        def peak_of(row):
            peak, what = link_peak(fabric, row["gpus"])
            return (2 * peak if peak else None), f"{what}, both directions"
    if not rows and gpu_profile.gpu_count < 2 and copy_kind.startswith("gpu_to_gpu"):
        pytest.skip(f"profile {gpu_profile.name} has one GPU: no GPU pair to copy between")
    gpufabric_check(_explained(check_copy(copy_kind, gpu_profile.copy_thresholds()[copy_kind], rows, peak_of,
                                          bandwidth.source, gpu_count=gpu_profile.gpu_count), request))


def _covers_the_promised_size(copy: dict, rows: list[dict], promised: int | None, source: str) -> None:
    """Not checked where the copies moved another size than the profile promises its floors at (a floor met at
    1 MiB says little of 1 GiB)."""
    if promised is None:
        return
    sizes = {int(size) for size in [copy.get("size"), *(row.get("bytes") for row in rows)] if is_number(size)}
    other = sorted(size for size in sizes if size != promised)
    if other:
        not_checked(f"{source}: its copies moved {format_bytes(other[0])}; the profile promises copies of "
                    f"{format_bytes(int(promised))}")
