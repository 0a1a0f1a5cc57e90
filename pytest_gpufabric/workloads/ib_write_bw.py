"""perftest's ib_write_bw, the real binary: a server and a client, on this machine or against a peer host.

Three set-ups, chosen by the profile's `rdma.ib_write_bw` section:
- loopback (no `peer`): server and client both here, between two ports or devices (`device` for the client,
  `server_device` for the server, default the same device): proves the HCA and the driver, not the cable;
- `peer` + `ssh`: the server is started on the peer over ssh (`ssh: "ssh -o BatchMode=yes node0"`), then the
  client here connects to it: the usual two-node acceptance;
- `peer` alone: a server is already listening there (started by hand: `ib_write_bw -d mlx5_0 --report_gbits`).
Both processes run in their own process groups, killed on timeout. Results are parsed by formats.perftest.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from ..errors import HardwareUnavailable, ToolMissing, WorkloadError
from ..formats.perftest import NoRdmaDevice, parse_perftest
from ..units import parse_bytes

INSTALL_HINT = "install perftest (Debian/Ubuntu: apt install perftest; RHEL: dnf install perftest)"


class RdmaUnavailable(HardwareUnavailable):
    """No RDMA device (or no perftest) on this machine: one sentence, from the tool's own words."""


@dataclass(frozen=True)
class IbWriteBwSettings:
    device: str | None = None  # -d for the client (and the server, unless server_device)
    server_device: str | None = None
    ib_port: int | None = None  # -i
    gid_index: int | None = None  # -x (RoCE)
    size: int = 65536  # -s bytes
    qps: int = 1  # -q
    duration_s: int | None = 5  # -D; None: iteration mode (-n iterations)
    iterations: int | None = None
    use_cuda: int | None = None  # --use_cuda=<GPU index>: GPUDirect RDMA from GPU memory
    peer: str | None = None
    ssh: str | None = None  # how to reach the peer to start the server there
    tcp_port: int = 18515  # -p
    binary: str = "ib_write_bw"
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    timeout_s: float = 120.0

    @classmethod
    def from_profile(cls, section: dict, device: str | None = None) -> IbWriteBwSettings:
        known = {k: section[k] for k in ("server_device", "ib_port", "gid_index", "qps", "duration_s",
                                          "iterations", "use_cuda", "peer", "ssh", "tcp_port", "binary",
                                          "timeout_s") if k in section}
        if "size" in section:
            known["size"] = parse_bytes(section["size"])
        if "extra_args" in section:
            known["extra_args"] = tuple(section["extra_args"])
        return cls(device=section.get("device", device), **known)


def _common_args(settings: IbWriteBwSettings, device: str | None) -> list[str]:
    args = ["--report_gbits", "-F", "-s", str(settings.size), "-q", str(settings.qps), "-p", str(settings.tcp_port)]
    if device:
        args += ["-d", device]
    if settings.ib_port is not None:
        args += ["-i", str(settings.ib_port)]
    if settings.gid_index is not None:
        args += ["-x", str(settings.gid_index)]
    if settings.duration_s is not None:
        args += ["-D", str(settings.duration_s)]
    elif settings.iterations is not None:
        args += ["-n", str(settings.iterations)]
    if settings.use_cuda is not None:
        args += [f"--use_cuda={settings.use_cuda}"]
    return args + list(settings.extra_args)


def server_command(settings: IbWriteBwSettings) -> list[str]:
    return [settings.binary, *_common_args(settings, settings.server_device or settings.device)]


def client_command(settings: IbWriteBwSettings, server_address: str) -> list[str]:
    return [settings.binary, *_common_args(settings, settings.device), server_address]


def find_binary(settings: IbWriteBwSettings) -> str:
    path = shutil.which(settings.binary)
    if path is None:
        raise ToolMissing(f"{settings.binary} not found on PATH: {INSTALL_HINT}")
    return path


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _stop(process: subprocess.Popen) -> str:
    """Kill the process group if it still runs; its output either way."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    output, _ = process.communicate()
    return output or ""


def _raise_for_output(cmd: list[str], returncode: int | None, output: str, role: str) -> None:
    try:
        parse_perftest(output)
    except NoRdmaDevice as exc:
        raise RdmaUnavailable(f"no RDMA device: {role} `{shlex.join(cmd)}` says: {exc}") from None
    except ValueError:
        raise WorkloadError(cmd, returncode, output, "", f"ib_write_bw {role} printed no result") from None


def run_ib_write_bw(settings: IbWriteBwSettings, *, on_begin=None, on_end=None) -> dict:
    """Run server and client; return both parsed outputs and the raw text (for bundles).

    ``on_begin``/``on_end`` bracket the client's run (counter sampling). Raises RdmaUnavailable when the
    binary or the device is missing (the binary's own message), WorkloadError on any other failure."""
    binary = find_binary(settings)
    settings = IbWriteBwSettings(**{**settings.__dict__, "binary": binary})
    server = None
    if settings.peer is None:
        server_cmd = server_command(settings)
        server = _start(server_cmd)
    elif settings.ssh:
        server_cmd = [*shlex.split(settings.ssh), shlex.join(server_command(settings))]
        server = _start(server_cmd)
    time.sleep(1.0)  # perftest's server needs a moment to listen; the client retries its connect briefly
    if server is not None and server.poll() is not None:
        output = _stop(server)
        _raise_for_output(server_cmd, server.returncode, output, "server")
    client_cmd = client_command(settings, settings.peer or "127.0.0.1")
    if on_begin:
        on_begin()
    try:
        client = _start(client_cmd)
        try:
            client_output, _ = client.communicate(timeout=settings.timeout_s)
        except subprocess.TimeoutExpired:
            _stop(client)
            raise WorkloadError(client_cmd, None, "", "", f"timed out after {settings.timeout_s:.0f} s") from None
    finally:
        if on_end:
            on_end()
        server_output = _stop(server) if server is not None else ""
        if server is not None and server.poll() is None:
            server.wait(timeout=5)
    if client.returncode != 0:
        _raise_for_output(client_cmd, client.returncode, client_output, "client")
        raise WorkloadError(client_cmd, client.returncode, client_output, "", "ib_write_bw client failed")
    return {
        "client_command": client_cmd,
        "client": parse_perftest(client_output),
        "client_output": client_output,
        "server_output": server_output,
    }
