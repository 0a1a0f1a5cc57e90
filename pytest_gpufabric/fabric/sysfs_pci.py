"""PCI placement from Linux sysfs: RDMA devices, NUMA nodes and the PCIe path label between two devices.

Pure functions over a filesystem tree: every reader takes ``root`` ("/" on a live machine, a temporary
directory in tests) and never fails when a file is missing; it answers ``None`` instead.

The sysfs facts used (Linux ABI, Documentation/ABI/testing/sysfs-bus-pci and sysfs-class-infiniband):

- ``/sys/bus/pci/devices/<bdf>`` is a symlink to the device's place in the tree,
  ``/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0``: the ``pci<domain>:<bus>`` component is the root
  complex (host bridge), every following ``dddd:bb:dd.f`` component is a PCI device, bridges first;
- ``/sys/bus/pci/devices/<bdf>/numa_node`` holds the device's NUMA node, ``-1`` when the firmware gave none;
- ``/sys/class/infiniband/<name>/device`` is a symlink to the RDMA device's PCI function (absent for
  software devices such as rxe/siw);
- ``/sys/devices/system/node/online`` lists the online NUMA nodes ("0", "0-1").

Bus ids here are sysfs-style: lower case, 4-digit domain (``0000:00:06.0``); ``sysfs_bdf`` converts NVML's
``00000000:00:06.0``.
"""

from __future__ import annotations

import os
import re

from ..units import parse_cpu_list

_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ROOT_COMPLEX = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")


def sysfs_bdf(bus_id: str) -> str:
    """A PCI bus id as sysfs names it: '00000000:00:06.0' (NVML) -> '0000:00:06.0'. Raises ValueError."""
    parts = bus_id.strip().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, devfn = parts
    dev, _, fn = devfn.partition(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn, 16):x}"


def _under(root: str, path: str) -> str:
    """``<root>/sys/...`` -> ``/sys/...`` (paths inside the tree as the machine would print them)."""
    real_root = os.path.realpath(root)
    if real_root == os.sep:
        return path
    if path == real_root or path.startswith(real_root + os.sep):
        return path[len(real_root):] or os.sep
    return path


def _in_root(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def pci_device_path(bdf: str, root: str = "/") -> str | None:
    """Where the device sits in the tree: '0000:00:06.0' -> '/sys/devices/pci0000:00/0000:00:06.0'.

    None when ``/sys/bus/pci/devices/<bdf>`` does not exist (no such device, or no sysfs).
    """
    link = _in_root(root, f"/sys/bus/pci/devices/{sysfs_bdf(bdf)}")
    if not os.path.exists(link):
        return None
    return _under(root, os.path.realpath(link))


def pci_numa_node(bdf: str, root: str = "/") -> int | None:
    """``/sys/bus/pci/devices/<bdf>/numa_node`` as an int (-1: firmware gave none); None when unreadable."""
    return _read_int(_in_root(root, f"/sys/bus/pci/devices/{sysfs_bdf(bdf)}/numa_node"))


def numa_node_sysfs_file(bdf: str) -> str:
    """The file ``pci_numa_node`` reads, as it is named on the machine (for provenance)."""
    return f"/sys/bus/pci/devices/{sysfs_bdf(bdf)}/numa_node"


def online_numa_nodes(root: str = "/") -> frozenset[int] | None:
    """The online NUMA nodes from ``/sys/devices/system/node/online``; None when unreadable."""
    text = _read_text(_in_root(root, "/sys/devices/system/node/online"))
    if not text:
        return None
    try:
        return parse_cpu_list(text)
    except ValueError:
        return None


def parse_pci_path(path: str) -> tuple[str, list[str]]:
    """The root complex and the PCI functions of a sysfs device path, nearest the root first.

    '/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0' -> ('pci0000:00', ['0000:00:01.0', '0000:02:00.0'])

    The list runs from the bridge nearest the root complex down to the device itself (last). Components
    after the device (``infiniband/mlx5_0``, ``net/eth0``) end the chain. Raises ValueError for a path
    outside a PCI root complex (``/sys/devices/virtual/...``).
    """
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        if _ROOT_COMPLEX.match(part):
            chain: list[str] = []
            for comp in parts[i + 1:]:
                if not _BDF.match(comp):
                    break
                chain.append(comp.lower())
            if not chain:
                raise ValueError(f"no PCI device below the root complex in {path!r}")
            return part.lower(), chain
    raise ValueError(f"not a PCI device path (no pciDDDD:BB root complex): {path!r}")


def _known(numa: int | None) -> bool:
    return numa is not None and numa >= 0


def pci_path_label(
    path_a: str,
    path_b: str,
    *,
    numa_a: int | None = None,
    numa_b: int | None = None,
    single_numa_node: bool = False,
) -> str:
    """The `nvidia-smi topo -m` label for the PCIe path between two devices, from their sysfs paths.

    - same device: "X";
    - both below the same bridge, or below two bridges that share their upstream bridge (the downstream
      ports of one PCIe switch): "PIX" (at most a single PCIe switch);
    - a common bridge higher up (several switches, no host bridge): "PXB";
    - same root complex (``pci0000:00``) but no common bridge: "PHB";
    - different root complexes on the same NUMA node: "NODE"; on different nodes: "SYS".

    A NUMA node that is unknown (None or -1) counts as the same node only when ``single_numa_node`` says
    the machine has one node; otherwise the pair is "SYS" (it cannot be shown to be nearer).
    """
    root_a, chain_a = parse_pci_path(path_a)
    root_b, chain_b = parse_pci_path(path_b)
    if root_a == root_b and chain_a == chain_b:
        return "X"
    if root_a != root_b:
        if _known(numa_a) and _known(numa_b):
            return "NODE" if numa_a == numa_b else "SYS"
        return "NODE" if single_numa_node else "SYS"
    bridges_a, bridges_b = chain_a[:-1], chain_b[:-1]
    common = 0
    for x, y in zip(bridges_a, bridges_b, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"
    # levels of bridges between each device and the deepest common bridge
    below_a, below_b = len(bridges_a) - common, len(bridges_b) - common
    if below_a <= 1 and below_b <= 1:
        return "PIX"
    return "PXB"


def _natural_key(name: str) -> list[object]:
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name)]


def rdma_devices(root: str = "/") -> list[dict]:
    """The RDMA devices under ``/sys/class/infiniband``, in natural name order (mlx5_2 before mlx5_10).

    Each: ``{"name", "pci_bus_id" (sysfs bdf or None), "sysfs_path" (or None), "numa_node" (int or None)}``.
    An absent ``/sys/class/infiniband`` gives ``[]``.
    """
    base = _in_root(root, "/sys/class/infiniband")
    try:
        names = sorted(os.listdir(base), key=_natural_key)
    except OSError:
        return []
    devices = []
    for name in names:
        link = os.path.join(base, name, "device")
        bdf = path = numa = None
        if os.path.exists(link):
            real = _under(root, os.path.realpath(link))
            try:
                _, chain = parse_pci_path(real)
            except ValueError:
                chain = []
            if chain:
                bdf, path = chain[-1], real
                numa = _read_int(os.path.join(os.path.realpath(link), "numa_node"))
        devices.append({"name": name, "pci_bus_id": bdf, "sysfs_path": path, "numa_node": numa})
    return devices


def nic_records(gpu_bus_ids: dict[int, str], root: str = "/") -> list[dict]:
    """RDMA devices with their path labels to every GPU and to every other RDMA device.

    ``gpu_bus_ids``: NVML index -> PCI bus id (either spelling). Each record is
    ``{"name", "pci_bus_id", "numa_node", "path_to_gpu": {"0": "PIX", ...}, "path_to_nic": {"mlx5_1": ...}}``;
    a GPU or NIC whose sysfs place is unknown is left out of the dicts.
    """
    nodes = online_numa_nodes(root)
    single = nodes is not None and len(nodes) == 1
    gpus: dict[str, tuple[str, int | None]] = {}
    for index, bus_id in gpu_bus_ids.items():
        try:
            path = pci_device_path(bus_id, root)
        except ValueError:
            path = None
        if path is not None:
            gpus[str(index)] = (path, pci_numa_node(bus_id, root))
    # software RDMA devices (rxe, siw) sit on no PCI function and have no place in the topology
    nics = [nic for nic in rdma_devices(root) if nic["pci_bus_id"] is not None]
    records = []
    for nic in nics:
        to_gpu: dict[str, str] = {}
        to_nic: dict[str, str] = {}
        if nic["sysfs_path"] is not None:
            for key, (gpu_path, gpu_numa) in gpus.items():
                to_gpu[key] = pci_path_label(
                    nic["sysfs_path"], gpu_path, numa_a=nic["numa_node"], numa_b=gpu_numa,
                    single_numa_node=single,
                )
            for other in nics:
                if other["name"] == nic["name"] or other["sysfs_path"] is None:
                    continue
                to_nic[other["name"]] = pci_path_label(
                    nic["sysfs_path"], other["sysfs_path"], numa_a=nic["numa_node"],
                    numa_b=other["numa_node"], single_numa_node=single,
                )
        records.append({
            "name": nic["name"],
            "pci_bus_id": nic["pci_bus_id"],
            "numa_node": nic["numa_node"],
            "path_to_gpu": to_gpu,
            "path_to_nic": to_nic,
        })
    return records


#: PCI class codes of an NVIDIA GPU function: VGA (0x0300) and 3D controller (0x0302); NVSwitches (0x0680) are not
_GPU_CLASSES = ("0x0300", "0x0302")


def nvidia_gpu_functions(root: str = "/") -> list[str] | None:
    """The NVIDIA GPUs the PCI bus lists (vendor 0x10de, class VGA or 3D), as NVML writes bus ids
    ('00000000:00:06.0'), sorted; None when sysfs cannot be listed. A GPU here that NVML does not list fell off
    the bus, or its driver did not take it."""
    devices = _in_root(root, "/sys/bus/pci/devices")
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return None
    found = []
    for name in names:
        if not _BDF.match(name):
            continue
        vendor = _read_text(os.path.join(devices, name, "vendor"))
        klass = _read_text(os.path.join(devices, name, "class")) or ""
        if vendor == "0x10de" and klass[:6] in _GPU_CLASSES:
            domain, bus, devfn = name.split(":")
            found.append(f"{int(domain, 16):08X}:{bus.upper()}:{devfn.upper()}")
    return found
