"""Nodes of a fleet on this one host, for the fabric tests: network namespaces joined by veth pairs to a bridge,
each with its own address, made by the test (as root) and torn down after it.

One namespace's link can be rate-limited with `tc` (a token bucket on both ends of its veth pair): a real slow
link, whose traffic really waits, not a sleep. Traffic stays inside the namespaces and the bridge the test made.

    with namespace_nodes(5, slow={3: "40mbit"}) as nodes:
        nodes.run(3, ["python3", ...])          # a process in node 3's namespace
        nodes.address(0)                        # "10.213.x.1"

Without root or `ip netns` the fixture skips; with CI=true it fails instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = f"gfp{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"ip netns add failed: {exc.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


def require() -> None:
    why = unavailable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the fabric tests: {why}", pytrace=False)
        pytest.skip(why)


@dataclass
class Nodes:
    tag: str
    count: int
    subnet: str  # "10.213.7"
    namespaces: list[str] = field(default_factory=list)

    def address(self, index: int) -> str:
        return f"{self.subnet}.{index + 1}"

    def prefix(self, index: int) -> list[str]:
        """The command prefix that runs a program in node ``index``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[index]]

    def run(self, index: int, command: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen([*self.prefix(index), *command], **kw)


@contextlib.contextmanager
def namespace_nodes(count: int, slow: dict[int, str] | None = None,
                    slow_pair: tuple[int, int, str] | None = None) -> Iterator[Nodes]:
    """``count`` namespaces on one bridge; ``slow``: node index -> tc rate ("40mbit") of its link, both ways;
    ``slow_pair``: (a, b, rate): only the traffic between a and b is limited (on each of the two, an HTB class at
    that rate takes the packets addressed to the other; the rest is unclassified and goes through HTB's direct
    queue, unshaped), each is as fast with the rest as any node. (A default HTB class "at 10 Gbit/s" for the rest,
    as this first did, itself held those two nodes to about half the speed of the others on a veth, which made
    their healthy pairs slow for real.)"""
    tag = secrets.token_hex(2)
    nodes = Nodes(tag=tag, count=count, subnet=f"10.213.{int(tag, 16) % 250 + 1}")
    bridge = f"gfbr{tag}"
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "up")
        for i in range(count):
            namespace, outside = f"gf{tag}n{i}", f"gf{tag}v{i}"
            _ip("netns", "add", namespace)
            nodes.namespaces.append(namespace)
            _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            inside = ["netns", "exec", namespace, "ip"]
            _ip(*inside, "addr", "add", f"{nodes.address(i)}/24", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")
            if slow and i in slow:
                # a token bucket on what the node sends (its eth0) and on what it receives (the bridge's veth end)
                spec = ["root", "tbf", "rate", slow[i], "burst", "64kb", "latency", "100ms"]
                subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", "eth0", *spec],
                               check=True, capture_output=True, text=True)
                subprocess.run(["tc", "qdisc", "add", "dev", outside, *spec], check=True, capture_output=True,
                               text=True)
        if slow_pair:
            a, b, rate = slow_pair
            for me, other in ((a, b), (b, a)):
                tc = ["ip", "netns", "exec", nodes.namespaces[me], "tc"]
                for command in (["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "r2q", "1000"],
                                ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", rate,
                                 "ceil", rate],
                                ["filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                                 "match", "ip", "dst", f"{nodes.address(other)}/32", "flowid", "1:20"]):
                    subprocess.run([*tc, *command], check=True, capture_output=True, text=True)
        yield nodes
    finally:
        for namespace in nodes.namespaces:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)  # takes its veth pair along
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def fabric_pairs_rank(node_name: str, result: Path, *, pair_size: int, iters: int = 3, warmup: int = 1,
                      confirm_iters: int = 0) -> list[str]:
    """One rank of workloads/fabric_pairs.py over gloo: the interpreter, the script and its arguments."""
    import sys

    script = Path(__file__).resolve().parents[1] / "pytest_gpufabric" / "workloads" / "fabric_pairs.py"
    return [sys.executable, str(script), "--backend", "gloo", "--node-name", node_name, "--sizes", str(pair_size),
            "--pair-size", str(pair_size), "--warmup", str(warmup), "--iters", str(iters), "--confirm-iters",
            str(confirm_iters), "--result", str(result)]


def run_fabric_pairs(nodes: Nodes, result: Path, *, pair_size: int, iters: int = 3, warmup: int = 1,
                     confirm_iters: int = 0, port: int = 29561, timeout: float = 600) -> list[str]:
    """workloads/fabric_pairs.py over gloo, one rank in each node's namespace (rank i is node<i>); the ranks'
    outputs. Raises AssertionError naming the outputs when a rank fails."""
    commands = [[*nodes.prefix(i), "env", f"RANK={i}", f"WORLD_SIZE={nodes.count}", "LOCAL_RANK=0",
                 f"MASTER_ADDR={nodes.address(0)}", f"MASTER_PORT={port}", "GLOO_SOCKET_IFNAME=eth0",
                 "OMP_NUM_THREADS=1",
                 *fabric_pairs_rank(f"node{i}", result, pair_size=pair_size, iters=iters, warmup=warmup,
                                    confirm_iters=confirm_iters)]
                for i in range(nodes.count)]
    ranks = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for command in commands]
    outputs = [rank.communicate(timeout=timeout)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0] * nodes.count, outputs
    return outputs
