"""The host's own IP addresses, recorded into a bundle and read back: what matches a rack tray to the IMEX node
that `nvidia-imex-ctl -N` lists by address (fleet/rack_imex.py).

Recorded as the raw output of the command or kernel file that gave it, so a replay reads exactly what the live
machine said: ``ip -j addr`` (iproute2's JSON) into ``ip-addr.json``; where ``ip`` is missing, the kernel's own
tables ``/proc/net/fib_trie`` (IPv4: each ``/32 host LOCAL`` entry is an address of this host) and
``/proc/net/if_inet6`` (IPv6) into ``proc-net-fib_trie.txt`` and ``proc-net-if_inet6.txt``. A bundle without any
of them (recorded before they were) stays valid: its addresses are unknown, never empty.

Addresses are normalised by ``ipaddress`` (an IPv4-mapped ``::ffff:a.b.c.d`` is its IPv4, a zone is dropped); a
host's addresses are those that name it alone: loopback, link-local, unspecified and multicast addresses (every
host has or shares them) are dropped (``identifies_one_host``). Where the folder's manifest.json says which address
files its snapshot wrote (its ``commands``), only those are read (``recorded_address_files``). A folder's addresses
are tied to its bundle only where the manifest lists each file read with its sha256 and was recorded on the tray's
host (``tie_to_bundle``), and a tray's readings only where it lists them with their sha256 (``not_as_recorded``);
the digests (either hex case) catch a file swapped or left in the folder, not one edited with the manifest.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .recorded_command import record_command

__all__ = ["ADDRESS_FILES", "IP_ADDR_COMMAND", "IP_ADDR_FILE", "HostAddresses", "identifies_one_host",
           "normal_address", "not_as_recorded", "parse_fib_trie", "parse_if_inet6", "parse_ip_addr_json",
           "read_host_addresses", "recorded_address_files", "sha256_hex", "snapshot_addresses", "tie_to_bundle"]

IP_ADDR_FILE = "ip-addr.json"
IP_ADDR_COMMAND = ["ip", "-j", "addr"]
FIB_TRIE_FILE = "proc-net-fib_trie.txt"
IF_INET6_FILE = "proc-net-if_inet6.txt"
#: the kernel files read where `ip` is missing, by the bundle file they are copied to
PROC_FILES = {FIB_TRIE_FILE: "/proc/net/fib_trie", IF_INET6_FILE: "/proc/net/if_inet6"}
ADDRESS_FILES = (IP_ADDR_FILE, FIB_TRIE_FILE, IF_INET6_FILE)
#: the IP versions each file records: ip-addr.json both, each /proc/net file one
FAMILIES = {IP_ADDR_FILE: (4, 6), FIB_TRIE_FILE: (4,), IF_INET6_FILE: (6,)}
MANIFEST_FILE = "manifest.json"  # fabric/bundle.py's, named here so that reading it needs no bundle loader
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


@dataclass
class HostAddresses:
    """A recorded host's addresses that name it alone (normalised by ``ipaddress``), the files they were read
    from and the IP versions those files record (``families``); ``addresses`` is None when the folder holds none
    of the files or one cannot be read, ``why`` then says which."""

    addresses: list[str] | None
    source: str = ""
    why: str | None = None
    families: tuple[int, ...] = ()


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


def normal_address(words) -> str | None:
    """``words`` as ``ipaddress`` writes the address (an IPv4-mapped IPv6 as its IPv4, no zone); None for no
    address."""
    try:
        address = ipaddress.ip_address(str(words).split("%")[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped if mapped is not None else address)


def identifies_one_host(address: str) -> bool:
    """Whether an address can name one host: not loopback (127.0.0.0/8, ::1), link-local (169.254/16, fe80::/10),
    unspecified or multicast, which every host has or shares."""
    parsed = ipaddress.ip_address(address)
    return not (parsed.is_loopback or parsed.is_link_local or parsed.is_unspecified or parsed.is_multicast)


def _address(words) -> str:
    address = normal_address(words)
    if address is None:
        raise ValueError(f"{words!r} is not an IP address")
    return address


def _unique(addresses: list[str]) -> list[str]:
    return list(dict.fromkeys(addresses))


def recorded_address_files(folder: Path) -> tuple[str, ...] | None:
    """The address files the folder's manifest.json says its snapshot wrote in that run: ip-addr.json where
    `ip -j addr` exited 0, else each /proc/net copy made without an error; None where the manifest says nothing of
    them (no manifest: the folder's files are read, and tie_to_bundle says they are not tied)."""
    manifest, why = _manifest(folder)
    commands = manifest.get("commands") if why is None and isinstance(manifest.get("commands"), dict) else {}
    entries = {name: commands[name] for name in ADDRESS_FILES if isinstance(commands.get(name), dict)}
    if not entries:
        return None
    ip = entries.get(IP_ADDR_FILE, {})
    if ip.get("returncode") == 0 and "error" not in ip:
        return (IP_ADDR_FILE,)
    return tuple(name for name in (FIB_TRIE_FILE, IF_INET6_FILE)
                 if "file" in entries.get(name, {}) and "error" not in entries[name])


def read_host_addresses(folder: Path) -> HostAddresses:
    """The addresses a bundle folder recorded that name its host alone: ip-addr.json, else the copied /proc/net
    files (each gives only its own IP version); where the folder's manifest.json says which of them its snapshot
    wrote, those only (a file left from an earlier recording is not read)."""
    written = recorded_address_files(folder)
    path = folder / IP_ADDR_FILE
    if (written is None or IP_ADDR_FILE in written) and path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        return HostAddresses(None, why=f"{IP_ADDR_FILE} is {what}: its addresses cannot be read")
    if written == ():
        return HostAddresses(None, why=f"its snapshot recorded no addresses ({MANIFEST_FILE}: "
                                       f"{_errors(folder) or 'no file written'})")
    if written is not None:
        readers = [(name, parse) for name, parse in ((IP_ADDR_FILE, parse_ip_addr_json),
                                                     (FIB_TRIE_FILE, parse_fib_trie),
                                                     (IF_INET6_FILE, parse_if_inet6))
                   if name in written and (folder / name).is_file()]
    else:
        readers = [(IP_ADDR_FILE, parse_ip_addr_json)] if path.is_file() else \
            [(name, parse) for name, parse in ((FIB_TRIE_FILE, parse_fib_trie), (IF_INET6_FILE, parse_if_inet6))
             if (folder / name).is_file()]
    if not readers and written and IP_ADDR_FILE not in written:
        return HostAddresses(None, why=f"no {' or '.join(written)} (the /proc/net copies its {MANIFEST_FILE} says "
                                       "the snapshot made)")
    if not readers:
        return HostAddresses(None, why=f"no {IP_ADDR_FILE} (`{' '.join(IP_ADDR_COMMAND)}`, recorded by "
                                       "`gpufabric snapshot`)")
    found = []
    for name, parse in readers:
        try:
            found += parse((folder / name).read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError) as exc:
            return HostAddresses(None, why=f"{name}: {exc}")
    families = tuple(sorted({family for name, _ in readers for family in FAMILIES[name]}))
    return HostAddresses([a for a in _unique(found) if identifies_one_host(a)],
                         source=", ".join(name for name, _ in readers), families=families)


def _errors(folder: Path) -> str:
    """The manifest's errors for the address files: why its snapshot wrote none."""
    commands = _manifest(folder)[0].get("commands")
    said = [f"{name}: {commands[name].get('error') or 'exit ' + str(commands[name].get('returncode'))}"
            for name in ADDRESS_FILES if isinstance(commands, dict) and isinstance(commands.get(name), dict)]
    return "; ".join(said)


def tie_to_bundle(folder: Path, recorded: HostAddresses, host: str | None) -> tuple[str | None, str | None]:
    """(why the recorded addresses are not the bundle's, None where they are; the bundle's recorded_at): each
    file read listed in the folder's manifest.json with its sha256, the manifest's host the tray's ``host``."""
    manifest, why = _manifest(folder)
    recorded_at = manifest.get("recorded_at") if isinstance(manifest.get("recorded_at"), str) else None
    if why is not None:
        return why, recorded_at
    digests = manifest.get("sha256") if isinstance(manifest.get("sha256"), dict) else {}
    listed = manifest.get("files") if isinstance(manifest.get("files"), list) else []
    for name in recorded.source.split(", ") if recorded.source else ():
        if name not in listed or name not in digests:
            return (f"{MANIFEST_FILE} does not list {name} with its sha256 (not recorded by this bundle's "
                    "`gpufabric snapshot`)"), recorded_at
        if sha256_hex(digests[name]) is None:
            return f"{MANIFEST_FILE} is malformed: its sha256 of {name} is not 64 hex digits", recorded_at
        try:
            content = (folder / name).read_bytes()
        except OSError as exc:
            return f"{name} cannot be read ({exc.strerror})", recorded_at
        if hashlib.sha256(content).hexdigest() != sha256_hex(digests[name]):
            return f"{name} is not the file its bundle recorded (its sha256 differs from {MANIFEST_FILE}'s)", \
                recorded_at
    said = manifest.get("hostname")
    if not host:
        return f"the bundle names no host to tie {recorded.source} to", recorded_at
    if not isinstance(said, str) or said.strip().lower().rstrip(".") != host.strip().lower().rstrip("."):
        return f"{MANIFEST_FILE} was recorded on {said or 'no named host'}, the tray's bundle on {host}", \
            recorded_at
    return None, recorded_at


def not_as_recorded(folder: Path, names) -> tuple[list[str], list[str]]:
    """(why each of ``names`` present in ``folder`` is not the reading its manifest.json recorded; what the manifest
    cannot tell). Where the folder has a manifest, each such file must be listed in its ``files``, not recorded as
    unwritten in its ``commands`` (an error, a non-zero exit) and, where the manifest has digests, listed with its
    sha256 and match it. A manifest written before the snapshot recorded digests (no ``sha256``, no addresses)
    is held to its list alone; a folder without a manifest is not checked here. A digest anyone can recompute
    shows a mix-up (a file swapped, put in or left in the folder), not an edit made together with the manifest."""
    present = [name for name in names if (folder / name).is_file()]
    if not present or not (folder / MANIFEST_FILE).exists():
        return [], []
    manifest, why = _manifest(folder)
    if not (folder / MANIFEST_FILE).is_file():
        why = f"{MANIFEST_FILE} is not a file"
    if why is not None:
        return [], [f"{why}: the tray's readings cannot be tied to it"]
    listed, commands = manifest.get("files"), manifest.get("commands", {})
    digests = manifest["sha256"] if "sha256" in manifest else None  # no key: from before digests
    shapes = (("files", listed, list), ("commands", commands, dict),
              ("sha256", digests, dict if "sha256" in manifest else type(None)))
    malformed = [key for key, value, kind in shapes if not isinstance(value, kind)]
    if malformed:
        return [], [f"{MANIFEST_FILE} is malformed (its {', '.join(malformed)} not as `gpufabric snapshot` writes "
                    "them): the tray's readings cannot be tied to it"]
    if digests is None and any(name in commands for name in ADDRESS_FILES):
        # the snapshot began recording the addresses and the digests together: no snapshot wrote one without the other
        return [], [f"{MANIFEST_FILE} records the host's addresses but no sha256: no `gpufabric snapshot` writes that "
                    "(its digests removed?): the tray's readings cannot be tied to it"]
    found, unknown = [], []
    for name in present:
        entry = commands.get(name) if isinstance(commands.get(name), dict) else {}
        if "error" in entry or entry.get("returncode", 0) != 0:
            said = entry.get("error") or f"exit {entry.get('returncode')}"
            found.append(f"{name} is in the folder, but {MANIFEST_FILE} says its snapshot did not write it "
                         f"({str(said)[:120]}): not the tray's recording")
        elif name not in listed:
            found.append(f"{name} is not listed in {MANIFEST_FILE} (put in the folder after or before its "
                         "snapshot): not the tray's recording")
        elif digests is None:  # a manifest from before the snapshot recorded digests: its list alone
            continue
        elif name not in digests:
            found.append(f"{MANIFEST_FILE} lists {name} without its sha256: not shown to be the tray's recording")
        elif sha256_hex(digests[name]) is None:
            unknown.append(f"{MANIFEST_FILE} is malformed: its sha256 of {name} is not 64 hex digits "
                           f"({str(digests[name])[:80]!r})")
        else:
            try:
                content = (folder / name).read_bytes()
            except OSError as exc:
                found.append(f"{name} cannot be read ({exc.strerror})")
                continue
            if hashlib.sha256(content).hexdigest() != sha256_hex(digests[name]):
                found.append(f"{name} is not the file its bundle recorded (its sha256 differs from "
                             f"{MANIFEST_FILE}'s)")
    return found, unknown


def sha256_hex(value) -> str | None:
    """A manifest's sha256 as ``hexdigest()`` writes it (64 hex digits, lower case; either case is accepted);
    None for anything else."""
    return value.lower() if isinstance(value, str) and _SHA256_HEX.fullmatch(value) else None


def _manifest(folder: Path) -> tuple[dict, str | None]:
    path = folder / MANIFEST_FILE
    if not path.is_file():
        return {}, f"no {MANIFEST_FILE}: the addresses cannot be tied to the tray's bundle"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {}, f"{MANIFEST_FILE} cannot be read ({exc})"
    if not isinstance(manifest, dict):
        return {}, f"{MANIFEST_FILE} is not a bundle manifest (a JSON object)"
    return manifest, None


def snapshot_addresses(target: Path) -> dict:
    """Record this host's addresses into the bundle folder ``target``; the manifest's entries, by file name."""
    commands = {IP_ADDR_FILE: record_command(target, IP_ADDR_FILE, IP_ADDR_COMMAND, timeout_s=60)}
    if commands[IP_ADDR_FILE].get("returncode") == 0:
        return commands
    for name, source in PROC_FILES.items():  # the kernel's own tables: what `ip` would have read
        try:
            text = Path(source).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            commands[name] = {"file": source, "error": str(exc)}
            continue
        (target / name).write_text(text, encoding="utf-8")
        commands[name] = {"file": source}
    return commands
