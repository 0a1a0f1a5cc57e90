"""RDMA acceptance: every promised port present, ACTIVE and LinkUp at its rate, link layer and MTU, next to the
GPUs it serves; ib_write_bw (perftest, the real binary) reaches the promised fraction of the line rate; and the
port's counters saw the bytes it sent.

RDMA is read from sysfs, not NVML: these tests run on a machine whose GPUs cannot be read, and in replay they
judge a bundle's sysfs copy, `ibv_devinfo -v` and ib_write_bw output.
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks.rdma import (
    check_counters_rise,
    check_gpu_locality,
    check_ib_write_bw,
    check_rdma_port,
    find_port,
)
from pytest_gpufabric.errors import GpuFabricError
from pytest_gpufabric.fabric.rdma import RdmaPort
from pytest_gpufabric.kinds.rdma import IB_WRITE_BW, RDMA_COUNTERS, RDMA_LOCALITY, RDMA_PORT
from pytest_gpufabric.parametrize import over, promised_profile
from pytest_gpufabric.promise import not_checked, promise


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test per RDMA port the profile promises (`rdma.devices`)."""
    if "rdma_promise" in metafunc.fixturenames:
        profile = promised_profile(metafunc.config)
        promised = profile.rdma_devices if profile else []
        over(metafunc, "rdma_promise", promised, [f"{d['name']}:{d.get('port', 1)}" for d in promised])


def _source(fabric_session) -> str:
    return f"bundle {fabric_session.replay}" if fabric_session.replay else "this machine's /sys/class/infiniband"


@promise(RDMA_PORT.name)
def test_rdma_port(rdma_promise, rdma_port, gpufabric_run, request, gpufabric_check):
    if rdma_port is None:
        return  # promised but missing: the test fails on that before it gets here
    devices = request.getfixturevalue("rdma_devices")
    gpufabric_check(check_rdma_port(rdma_promise, devices, _source(gpufabric_run)))


@promise(RDMA_LOCALITY.name)
def test_rdma_gpu_locality(gpu_profile, rdma_promise, request, gpufabric_check):
    devices = request.getfixturevalue("rdma_devices")
    gpufabric_check(check_gpu_locality(rdma_promise, devices, request.getfixturevalue("fabric")))


def _promised_rate(profile, device: str | None) -> str | None:
    return next((d.get("rate") for d in profile.rdma_devices if d["name"] == device), None)


def _promised_device(profile) -> str | None:
    """The device the profile promises ib_write_bw on: its own `device`, else the first RDMA device (as the live
    run picks it, workloads/rdma.py)."""
    settings = profile.rdma.get("ib_write_bw") or {}
    return settings.get("device") or next((d["name"] for d in profile.rdma_devices), None)


def _recorded_port(fabric_session, profile, device: str | None) -> RdmaPort | None:
    """The promised port as this machine's sysfs or the bundle records it, to hold ib_write_bw's figures to; None
    where the devices were not recorded (the figures are then held to each other only)."""
    number = next((d.get("port", 1) for d in profile.rdma_devices if d["name"] == device), 1)
    try:
        devices = fabric_session.measurement("rdma")
    except GpuFabricError:
        return None
    return find_port(devices or [], device, number)[1] if device else None


@promise(IB_WRITE_BW.name)
def test_ib_write_bw(gpu_profile, ib_write_bw_result, gpufabric_run, gpufabric_check):
    client = ib_write_bw_result.get("client")
    source = ib_write_bw_result.get("source", "ib_write_bw on this machine")
    if not isinstance(client, dict):
        not_checked(f"{source}: the recording holds no ib_write_bw client result")
    settings = gpu_profile.rdma["ib_write_bw"]
    device = _promised_device(gpu_profile)
    port = _recorded_port(gpufabric_run, gpu_profile, device)
    gpufabric_check(check_ib_write_bw(settings, client, _promised_rate(gpu_profile, device), source, device, port))


@promise(RDMA_COUNTERS.name)
def test_rdma_counters_rise(gpu_profile, ib_write_bw_result, gpufabric_check):
    counters = ib_write_bw_result.get("counters")
    if not counters:
        not_checked("the recording holds no port counters read around the run (a bare ib_write_bw output)")
    device, port = counters.get("device"), counters.get("port")
    if device != _promised_device(gpu_profile):
        not_checked(f"the counters were read on {device} port {port}; the profile promises ib_write_bw on "
                    f"{_promised_device(gpu_profile)}")
    rows = [r for r in (ib_write_bw_result.get("client") or {}).get("results") or []
            if isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("iterations"), int)]
    bytes_sent = max(r["bytes"] * r["iterations"] for r in rows) if rows else 0
    try:
        before = RdmaPort(**counters["before"]) if counters.get("before") else None
        after = RdmaPort(**counters["after"]) if counters.get("after") else None
    except TypeError as exc:
        not_checked(f"the port records around the run are not in the recording's shape ({exc})")
    gpufabric_check(check_counters_rise(before, after, bytes_sent, f"{device} port {port}"))
