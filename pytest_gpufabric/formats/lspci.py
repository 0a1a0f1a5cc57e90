"""PCI configuration space as lspci prints it, read into the record of formats/pci_config.py (``PciFacts``):

- lspci's hex dump of it, ``-xxx`` (256 bytes) or ``-xxxx`` (4096), lines ``00: 86 80 04 2f ...``;
- ``lspci -vvv``'s decoding: ``Bus: primary=00, secondary=03``, ``Express (v2) Root Port``, ``DevCap: MaxPayload
  256 bytes``, ``DevCtl: ... MaxPayload 256 bytes, MaxReadReq 128 bytes``, ``ACSCtl: SrcValid+ TransBlk- ...``;
  without root it prints ``Capabilities: <access denied>`` in their place.


Partial evidence is no evidence. A paste cut in the middle of a register (``ACSCtl: SrcValid+ TransBlk-`` and
nothing after), a hex dump whose last line is cut, a capability whose register lines the text does not reach:
the register's fields stay None and ``PciFacts.unreadable`` says which register and where it was cut. A partly
read register is never presented as a reading (an ACS control dict without its redirect bits would read as

Pure functions of text; a text that is not lspci's output raises ValueError naming its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .paste import ANSI, paste_noise
from .pci_config import (
    _NO_LINK,
    ACS_BITS,
    PCIE_GENERATIONS,
    REGISTER_FIELDS,
    PciFacts,
    _note,
    _was_read,
    parse_config_space,
)

__all__ = ["LspciDevice", "parse_lspci", "parse_lspci_hex", "lspci_parents", "normalize_bdf"]

#: lspci's words for the port types (pci_config.PORT_TYPES), longest first: "Legacy Endpoint" is no "Endpoint"
_LSPCI_PORT_TYPES = (("Root Complex Integrated Endpoint", "root complex integrated endpoint"),
                     ("Root Complex Event Collector", "root complex event collector"),
                     ("Legacy Endpoint", "legacy endpoint"), ("Root Port", "root port"),
                     ("Upstream Port", "switch upstream port"), ("Downstream Port", "switch downstream port"),
                     ("PCI-Express to PCI/PCI-X Bridge", "PCIe-to-PCI bridge"),
                     ("PCI/PCI-X to PCI-Express Bridge", "PCI-to-PCIe bridge"), ("Endpoint", "endpoint"))
#: the sizes lspci dumps: -x 64 (128 for CardBus bridges), -xxx 256, -xxxx 4096 (show_hex_dump in lspci.c)
_DUMP_SIZES = (64, 128, 256, 4096)


# ------------------------------------------------------------------------------------------------ lspci text

_HEADER = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>\S.*)$")
_HEX = re.compile(r"^(?P<offset>[0-9a-fA-F]{2,3}):(?P<bytes>(?: [0-9a-fA-F]{2}){1,16})\s*$")
#: the last line of a cut dump: whole bytes, then perhaps half of one ("f0: 00 00 0")
_HEX_CUT = re.compile(r"^(?P<offset>[0-9a-fA-F]{2,3}):(?P<bytes>(?: [0-9a-fA-F]{2}){0,15})(?: [0-9a-fA-F])?\s*$")
#: "Bus: primary=%02x, secondary=%02x, subordinate=%02x, sec-latency=%d" (lspci.c since 1998): the comma after the
#: subordinate bus proves it whole ("subordinate=0" may be "subordinate=04" cut short)
_BUS = re.compile(r"Bus: primary=(?P<p>[0-9a-fA-F]+), secondary=(?P<s>[0-9a-fA-F]+), "
                  r"subordinate=(?P<u>[0-9a-fA-F]+),")
#: a capability's header line: "Capabilities: [68] Express (v2) Endpoint, MSI 00", "Capabilities: [100 v1] ..."
_CAP_HEADER = re.compile(r"^\s*Capabilities: \[(?P<offset>[0-9a-fA-F]+)(?: v\d+)?\]\s*(?P<name>.*)$")
_EXPRESS = re.compile(r"Capabilities: \[[0-9a-fA-F]+\] Express \([^)]*\) (?P<type>[^,(]+?)(?:\s*\(|,|$)")
_DEVCTL_SIZES = re.compile(r"MaxPayload (?P<mps>\d+) bytes, MaxReadReq (?P<mrrs>\d+) bytes")
_DEVCAP = re.compile(r"DevCap:\s*MaxPayload (?P<mps>\d+) bytes")
#: ls-caps.c cap_express_link: "LnkCap:\tPort #%d, Speed %s, Width x%d, ASPM %s" (the comma after the width
#: proves it whole)
_LNKCAP = re.compile(r"LnkCap:\s*Port #(?P<port>\d+), Speed (?P<speed>[\d.]+GT/s|unknown), Width x(?P<width>\d+),")
#: "LnkSta:\tSpeed %s%s, Width x%d%s": before pciutils 3.6 the status flags follow on the same line after a comma;
#: 3.6 and 3.7 add " (ok)" or " (downgraded)" ("(strange)" above LnkCap); 3.8 and later " (downgraded)" or
#: " (overdriven)" only, and end the line after the width
_LNKSTA = re.compile(r"LnkSta:\s*Speed (?P<speed>[\d.]+GT/s|unknown)(?: \((?P<speed_note>[a-z]+)\))?, "
                     r"Width x(?P<width>\d+)(?: \((?P<width_note>[a-z]+)\))?(?P<end>,|\s*$)")
_ACS_LINE = re.compile(r"^\s*(?P<reg>ACSCap|ACSCtl):\s*(?P<flags>.*)$")
_FLAG = re.compile(r"(?P<name>[A-Za-z]+)(?P<sign>[+-])")
#: a register's label at the start of its line ("DevCtl:\tCorrErr- ...", "LnkSta:\tSpeed ...")
_LABEL = re.compile(r"^\s*(?P<label>[A-Za-z][\w ]*?):")
_DRIVER = re.compile(r"Kernel driver in use:\s*(?P<driver>\S+)")
_IDS = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
#: ``lspci -n``'s header: "05:01.0 Class 0604: Device 10b5:9716 (rev aa)"
_NUMERIC = re.compile(r"^Class (?P<cls>[0-9a-fA-F]{4}): Device (?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})")
#: shell lines around a paste of lspci (or setpci, lsmod) output: `# lspci -vvv | grep ACSCtl`, `$ sudo setpci ...`
_COMMAND = re.compile(r"^\s*(?:\S*[$#%>]\s*)?(?:sudo\s+)?(?:\S*/)?(?:lspci|setpci|grep|lsmod)\b")
_ELLIPSIS = re.compile(r"^\s*\.{3,}\s*$")
#: what `sudo lspci -vvv` leaves in a terminal above the output: "[sudo] password for alice: " (sudo's prompt is
#: translated, so only its "[sudo]" tag is matched)
_SUDO_PROMPT = re.compile(r"^\s*\[sudo\] .*:\s*$")
#: lspci -vvv's class names of the functions the platform checks care about
_CLASS_NAMES = {"VGA compatible controller": 0x0300, "3D controller": 0x0302, "Display controller": 0x0380,
                "Ethernet controller": 0x0200, "Infiniband controller": 0x0207, "Network controller": 0x0280,
                "PCI bridge": 0x0604, "Host bridge": 0x0600}
#: the registers lspci -vv prints under a capability's header, and the labels of their lines
_EXPRESS_REGISTERS = ("DevCap", "DevCtl")
_LINK_REGISTERS = ("LnkCap", "LnkSta")
_ACS_REGISTERS = ("ACSCap", "ACSCtl")


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
    hex_cut: str | None = None  # the dump's last line, where it is cut within a line
    capabilities_shown: bool = False  # lspci printed a standard capability (it could read them)
    extended_shown: bool = False  # lspci printed an extended capability ([100] and above: it could read them)
    #: registers the capability headers promise (lspci -vv prints them under the header), with that header
    expected: dict[str, str] = field(default_factory=dict, repr=False)
    #: registers whose label line was seen, with the last line of text that belongs to each
    labels: dict[str, str] = field(default_factory=dict, repr=False)

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


def _noise(line: str) -> bool:
    """A line pasted around lspci's output: a command line, an elision, a fence, sudo's password prompt."""
    return bool(_COMMAND.match(line) or _ELLIPSIS.match(line) or _SUDO_PROMPT.match(line) or paste_noise(line))


def _segment_ends(lines: list[str]) -> set[int]:
    """The (1-based) lines after which the text of lspci's output stops: the last line, and lines followed by
    something pasted around it (a command line, an elision, a fence). A paste is cut there if anywhere."""
    ends: set[int] = set()
    previous = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if previous is not None and not line[:1].isspace() and not _HEADER.match(line) \
                and not _HEX_CUT.match(line) and not _ACS_LINE.match(line) and _noise(line):
            ends.add(previous)
        previous = number
    if previous is not None:
        ends.add(previous)
    return ends


def parse_lspci(text: str) -> list[LspciDevice]:
    """Every function of an ``lspci -v``/``-vv``/``-vvv`` (``-xxx``/``-xxxx`` hex dumps too) output, or of a
    ``grep`` of one (``lspci -vvv | grep ACSCtl``: devices without a bus id), in order.

    Reads pastes (prompts, sudo's password prompt, command lines, fences, ``...`` elisions, a common indent).
    Where the paste is cut within a register, that register is listed in ``facts.unreadable`` and its fields
    stay None. Raises ValueError for empty text or a line that belongs to no lspci output."""
    lines = [ANSI.sub("", line.rstrip("\r\n")) for line in text.splitlines()]
    indent = _common_indent(lines)
    lines = [raw[len(indent):] if indent and raw.startswith(indent) else raw for raw in lines]
    ends = _segment_ends(lines)
    devices: list[LspciDevice] = []
    current: LspciDevice | None = None
    context = ""  # the register the continuation lines belong to (DevCap, DevCtl, ...)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        at_end = number in ends
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
        hex_line = _HEX.match(line) or (_HEX_CUT.match(line) if at_end and current is not None else None)
        if hex_line and current is not None:
            offset = int(hex_line.group("offset"), 16)
            values = bytes(int(b, 16) for b in hex_line.group("bytes").split())
            if offset != len(current.hex_bytes):
                raise ValueError(f"lspci line {number}: hex dump of {current.bdf} jumps to offset {offset:#x} "
                                 f"after {len(current.hex_bytes)} bytes")
            current.hex_bytes.extend(values)
            if len(values) < 16 or hex_line.re is _HEX_CUT:
                if not at_end:
                    raise ValueError(f"lspci line {number}: hex dump of {current.bdf} has {len(values)} bytes at "
                                     f"{offset:#x}, and lspci prints 16 a line")
                current.hex_cut = (f"its last line ({offset:#x}) is cut after {len(values)} of 16 bytes: "
                                   f"{line.strip()!r}")
            continue
        acs = _ACS_LINE.match(line)
        if acs and (current is None or not line[:1].isspace()):
            # a grep of lspci -vvv: the register without the device it belongs to
            loose = LspciDevice(bdf=None, description=f"(a `{acs.group('reg')}:` line without its device)",
                                line=number)
            devices.append(loose)
            _read_block_line(loose, line, acs.group("reg"), at_end)
            current = None
            continue
        if current is not None and line[:1].isspace():
            label = _LABEL.match(line)
            if label and not label.group("label").startswith("Max"):
                context = label.group("label")
            _read_block_line(current, line, context, at_end)
            continue
        if _noise(line):
            current = None
            continue
        raise ValueError(f"line {number} is not lspci output: {line.strip()[:80]!r} (expected a function's header "
                         "such as '03:00.0 Ethernet controller: ...', its indented lines or its hex dump)")
    if not devices:
        raise ValueError("no PCI function in the text (expected lspci -vvv output: '03:00.0 Class: Vendor ...')")
    for device in devices:
        _close(device)
        _merge_hex(device)
    return devices


def _read_block_line(device: LspciDevice, line: str, context: str, at_end: bool = False) -> None:
    facts = device.facts
    if "<access denied>" in line:
        device.access_denied = True
        facts.capabilities_unreadable = "lspci ran without root: 'Capabilities: <access denied>'"
        facts.extended_unreadable = facts.capabilities_unreadable
        return
    if context in REGISTER_FIELDS:
        device.labels[context] = line.strip()
    bus = _BUS.search(line)
    if bus:
        facts.header_type = 1
        facts.secondary_bus, facts.subordinate_bus = int(bus["s"], 16), int(bus["u"], 16)
        return
    cap = _CAP_HEADER.match(line)
    if cap:
        _read_capability_header(device, line, cap, at_end)
        return
    acs = _ACS_LINE.match(line)
    if acs:
        _read_acs(device, acs.group("reg"), acs.group("flags"))
        return
    if context == "LnkCap":
        _read_link_capabilities(device, line)
        return
    if context == "LnkSta":
        _read_link_status(device, line, at_end)
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


def _read_capability_header(device: LspciDevice, line: str, cap: re.Match, at_end: bool) -> None:
    facts = device.facts
    offset = int(cap["offset"], 16)
    if offset >= 0x100:
        device.extended_shown = True
    else:
        device.capabilities_shown = True
    where = f"[{cap['offset']}]"
    express = _EXPRESS.search(line)
    if express:
        facts.pcie = True
        kind = express.group("type").strip()
        if at_end and "," not in line[express.end("type"):]:
            # lspci goes on with ", MSI 00" or ", IntMsgNum 0": without it the port type may be cut ("Endpo")
            _note(facts, f"Express: the text ends in the capability's header at {where}: {line.strip()!r}")
            return
        facts.port_type = next((ours for words, ours in _LSPCI_PORT_TYPES if kind.startswith(words)), kind)
        registers = _EXPRESS_REGISTERS + (() if facts.port_type in _NO_LINK else _LINK_REGISTERS)
        device.expected.update(dict.fromkeys(registers, f"the PCI Express capability at {where}"))
    elif cap["name"].startswith("Access Control Services"):
        facts.acs = True
        device.expected.update(dict.fromkeys(_ACS_REGISTERS, f"the ACS capability at {where}"))


def _read_acs(device: LspciDevice, register: str, text: str) -> None:
    """``ACSCap:``/``ACSCtl:``: lspci prints all seven bits; a line with fewer was cut, and is not a reading."""
    facts = device.facts
    facts.acs = True
    flags = _flags(text)
    if len(flags) < len(ACS_BITS):
        missing = [bit for bit in ACS_BITS if bit not in flags]
        read = " ".join(f"{bit}{'+' if value else '-'}" for bit, value in flags.items())
        after = f"after {read.split()[-1]}" if read else "before its first bit"
        _note(facts, f"{register}: cut {after} ({len(missing)} of {len(ACS_BITS)} bits missing: "
                     f"{', '.join(missing)})")
        return
    if register == "ACSCap":
        facts.acs_capability = flags
    else:
        facts.acs_control = flags


def _read_link_capabilities(device: LspciDevice, line: str) -> None:
    facts = device.facts
    cap = _LNKCAP.search(line)
    if not cap:
        return  # the continuation line ("ClockPM+ Surprise- ..."), or a cut one: _close names it
    facts.link_port = int(cap["port"])
    facts.link_max_speed_gts = _gts(cap["speed"])
    facts.link_max_width = int(cap["width"])
    facts.link_max_gen = PCIE_GENERATIONS.get(facts.link_max_speed_gts)


def _read_link_status(device: LspciDevice, line: str, at_end: bool) -> None:
    facts = device.facts
    status = _LNKSTA.search(line)
    if not status:
        return  # the flags line of lspci 3.6 and later, or a cut one: _close names it
    facts.link_speed_gts = _gts(status["speed"])
    facts.link_gen = PCIE_GENERATIONS.get(facts.link_speed_gts)
    facts.link_speed_downgraded = _downgraded(status["speed_note"])
    if at_end and not status["end"].strip() and not status["width_note"]:
        # "Width x1" at the end of the text may be "Width x16" cut short: the speed before it was read whole
        _note(facts, f"LnkSta: the text ends at {line.strip()!r}: the width may be cut short")
        return
    facts.link_width = int(status["width"])
    facts.link_width_downgraded = _downgraded(status["width_note"])


def _gts(text: str) -> float | None:
    return None if text == "unknown" else float(text.removesuffix("GT/s"))


def _downgraded(note: str | None) -> bool | None:
    return None if note is None else note == "downgraded"


def _close(device: LspciDevice) -> None:
    """At the end of a function's text: each register a capability header promised, or whose label was seen,
    that was not read whole is named in ``facts.unreadable``."""
    facts = device.facts
    for register in dict.fromkeys([*device.expected, *device.labels]):
        entry = f"{register}:"
        if _was_read(facts, entry) or facts.unreadable_reason(register):
            continue
        if register in device.labels:
            _note(facts, f"{register}: not read whole: the text of it ends at {device.labels[register]!r}")
        else:
            _note(facts, f"{register}: not in the text ({device.expected[register]} shows no {register} line)")


def _merge_hex(device: LspciDevice) -> None:
    """Where lspci also dumped the bytes, they fill what the decoded lines did not say (a ``-xxxx`` without
    ``-v``), and their size says what could be read. lspci prints the dump after all the decoded lines
    (show_device in lspci.c), so a dump also proves those lines whole."""
    size = len(device.hex_bytes)
    facts = device.facts
    if not size:
        return
    cut = device.hex_cut or (None if size in _DUMP_SIZES else
                             f"it ends after {size} bytes ({size:#x}), and lspci dumps 64, 256 or 4096")
    if cut:
        _note(facts, f"hex dump: {cut}")
    if size < 64:
        return
    dumped = parse_config_space(bytes(device.hex_bytes), f"lspci hex dump ({size} bytes)")
    decoded = facts.pcie is not None or facts.acs_control is not None or facts.header_type is not None
    for name, value in dumped.to_dict().items():
        if name in ("source", "unreadable"):
            continue
        if name == "capabilities_unreadable" and device.capabilities_shown:
            continue  # lspci printed the capabilities: it could read them, whatever the dump's size
        if name == "extended_unreadable" and device.extended_shown:
            continue  # likewise: a 256-byte -xxx dump of a function whose [100]+ capabilities lspci printed
        if getattr(facts, name) is None or name in ("config_bytes", "vendor_id", "device_id", "class_code"):
            setattr(facts, name, value)
    if device.extended_shown and facts.acs is None:
        facts.acs = False  # lspci printed the extended capabilities, all of them (the dump follows), and no ACS
    facts.unreadable = [entry for entry in facts.unreadable if not _was_read(facts, entry)]
    for entry in dumped.unreadable:
        if not _was_read(facts, entry):
            _note(facts, entry)
    facts.source = f"lspci -vvv text and hex dump ({size} bytes)" if decoded else dumped.source


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
