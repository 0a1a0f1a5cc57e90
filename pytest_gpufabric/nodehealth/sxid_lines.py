"""The NVSwitch driver's SXid lines in the kernel log, read beside the Xid lines (record.py's read_kernel_xids) and
typed back from health.json's ``kernel_log.sxids``.

One SXid is logged as a few lines of the same switch and code: "nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034,
Fatal, Link 30 LTSSM Fault Up", then "..., Severity 1 Engine instance 30 ..." and "..., Data {...}". Each line is
kept ({"switch", "pci", "sxid", "age_s", "text"}); sxid.py groups and judges them. A record written before SXids
were read has no ``sxids`` list: not recorded (a note), never an unknown.
"""

from __future__ import annotations

import re

#: "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)"
SXID_LINE = re.compile(r"(?P<switch>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                       r"[0-9A-Fa-f]{2}\.[0-7])\): (?P<sxid>\d+)")
PCI_FUNCTION = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
SWITCH_NAME = re.compile(r"nvidia-nvswitch\d+")


def sxid_of_message(message: str, age_s: float) -> dict | None:
    """The SXid of one kernel message logged ``age_s`` seconds before the read, or None."""
    match = SXID_LINE.search(message)
    if match is None:
        return None
    return {"switch": match["switch"], "pci": match["pci"].lower(), "sxid": int(match["sxid"]),
            "age_s": round(max(age_s, 0.0), 3), "text": message.splitlines()[0].strip()[:300]}


def severity_word(text: str) -> str | None:
    """"fatal" or "non-fatal" where the line says so after its code (the driver's own word), else None."""
    match = re.search(r"SXid \([^)]*\): \d+, (Fatal|Non-fatal),", text)
    return match[1].lower() if match else None


def type_sxids(data: dict, typed, number) -> list[dict] | None:
    """``kernel_log.sxids`` typed (None: not recorded); ``number`` reads a bounded float (record._Typed.number).
    Raises Unreadable naming the entry that is not an SXid line."""
    if "sxids" not in data:
        return None
    if not isinstance(data["sxids"], list):
        raise typed._refuse("the SXid lines", data["sxids"], "kernel_log.sxids", "a list of SXid lines")
    sxids = []
    for n, entry in enumerate(data["sxids"]):
        key = f"kernel_log.sxids[{n}]"
        if not isinstance(entry, dict):
            raise typed._refuse("an SXid line", entry, key, "an object")
        switch = typed.text(entry.get("switch"), f"{key}.switch", "the NVSwitch's name")
        if not SWITCH_NAME.fullmatch(switch):
            raise typed._refuse("the NVSwitch's name", switch, f"{key}.switch", "nvidia-nvswitchN")
        pci = typed.text(entry.get("pci"), f"{key}.pci", "the NVSwitch's PCI address")
        if not PCI_FUNCTION.fullmatch(pci):
            raise typed._refuse("the NVSwitch's PCI address", pci, f"{key}.pci", "a PCI address (0000:a9:00.0)")
        sxids.append({"switch": switch, "pci": pci.lower(),
                      "sxid": typed.whole(entry.get("sxid"), f"{key}.sxid", "the SXid", 0, 99999),
                      "age_s": float(number(entry.get("age_s"), f"{key}.age_s", "the SXid's age", 0, 1e10)),
                      "text": str(entry.get("text") or "")[:300]})
    return sxids
