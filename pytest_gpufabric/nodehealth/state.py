"""The node's health state: the drains `gpufabric health` remembers between runs (health-state.json in the state
folder, $GPUFABRIC_STATE_DIR, default /var/lib/gpufabric; written atomically, under a lock, by root).

A run's findings are checked against it (``reconcile``):

- every DRAIN finding is held: its key (check, Xid code, board serial; an SXid's code and switch address), the
  tier that saw it (passive < quick), the boot id and the time it was first seen;
- a held drain the run no longer finds is lifted only when the run is of its tier or a deeper one (a passive run
  does not run the GEMM that found wrong elements), read the node (nothing about the check was unknown), and, for a
  finding whose remedy needs the node down or a hand on it (reset or reboot, reseat or recable, return to the vendor)
  and for every Xid and SXid, only once a readable boot id differs from the readable one it was last seen under: an
  Xid that left the window is not a reset; a drain seen while the boot id was unreadable is lifted only by ``--clear``;
- a held drain not lifted drains the run again, with its first line as it was first seen;
- an operator's ``--clear CHECK|all --by NAME`` lifts held drains and is recorded; Xid and SXid lines logged before
  it are not judged again (the counters are: a remap still pending drains again, the fault is still there), within
  the boot it was made in and only while the check's clock is not behind it (a clock stepped back orders nothing).

The boot id is the kernel's (/proc/sys/kernel/random/boot_id). $GPUFABRIC_BOOT_ID_FILE (tests simulating reboots) is
read by replays and clears only, and only as a well-formed UUID that reads the same twice.

A state file that cannot be read, a symlink, or another node's (none of the boards it last saw answer here) is never
replaced: the run is UNKNOWN naming it (StateUnreadable). A deleted state file cannot be told from a new node:
deleting it is an operator's act, as ``--clear all`` is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..remedy_classes import RESEAT, RESET, RMA
from .finding import DRAIN, UNKNOWN, Finding
from .output import write_atomically

STATE_FILE, LOCK_FILE = "health-state.json", ".health-state.lock"
FORMAT = "gpufabric-health-state/1"
TIERS = {"passive": 0, "quick": 1}
#: remedies that take the node down or a hand on it: lifted only after evidence of a reboot (a new boot id)
NEEDS_REBOOT = (RESET, RESEAT, RMA)
BOOT_ID_FILE, BOOT_ID_ENV = "/proc/sys/kernel/random/boot_id", "GPUFABRIC_BOOT_ID_FILE"
UUID_FORM = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: checks judged from kernel log lines: lifted only after a reboot, lines logged before a clear not judged again,
#: held while the kernel log could not be read (passive.py's "xid" unknown says so for them all)
KERNEL_LOG_CHECKS = ("xid", "sxid")
#: what a held kernel-log drain keeps of its finding's evidence (its code; an SXid's switch), for its reason
HELD_EVIDENCE = {"xid": ("xid",), "sxid": ("sxid", "switch", "pci")}
#: cleared entries kept (the newest), so the file stays small over years
CLEARED_KEPT = 200


class StateUnreadable(Exception):
    """The state file exists and is not one: never silently reset (the drains it holds would be forgotten)."""


def boot_id(env: dict[str, str] | None = None, *, replay: bool = False) -> str | None:
    """This boot's id, None where unreadable: the kernel's. Only a replay (tests simulating reboots) reads the file
    $GPUFABRIC_BOOT_ID_FILE names instead, and only a well-formed UUID that reads the same twice (a source that
    changes between reads, such as /proc/sys/kernel/random/uuid, would fake a reboot on every run): else None."""
    env = os.environ if env is None else env
    override = env.get(BOOT_ID_ENV) if replay else None
    first = _read_boot_id(override or BOOT_ID_FILE)
    if not override or first is None:
        return first
    return first if UUID_FORM.fullmatch(first) and _read_boot_id(override) == first else None


def _read_boot_id(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def ignored_boot_id_override(env: dict[str, str] | None = None, *, replay: bool = False) -> str | None:
    """The note a live check gives when $GPUFABRIC_BOOT_ID_FILE is set (it reads the kernel's boot id), else None."""
    env = os.environ if env is None else env
    if replay or not env.get(BOOT_ID_ENV):
        return None
    return (f"{BOOT_ID_ENV}={env[BOOT_ID_ENV]} ignored: a live check reads the kernel's boot id ({BOOT_ID_FILE}); "
            "the variable is for replays (tests)")


def drain_key(finding: Finding) -> str:
    """``xid:79@1653724049829``, ``quick-gemm@1653824016216``, ``gpu-count@node``: the check (an Xid's code with
    it) and the board by serial (by index where it has none); ``sxid:20034@0000:a9:00.0``: an SXid's code and its
    NVSwitch by PCI address."""
    check = finding.check
    if check == "xid" and isinstance(finding.evidence.get("xid"), int):
        check = f"xid:{finding.evidence['xid']}"
    if check == "sxid" and isinstance(finding.evidence.get("sxid"), int):  # the switch by its PCI address
        return f"sxid:{finding.evidence['sxid']}@{finding.evidence.get('pci')}"
    board = finding.serial or (f"GPU{finding.gpu}" if finding.gpu is not None else "node")
    return f"{check}@{board}"


def needs_reboot(check: str, remedy: str | None) -> bool:
    """Whether a drain is lifted only after a reboot: its remedy takes the node down, or it is an Xid or SXid (a
    line that left the window says nothing of its fault)."""
    return remedy in NEEDS_REBOOT or check in KERNEL_LOG_CHECKS


def tier_of(finding: Finding) -> str:
    return "quick" if finding.check.startswith("quick-") else "passive"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


@dataclass
class HealthState:
    path: Path
    drains: dict[str, dict] = field(default_factory=dict)
    cleared: list[dict] = field(default_factory=list)
    last_check: dict | None = None

    def known_gpus(self) -> list[dict]:
        """The boards the last run that read any saw: index, uuid, pci_bus_id, serial."""
        gpus = (self.last_check or {}).get("gpus") if isinstance(self.last_check, dict) else None
        return [g for g in gpus if isinstance(g, dict) and isinstance(g.get("index"), int)] \
            if isinstance(gpus, list) else []

    def to_dict(self) -> dict:
        return {"format": FORMAT, "drains": [self.drains[k] for k in sorted(self.drains)],
                "cleared": self.cleared[-CLEARED_KEPT:], "last_check": self.last_check}

    def save(self) -> None:
        write_atomically(self.path, json.dumps(self.to_dict(), indent=1) + "\n")


def load_state(directory: Path) -> HealthState:
    """The state in ``directory`` (empty where there is no file yet); StateUnreadable for a file that is not one."""
    path = Path(directory) / STATE_FILE
    if path.is_symlink():  # another node's file linked in, or one outside the root-owned folder
        raise StateUnreadable(f"{path}: a symlink (to {os.readlink(path)}), not this node's state file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return HealthState(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise StateUnreadable(f"{path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateUnreadable(f"{path}: not JSON ({exc})") from None
    drains = data.get("drains") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(drains, list) \
            or not all(isinstance(d, dict) and isinstance(d.get("key"), str) and d.get("tier") in TIERS
                       and isinstance(d.get("check"), str) for d in drains) \
            or not isinstance(data.get("cleared", []), list):
        raise StateUnreadable(f"{path}: not a {FORMAT} file (a drains list of keyed entries)")
    return HealthState(path, {d["key"]: d for d in drains}, list(data.get("cleared") or []), data.get("last_check"))


def refuse_another_node(state: HealthState, gpus: list[dict]) -> None:
    """StateUnreadable where none of the boards the state knows (its last check's and its drains' serials) answers
    in this run: another node's state file, whose drains and clears are not this node's."""
    recorded = {g.get("serial") for g in state.known_gpus()} | {d.get("serial") for d in state.drains.values()}
    recorded = {s for s in recorded if isinstance(s, str) and s}
    present = {g.get("serial") for g in gpus if isinstance(g.get("serial"), str) and g.get("serial")}
    if recorded and present and not recorded & present:
        raise StateUnreadable(f"{state.path}: another node's state (boards {', '.join(sorted(recorded))}; this "
                              f"node's: {', '.join(sorted(present))})")


@contextlib.contextmanager
def locked(directory: Path):
    """Hold the state folder's lock (a check between jobs and the epilog's may run at once)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _unverified(entry: dict, findings: list[Finding], tier: str, node_read: bool, quick_skipped: set[int]) \
        -> str | None:
    """Why a held drain the run did not find is not shown gone (None: it is)."""
    if not node_read:
        return "the node could not be read"
    if TIERS[tier] < TIERS[entry["tier"]]:
        return f"a {entry['tier']} tier run verifies it (this was a {tier} run)"
    if entry["tier"] == "quick" and entry.get("gpu") in quick_skipped:
        return f"the quick tier skipped GPU{entry['gpu']} (held by another job, or not the job's)"
    read_by = ("xid",) if entry["check"] in KERNEL_LOG_CHECKS else ()  # the kernel log's one unknown
    if any(f.severity == UNKNOWN and f.check in (entry["check"], *read_by) and f.gpu in (None, entry.get("gpu"))
           for f in findings):
        return f"{entry['check']} could not be read"
    return None


def _no_reboot(recorded: str | None, boot: str | None) -> str | None:
    """Why no reboot is shown since a drain was seen under boot id ``recorded`` (None: one is)."""
    if recorded is None:
        return "the boot id was not readable when it was seen: no reboot can be shown since"
    if boot is None:
        return "no reset or reboot can be shown (the boot id is not readable)"
    return "no reset or reboot since it was seen (boot id unchanged)" if boot == recorded else None


def _logged_before(logged_s: float, clear: dict, now: float, boot: str | None) -> bool:
    """Whether a kernel line logged at ``logged_s`` (this check's clock) is shown to predate the operator's clear.
    Not where the boot changed since the clear (this boot's kernel log holds only lines logged after it), nor where
    the clear is dated after this check's clock (the clock stepped back: times no longer order the lines)."""
    at = clear.get("at_s")
    if not isinstance(at, (int, float)) or at > now:
        return False
    if boot is not None and clear.get("boot_id") is not None and clear["boot_id"] != boot:
        return False
    return logged_s <= at


def reconcile(state: HealthState, findings: list[Finding], *, tier: str, node_read: bool, now: float,
              boot: str | None, gpus: list[dict] | None = None, quick_skipped: set[int] | None = None) \
        -> tuple[list[Finding], list[str]]:
    """Hold, keep or lift the drains (the module says how): the findings with the held drains added, and notes.
    ``gpus``: the boards the run read (kept as the node's last known, for the metrics of a run that reads none);
    ``quick_skipped``: the GPUs the quick tier did not run on (their quick drains are not verified gone)."""
    notes: list[str] = []
    found: dict[str, Finding] = {}
    kept: list[Finding] = []
    for finding in findings:
        if finding.severity != DRAIN:
            kept.append(finding)
            continue
        key = drain_key(finding)
        clear = next((c for c in reversed(state.cleared) if c.get("key") == key), None)
        age = finding.evidence.get("age_s") if finding.check in KERNEL_LOG_CHECKS else None
        if clear is not None and isinstance(age, (int, float)) and _logged_before(now - age, clear, now, boot):
            notes.append(f"{key}: its newest line was logged before {clear.get('by')} cleared it "
                         f"({clear.get('at')}): not judged again")
            continue
        kept.append(finding)
        found[key] = finding
    for key, finding in found.items():
        entry = state.drains.get(key)
        if entry is None:
            state.drains[key] = entry = {
                "key": key, "check": finding.check, "tier": tier_of(finding), "gpu": finding.gpu,
                "serial": finding.serial, "what": finding.what, "remedy": finding.remedy, "boot_id": boot,
                "first_seen": _iso(now), "first_seen_s": now}
            for code in HELD_EVIDENCE.get(finding.check, ()):
                if code in finding.evidence:
                    entry[code] = finding.evidence[code]
        elif TIERS[tier_of(finding)] > TIERS[entry["tier"]]:
            entry["tier"] = tier_of(finding)
        if needs_reboot(finding.check, finding.remedy) and entry.get("boot_id") != boot:
            entry["boot_id"] = boot  # seen again after a reboot (or unreadably): the next one is what lifts it
        entry["last_seen"] = _iso(now)
    for key, entry in sorted(state.drains.items()):
        if key in found:
            continue
        why = _unverified(entry, findings, tier, node_read, quick_skipped or set())
        if why is None and needs_reboot(entry["check"], entry.get("remedy")):
            why = _no_reboot(entry.get("boot_id"), boot)
        if why is None:
            del state.drains[key]
            notes.append(f"{key}: drained since {entry['first_seen']}, now gone: lifted")
            continue
        kept.append(Finding(entry["check"], DRAIN, entry["what"], entry.get("gpu"), entry.get("serial"),
                            entry.get("remedy"), {"held": True, "key": key, "tier": entry["tier"],
                                                  "first_seen": entry["first_seen"], "boot_id": entry.get("boot_id"),
                                                  "kept_because": why,
                                                  **{k: entry[k] for k in HELD_EVIDENCE.get(entry["check"], ())
                                                     if k in entry}},
                            f"drained by the {entry['tier']} tier since {entry['first_seen']} and held: {why} "
                            f"(gpufabric health --clear {entry['check']} --by NAME lifts it; {state.path})"))
    known = [{k: g.get(k) for k in ("index", "uuid", "pci_bus_id", "serial")} for g in gpus or []]
    state.last_check = {"at": _iso(now), "tier": tier, "boot_id": boot, "gpus": known or state.known_gpus()}
    return kept, notes


def clear(state: HealthState, which: str, by: str, now: float, boot: str | None) -> list[str]:
    """Lift the held drains ``which`` names (a check, a key, or ``all``) by an operator; the keys lifted."""
    keys = [k for k, e in state.drains.items() if which in ("all", k, e["check"])]
    for key in keys:
        entry = state.drains.pop(key)
        state.cleared.append({"key": key, "check": entry["check"], "serial": entry.get("serial"),
                              "what": entry["what"], "tier": entry["tier"], "first_seen": entry["first_seen"],
                              "by": by, "at": _iso(now), "at_s": now, "boot_id": boot})
    return keys
