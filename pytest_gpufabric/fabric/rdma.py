"""RDMA devices and ports from Linux sysfs (``/sys/class/infiniband``); ``ibv_devinfo -v`` text in ibv_devinfo.py.

Why sysfs: it needs no verbs library and no device access, reads the same on a live machine and on a copy
taken into a bundle (``snapshot_rdma``), and holds what an acceptance check asks first: is the port ACTIVE
and LinkUp, at what rate, over which link layer, and did its counters move.

Every reader takes ``root`` ("/" on a live machine, a directory holding ``sys/`` in tests and bundles) and
never raises for a missing or unreadable file: the field is ``None`` ("not recorded"). A file that is
there but cannot be parsed (i40iw answers ``N/A (no PMA)`` for its IB counters) also gives ``None``, and its
text is kept in the ``raw`` dict of the device or port so a report can show what the machine said.

The sysfs files read, their units, and how a RoCE port's active MTU is computed (``ibv_devinfo`` wins where it
was recorded: ``merge_ibv_devinfo``, fabric/ibv_devinfo.py): docs/evidence/rdma.md, "Where the RDMA facts are read".
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .sysfs_pci import _in_root, _natural_key, _read_text, _under, parse_pci_path, rdma_devices

SYSFS_IB = "/sys/class/infiniband"
SYMLINK_SUFFIX = ".symlink"
#: a snapshot lists here, one a line, the files it could not read (relative to the snapshot root)
UNREADABLE_LIST = "sys-class-infiniband.unreadable.txt"

#: IB MTU sizes (ib_mtu enum 1..5) and the RoCE headers ib_core's iboe_get_mtu takes off the netdev MTU:
#: GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4
IB_MTUS = (256, 512, 1024, 2048, 4096)
ROCE_HEADER_BYTES = 40 + 8 + 12 + 4 + 28 + 4
#: a 32-bit PortCounters data counter stops here (the IB spec saturates it instead of wrapping)
_U32_SATURATED = 2**32 - 1

_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\s*(?:\(\s*(\d+X)(?:\s+([A-Za-z0-9]+))?\s*\))?\s*$")


@dataclass
class RdmaPort:
    """One port of an RDMA device, as sysfs (and, where merged, ibv_devinfo) describe it."""

    device: str
    port: int
    state: str | None = None  # "ACTIVE", the name sysfs prints after the code
    state_code: int | None = None  # 4
    phys_state: str | None = None  # "LinkUp"
    phys_state_code: int | None = None  # 5
    rate_gbit: float | None = None  # Gb/s, the whole port (width x lane speed), as the rate file says
    rate_text: str | None = None  # "25 Gb/sec (1X EDR)", as printed
    width: str | None = None  # "1X", "4X"
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    active_mtu: int | None = None  # bytes; where it comes from: docs/evidence/rdma.md
    active_mtu_source: str | None = None  # "ibv_devinfo" | "netdev ens1f0 mtu 1500"
    netdev: str | None = None  # the netdev behind the port (RoCE GID table, or the device's only netdev)
    netdev_mtu: int | None = None  # that netdev's ``mtu``
    netdev_speed_mbit: int | None = None  # that netdev's ``speed`` (Mb/s): a RoCE port's real line rate
    lid: int | None = None
    gids: list[str] | None = None  # non-zero GIDs in index order, compressed ("fe80::b696:91ff:feec:a458")
    counters: dict[str, int] | None = None  # ``counters/``: None when the directory is absent
    counters_ext: dict[str, int] | None = None  # ``counters_ext/`` (mlx4)
    hw_counters: dict[str, int] | None = None  # ``hw_counters/``
    raw: dict[str, str] = field(default_factory=dict)  # port-relative path -> text that did not parse


@dataclass
class RdmaDevice:
    """An RDMA device (``/sys/class/infiniband/<name>``) and its ports."""

    name: str
    node_type: str | None = None  # "CA", "RNIC", ... (the name after the code in "1: CA")
    node_guid: str | None = None  # "0a7f:bc12:45ef:d23b", as printed
    fw_ver: str | None = None
    board_id: str | None = None  # PSID on Mellanox/NVIDIA ("SM_2001000001034")
    hca_type: str | None = None  # "MT4118"
    numa_node: int | None = None  # -1: the firmware gave none
    pci_bus_id: str | None = None  # sysfs style "0000:3b:00.0"; None for software devices or when unrecorded
    netdevs: list[str] | None = None  # ``device/net/*``
    ports: list[RdmaPort] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)

    def port(self, number: int) -> RdmaPort | None:
        for port in self.ports:
            if port.port == number:
                return port
        return None

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- parsers


def parse_state(text: str) -> tuple[int, str]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); '5: LinkUp' -> (5, 'LinkUp'); '7: Phy Test' -> (7, 'Phy Test').

    The format of the ``state``, ``phys_state`` and ``node_type`` files. Raises ValueError.
    """
    m = _STATE.match(text or "")
    if not m:
        raise ValueError(f"not a sysfs state: {text!r} (expected e.g. '4: ACTIVE')")
    return int(m.group(1)), m.group(2)


def parse_rate(text: str) -> tuple[float, str | None]:
    """A port ``rate`` file -> (Gb/s for the whole port, width).

    '25 Gb/sec (1X EDR)' -> (25.0, '1X'); '100 Gb/sec (4X EDR)' -> (100.0, '4X');
    '2.5 Gb/sec (1X SDR)' -> (2.5, '1X'); '10 Gb/sec (4X)' -> (10.0, '4X') (kernels before 4.x printed
    no speed name for SDR). The number already includes the width: the kernel prints lane rate x lanes.
    Raises ValueError.
    """
    m = _RATE.match(text or "")
    if not m:
        raise ValueError(f"not a port rate: {text!r} (expected e.g. '100 Gb/sec (4X EDR)')")
    return float(m.group(1)), m.group(2)


def _parse_gid(text: str) -> str | None:
    """'fe80:0000:0000:0000:b696:91ff:feec:a458' -> 'fe80::b696:91ff:feec:a458'; the zero GID -> None.

    inet_ntop's form, the one ibv_devinfo prints (IPv4-mapped GIDs as '::ffff:10.100.100.1').
    Raises ValueError for text that is not a GID.
    """
    try:
        packed = socket.inet_pton(socket.AF_INET6, text.strip())
    except OSError as exc:
        raise ValueError(f"not a GID: {text!r}") from exc
    if not any(packed):
        return None
    return socket.inet_ntop(socket.AF_INET6, packed)


def roce_active_mtu(netdev_mtu: int) -> int | None:
    """The IB MTU a RoCE port carries over a netdev MTU, by ib_core's iboe_get_mtu: 1500 -> 1024,
    9000 -> 4096, 4200 -> 4096. None when even 256 does not fit."""
    payload = netdev_mtu - ROCE_HEADER_BYTES
    fitting = [size for size in IB_MTUS if size <= payload]
    return fitting[-1] if fitting else None


# ------------------------------------------------------------------------------------------- sysfs reads


def _read_counters(directory: str, raw: dict[str, str], prefix: str) -> dict[str, int] | None:
    """Every file of a counters directory as int; None when the directory is absent or unreadable."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    values: dict[str, int] = {}
    for name in names:
        if name.endswith(SYMLINK_SUFFIX):
            continue
        text = _read_text(os.path.join(directory, name))
        if text is None:
            continue
        try:
            values[name] = int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            raw[f"{prefix}/{name}"] = text
    return values


def _link_target(path: str, root: str) -> str | None:
    """Where a sysfs symlink leads, as the machine names it: a live link, or the ``<path>.symlink`` file a
    snapshot wrote in its place. None when neither is there."""
    if os.path.islink(path):
        return _under(root, os.path.realpath(path))
    text = _read_text(path + SYMLINK_SUFFIX)
    return text or None


def _text_field(path: str) -> str | None:
    text = _read_text(path)
    return text if text else None


def _state_field(path: str, raw: dict[str, str], key: str) -> tuple[int | None, str | None]:
    text = _read_text(path)
    if text is None:
        return None, None
    try:
        return parse_state(text)
    except ValueError:
        raw[key] = text
        return None, None


def _netdevs(dev_dir: str) -> list[str] | None:
    try:
        return sorted(os.listdir(os.path.join(dev_dir, "device", "net")), key=_natural_key)
    except OSError:
        return None


def _read_port(root: str, dev_dir: str, name: str, number: int, netdevs: list[str] | None) -> RdmaPort:
    pdir = os.path.join(dev_dir, "ports", str(number))
    port = RdmaPort(device=name, port=number)
    raw = port.raw
    port.state_code, port.state = _state_field(os.path.join(pdir, "state"), raw, "state")
    port.phys_state_code, port.phys_state = _state_field(os.path.join(pdir, "phys_state"), raw, "phys_state")
    rate = _read_text(os.path.join(pdir, "rate"))
    if rate is not None:
        port.rate_text = rate
        try:
            port.rate_gbit, port.width = parse_rate(rate)
        except ValueError:
            raw["rate"] = rate
    port.link_layer = _text_field(os.path.join(pdir, "link_layer"))
    lid = _read_text(os.path.join(pdir, "lid"))
    if lid is not None:
        try:
            port.lid = int(lid, 16)
        except ValueError:
            raw["lid"] = lid
    port.gids = _read_gids(os.path.join(pdir, "gids"), raw)
    port.counters = _read_counters(os.path.join(pdir, "counters"), raw, "counters")
    port.counters_ext = _read_counters(os.path.join(pdir, "counters_ext"), raw, "counters_ext")
    port.hw_counters = _read_counters(os.path.join(pdir, "hw_counters"), raw, "hw_counters")
    port.netdev = _port_netdev(pdir, netdevs)
    if port.netdev is not None:
        mtu = _read_text(os.path.join(dev_dir, "device", "net", port.netdev, "mtu"))
        if mtu is not None:
            try:
                port.netdev_mtu = int(mtu)
            except ValueError:
                raw[f"device/net/{port.netdev}/mtu"] = mtu
        speed = _read_text(os.path.join(dev_dir, "device", "net", port.netdev, "speed"))
        if speed is not None:
            try:
                port.netdev_speed_mbit = int(speed) if int(speed) > 0 else None  # -1: link down or unknown
            except ValueError:
                raw[f"device/net/{port.netdev}/speed"] = speed
    if port.link_layer == "Ethernet" and port.netdev_mtu is not None:
        port.active_mtu = roce_active_mtu(port.netdev_mtu)
        port.active_mtu_source = f"netdev {port.netdev} mtu {port.netdev_mtu}"
    return port


def _read_gids(gid_dir: str, raw: dict[str, str]) -> list[str] | None:
    try:
        names = [n for n in os.listdir(gid_dir) if n.isdigit()]
    except OSError:
        return None
    gids: list[str] = []
    for index in sorted(names, key=int):
        text = _read_text(os.path.join(gid_dir, index))
        if text is None:  # newer kernels answer EINVAL for an unused RoCE entry
            continue
        try:
            gid = _parse_gid(text)
        except ValueError:
            raw[f"gids/{index}"] = text
            continue
        if gid is not None:
            gids.append(gid)
    return gids


def _port_netdev(pdir: str, netdevs: list[str] | None) -> str | None:
    """The port's netdev: the kernel's own RoCE mapping (``gid_attrs/ndevs/*``), else the device's only
    netdev. None when it cannot be told (several netdevs and no RoCE GID table)."""
    ndev_dir = os.path.join(pdir, "gid_attrs", "ndevs")
    try:
        entries = sorted((n for n in os.listdir(ndev_dir) if n.isdigit()), key=int)
    except OSError:
        entries = []
    for index in entries:
        text = _read_text(os.path.join(ndev_dir, index))
        if text:
            return text
    if netdevs is not None and len(netdevs) == 1:
        return netdevs[0]
    return None


def _device_names(base: str, root: str) -> list[tuple[str, dict]]:
    """(name, sysfs_pci placement) for every device directory, in sysfs_pci's natural order."""
    return [(d["name"], d) for d in rdma_devices(root) if os.path.isdir(os.path.join(base, d["name"]))]


def discover_rdma(root: str = "/") -> list[RdmaDevice]:
    """Every device under ``<root>/sys/class/infiniband`` with its ports; ``[]`` when there is none.

    Reads a live tree and a ``snapshot_rdma`` copy alike: where a snapshot replaced the ``device`` link by
    ``device.symlink`` (the PCI path as the machine named it), the PCI bus id comes from that text.
    """
    base = _in_root(root, SYSFS_IB)
    devices: list[RdmaDevice] = []
    for name, placement in _device_names(base, root):
        dev_dir = os.path.join(base, name)
        dev = RdmaDevice(name=name)
        _, dev.node_type = _state_field(os.path.join(dev_dir, "node_type"), dev.raw, "node_type")
        dev.node_guid = _text_field(os.path.join(dev_dir, "node_guid"))
        dev.fw_ver = _text_field(os.path.join(dev_dir, "fw_ver"))
        dev.board_id = _text_field(os.path.join(dev_dir, "board_id"))
        dev.hca_type = _text_field(os.path.join(dev_dir, "hca_type"))
        dev.pci_bus_id = placement["pci_bus_id"]
        dev.numa_node = placement["numa_node"]
        if dev.pci_bus_id is None:  # a snapshot: the link is text
            target = _link_target(os.path.join(dev_dir, "device"), root)
            if target is not None:
                try:
                    dev.pci_bus_id = parse_pci_path(target)[1][-1]
                except ValueError:
                    pass  # a virtual device (rxe, siw): no PCI function
        if dev.numa_node is None:
            numa = _read_text(os.path.join(dev_dir, "device", "numa_node"))
            if numa is not None:
                try:
                    dev.numa_node = int(numa)
                except ValueError:
                    dev.raw["device/numa_node"] = numa
        dev.netdevs = _netdevs(dev_dir)
        try:
            numbers = sorted(int(p) for p in os.listdir(os.path.join(dev_dir, "ports")) if p.isdigit())
        except OSError:
            numbers = []
        dev.ports = [_read_port(root, dev_dir, name, n, dev.netdevs) for n in numbers]
        devices.append(dev)
    return devices


# -------------------------------------------------------------------------------------------- counters


def port_data_bytes(port: RdmaPort) -> tuple[int, int] | None:
    """(tx_bytes, rx_bytes) a port has moved since its counters were last cleared; None when unrecorded.

    - ``counters/port_xmit_data`` / ``port_rcv_data`` (mlx4, mlx5, hfi1, ...): 4-byte words per the IB
      spec, so x4. A 32-bit PortCounters value saturates at 2**32-1; then (or when ``counters/`` lacks it)
      the 64-bit ``counters_ext/port_xmit_data_64`` / ``port_rcv_data_64`` are used, same unit.
    - else irdma/i40iw ``hw_counters/ip4OutOctets + ip6OutOctets`` / ``ip4InOctets + ip6InOctets``: bytes
      already (IP octets of the RDMA engine, headers included).
    """
    counters = port.counters or {}
    ext = port.counters_ext or {}

    def words(name: str) -> int | None:
        value = counters.get(name)
        if value is None or value == _U32_SATURATED:
            value = ext.get(f"{name}_64", value)
        return value

    tx, rx = words("port_xmit_data"), words("port_rcv_data")
    if saturated_data_counters(port):
        return None  # a saturated 32-bit count is no byte count
    if tx is not None and rx is not None:
        return tx * 4, rx * 4
    hw = port.hw_counters or {}
    if "ip4OutOctets" in hw and "ip4InOctets" in hw:
        return hw["ip4OutOctets"] + hw.get("ip6OutOctets", 0), hw["ip4InOctets"] + hw.get("ip6InOctets", 0)
    return None


def saturated_data_counters(port: RdmaPort) -> list[str]:
    """The 32-bit data counters (``counters/port_xmit_data``, ``port_rcv_data``) stuck at 2**32-1 with no 64-bit
    ``counters_ext/*_64`` beside them: they say nothing about the bytes the port moved."""
    counters, ext = port.counters or {}, port.counters_ext or {}
    return [f"counters/{name}" for name in ("port_xmit_data", "port_rcv_data")
            if counters.get(name) == _U32_SATURATED and f"{name}_64" not in ext]


def rdma_write_ops(port: RdmaPort) -> tuple[int | None, int | None] | None:
    """(RDMA writes sent, RDMA writes received) as operations (messages), not bytes; None when unrecorded.

    irdma/i40iw: ``iwOutRdmaWrites`` / ``iwInRdmaWrites`` (``OutRdmaWrites`` / ``InRdmaWrites`` in newer
    irdma). mlx5 counts only the responder side: ``rx_write_requests`` (sent stays None).
    """
    hw = port.hw_counters or {}
    out = hw.get("iwOutRdmaWrites", hw.get("OutRdmaWrites"))
    inc = hw.get("iwInRdmaWrites", hw.get("InRdmaWrites", hw.get("rx_write_requests")))
    if out is None and inc is None:
        return None
    return out, inc


# --------------------------------------------------------------------------------------------- snapshot


def _copy_file(src: str, dst: str) -> bool:
    # the directory first: a snapshot keeps the layout (``device/net/<ifname>``) even where a file is unreadable
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        with open(src, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return False
    with open(dst, "wb") as fh:
        fh.write(data)
    return True


def snapshot_rdma(root: str, target_dir: str | os.PathLike[str], skipped: list[str] | None = None) -> list[str]:
    """Copy the readable files of ``<root>/sys/class/infiniband/**`` into ``target_dir`` (same layout), so
    that ``discover_rdma(str(target_dir))`` reads the copy as it read the machine.

    Bundles travel as tar/zip, which may not keep symlinks: every symlink inside a device directory becomes
    ``<name>.symlink``, a text file holding the path the link resolves to as the machine names it
    (``/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.0``; a relative target would mean nothing away from
    the link's real place). The ``device`` link is followed only for ``numa_node`` and ``net/*/mtu``; the
    rest of the PCI device is not copied. Files that cannot be read (write-only, EINVAL from the driver) are
    skipped, listed in ``target_dir/sys-class-infiniband.unreadable.txt`` and appended to ``skipped``.

    Returns the copied files (``.symlink`` files included), relative to ``target_dir``.
    """
    target = os.fspath(target_dir)
    base = _in_root(root, SYSFS_IB)
    copied: list[str] = []
    unreadable: list[str] = []
    try:
        names = sorted(os.listdir(base), key=_natural_key)
    except OSError:
        return copied

    def copy(src: str, rel: str) -> None:
        if _copy_file(src, os.path.join(target, rel)):
            copied.append(rel)
        else:
            unreadable.append(rel)

    def write_link(rel: str, resolved: str) -> None:
        path = os.path.join(target, rel + SYMLINK_SUFFIX)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(resolved + "\n")
        copied.append(rel + SYMLINK_SUFFIX)

    for name in names:
        src_dev = os.path.realpath(os.path.join(base, name))
        if not os.path.isdir(src_dev):
            continue
        rel_dev = os.path.join("sys", "class", "infiniband", name)
        os.makedirs(os.path.join(target, rel_dev), exist_ok=True)
        for dirpath, dirnames, filenames in os.walk(src_dev):
            rel_dir = os.path.normpath(os.path.join(rel_dev, os.path.relpath(dirpath, src_dev)))
            for entry in sorted(dirnames + filenames):
                src = os.path.join(dirpath, entry)
                rel = os.path.join(rel_dir, entry)
                if os.path.islink(src):
                    write_link(rel, _under(root, os.path.realpath(src)))
                    if rel_dir == rel_dev and entry == "device":
                        _snapshot_pci_device(os.path.realpath(src), rel, copy)
                elif entry in filenames:
                    copy(src, rel)
    if unreadable:
        with open(os.path.join(target, UNREADABLE_LIST), "w", encoding="utf-8") as fh:
            fh.write("".join(rel + "\n" for rel in unreadable))
    if skipped is not None:
        skipped.extend(unreadable)
    return copied


def _snapshot_pci_device(pci_dir: str, rel: str, copy: Callable[[str, str], None]) -> None:
    """The part of the PCI device a snapshot keeps: ``numa_node`` and every ``net/<ifname>/{mtu,speed}``."""
    if os.path.exists(os.path.join(pci_dir, "numa_node")):
        copy(os.path.join(pci_dir, "numa_node"), os.path.join(rel, "numa_node"))
    try:
        ifnames = sorted(os.listdir(os.path.join(pci_dir, "net")), key=_natural_key)
    except OSError:
        return
    for ifname in ifnames:
        for name in ("mtu", "speed"):  # speed reads EINVAL while the link is down: listed as unreadable
            copy(os.path.join(pci_dir, "net", ifname, name), os.path.join(rel, "net", ifname, name))


# ------------------------------------------------------------------------------------------ line rate


#: drivers whose IB port rate said nothing about the Ethernet link: irdma reported 4X EDR (100 Gb/s) for
#: every port until Linux 6.1 ("RDMA/irdma: Report the correct link speed", 2022: it now asks the netdev)
_UNRELIABLE_ROCE_RATE = ("irdma", "i40iw")


def line_rate(port: RdmaPort) -> tuple[float | None, str]:
    """The port's line rate in Gb/s and where it came from, or None and why it is unknown.

    InfiniBand: the port's rate (width x lane speed). RoCE: the netdev's link speed, which is the wire's;
    the IB rate a RoCE driver reports is derived from it, and for irdma/i40iw on older kernels it was a
    constant (4X EDR = 100 Gb/s on a 25 Gb/s E810 port, as tests/data/captures/a100-pcie-roce-2node shows)."""
    if port.link_layer == "Ethernet":
        if port.netdev_speed_mbit:
            return port.netdev_speed_mbit / 1000, f"netdev {port.netdev} speed {port.netdev_speed_mbit} Mb/s"
        if port.device.startswith(_UNRELIABLE_ROCE_RATE):
            return None, (f"{port.device} reports {port.rate_text or 'no rate'}, which irdma/i40iw hard-coded "
                          "before Linux 6.1; the netdev's speed (ethtool) was not recorded")
    if port.rate_gbit is not None:
        return port.rate_gbit, f"port rate {port.rate_text}"
    return None, "the port rate was not recorded"
