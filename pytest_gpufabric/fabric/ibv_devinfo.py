"""RDMA devices as ``ibv_devinfo -v`` shows them: its text read into plain records, merged into the devices sysfs
gave (what sysfs cannot say: the active MTU a driver really uses, and fields a copy lacks), or standing alone
where a bundle holds no sysfs copy. fabric/rdma.py says why sysfs comes first.
"""

from __future__ import annotations

import re

from .rdma import RdmaDevice, RdmaPort

_DEVINFO_LINE = re.compile(r"^(\s*)([A-Za-z_][\w ]*?):\s*(.*?)\s*$")
# ASCII digits only: "²" is a digit to re's \d and no number to int()
_DEVINFO_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)(?:,\s*(.*?))?\s*$", re.ASCII)
_VALUE_CODE = re.compile(r"^(.*?)\s*\((\d+)\)$", re.ASCII)
#: keys this parser builds itself; a line naming one is not ibv_devinfo's and must not replace them
_OWN_KEYS = {"ports", "gids"}
_INT_KEYS = {"phys_port_cnt", "port_lid", "sm_lid", "sm_sl", "gid_tbl_len", "pkey_tbl_len"}


def _int_or_text(text: str) -> int | str:
    try:
        return int(text, 0)
    except ValueError:
        return text


def parse_ibv_devinfo(text: str) -> list[dict]:
    """``ibv_devinfo`` / ``ibv_devinfo -v`` output -> one dict per ``hca_id``.

    Device keys as printed (``hca_id``, ``transport``, ``fw_ver``, ``node_guid``, ``vendor_id`` "0x8086",
    ...), ``vendor_part_id`` and ``phys_port_cnt`` as int, and ``ports``: one dict per ``port:`` with
    ``port`` (int), ``state`` ("PORT_ACTIVE") + ``state_code`` (4), ``max_mtu``/``active_mtu`` as bytes
    (1024 from "1024 (3)"), ``link_layer``, ``active_width`` ("4X") + code, ``active_speed`` ("25.0 Gbps",
    the per-lane speed) + code, ``phys_state`` ("LINK_UP") + code, ``gids``: [{"index", "gid", "type"}].
    Text without any ``hca_id`` (e.g. "Failed to get IB devices list") gives ``[]``; a ``port:`` line that
    names no port number raises ValueError naming the line.
    """
    devices: list[dict] = []
    dev: dict | None = None
    port: dict | None = None
    for line in text.splitlines():
        gid = _DEVINFO_GID.match(line)
        if gid and port is not None:
            port["gids"].append({"index": int(gid.group(1)), "gid": gid.group(2), "type": gid.group(3)})
            continue
        m = _DEVINFO_LINE.match(line)
        if not m:
            continue
        key, value = m.group(2), m.group(3)
        if key == "hca_id":
            dev = {"hca_id": value, "ports": []}
            devices.append(dev)
            port = None
            continue
        if dev is None:
            continue
        if key == "port":
            if not re.fullmatch(r"[0-9]+", value):
                raise ValueError(f"ibv_devinfo: 'port: {value}' is not a port number (line {line.strip()[:80]!r})")
            port = {"port": int(value), "gids": []}
            dev["ports"].append(port)
            continue
        if key in _OWN_KEYS:
            continue
        target = port if port is not None else dev
        coded = _VALUE_CODE.match(value)
        if key in ("max_mtu", "active_mtu"):
            digits = coded.group(1) if coded else ""
            target[key] = int(digits) if re.fullmatch(r"[0-9]+", digits) else _int_or_text(value)
        elif key in ("state", "phys_state", "active_width", "active_speed") and coded:
            target[key] = coded.group(1)
            target[f"{key}_code"] = int(coded.group(2))
        elif key in _INT_KEYS or key == "vendor_part_id":
            target[key] = _int_or_text(value)
        elif value:
            target[key] = value
    return devices


def merge_ibv_devinfo(devices: list[RdmaDevice], infos: list[dict]) -> None:
    """Fill what sysfs cannot say from ``parse_ibv_devinfo`` output, in place: ``active_mtu`` (ibv_devinfo's
    answer replaces the netdev estimate) and any field sysfs left ``None`` (fw_ver, node_guid, link_layer, lid,
    width, GIDs). A state or phys_state only where sysfs recorded no such file: text sysfs recorded that does not
    parse (``port.raw``) stays unread, and so does a state ibv_devinfo contradicts itself on (``_agreed_state``).
    Ports and devices sysfs did not list are not added."""
    by_name = {info.get("hca_id"): info for info in infos}
    for dev in devices:
        info = by_name.get(dev.name)
        if info is None:
            continue
        dev.fw_ver = dev.fw_ver or info.get("fw_ver")
        dev.node_guid = dev.node_guid or info.get("node_guid")
        ports = {p["port"]: p for p in info.get("ports", [])}
        for port in dev.ports:
            p = ports.get(port.port)
            if p is None:
                continue
            if isinstance(p.get("active_mtu"), int):
                port.active_mtu = p["active_mtu"]
                port.active_mtu_source = "ibv_devinfo"
            sections = [s for i in infos if i.get("hca_id") == dev.name for s in i.get("ports", [])
                        if s.get("port") == port.port]
            if port.state is None and "state" not in port.raw:
                port.state_code, port.state = _agreed_state(sections, "state", _PORT_STATES)
            if port.phys_state is None and "phys_state" not in port.raw:
                port.phys_state_code, port.phys_state = _agreed_state(sections, "phys_state", _PHYS_STATES)
            port.link_layer = port.link_layer or p.get("link_layer")
            if port.lid is None and isinstance(p.get("port_lid"), int):
                port.lid = p["port_lid"]
            port.width = port.width or p.get("active_width")
            if port.gids is None and p.get("gids"):
                port.gids = [g["gid"] for g in p["gids"]]


def _agreed_state(sections: list[dict], key: str, names: dict[str, tuple[int, str]]) \
        -> tuple[int | None, str | None]:
    """(code, name as sysfs names it) of ``key`` where every ibv_devinfo section of the port gives the same one;
    (None, None) where none gives it, two sections differ, or a known name's code is another (``PORT_ACTIVE (1)``)."""
    said = {(s.get(f"{key}_code"), s[key]) for s in sections if s.get(key)}
    if len(said) != 1:
        return None, None
    ((code, name),) = said
    known = names.get(name)
    if known is None:
        return code, name
    if code is not None and code != known[0]:
        return None, None
    return known


#: ibv_devinfo's state names -> (their code, the name sysfs prints) (libibverbs ibv_port_state_str,
#: ibv_devinfo's port_phy_state_str)
_PORT_STATES = {"PORT_DOWN": (1, "DOWN"), "PORT_INIT": (2, "INIT"), "PORT_ARMED": (3, "ARMED"),
                "PORT_ACTIVE": (4, "ACTIVE"), "PORT_ACTIVE_DEFER": (5, "ACTIVE_DEFER")}
_PHYS_STATES = {"SLEEP": (1, "Sleep"), "POLLING": (2, "Polling"), "DISABLED": (3, "Disabled"),
                "PORT_CONFIGURATION TRAINNING": (4, "PortConfigurationTraining"), "LINK_UP": (5, "LinkUp"),
                "LINK_ERROR_RECOVERY": (6, "LinkErrorRecovery"), "PHY TEST": (7, "Phy Test")}
_LANE_GBIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gbps")


def devices_from_ibv_devinfo(infos: list[dict]) -> list[RdmaDevice]:
    """RdmaDevices from ``parse_ibv_devinfo`` alone (a bundle without a sysfs copy), named as sysfs names
    states, with the rate computed as the kernel's sysfs ``rate`` file would print it (width x lane speed).
    A device or port printed twice is one; its state is merge_ibv_devinfo's (unread where the text contradicts
    itself)."""
    devices: dict[str, RdmaDevice] = {}
    for info in infos:
        dev = devices.setdefault(info["hca_id"], RdmaDevice(name=info["hca_id"], fw_ver=info.get("fw_ver"),
                                                            node_guid=info.get("node_guid")))
        for p in info.get("ports", []):
            if dev.port(p["port"]) is not None:
                continue
            port = RdmaPort(device=dev.name, port=p["port"])
            lane = _LANE_GBIT.match(p.get("active_speed", ""))
            width = p.get("active_width")
            if lane and width and re.fullmatch(r"[0-9]+X", width):
                port.rate_gbit = float(lane.group(1)) * int(width[:-1])
                port.rate_text = f"{port.rate_gbit:g} Gb/sec ({width}, ibv_devinfo: {p['active_speed']})"
            dev.ports.append(port)
    merge_ibv_devinfo(list(devices.values()), infos)
    return list(devices.values())
