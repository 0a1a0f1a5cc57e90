"""The RDMA suite's live measurements: the devices (sysfs, with ibv_devinfo's active MTU when the tool is
there) and an ib_write_bw run with the port counters read around it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict

from ..fabric.ibv_devinfo import merge_ibv_devinfo, parse_ibv_devinfo
from ..fabric.rdma import RdmaPort, discover_rdma
from .ib_write_bw import IbWriteBwSettings, run_ib_write_bw


def live_rdma_devices() -> list:
    devices = discover_rdma("/")
    if devices and shutil.which("ibv_devinfo"):
        try:
            done = subprocess.run(["ibv_devinfo", "-v"], capture_output=True, text=True, timeout=30)
            merge_ibv_devinfo(devices, parse_ibv_devinfo(done.stdout))
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass  # the MTU stays as sysfs gave it (None for InfiniBand): checks say "not recorded"
    return devices


def _port(device: str | None, number: int) -> RdmaPort | None:
    for dev in discover_rdma("/"):
        if dev.name == device:
            return dev.port(number)
    return None


def measure_ib_write_bw(section: dict) -> dict:
    """ib_write_bw as the profile's `rdma.ib_write_bw` asks, the client device's port counters read just
    before and after the client runs. Raises RdmaUnavailable / WorkloadError."""
    devices = section.get("devices", [])
    bw_section = section.get("ib_write_bw", {})
    default_device = devices[0]["name"] if devices else None
    settings = IbWriteBwSettings.from_profile(bw_section, device=default_device)
    port_number = settings.ib_port or next((d.get("port", 1) for d in devices if d["name"] == settings.device), 1)
    counters: dict = {"device": settings.device, "port": port_number}

    def before() -> None:
        port = _port(settings.device, port_number)
        counters["before"] = asdict(port) if port else None

    def after() -> None:
        port = _port(settings.device, port_number)
        counters["after"] = asdict(port) if port else None

    result = run_ib_write_bw(settings, on_begin=before, on_end=after)
    result["counters"] = counters
    result["settings"] = asdict(settings)
    return result
