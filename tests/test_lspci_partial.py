"""lspci evidence read in part is no evidence; PCIe link speed and width from lspci's text and from the config-space
bytes; two paste quirks (sudo's password prompt above the output, a 256-byte ``-xxx`` dump beside the extended
capabilities lspci printed).

Every output read here is a real file under tests/data/captures/public/platform/ (its README names the source and
the values read off it by hand, which the assertions repeat). A cut paste is made here by cutting such a file: what
is left before the cut is the real output, byte for byte. Anything else put together here is marked DERIVED, with
why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_gpufabric.checks import platform as checks
from pytest_gpufabric.checks.result import FAILED, PASSED, unknown
from pytest_gpufabric.fabric import platform_record as pr
from pytest_gpufabric.fabric import platform_text as pt
from pytest_gpufabric.formats.lspci import parse_lspci, parse_lspci_hex
from pytest_gpufabric.formats.pci_config import parse_config_space

PUBLIC = Path(__file__).parent / "data" / "captures" / "public" / "platform"
PLX_GREP = PUBLIC / "lspci-grep-acsctl-plx-acs-on-nccl-304-excerpt.txt"
PLX_TITAN = PUBLIC / "lspci-vvv-plx-pex8747-downstream-port-acs-off-above-titan-x.txt"
ACS_ON = PUBLIC / "lspci-vvvxxxx-haswell-e-root-port-acs-on-above-connectx3-pro.txt"
ACS_OFF_GPU = PUBLIC / "lspci-vvvxxxx-sunrise-point-root-port-acs-off-above-gp108m.txt"
RTX3090 = PUBLIC / "lspci-vvvv-rtx3090-on-rk3568-link-downgraded-to-2.5gts-x1.txt"
A6000 = PUBLIC / "lspci-vvd-rtx-a6000-link-speed-downgraded-width-ok.txt"
PM174X = PUBLIC / "lspci-vvvxxxx-pm174x-nvme-link-32gts-running-16gts.txt"
SUDO = PUBLIC / "lspci-vvnn-sudo-password-prompt-i865-host-and-agp-bridge-excerpt.txt"

#: the verdict of a promise the evidence cannot judge (whatever checks.result calls it)
NOT_JUDGED = unknown("", "", None, "").verdict
ALL_OFF = dict.fromkeys(("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl",
                         "DirectTrans"), False)
HEX_LINE = re.compile(r"^[0-9a-f]{2,3}:( [0-9a-f]{2})+\s*$")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _cut_after(text: str, line_part: str, *, occurrence: int = 0) -> str:
    """The text up to and including ``line_part`` (its ``occurrence``-th appearance): a paste cut there."""
    at = -1
    for _ in range(occurrence + 1):
        at = text.index(line_part, at + 1)
    return text[:at + len(line_part)]


def _platform(text: str, source: str, **kw) -> pr.Platform:
    platform = pr.Platform(source=source)
    pt.apply_lspci(platform, text, source, **kw)
    return platform


def _hex_only(text: str) -> str:
    """DERIVED: what ``lspci -xxxx`` prints of the same functions: each header line (show_verbose starts with the
    terse line) and its hex dump, without the decoded lines."""
    return "\n".join(line for line in text.splitlines() if not line[:1].isspace() and line.strip()) + "\n"


# --- 1. a register cut mid-line is unreadable, and a check on it is not judged ------------------------------------


def test_an_acsctl_line_cut_after_transblk_is_unreadable_not_redirect_off():
    """NVIDIA/nccl#304's PLX line reads SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ (README). Cut after
    TransBlk- it used to read {'SrcValid': True, 'TransBlk': False}: no redirect bit, and `acs: disabled` passed."""
    text = _cut_after(_read(PLX_GREP), "TransBlk-")
    (line,) = parse_lspci(text)
    assert line.bdf is None and line.facts.acs is True
    assert line.facts.acs_control is None and line.facts.redirects() == []
    assert line.facts.unreadable == ["ACSCtl: cut after TransBlk- (5 of 7 bits missing: ReqRedir, CmpltRedir, "
                                     "UpstreamFwd, EgressCtrl, DirectTrans)"]
    platform = _platform(text, PLX_GREP.name)
    for want in ("disabled", "all_off"):
        result = checks.check_acs(want, platform)
        assert result.verdict == NOT_JUDGED, result.message
        assert "ACSCtl: cut after TransBlk-" in result.message and f"line 2 of {PLX_GREP.name}" in result.message
    # the whole line still fails (test_platform.py): the cut, not the data, made it unjudgeable
    assert checks.check_acs("disabled", _platform(_read(PLX_GREP), PLX_GREP.name)).verdict == FAILED


def test_no_cut_anywhere_in_the_acsctl_line_reads_as_acs_off():
    """Every place the paste can end inside its ACSCtl line: the check never passes (a cut inside the label, with
    no `ACSCtl:` left to recognise, is refused as text that is not lspci's)."""
    text = _read(PLX_GREP)
    start = text.index("ACSCtl:")
    end = text.index("DirectTrans-") + len("DirectTrans-")
    for cut in range(start + 1, end):
        try:
            platform = _platform(text[:cut], PLX_GREP.name)
        except ValueError as exc:
            assert cut < start + len("ACSCtl:"), (cut, exc)
            continue
        # a redirect bit read whole before the cut is still not a reading of the register: not judged either
        result = checks.check_acs("disabled", platform)
        assert result.verdict == NOT_JUDGED, (text[start:cut], result.message)
    assert checks.check_acs("disabled", _platform(text[:end], PLX_GREP.name)).verdict == FAILED


def test_plx_downstream_port_with_its_acsctl_cut_above_the_titan_x_is_not_judged():
    """DERIVED: the README's two pastes of one page (`lspci -vvv -s 03:08.0`, `lspci -vvv -s 04:00`), the first cut
    in its ACSCtl line after TransBlk- (its README value: all seven bits `-`). The cut block is followed by the second
    paste's command line, as when an output is cut short before the next command. Before, the two bits read made
    `acs: disabled` pass on the bridge above the GPU."""
    text = _read(PLX_TITAN)
    second = text[text.index("# lspci -vvv -s 04:00"):]
    first = _cut_after(text[:text.index("# lspci -vvv -s 04:00")], "ACSCtl: SrcValid- TransBlk-")
    derived = first + "\n" + second
    devices = {d.bdf: d for d in parse_lspci(derived)}
    bridge = devices["0000:03:08.0"].facts
    assert bridge.acs_capability == dict.fromkeys(ALL_OFF, True)  # the ACSCap line above the cut is whole
    assert bridge.acs_control is None
    assert bridge.unreadable_reason("ACSCtl") == ("ACSCtl: cut after TransBlk- (5 of 7 bits missing: ReqRedir, "
                                                  "CmpltRedir, UpstreamFwd, EgressCtrl, DirectTrans)")
    result = checks.check_acs("disabled", _platform(derived, "derived"))
    assert result.verdict == NOT_JUDGED
    assert "0000:03:08.0 above NVIDIA GPU 0000:04:00.0: ACSCtl: cut after TransBlk-" in result.message
    # uncut, the downstream port is read whole and judged (its ACS is off): only the ports above it, which the two
    # pastes do not show, keep the check from passing (test_platform.py); the ACSCtl cut above is the cut's doing
    whole = checks.check_acs("disabled", _platform(text, PLX_TITAN.name))
    assert whole.verdict == NOT_JUDGED and "judged without a redirect: 0000:03:08.0" in whole.message
    assert "ACSCtl: cut" not in whole.message


def test_a_text_that_ends_at_the_acs_header_has_no_acs_reading():
    text = _cut_after(_read(PLX_TITAN), "Access Control Services")
    (bridge,) = parse_lspci(text)
    assert bridge.facts.acs is True and bridge.facts.acs_control is None and bridge.facts.acs_capability is None
    assert [entry.split(":")[0] for entry in bridge.facts.unreadable] == ["ACSCap", "ACSCtl"]
    assert "not in the text (the ACS capability at [" in bridge.facts.unreadable[1]


@pytest.mark.parametrize("cut", ["MaxPayload 1", "MaxPayload 128 bytes, MaxRe", "MaxPayload 128 bytes, MaxReadReq 51",
                                 "MaxPayload 128 bytes, MaxReadReq 512 byte", "NoSnoop+ FLReset-"])
def test_devctl_cut_leaves_the_payload_sizes_unread_and_the_check_not_judged(cut):
    """The RTX 3090's DevCtl reads `MaxPayload 128 bytes, MaxReadReq 512 bytes` (README). Cut anywhere in it, or
    before its last line, neither size is read and the PCIe sizes check is not judged, never failed or passed."""
    text = _cut_after(_read(RTX3090), cut)
    (gpu,) = parse_lspci(text)
    assert (gpu.facts.max_payload, gpu.facts.max_read_request) == (None, None)
    assert gpu.facts.unreadable_reason("DevCtl").startswith("DevCtl: not read whole: the text of it ends at ")
    platform = _platform(text, "cut", gpu_bus_ids={0: "0002:21:00.0"})
    for spec in ({"min_max_payload": 128}, {"min_max_read_request": 512}, {"min_max_payload": 256}):
        result = checks.check_pcie_sizes(spec, "GPU0", platform)
        assert result.verdict == NOT_JUDGED and "DevCtl: not read whole" in result.message, result.message


def test_devctl_read_whole_on_the_same_gpu_passes_and_fails_by_the_numbers():
    platform = _platform(_read(RTX3090), RTX3090.name, gpu_bus_ids={0: "0002:21:00.0"})
    assert checks.check_pcie_sizes({"min_max_payload": 128, "min_max_read_request": 512}, "GPU0",
                                   platform).verdict == PASSED
    assert checks.check_pcie_sizes({"min_max_payload": 256}, "GPU0", platform).verdict == FAILED


def test_a_text_cut_in_or_right_after_the_express_header():
    whole_header = _cut_after(_read(RTX3090), "Express (v2) Legacy Endpoint, MSI 00")
    (gpu,) = parse_lspci(whole_header)
    assert gpu.facts.pcie is True and gpu.facts.port_type == "legacy endpoint"
    assert [entry.split(":")[0] for entry in gpu.facts.unreadable] == ["DevCap", "DevCtl", "LnkCap", "LnkSta"]
    assert all("not in the text (the PCI Express capability at [78]" in e for e in gpu.facts.unreadable)
    (gpu,) = parse_lspci(_cut_after(_read(RTX3090), "Express (v2) Legacy Endpo"))
    assert gpu.facts.pcie is True and gpu.facts.port_type is None  # not "Legacy Endpo"
    assert gpu.facts.unreadable[0].startswith("Express: the text ends in the capability's header at [78]")


#: the lines whose every character a cut is tried at: headers and the lines of the registers read
READ_LINES = re.compile(r"^[0-9a-f]{2,4}:|Bus:|Capabilities: \[|DevCap:|MaxPayload|LnkCap:|LnkSta:|ACSC")


def _cuts(text: str):
    """Where a paste can end: anywhere in a line that is read, else at the line's end, one character short of it
    and in its middle."""
    at = 0
    for line in text.splitlines(keepends=True):
        body = len(line.rstrip("\r\n"))
        inside = range(1, body + 1) if READ_LINES.search(line) else (body // 2, body - 1, body)
        yield from sorted({at + cut for cut in inside if at + cut > 0})
        at += len(line)


FACT_FIELDS = ("vendor_id", "device_id", "class_code", "header_type", "secondary_bus", "subordinate_bus", "pcie",
               "port_type", "max_payload_supported", "max_payload", "max_read_request", "acs", "acs_capability",
               "acs_control", "link_port", "link_max_speed_gts", "link_max_width", "link_max_gen", "link_speed_gts",
               "link_width", "link_gen", "link_speed_downgraded", "link_width_downgraded")


@pytest.mark.parametrize("path", [PLX_GREP, PLX_TITAN, RTX3090, A6000, SUDO],
                         ids=["plx-grep", "plx+titan-x", "rtx3090", "a6000", "sudo-i865"])
def test_no_cut_of_a_real_paste_reads_a_value_the_whole_paste_does_not(path):
    """A paste cut anywhere (see _cuts) reads each fact as the whole paste does, or not at all (None): "Width x1"
    of a cut "Width x16", "subordinate=0" of a cut "subordinate=04" and two bits of a cut ACSCtl are not readings."""
    text = _read(path)
    whole = {d.bdf or f"line {d.line}": d.facts for d in parse_lspci(text)}
    read = 0
    for cut in _cuts(text):
        try:
            devices = parse_lspci(text[:cut])
        except ValueError:
            continue  # refused as text that is not lspci's (a cut header, a cut label): no reading either
        for device in devices:
            facts = whole[device.bdf or f"line {device.line}"]
            for name in FACT_FIELDS:
                value = getattr(device.facts, name)
                assert value is None or value == getattr(facts, name), (name, text[max(0, cut - 60):cut])
                read += value is not None
    assert read > 0


def _decoded_only(path: Path) -> str:
    """DERIVED: an ``lspci -vvvxxxx`` capture without its hex dump, as ``lspci -vvv`` prints the same functions
    (cutting 4 x 4096 dumped bytes everywhere would take minutes)."""
    return "\n".join(line for line in _read(path).splitlines() if not HEX_LINE.match(line)) + "\n"


@pytest.mark.parametrize(("path", "kw", "check"), [
    (PLX_GREP, {}, lambda platform: checks.check_acs("disabled", platform)),
    (ACS_OFF_GPU, {"decoded": True}, lambda platform: checks.check_acs("all_off", platform)),
    (RTX3090, {"gpu_bus_ids": {0: "0002:21:00.0"}},
     lambda platform: checks.check_pcie_sizes({"min_max_payload": 128, "min_max_read_request": 512}, "GPU0", platform)),
    (RTX3090, {"gpu_bus_ids": {0: "0002:21:00.0"}},
     lambda platform: checks.check_pcie_sizes({"min_max_payload": 256}, "GPU0", platform)),
], ids=["plx-grep-acs-fails", "sunrise-point+gp108m-acs-passes", "rtx3090-sizes-pass", "rtx3090-sizes-fail"])
def test_a_cut_paste_is_judged_as_the_whole_one_or_not_at_all(path, kw, check):
    kw = dict(kw)
    text = _decoded_only(path) if kw.pop("decoded", False) else _read(path)
    whole = check(_platform(text, path.name, **kw)).verdict
    assert whole in (PASSED, FAILED)
    verdicts = set()
    for cut in _cuts(text):
        try:
            verdicts.add(check(_platform(text[:cut], path.name, **kw)).verdict)
        except ValueError:
            continue
    assert verdicts <= {whole, NOT_JUDGED} and NOT_JUDGED in verdicts


# --- 2. a hex dump cut in its last line -----------------------------------------------------------------------------


def test_a_dump_cut_in_the_middle_of_a_byte_is_read_up_to_the_last_whole_byte():
    """DERIVED `lspci -xxxx` of the PM174X (_hex_only), cut inside line 80 (`80: 00 00 24 10 ...`): two whole
    bytes and half of the third. LnkCap (0x7c, `25 70 43 00`) is whole, LnkSta (0x82, `24 10`) is not."""
    text = _cut_after(_hex_only(_read(PM174X)), "\n80: 00 00 2")
    (nvme,) = parse_lspci(text)
    facts = nvme.facts
    assert facts.config_bytes == 0x82 and facts.port_type == "endpoint"
    assert (facts.link_max_speed_gts, facts.link_max_width, facts.link_max_gen) == (32.0, 2, 5)
    assert (facts.link_speed_gts, facts.link_width, facts.link_gen) == (None, None, None)
    assert facts.unreadable_reason("LnkSta") == ("LnkSta: beyond the 130 bytes read (PCI Express capability at "
                                                 "0x70)")
    assert facts.unreadable_reason("hex dump") == ("hex dump: its last line (0x80) is cut after 2 of 16 bytes: "
                                                   "'80: 00 00 2'")
    assert facts.acs is None and facts.extended_unreadable == "extended capabilities beyond the 130 bytes"


def test_a_dump_cut_in_the_extended_capabilities_does_not_say_no_acs():
    """DERIVED `lspci -xxxx` of the PM174X cut after line 140: its extended list (AER at 0x100, then 0x148, 0x168)
    runs past the bytes read, so whether it has ACS is not known (the whole dump: no ACS)."""
    hex_text = _hex_only(_read(PM174X))
    cut = hex_text[:hex_text.index("\n150:") + 1]
    (nvme,) = parse_lspci(cut)
    assert nvme.facts.config_bytes == 0x150 and nvme.facts.acs is None
    assert nvme.facts.extended_unreadable == "the extended capability list runs past the 336 bytes read (next at 0x168)"
    assert nvme.facts.unreadable == ["hex dump: it ends after 336 bytes (0x150), and lspci dumps 64, 256 or 4096"]
    (whole,) = parse_lspci(hex_text)
    assert whole.facts.acs is False and whole.facts.unreadable == []


def test_a_root_port_dump_cut_inside_its_acs_capability_is_not_judged():
    """DERIVED: `lspci -xxxx -s 03:00.0; lspci -xxxx -s 00:02.0` of the Haswell file (_hex_only, the NIC's block
    first), the root port's dump cut after `110: 0d 00 81 14` (its ACS header; ACSCap and ACSCtl follow at 0x114).
    Before, the walk stopped there and read "no ACS capability": `acs: disabled` passed above the ConnectX-3."""
    hex_text = _hex_only(_read(ACS_ON))
    port, nic = hex_text[:hex_text.index("03:00.0 ")], hex_text[hex_text.index("03:00.0 "):]
    derived = nic + _cut_after(port, "\n110: 0d 00 81 14")
    devices = {d.bdf: d.facts for d in parse_lspci(derived)}
    facts = devices["0000:00:02.0"]
    assert facts.secondary_bus == 3 and facts.acs is True and facts.acs_control is None
    assert facts.unreadable_reason("ACSCtl") == "ACSCtl: beyond the 276 bytes read (ACS capability at 0x110)"
    result = checks.check_acs("disabled", _platform(derived, "derived"))
    assert result.verdict == NOT_JUDGED and "ACSCtl: beyond the 276 bytes read" in result.message
    assert checks.check_acs("disabled", _platform(hex_text, "hex")).verdict == FAILED  # whole: ReqRedir+ ...


def test_a_dump_line_short_of_sixteen_bytes_before_more_dump_is_refused():
    """A dump line with fewer than 16 bytes that is not the last line cannot be lspci's: refused, naming it."""
    lines = _hex_only(_read(PM174X)).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("80:"))
    lines[at] = lines[at][:len("80: 00 00 24")]
    with pytest.raises(ValueError, match="has 3 bytes at 0x80, and lspci prints 16 a line"):
        parse_lspci("\n".join(lines))


# --- 3. PCIe link speed and width ---------------------------------------------------------------------------------

LINK_FIELDS = ("link_port", "link_max_speed_gts", "link_max_width", "link_max_gen", "link_speed_gts", "link_width",
               "link_gen", "link_speed_downgraded", "link_width_downgraded")


@pytest.mark.parametrize(("path", "bdf", "expected"), [
    # `LnkCap: Port #8, Speed 8GT/s, Width x16` / `LnkSta: Speed 8GT/s (ok), Width x16 (ok)` (lspci 3.6/3.7)
    (PLX_TITAN, "0000:03:08.0", (8, 8.0, 16, 3, 8.0, 16, 3, False, False)),
    # `LnkCap: Port #3, Speed 8GT/s, Width x8` / `LnkSta: Speed 8GT/s, Width x8, TrErr- ...` (before 3.6: no note)
    (ACS_ON, "0000:00:02.0", (3, 8.0, 8, 3, 8.0, 8, 3, None, None)),
    # `LnkCap: Port #0, Speed 16GT/s, Width x16` / `LnkSta: Speed 2.5GT/s (downgraded), Width x1 (downgraded)`
    (RTX3090, "0002:21:00.0", (0, 16.0, 16, 4, 2.5, 1, 1, True, True)),
    # `LnkCap: Port #0, Speed 16GT/s, Width x16` / `LnkSta: Speed 2.5GT/s (downgraded), Width x16 (ok)`
    (A6000, "0000:01:00.0", (0, 16.0, 16, 4, 2.5, 16, 1, True, False)),
    # `LnkCap: Port #0, Speed 32GT/s, Width x2` / `LnkSta: Speed 16GT/s (downgraded), Width x2` (3.8 and later)
    (PM174X, "0000:2e:00.0", (0, 32.0, 2, 5, 16.0, 2, 4, True, None)),
], ids=["plx-ok", "haswell-no-note", "rtx3090-both-downgraded", "a6000-speed-downgraded", "pm174x-gen5-at-gen4"])
def test_link_capabilities_and_status_as_read_by_hand(path, bdf, expected):
    devices = {d.bdf: d.facts for d in parse_lspci(_read(path))}
    assert tuple(getattr(devices[bdf], name) for name in LINK_FIELDS) == expected
    assert devices[bdf].unreadable == []


@pytest.mark.parametrize("path", [ACS_ON, ACS_OFF_GPU, PM174X], ids=["haswell-e+connectx3", "sunrise-point+gp108m",
                                                                     "pm174x"])
def test_the_link_registers_of_the_dump_agree_with_lspcis_decoding(path):
    """pciutils' dumps hold lspci's decoding and the bytes it decoded: LnkCap (+0x0c) and LnkSta (+0x12) of the
    PCI Express capability give the same port, speeds, widths and generations."""
    decoded = {d.bdf: d.facts for d in parse_lspci("\n".join(line for line in _read(path).splitlines()
                                                              if not HEX_LINE.match(line)))}
    compared = 0
    for bdf, data in parse_lspci_hex(_read(path)).items():
        dumped = parse_config_space(data)
        for name in LINK_FIELDS[:7]:
            assert getattr(dumped, name) == getattr(decoded[bdf], name), (bdf, name)
            compared += getattr(dumped, name) is not None
    assert compared >= 7 * len(decoded)


def test_the_link_registers_read_by_hand_from_the_bytes():
    """PM174X `70: 10 b0 02 00 e2 8f a0 10 30 19 00 00 25 70 43 00` (LnkCap 0x00437025: speed 5, width 2, port 0)
    and `80: 00 00 24 10` (LnkSta 0x1024: speed 4, width 2); Haswell root port `90: ... 83 38 7a 03` (LnkCap
    0x037a3883: speed 3, width 8, port 3) and `a0: 40 00 83 70` (LnkSta 0x7083: speed 3, width 8)."""
    nvme = parse_config_space(parse_lspci_hex(_read(PM174X))["0000:2e:00.0"])
    assert (nvme.link_port, nvme.link_max_speed_gts, nvme.link_max_width, nvme.link_speed_gts, nvme.link_width) == \
        (0, 32.0, 2, 16.0, 2)
    port = parse_config_space(parse_lspci_hex(_read(ACS_ON))["0000:00:02.0"])
    assert (port.link_port, port.link_max_speed_gts, port.link_max_width, port.link_speed_gts, port.link_width) == \
        (3, 8.0, 8, 8.0, 8)
    assert (port.link_speed_downgraded, port.link_width_downgraded) == (None, None)  # lspci's notes are not bytes


def test_a_link_status_line_that_ends_the_text_at_its_width_keeps_the_speed_only():
    """`LnkSta: Speed 2.5GT/s (downgraded), Width x16 (ok)` cut to `... Width x1`: x1 would be a wrong reading."""
    (gpu,) = parse_lspci(_cut_after(_read(A6000), "Width x1", occurrence=1))
    assert (gpu.facts.link_speed_gts, gpu.facts.link_gen, gpu.facts.link_speed_downgraded) == (2.5, 1, True)
    assert gpu.facts.link_width is None and gpu.facts.link_width_downgraded is None
    assert gpu.facts.unreadable_reason("LnkSta") == ("LnkSta: the text ends at 'LnkSta: Speed 2.5GT/s (downgraded), "
                                                     "Width x1': the width may be cut short")
    assert gpu.facts.link_max_width == 16  # `LnkCap: ... Width x16,` above it is whole


# --- 4. paste quirks ----------------------------------------------------------------------------------------------


def test_a_paste_with_sudos_password_prompt_above_the_output_is_read():
    """`zeerok@milkview:~$ sudo lspci -vvnn`, then `[sudo] password for zeerok: `, then the output (README)."""
    devices = parse_lspci(_read(SUDO))
    assert [d.bdf for d in devices] == ["0000:00:00.0", "0000:00:01.0"]
    host, bridge = devices
    assert (host.facts.vendor_id, host.facts.device_id, host.facts.class_code) == (0x8086, 0x2570, 0x060000)
    assert (bridge.facts.vendor_id, bridge.facts.device_id, bridge.facts.secondary_bus) == (0x8086, 0x2571, 1)
    assert host.line == 3 and host.driver == "agpgart-intel"


def test_a_256_byte_dump_beside_the_extended_capabilities_lspci_printed_is_not_no_ecam():
    """DERIVED: what `lspci -vvvxxx` prints of the Sunrise Point file's functions: the same decoded lines and the
    first 256 bytes of each dump. lspci printed `Capabilities: [100 v1] ...`, so it could read them: no "no ECAM",
    the root port's ACS comes from its decoded ACSCtl (all off) and the GPU has none (its list is all there)."""
    text = "\n".join(line for line in _read(ACS_OFF_GPU).splitlines() if not re.match(r"^[0-9a-f]{3}:", line))
    devices = {d.bdf: d.facts for d in parse_lspci(text)}
    port, gpu = devices["0000:00:1c.0"], devices["0000:02:00.0"]
    assert port.config_bytes == 256 and port.extended_unreadable is None and port.acs_control == ALL_OFF
    assert gpu.config_bytes == 256 and gpu.extended_unreadable is None and gpu.acs is False
    assert all(facts.unreadable == [] for facts in devices.values())
    assert checks.check_acs("disabled", _platform(text, "derived")).verdict == PASSED
    # the same 256 bytes without the decoded lines (`lspci -xxx`): nothing shows the extended space was readable
    (port_only, *_) = parse_lspci(_hex_only(text))
    assert port_only.facts.extended_unreadable.startswith("extended configuration space (beyond 256 bytes) not "
                                                         "readable: the kernel has no ECAM/MMCONFIG access")
    assert port_only.facts.acs is None
