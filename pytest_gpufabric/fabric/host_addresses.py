"""The host's own IP addresses, recorded into a bundle and read back: what matches a rack tray to the IMEX node
that `nvidia-imex-ctl -N` lists by address (fleet/rack_imex.py).

Recorded as the raw output of the command or kernel file that gave it, so a replay reads exactly what the live
machine said: ``ip -j addr`` (iproute2's JSON) into ``ip-addr.json``; where ``ip`` is missing, the kernel's own
tables ``/proc/net/fib_trie`` (IPv4: each ``/32 host LOCAL`` entry is an address of this host) and
``/proc/net/if_inet6`` (IPv6) into ``proc-net-fib_trie.txt`` and ``proc-net-if_inet6.txt``. A bundle without any
of them (recorded before they were) stays valid: its addresses are unknown, never empty.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ADDRESS_FILES", "IP_ADDR_COMMAND", "IP_ADDR_FILE", "HostAddresses", "parse_fib_trie",
           "parse_if_inet6", "parse_ip_addr_json", "read_host_addresses", "snapshot_addresses"]

IP_ADDR_FILE = "ip-addr.json"
IP_ADDR_COMMAND = ["ip", "-j", "addr"]
FIB_TRIE_FILE = "proc-net-fib_trie.txt"
IF_INET6_FILE = "proc-net-if_inet6.txt"
#: the kernel files read where `ip` is missing, by the bundle file they are copied to
PROC_FILES = {FIB_TRIE_FILE: "/proc/net/fib_trie", IF_INET6_FILE: "/proc/net/if_inet6"}
ADDRESS_FILES = (IP_ADDR_FILE, FIB_TRIE_FILE, IF_INET6_FILE)


@dataclass
class HostAddresses:
    """A recorded host's addresses (normalised by ``ipaddress``), the files they were read from; ``addresses`` is
    None when the folder holds none of the files or one cannot be read, ``why`` then says which."""

    addresses: list[str] | None
    source: str = ""
    why: str | None = None


def parse_ip_addr_json(text: str) -> list[str]:
    """Every ``addr_info[].local`` of ``ip -j addr``'s interfaces; ValueError names what is not that output."""
    try:
        interfaces = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(interfaces, list) or not all(isinstance(i, dict) for i in interfaces):
        raise ValueError("not `ip -j addr` output (a JSON list of interfaces)")
    found = []
    for interface in interfaces:
        for info in interface.get("addr_info") or []:
            if isinstance(info, dict) and "local" in info:
                found.append(_address(info["local"]))
    return _unique(found)


def parse_fib_trie(text: str) -> list[str]:
    """The IPv4 addresses of this host in /proc/net/fib_trie: a ``|-- A.B.C.D`` leaf whose next line says
    ``/32 host LOCAL``."""
    found, leaf = [], None
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["|--"] and len(words) == 2:
            leaf = words[1]
        elif words[:1] == ["+--"]:  # a subtree, not a leaf: its entries follow their own leaves
            leaf = None
        elif leaf is not None and words == ["/32", "host", "LOCAL"]:
            found.append(_address(leaf))
    return _unique(found)


def parse_if_inet6(text: str) -> list[str]:
    """The IPv6 addresses of /proc/net/if_inet6: each line's first field, 32 hex digits."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if len(words[0]) != 32:
            raise ValueError(f"not /proc/net/if_inet6 (a line starts {words[0]!r}, not 32 hex digits)")
        found.append(_address(":".join(words[0][i:i + 4] for i in range(0, 32, 4))))
    return _unique(found)


def _address(words) -> str:
    try:
        return str(ipaddress.ip_address(str(words)))
    except ValueError:
        raise ValueError(f"{words!r} is not an IP address") from None


def _unique(addresses: list[str]) -> list[str]:
    return list(dict.fromkeys(addresses))


def read_host_addresses(folder: Path) -> HostAddresses:
    """The addresses a bundle folder recorded: ip-addr.json, else the copied /proc/net files."""
    readers = [(IP_ADDR_FILE, parse_ip_addr_json)] if (folder / IP_ADDR_FILE).is_file() else \
        [(name, parse) for name, parse in ((FIB_TRIE_FILE, parse_fib_trie), (IF_INET6_FILE, parse_if_inet6))
         if (folder / name).is_file()]
    if not readers:
        return HostAddresses(None, why=f"no {IP_ADDR_FILE} (`{' '.join(IP_ADDR_COMMAND)}`, recorded by "
                                       "`gpufabric snapshot`)")
    found = []
    for name, parse in readers:
        try:
            found += parse((folder / name).read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError) as exc:
            return HostAddresses(None, why=f"{name}: {exc}")
    return HostAddresses(_unique(found), source=", ".join(name for name, _ in readers))


def snapshot_addresses(target: Path) -> dict:
    """Record this host's addresses into the bundle folder ``target``; the manifest's entries, by file name."""
    commands: dict[str, dict] = {}
    if shutil.which(IP_ADDR_COMMAND[0]) is not None:
        try:
            done = subprocess.run(IP_ADDR_COMMAND, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            commands[IP_ADDR_FILE] = {"cmd": IP_ADDR_COMMAND, "error": str(exc)}
        else:
            commands[IP_ADDR_FILE] = {"cmd": IP_ADDR_COMMAND, "returncode": done.returncode,
                                      "stderr": done.stderr[-2000:]}
            if done.returncode == 0:
                (target / IP_ADDR_FILE).write_text(done.stdout, encoding="utf-8")
                return commands
    else:
        commands[IP_ADDR_FILE] = {"cmd": IP_ADDR_COMMAND, "error": f"{IP_ADDR_COMMAND[0]} not on PATH"}
    for name, source in PROC_FILES.items():  # the kernel's own tables: what `ip` would have read
        try:
            text = Path(source).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            commands[name] = {"file": source, "error": str(exc)}
            continue
        (target / name).write_text(text, encoding="utf-8")
        commands[name] = {"file": source}
    return commands
