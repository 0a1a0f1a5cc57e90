"""PCI configuration space: the registers an acceptance reads, decoded into one record (``PciFacts``) from the
bytes of ``/sys/bus/pci/devices/<bdf>/config`` (``parse_config_space``). An unprivileged reader gets the first 64
bytes only (the kernel's ``pci_read_config`` stops at the standard header without CAP_SYS_ADMIN); a kernel without
ECAM/MMCONFIG access, as in many VMs, gives 256 bytes, without the extended capabilities. lspci's hex dump and its
``-vvv`` decoding of the same registers fill the same record (formats/lspci.py).

The registers read (PCI Express Base Specification; lspci's ``ls-caps.c`` and ``ls-ecaps.c`` decode the same):

- the PCI Express capability (capability id 0x10): PCIe Capabilities register (+2) bits 7:4 = device/port type;
  Device Capabilities (+4) bits 2:0 = Max_Payload_Size supported; Device Control (+8) bits 7:5 =
  Max_Payload_Size and bits 14:12 = Max_Read_Request_Size, each 128 << value bytes; Link Capabilities (+0x0C)
  bits 3:0 = Max Link Speed, 9:4 = Maximum Link Width, 31:24 = Port Number; Link Status (+0x12) bits 3:0 =
  Current Link Speed, 9:4 = Negotiated Link Width (speed codes 1..6: 2.5, 5, 8, 16, 32, 64 GT/s, PCIe 1..6;
  lspci's ``LnkCap: Port #0, Speed 16GT/s, Width x16, ...`` and ``LnkSta: Speed 2.5GT/s (downgraded), Width x16``,
  whose ``(downgraded)``/``(ok)`` lspci 3.6 and later add: 3.6 and 3.7 print ``(ok)`` or ``(downgraded)`` on
  every port, 3.8 and later ``(downgraded)`` only on endpoints and upstream ports, older ones nothing);
- the Access Control Services extended capability (id 0x000D): ACS Capability (+4) and ACS Control (+6), bit 0
  Source Validation, 1 Translation Blocking, 2 P2P Request Redirect, 3 P2P Completion Redirect, 4 Upstream
  Forwarding, 5 P2P Egress Control, 6 Direct Translated P2P (lspci's SrcValid, TransBlk, ReqRedir, CmpltRedir,
  UpstreamFwd, EgressCtrl, DirectTrans). Request and Completion Redirect, Upstream Forwarding and Egress Control
  send peer-to-peer traffic up to the root complex instead of across the switch.

A register read only in part leaves its fields None, and ``PciFacts.unreadable`` says which register and where it
was cut.

Pure functions of bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["ACS_BITS", "REDIRECT_BITS", "PCIE_GENERATIONS", "REGISTER_FIELDS", "PciFacts", "parse_config_space"]

#: ACS Capability / Control bits 0..6, by lspci's names
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: the bits that send peer-to-peer requests or completions up to the root complex
REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl")

#: PCI Express Capabilities register bits 7:4
PORT_TYPES = {0: "endpoint", 1: "legacy endpoint", 4: "root port", 5: "switch upstream port",
              6: "switch downstream port", 7: "PCIe-to-PCI bridge", 8: "PCI-to-PCIe bridge",
              9: "root complex integrated endpoint", 10: "root complex event collector"}

_CAP_PCIE = 0x10
_ECAP_ACS = 0x000D
#: Link Capabilities / Link Status speed codes (bits 3:0), as lspci's ``link_speed`` decodes them, in GT/s
_SPEED_CODES = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
#: PCIe generation of a link speed in GT/s
PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
#: port types without a link of their own (lspci prints no LnkCap/LnkSta for them)
_NO_LINK = ("root complex integrated endpoint", "root complex event collector")
_NEEDS_ROOT = ("config space beyond 64 bytes needs root: the kernel gives unprivileged readers the standard "
               "header only")
_NO_EXTENDED = ("extended configuration space (beyond 256 bytes) not readable: the kernel has no ECAM/MMCONFIG "
                "access to it, as in many VMs")


@dataclass
class PciFacts:
    """What one function's configuration space says; None: not in what was read (``*_unreadable`` and
    ``unreadable`` say why: a register listed in ``unreadable`` was cut short, its fields are None)."""

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
    link_port: int | None = None  # LnkCap Port #
    link_max_speed_gts: float | None = None  # LnkCap: the fastest this port trains, GT/s per lane
    link_max_width: int | None = None  # LnkCap: lanes
    link_max_gen: int | None = None  # PCIe generation of link_max_speed_gts
    link_speed_gts: float | None = None  # LnkSta: as trained now (None also for lspci's "unknown": link down)
    link_width: int | None = None  # LnkSta: lanes (0: link down)
    link_gen: int | None = None
    link_speed_downgraded: bool | None = None  # lspci printed "(downgraded)" True, "(ok)" False; None: neither
    link_width_downgraded: bool | None = None
    capabilities_unreadable: str | None = None  # why the capability list could not be read
    extended_unreadable: str | None = None  # why the extended capabilities (ACS) could not be read
    #: registers read only in part ("ACSCtl: cut after TransBlk- (5 of 7 bits missing)"): their fields are None
    unreadable: list[str] = field(default_factory=list)

    def redirects(self) -> list[str]:
        """The ACS control bits set that reroute peer-to-peer traffic ([] when none, or when ACS is unknown)."""
        return [bit for bit in REDIRECT_BITS if (self.acs_control or {}).get(bit)]

    def unreadable_reason(self, *registers: str) -> str | None:
        """Why one of ``registers`` ("ACSCtl", "DevCtl", "LnkSta", ...) could not be read whole, or None."""
        return next((entry for entry in self.unreadable if entry.split(":", 1)[0] in registers), None)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> PciFacts:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


#: the fields each register fills; the first one says whether it was read
REGISTER_FIELDS = {
    "DevCap": ("max_payload_supported",),
    "DevCtl": ("max_payload", "max_read_request"),
    "LnkCap": ("link_max_width", "link_port", "link_max_speed_gts", "link_max_gen"),
    "LnkSta": ("link_width", "link_speed_gts", "link_gen", "link_speed_downgraded", "link_width_downgraded"),
    "ACSCap": ("acs_capability",),
    "ACSCtl": ("acs_control",),
}


def _was_read(facts: PciFacts, entry: str) -> bool:
    fields = REGISTER_FIELDS.get(entry.split(":", 1)[0])
    return bool(fields) and getattr(facts, fields[0]) is not None


def _note(facts: PciFacts, entry: str) -> None:
    register = entry.split(":", 1)[0]
    if facts.unreadable_reason(register) is None:
        facts.unreadable.append(entry)


def _bits(value: int) -> dict[str, bool]:
    return {name: bool(value >> bit & 1) for bit, name in enumerate(ACS_BITS)}


def _u16(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 2], "little")


def _u32(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 4], "little")


def parse_config_space(data: bytes, source: str | None = None) -> PciFacts:
    """Decode a function's configuration space (64, 256 or 4096 bytes, as read; any other length is a cut dump,
    read as far as it goes). Raises ValueError for fewer than 64 bytes (not a configuration space)."""
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
        if cap_id == _CAP_PCIE:
            facts.pcie = True
            _read_pcie_capability(facts, data, pointer)
        pointer = following
    if pointer and pointer + 2 > size and not facts.pcie:
        # the list goes on past what was read: the PCI Express capability may be there, unseen
        facts.pcie = None
        facts.capabilities_unreadable = f"the capability list runs past the {size} bytes read (next at {pointer:#x})"
        facts.extended_unreadable = facts.capabilities_unreadable
        return facts
    if not facts.pcie:
        facts.acs = False  # extended capabilities are PCI Express only
        return facts
    if size <= 0x100:
        facts.extended_unreadable = _NO_EXTENDED if size == 256 else f"extended capabilities beyond the {size} bytes"
        return facts
    facts.acs = False
    offset, seen = 0x100, 0
    while offset and seen < 512:
        seen += 1
        if offset + 4 > size:
            facts.acs = None  # ACS may be further down the list, past what was read
            facts.extended_unreadable = (f"the extended capability list runs past the {size} bytes read (next at "
                                         f"{offset:#x})")
            break
        header = _u32(data, offset)
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == _ECAP_ACS:
            facts.acs = True
            if offset + 8 > size:
                for register in ("ACSCap", "ACSCtl"):
                    _note(facts, f"{register}: beyond the {size} bytes read (ACS capability at {offset:#x})")
                break
            facts.acs_capability = _bits(_u16(data, offset + 4))
            facts.acs_control = _bits(_u16(data, offset + 6))
        following = header >> 20 & 0xFFC
        offset = following if following >= 0x100 else 0
    return facts


def _read_pcie_capability(facts: PciFacts, data: bytes, pointer: int) -> None:
    """The PCI Express capability's registers at ``pointer``, each only where all its bytes were read."""
    size = len(data)

    def whole(register: str, offset: int, length: int) -> bool:
        if pointer + offset + length <= size:
            return True
        _note(facts, f"{register}: beyond the {size} bytes read (PCI Express capability at {pointer:#x})")
        return False

    if pointer + 4 <= size:
        facts.port_type = PORT_TYPES.get(_u16(data, pointer + 2) >> 4 & 0xF, "other")
    if whole("DevCap", 4, 4):
        facts.max_payload_supported = 128 << (_u32(data, pointer + 4) & 0x7)
    if whole("DevCtl", 8, 2):
        control = _u16(data, pointer + 8)
        facts.max_payload = 128 << (control >> 5 & 0x7)
        facts.max_read_request = 128 << (control >> 12 & 0x7)
    if facts.port_type in _NO_LINK:
        return
    if whole("LnkCap", 0x0C, 4):
        capability = _u32(data, pointer + 0x0C)
        facts.link_port = capability >> 24
        facts.link_max_speed_gts = _SPEED_CODES.get(capability & 0xF)
        facts.link_max_width = capability >> 4 & 0x3F
        facts.link_max_gen = PCIE_GENERATIONS.get(facts.link_max_speed_gts)
    if whole("LnkSta", 0x12, 2):
        status = _u16(data, pointer + 0x12)
        facts.link_speed_gts = _SPEED_CODES.get(status & 0xF)
        facts.link_width = status >> 4 & 0x3F
        facts.link_gen = PCIE_GENERATIONS.get(facts.link_speed_gts)

