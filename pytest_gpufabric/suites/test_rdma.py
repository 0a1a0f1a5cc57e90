"""RDMA acceptance: every promised port present, ACTIVE and LinkUp at its rate, link layer and MTU, next to the
GPUs it serves; ib_write_bw (perftest, the real binary) reaches the promised fraction of the line rate; and the
port's counters saw the bytes it sent.

RDMA is read from sysfs, not NVML: these tests run on a machine whose GPUs cannot be read, and in replay they
judge a bundle's sysfs copy, `ibv_devinfo -v` and ib_write_bw output.
"""

from __future__ import annotations

from pytest_gpufabric.checks.rdma import check_counters_rise, check_gpu_locality, check_ib_write_bw, check_rdma_port
from pytest_gpufabric.promise import not_checked, promise


def _source(run) -> str:
    return f"bundle {run.replay}" if run.replay else "this machine's /sys/class/infiniband"


@promise("rdma-port")
def test_rdma_port(rdma_promise, rdma_port, gpufabric_run, request, gpufabric_check):
    if rdma_port is None:
        return  # promised but missing: the test fails on that before it gets here
    devices = request.getfixturevalue("rdma_devices")
    gpufabric_check(check_rdma_port(rdma_promise, devices, _source(gpufabric_run)))


@promise("rdma-locality")
def test_rdma_gpu_locality(gpu_profile, rdma_promise, request, gpufabric_check):
    devices = request.getfixturevalue("rdma_devices")
    gpufabric_check(check_gpu_locality(rdma_promise, devices, request.getfixturevalue("fabric")))


def _promised_rate(profile, device: str | None) -> str | None:
    return next((d.get("rate") for d in profile.rdma_devices if d["name"] == device), None)


@promise("ib-write-bw")
def test_ib_write_bw(gpu_profile, ib_write_bw_result, gpufabric_check):
    client = ib_write_bw_result["client"]
    settings = gpu_profile.rdma["ib_write_bw"]
    device = settings.get("device") or client.get("device")
    source = ib_write_bw_result.get("source", "ib_write_bw on this machine")
    gpufabric_check(check_ib_write_bw(settings, client, _promised_rate(gpu_profile, device), source))


@promise("rdma-counters")
def test_rdma_counters_rise(gpu_profile, ib_write_bw_result, gpufabric_check):
    from pytest_gpufabric.fabric.rdma import RdmaPort

    counters = ib_write_bw_result.get("counters")
    if not counters:
        not_checked("the recording holds no port counters read around the run (a bare ib_write_bw output)")
    rows = ib_write_bw_result["client"]["results"]
    bytes_sent = max(r["bytes"] * r["iterations"] for r in rows) if rows else 0
    before = RdmaPort(**counters["before"]) if counters.get("before") else None
    after = RdmaPort(**counters["after"]) if counters.get("after") else None
    gpufabric_check(check_counters_rise(before, after, bytes_sent, f"{counters['device']} port {counters['port']}"))
