"""PCI configuration space, as sysfs holds it and as lspci prints it.

Three forms of the same registers, read into one record (``PciFacts``):

- the bytes of ``/sys/bus/pci/devices/<bdf>/config`` (``parse_config_space``). An unprivileged reader gets the
  first 64 bytes only (the kernel's ``pci_read_config`` stops at the standard header without CAP_SYS_ADMIN); a
  kernel without ECAM/MMCONFIG access, as in many VMs, gives 256 bytes, without the extended capabilities;
- lspci's hex dump of them, ``-xxx`` (256 bytes) or ``-xxxx`` (4096), lines ``00: 86 80 04 2f ...``;
- ``lspci -vvv``'s decoding: ``Bus: primary=00, secondary=03``, ``Express (v2) Root Port``, ``DevCap: MaxPayload
  256 bytes``, ``DevCtl: ... MaxPayload 256 bytes, MaxReadReq 128 bytes``, ``ACSCtl: SrcValid+ TransBlk- ...``;
  without root it prints ``Capabilities: <access denied>`` in their place.

The registers read (PCI Express Base Specification; lspci's ``ls-caps.c`` and ``ls-ecaps.c`` decode the same):

- the PCI Express capability (capability id 0x10): PCIe Capabilities register (+2) bits 7:4 = device/port type;
  Device Capabilities (+4) bits 2:0 = Max_Payload_Size supported; Device Control (+8) bits 7:5 =
  Max_Payload_Size and bits 14:12 = Max_Read_Request_Size, each 128 << value bytes;
- the Access Control Services extended capability (id 0x000D): ACS Capability (+4) and ACS Control (+6), bit 0
  Source Validation, 1 Translation Blocking, 2 P2P Request Redirect, 3 P2P Completion Redirect, 4 Upstream
  Forwarding, 5 P2P Egress Control, 6 Direct Translated P2P (lspci's SrcValid, TransBlk, ReqRedir, CmpltRedir,
  UpstreamFwd, EgressCtrl, DirectTrans). Request and Completion Redirect, Upstream Forwarding and Egress Control
  send peer-to-peer traffic up to the root complex instead of across the switch.

Pure functions of bytes and text; a text that is not lspci's output raises ValueError naming its line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from .paste import ANSI, paste_noise

__all__ = ["ACS_BITS", "REDIRECT_BITS", "PciFacts", "LspciDevice", "parse_config_space", "parse_lspci",
           "parse_lspci_hex", "lspci_parents", "normalize_bdf"]

#: ACS Capability / Control bits 0..6, by lspci's names
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: the bits that send peer-to-peer requests or completions up to the root complex
REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl")

#: PCI Express Capabilities register bits 7:4
PORT_TYPES = {0: "endpoint", 1: "legacy endpoint", 4: "root port", 5: "switch upstream port",
              6: "switch downstream port", 7: "PCIe-to-PCI bridge", 8: "PCI-to-PCIe bridge",
              9: "root complex integrated endpoint", 10: "root complex event collector"}
#: lspci's words for the same, longest first so "Legacy Endpoint" is not read as "Endpoint"
_LSPCI_PORT_TYPES = (("Root Complex Integrated Endpoint", "root complex integrated endpoint"),
                     ("Root Complex Event Collector", "root complex event collector"),
                     ("Legacy Endpoint", "legacy endpoint"), ("Root Port", "root port"),
                     ("Upstream Port", "switch upstream port"), ("Downstream Port", "switch downstream port"),
                     ("PCI-Express to PCI/PCI-X Bridge", "PCIe-to-PCI bridge"),
                     ("PCI/PCI-X to PCI-Express Bridge", "PCI-to-PCIe bridge"), ("Endpoint", "endpoint"))

_CAP_PCIE = 0x10
_ECAP_ACS = 0x000D
_NEEDS_ROOT = ("config space beyond 64 bytes needs root: the kernel gives unprivileged readers the standard "
               "header only")
_NO_EXTENDED = ("extended configuration space (beyond 256 bytes) not readable: the kernel has no ECAM/MMCONFIG "
                "access to it, as in many VMs")


@dataclass
class PciFacts:
    """What one function's configuration space says; None: not in what was read (``*_unreadable`` says why)."""

    source: str = ""  # "config space (4096 bytes)", "lspci -vvv text", "lspci hex dump (256 bytes)"
    config_bytes: int | None = None  # how many bytes of config space were read (None: decoded text only)
    vendor_id: int | None = None
    device_id: int | None = None
    class_code: int | None = None  # 24 bits: class, subclass, programming interface (0x030200: 3D controller)
    header_type: int | None = None  # 0 device, 1 PCI-to-PCI bridge
    secondary_bus: int | None = None  # bridges: the bus range below them
    subordinate_bus: int | None = None
    pcie: bool | None = None  # has a PCI Express capability (None: capabilities not readable)
    port_type: str | None = None  # "root port", "switch downstream port", "endpoint", ...
    max_payload_supported: int | None = None  # bytes, Device Capabilities
    max_payload: int | None = None  # bytes, Device Control
    max_read_request: int | None = None  # bytes, Device Control
    acs: bool | None = None  # has an ACS capability (None: extended capabilities not readable)
    acs_capability: dict[str, bool] | None = None
    acs_control: dict[str, bool] | None = None
    capabilities_unreadable: str | None = None  # why the capability list could not be read
    extended_unreadable: str | None = None  # why the extended capabilities (ACS) could not be read

    def redirects(self) -> list[str]:
        """The ACS control bits set that reroute peer-to-peer traffic ([] when none, or when ACS is unknown)."""
        return [bit for bit in REDIRECT_BITS if (self.acs_control or {}).get(bit)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> PciFacts:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _bits(value: int) -> dict[str, bool]:
    return {name: bool(value >> bit & 1) for bit, name in enumerate(ACS_BITS)}


def _u16(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 2], "little")


def _u32(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 4], "little")


def parse_config_space(data: bytes, source: str | None = None) -> PciFacts:
    """Decode a function's configuration space (64, 256 or 4096 bytes, as read). Raises ValueError for fewer
    than 64 bytes (not a configuration space)."""
    size = len(data)
    if size < 64:
        raise ValueError(f"PCI config space: {size} bytes, expected at least the 64-byte standard header")
    facts = PciFacts(source=source or f"config space ({size} bytes)", config_bytes=size,
                     vendor_id=_u16(data, 0), device_id=_u16(data, 2),
                     class_code=data[0x09] | data[0x0A] << 8 | data[0x0B] << 16, header_type=data[0x0E] & 0x7F)
    if facts.header_type == 1:
        facts.secondary_bus, facts.subordinate_bus = data[0x19], data[0x1A]
    has_caps = bool(_u16(data, 0x06) & 0x10)
    pointer = data[0x34] & 0xFC if has_caps else 0
    if not has_caps:
        facts.pcie = False
        facts.acs = False
        return facts
    if pointer + 2 > size:
        facts.capabilities_unreadable = _NEEDS_ROOT if size == 64 else f"capabilities beyond the {size} bytes read"
        facts.extended_unreadable = facts.capabilities_unreadable
        return facts
    facts.pcie = False
    seen = 0
    while pointer and seen < 48 and pointer + 2 <= size:
        seen += 1
        cap_id, following = data[pointer], data[pointer + 1] & 0xFC
        if cap_id == _CAP_PCIE and pointer + 12 <= size:
            facts.pcie = True
            facts.port_type = PORT_TYPES.get(_u16(data, pointer + 2) >> 4 & 0xF, "other")
            facts.max_payload_supported = 128 << (_u32(data, pointer + 4) & 0x7)
            control = _u16(data, pointer + 8)
            facts.max_payload = 128 << (control >> 5 & 0x7)
            facts.max_read_request = 128 << (control >> 12 & 0x7)
        pointer = following
    if not facts.pcie:
        facts.acs = False  # extended capabilities are PCI Express only
        return facts
    if size <= 0x100:
        facts.extended_unreadable = _NO_EXTENDED if size == 256 else f"extended capabilities beyond the {size} bytes"
        return facts
    facts.acs = False
    offset, seen = 0x100, 0
    while offset and seen < 512 and offset + 8 <= size:
        seen += 1
        header = _u32(data, offset)
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == _ECAP_ACS:
            facts.acs = True
            facts.acs_capability = _bits(_u16(data, offset + 4))
            facts.acs_control = _bits(_u16(data, offset + 6))
        following = header >> 20 & 0xFFC
        offset = following if following >= 0x100 else 0
    return facts


# ------------------------------------------------------------------------------------------------ lspci text

_HEADER = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>\S.*)$")
_HEX = re.compile(r"^(?P<offset>[0-9a-fA-F]{2,3}):(?P<bytes>(?: [0-9a-fA-F]{2}){1,16})\s*$")
_BUS = re.compile(r"Bus: primary=(?P<p>[0-9a-fA-F]+), secondary=(?P<s>[0-9a-fA-F]+), "
                  r"subordinate=(?P<u>[0-9a-fA-F]+)")
_EXPRESS = re.compile(r"Capabilities: \[[0-9a-fA-F]+\] Express \([^)]*\) (?P<type>[^,(]+?)(?:\s*\(|,|$)")
_DEVCTL_SIZES = re.compile(r"MaxPayload (?P<mps>\d+) bytes, MaxReadReq (?P<mrrs>\d+) bytes")
_DEVCAP = re.compile(r"DevCap:\s*MaxPayload (?P<mps>\d+) bytes")
_ACS_LINE = re.compile(r"^\s*(?P<reg>ACSCap|ACSCtl):\s*(?P<flags>.*)$")
_FLAG = re.compile(r"(?P<name>[A-Za-z]+)(?P<sign>[+-])")
_DRIVER = re.compile(r"Kernel driver in use:\s*(?P<driver>\S+)")
_IDS = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
#: ``lspci -n``'s header: "05:01.0 Class 0604: Device 10b5:9716 (rev aa)"
_NUMERIC = re.compile(r"^Class (?P<cls>[0-9a-fA-F]{4}): Device (?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})")
#: shell lines around a paste of lspci (or setpci, lsmod) output: `# lspci -vvv | grep ACSCtl`, `$ sudo setpci ...`
_COMMAND = re.compile(r"^\s*(?:\S*[$#%>]\s*)?(?:sudo\s+)?(?:\S*/)?(?:lspci|setpci|grep|lsmod)\b")
_ELLIPSIS = re.compile(r"^\s*\.{3,}\s*$")
#: lspci -vvv's class names of the functions the platform checks care about
_CLASS_NAMES = {"VGA compatible controller": 0x0300, "3D controller": 0x0302, "Display controller": 0x0380,
                "Ethernet controller": 0x0200, "Infiniband controller": 0x0207, "Network controller": 0x0280,
                "PCI bridge": 0x0604, "Host bridge": 0x0600}


@dataclass
class LspciDevice:
    """One function as lspci printed it; ``bdf`` is None for lines of a ``grep`` that dropped the headers."""

    bdf: str | None
    description: str
    line: int  # 1-based line of the header (or of the grepped line)
    facts: PciFacts = field(default_factory=lambda: PciFacts(source="lspci -vvv text"))
    driver: str | None = None
    access_denied: bool = False  # "Capabilities: <access denied>": lspci was run without root
    hex_bytes: bytearray = field(default_factory=bytearray)

    @property
    def bus(self) -> tuple[str, int] | None:
        """(domain, bus) of the function."""
        if self.bdf is None:
            return None
        domain, bus, _ = self.bdf.split(":")
        return domain, int(bus, 16)


def normalize_bdf(text: str) -> str:
    """'03:00.0' -> '0000:03:00.0', '00000000:17:00.0' -> '0000:17:00.0' (sysfs' spelling)."""
    parts = text.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    domain, bus, devfn = parts
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{devfn}"


def _flags(text: str) -> dict[str, bool]:
    found = {m.group("name"): m.group("sign") == "+" for m in _FLAG.finditer(text)}
    return {name: found[name] for name in ACS_BITS if name in found}


def _class_of(description: str) -> int | None:
    for name, code in _CLASS_NAMES.items():
        if description.startswith(name):
            return code << 8
    return None


def _common_indent(lines: list[str]) -> str:
    """The indent of the first lspci header line (a paste indented as a whole, or a Markdown list item)."""
    for line in lines:
        stripped = line.lstrip(" ")
        if _HEADER.match(stripped):
            return line[:len(line) - len(stripped)]
    return ""


def parse_lspci(text: str) -> list[LspciDevice]:
    """Every function of an ``lspci -v``/``-vv``/``-vvv`` (``-xxx``/``-xxxx`` hex dumps too) output, or of a
    ``grep`` of one (``lspci -vvv | grep ACSCtl``: devices without a bus id), in order.

    Reads pastes (prompts, command lines, fences, ``...`` elisions, a common indent). Raises ValueError for
    empty text or a line that belongs to no lspci output."""
    lines = [ANSI.sub("", line.rstrip("\r\n")) for line in text.splitlines()]
    indent = _common_indent(lines)
    devices: list[LspciDevice] = []
    current: LspciDevice | None = None
    context = ""  # the register the continuation lines belong to (DevCap, DevCtl, ...)
    for number, raw in enumerate(lines, 1):
        line = raw[len(indent):] if indent and raw.startswith(indent) else raw
        if not line.strip():
            continue
        header = _HEADER.match(line)
        if header:
            current = LspciDevice(bdf=normalize_bdf(header.group("bdf")), description=header.group("desc"),
                                  line=number)
            current.facts.class_code = _class_of(current.description)
            ids = _NUMERIC.match(current.description) or _IDS.search(current.description)
            if ids and "cls" in ids.groupdict():
                current.facts.class_code = int(ids["cls"], 16) << 8
            if ids:
                current.facts.vendor_id, current.facts.device_id = int(ids["vendor"], 16), int(ids["device"], 16)
            devices.append(current)
            context = ""
            continue
        hex_line = _HEX.match(line)
        if hex_line and current is not None:
            offset = int(hex_line.group("offset"), 16)
            values = bytes(int(b, 16) for b in hex_line.group("bytes").split())
            if offset != len(current.hex_bytes):
                raise ValueError(f"lspci line {number}: hex dump of {current.bdf} jumps to offset {offset:#x} "
                                 f"after {len(current.hex_bytes)} bytes")
            current.hex_bytes.extend(values)
            continue
        acs = _ACS_LINE.match(line)
        if acs and (current is None or not line[:1].isspace()):
            # a grep of lspci -vvv: the register without the device it belongs to
            current = LspciDevice(bdf=None, description=f"(a `{acs.group('reg')}:` line without its device)",
                                  line=number)
            devices.append(current)
            _read_block_line(current, line, acs.group("reg"))
            current = None
            continue
        if current is not None and line[:1].isspace():
            label = re.match(r"^\s*([A-Za-z][\w ]*?):", line)
            if label and not label.group(1).startswith("Max"):
                context = label.group(1)
            _read_block_line(current, line, context)
            continue
        if _COMMAND.match(line) or _ELLIPSIS.match(line) or paste_noise(line):
            current = None
            continue
        raise ValueError(f"line {number} is not lspci output: {line.strip()[:80]!r} (expected a function's header "
                         "such as '03:00.0 Ethernet controller: ...', its indented lines or its hex dump)")
    if not devices:
        raise ValueError("no PCI function in the text (expected lspci -vvv output: '03:00.0 Class: Vendor ...')")
    for device in devices:
        _merge_hex(device)
    return devices


def _read_block_line(device: LspciDevice, line: str, context: str) -> None:
    facts = device.facts
    if "<access denied>" in line:
        device.access_denied = True
        facts.capabilities_unreadable = "lspci ran without root: 'Capabilities: <access denied>'"
        facts.extended_unreadable = facts.capabilities_unreadable
        return
    bus = _BUS.search(line)
    if bus:
        facts.header_type = 1
        facts.secondary_bus, facts.subordinate_bus = int(bus["s"], 16), int(bus["u"], 16)
        return
    express = _EXPRESS.search(line)
    if express:
        facts.pcie = True
        kind = express.group("type").strip()
        facts.port_type = next((ours for words, ours in _LSPCI_PORT_TYPES if kind.startswith(words)), kind)
        return
    acs = _ACS_LINE.match(line)
    if acs:
        flags = _flags(acs.group("flags"))
        facts.acs = True
        if acs.group("reg") == "ACSCap":
            facts.acs_capability = flags
        else:
            facts.acs_control = flags
        return
    devcap = _DEVCAP.search(line)
    if devcap:
        facts.max_payload_supported = int(devcap["mps"])
        return
    sizes = _DEVCTL_SIZES.search(line)
    if sizes and context in ("DevCtl", ""):
        facts.max_payload, facts.max_read_request = int(sizes["mps"]), int(sizes["mrrs"])
        return
    driver = _DRIVER.search(line)
    if driver:
        device.driver = driver["driver"]


def _merge_hex(device: LspciDevice) -> None:
    """Where lspci also dumped the bytes, they fill what the decoded lines did not say (a ``-xxxx`` without
    ``-v``), and their size says what could be read."""
    if len(device.hex_bytes) < 64:
        return
    dumped = parse_config_space(bytes(device.hex_bytes), f"lspci hex dump ({len(device.hex_bytes)} bytes)")
    facts = device.facts
    decoded = facts.pcie is not None or facts.acs_control is not None or facts.header_type is not None
    for name, value in dumped.to_dict().items():
        if name == "source":
            continue
        if getattr(facts, name) is None or name in ("config_bytes", "vendor_id", "device_id", "class_code"):
            setattr(facts, name, value)
    facts.source = f"lspci -vvv text and hex dump ({len(device.hex_bytes)} bytes)" if decoded else dumped.source


def parse_lspci_hex(text: str) -> dict[str, bytes]:
    """The configuration space bytes of every function an ``lspci -xxx``/``-xxxx`` output dumps, by bus id."""
    return {d.bdf: bytes(d.hex_bytes) for d in parse_lspci(text) if d.bdf and len(d.hex_bytes) >= 64}


def lspci_parents(devices: list[LspciDevice]) -> dict[str, str]:
    """Each function's upstream bridge, by bus id, from the bridges' secondary bus numbers (``Bus:
    primary=00, secondary=03, subordinate=03`` or the hex dump's bytes 0x19/0x1A). Functions on a bus no
    bridge in the output leads to (the root bus) have none."""
    bridges: dict[tuple[str, int], str] = {}
    for device in devices:
        if device.bdf and device.facts.secondary_bus is not None and device.facts.header_type == 1:
            domain = device.bdf.split(":")[0]
            bridges[(domain, device.facts.secondary_bus)] = device.bdf
    parents = {}
    for device in devices:
        if device.bus is not None and device.bus in bridges and bridges[device.bus] != device.bdf:
            parents[device.bdf] = bridges[device.bus]
    return parents
