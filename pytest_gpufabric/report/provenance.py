"""Who, what and when for the cover: the operator, the evidence (live, or the replay of a bundle named by its name,
with the date the machine was measured) and the system's identity (DMI serials, hostname).

Each reads what the run already has and never fails the run: a value that cannot be read is None, said on the cover
as "not recorded".
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path

from .integrity import bundle_digest

#: the DMI fields the cover shows (/sys/class/dmi/id/<field>; the serials are readable by root only)
DMI_FIELDS = ("sys_vendor", "product_name", "product_serial", "board_vendor", "board_name", "board_serial",
              "chassis_vendor", "chassis_serial")
DMI_DIR = "sys/class/dmi/id"
#: what firmware writes where it has no serial to give
_PLACEHOLDERS = {"", "n/a", "na", "none", "not specified", "to be filled by o.e.m.", "default string",
                 "system serial number", "chassis serial number", "0123456789", "0"}


def operator(given: str | None) -> str | None:
    """The operator given (--gpu-operator, or its ini value), else the user the run ran as."""
    if given:
        return str(given)
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def bundle_name(replay: str | None, bundle_dir: Path | None) -> str | None:
    """A bundle by its name, never a local path: the folder's name, or the archive's without .tar.gz."""
    if not replay:
        return None
    name = Path(str(replay).rstrip("/")).name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name or (bundle_dir.name if bundle_dir else None)


def _manifest(bundle_dir: Path | None) -> dict:
    if bundle_dir is None:
        return {}
    from ..formats.strict import load_json_text

    try:
        data = load_json_text((bundle_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


#: where a live run reads which boot of which machine it measured
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def _first_line(paths: tuple[str, ...]) -> str | None:
    """The first line of the first of ``paths`` that can be read and is not empty; None where none is."""
    for path in paths:
        try:
            value = Path(path).read_text(encoding="ascii", errors="replace").strip().splitlines()
        except OSError:
            continue
        if value and value[0].strip():
            return value[0].strip()[:128]
    return None


def live_source() -> dict[str, str | None]:
    """This host and this boot: the kernel's host name, its boot id and the machine id where readable. The fleet
    holds a node to them: a live run says which boot of which machine it measured."""
    return {"host": os.uname().nodename or None, "boot_id": _first_line((BOOT_ID_PATH,)),
            "machine_id": _first_line(MACHINE_ID_PATHS)}


def evidence_record(fabric_session, document: dict) -> dict:
    """What the verdict rests on: ``kind`` live or replay; for a live run this host and boot (live_source); for a
    replay the bundle's name and sha256, and when and on which host it was recorded (its manifest.json);
    ``measured_at`` the date the machine was measured (a live run: when it started) and ``judged_at`` when this
    run judged it."""
    replay = getattr(fabric_session, "replay", None)
    bundle_dir = getattr(fabric_session, "bundle_dir", None)
    if not replay:
        return {"kind": "live", "bundle": None, "bundle_sha256": None, "measured_at": document.get("started_at"),
                "measured_on": (document.get("machine") or {}).get("hostname") or (document.get("run") or {}).get(
                    "host"), "recorded_by": None, "judged_at": document.get("finished_at"), **live_source()}
    manifest = _manifest(bundle_dir)
    try:
        digest = bundle_digest(bundle_dir) if bundle_dir is not None else None
    except OSError:
        digest = None
    return {"kind": "replay", "bundle": bundle_name(replay, bundle_dir), "bundle_sha256": digest,
            "measured_at": manifest.get("recorded_at"), "measured_on": manifest.get("hostname"),
            "recorded_by": manifest.get("gpufabric_version"), "judged_at": document.get("finished_at"),
            "host": None, "boot_id": None, "machine_id": None}


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value.lower() in _PLACEHOLDERS else value


def read_dmi(root: Path) -> dict[str, str | None]:
    """The DMI fields under ``root``/sys/class/dmi/id; None where absent, unreadable or a firmware placeholder."""
    out: dict[str, str | None] = {}
    for name in DMI_FIELDS:
        try:
            out[name] = _clean((root / DMI_DIR / name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            out[name] = None
    return out


def snapshot_dmi(target: Path, root: Path | str = "/") -> list[str]:
    """Copy the DMI fields the cover shows (vendor, product, the system, board and chassis serials) from
    ``root``/sys/class/dmi/id into the bundle's platform/ folder, where a replay's cover reads them. The serials are
    readable by root only: a snapshot run as another user records what it can. Returns the copied names."""
    source = Path(root) / DMI_DIR
    copied = []
    for name in DMI_FIELDS:
        try:
            data = (source / name).read_bytes()
        except OSError:
            continue
        destination = Path(target) / "platform" / DMI_DIR / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        copied.append(name)
    return copied


def _gpu_chassis_serials(bundle_dir: Path | None) -> list[str]:
    """The chassis serials nvidia-smi -q reports for the GPUs (HGX boards carry the system's), where not N/A."""
    if bundle_dir is None:
        return []
    try:
        text = (bundle_dir / "nvidia-smi-q.xml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for value in re.findall(r"<chassis_serial_number>([^<]*)</chassis_serial_number>", text):
        value = _clean(value)
        if value and value not in found:
            found.append(value)
    return found


def system_record(fabric_session, document: dict, root: str = "/") -> dict:
    """The system's identity: hostname, DMI vendor, product and serials (live: this machine's; replay: the
    bundle's copy of /sys/class/dmi/id where it has one) and the chassis serial NVIDIA's tools report."""
    replay = getattr(fabric_session, "replay", None)
    bundle_dir = getattr(fabric_session, "bundle_dir", None)
    if replay:
        base = bundle_dir / "platform" if bundle_dir is not None else None
        dmi = read_dmi(base) if base is not None and (base / DMI_DIR).is_dir() else dict.fromkeys(DMI_FIELDS)
        dmi_source = "the bundle's platform/sys/class/dmi/id" if any(dmi.values()) else None
    else:
        dmi = read_dmi(Path(root))
        dmi_source = "/sys/class/dmi/id" if any(dmi.values()) else None
    machine = document.get("machine") or {}
    return {"hostname": machine.get("hostname") or (None if replay else os.uname().nodename),
            "dmi": dmi, "dmi_source": dmi_source, "gpu_chassis_serials": _gpu_chassis_serials(bundle_dir)}


def display_path(path: str | None, base: Path | None = None) -> str | None:
    """A path as the cover may show it: relative to ``base`` (where pytest was started) where it lies below it,
    else the file's name; never a local absolute path."""
    if not path:
        return path
    candidate = Path(path)
    if not candidate.is_absolute():
        return candidate.as_posix()
    if base is not None:
        try:
            return candidate.resolve().relative_to(Path(base).resolve()).as_posix()
        except ValueError:
            pass
    return candidate.name
