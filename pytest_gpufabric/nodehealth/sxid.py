"""The passive tier's NVSwitch SXids: the nvidia-nvswitch driver's error lines in the kernel log (sxid_lines.py),
judged by NVIDIA's classes (sxid_catalog.py) as the Xids are judged (passive.py): only lines younger than the Xid
window, grouped by switch and code.

- a fatal SXid (the guide's fatal or always fatal classes, or a line that says "Fatal") drains the node naming the
  switch and its PCI address, remedy reset or reboot; state.py holds it until a reboot, as it holds an Xid;
- a non-fatal one whose recovery restarts or resets (sxid_catalog.NON_FATAL_RESET) drains the same way;
- a code the guide does not class whose line does not say "Non-fatal" drains the same way: the driver logs its
  fatal host codes (10006 thermal shutdown, 10007 IO failure) with no severity word, so no word is not "corrected";
- any other (the guide's non-fatal and other notable classes, or an uncatalogued line logged Non-fatal) is shown
  (warn): the NVSwitch corrected it.

A kernel log that could not be read is passive.py's Xid unknown (one reading, one finding): the SXids are not told
either, and state.py keeps the held SXid drains (KERNEL_LOG_CHECKS).
"""

from __future__ import annotations

from ..remedy_classes import RESET
from .finding import DRAIN, WARN, Finding
from .record import NodeHealthRecord
from .sxid_catalog import DRIVER_HOST_NAMES, FATAL_CLASSES, NON_FATAL, NON_FATAL_RESET, SXID_CATALOG
from .sxid_lines import severity_word

CHECK = "sxid"


def sxid_findings(node: NodeHealthRecord, window_s: float) -> tuple[list[Finding], list[str]]:
    log = node.kernel_log
    if log.error is not None:
        return [], []  # passive.py says it (the Xid check's unknown, or a replay's note)
    if log.sxids is None:
        return [], [f"NVSwitch SXid events not checked: {node.source} records no SXid lines (written before "
                    "they were read)"]
    recent: dict[tuple[str, int], list[dict]] = {}
    for line in log.sxids:
        if line["age_s"] <= window_s:
            recent.setdefault((line["pci"], line["sxid"]), []).append(line)
    notes = []
    older = sum(1 for line in log.sxids if line["age_s"] > window_s)
    if older:
        notes.append(f"{older} SXid line(s) older than {window_s:g} s in the kernel log, not judged (a reset or "
                     "reboot since leaves them there)")
    findings = []
    for (pci, code), lines in sorted(recent.items(), key=lambda item: (item[0][1], item[0][0])):
        findings.append(_judged(node, pci, code, lines, window_s))
    return findings, notes


def _judged(node: NodeHealthRecord, pci: str, code: int, lines: list[dict], window_s: float) -> Finding:
    """One switch's lines of one code: a drain or a warning."""
    klass, name = SXID_CATALOG.get(code, (None, DRIVER_HOST_NAMES.get(code)))
    words = {severity_word(line["text"]) for line in lines} - {None}
    newest = min(lines, key=lambda line: line["age_s"])
    worded = [line for line in lines if severity_word(line["text"])]  # an event's first line: what went wrong
    shown = min(worded or lines, key=lambda line: line["age_s"])
    events = len(worded) or 1  # the driver logs a few lines per event
    fatal_by = "catalogue" if klass in FATAL_CLASSES else "line" if "fatal" in words else \
        "recovery" if code in NON_FATAL_RESET else "unclassed" if klass is None and NON_FATAL not in words else None
    switch = newest["switch"]
    what = f"SXid {code}" + (f" {name}" if name else "") + (f" x{events}" if events > 1 else "") + \
        f" on {switch} (PCI {pci})"
    evidence = {"sxid": code, "switch": switch, "pci": pci, "count": len(lines), "events": events,
                "age_s": newest["age_s"], "line": shown["text"], "window_s": window_s,
                "nvidia_class": klass, "fatal_by": fatal_by, "source": node.kernel_log.source or node.source}
    if fatal_by is None:
        said = (f"{klass} in NVIDIA's Fabric Manager guide" if klass else "not in NVIDIA's SXid catalogue") + (
            ", logged Non-fatal" if NON_FATAL in words else ", not logged Fatal")
        return Finding(CHECK, WARN, what, None, None, None, evidence,
                       f"{said}: shown, the node keeps working; logged {newest['age_s']:.0f} s before the check: "
                       f"{shown['text']}")
    why = {"catalogue": f"{klass} in NVIDIA's Fabric Manager guide",
           "line": "the driver logged it Fatal",
           "recovery": "NVIDIA's recovery restarts or resets (traffic through the switch stalls)",
           "unclassed": "not in NVIDIA's SXid catalogue and not logged Non-fatal (the driver logs its fatal host "
                        "errors, such as 10007 IO failure, with no severity word): taken as fatal"}[fatal_by]
    return Finding(CHECK, DRAIN, what, None, None, RESET, evidence,
                   f"{why}: reset the NVSwitches and GPUs (or reboot the node; NVIDIA: restart the host to reset "
                   f"the fabric), then check the links (nvidia-smi nvlink -s); logged {newest['age_s']:.0f} s "
                   f"before the check: {shown['text']}")
