"""One node of a fleet, as its own results say: its verdict, its failed checks, its inventory, its measurements.

A node is a folder holding ``gpufabric-results.json`` (what ``pytest --gpu-profile P --gpu-report-dir
reports/fleet/{host}`` wrote there); its name is the folder's name. Only what the fleet report needs is kept of
each document (a few kilobytes of a file that can hold megabytes of health timeline), so ten thousand nodes fit
in memory.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..catalogue import CHECK_HERE
from ..kinds import check_rule
from ..kinds.burn_in import BURN_IN_GPU
from ..remedy import remedies_by_class
from ..report.versions import NotJudgeable, judge_again
from .loader import EMBEDDED_PROFILE, FILE_INTEGRITY, FILE_SHA256, FILE_SIGNED, MAX_BYTES, Unreadable, load_results
from .source import source_of

__all__ = ["RESULTS_FILE", "Node", "find_node_dirs", "read_node", "read_nodes_ahead"]

RESULTS_FILE = "gpufabric-results.json"
_HTML_NAMES = ("acceptance.html", "report.html")

@dataclass(slots=True)  # slots: a node's record costs its fields, not a dict of them (100,000 nodes in memory)
class Node:
    """What the fleet report keeps of one node's results."""

    name: str
    directory: str
    verdict: str | None = None  # derived again from its checks (loader.py); None: no results, or unreadable ones
    reason: str = ""
    state: str = "reported"  # "reported", "never reported" (no results file), "unreadable" (error says why)
    schema_version: int | None = None
    profile: str | None = None
    profile_sha256: str | None = None  # the node's own profile, by content: the fleet judges by one profile only
    fleet_id: str | None = None
    host: str | None = None  # the hostname the node's run recorded (two folders of one host are named)
    promises: dict = field(default_factory=dict)  # passed / failed / not_checked / waived, as derived here
    waivers: list[str] = field(default_factory=list)  # the waivers that waived promises on this node
    failed: list[dict] = field(default_factory=list)  # {"check", "subject", "message"}
    remedies: dict = field(default_factory=dict)  # what to do next: class -> {"promises", "why"} (remedy.py)
    inventory: dict[str, str] = field(default_factory=dict)  # drift field -> value as text
    serials: list[str] = field(default_factory=list)
    metrics: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (check, subject, metric) -> value
    #: (check, metric) -> (unit, +1 where more is better, -1 where less is): as the check's limits say
    units: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    #: GPU subject ("GPU0") -> the temperature NVML says that board slows down at (the power-hold check records
    #: it); a GPU missing here: not known, never assumed
    slowdown_c: dict[str, float] = field(default_factory=dict)
    report: str | None = None  # the node's own HTML report, relative to its folder
    burn_in: dict | None = None  # per GPU: {"wrong_elements", "checks", "tflops"} from its burn-in verdicts
    error: str | None = None  # why the results could not be read
    file_sha256: str | None = None  # of the results file's bytes as read, with --require-signed (it checks
    # that they are the signed ones)
    signed: bool | None = None  # its results carry a signature that verifies; None: not read
    #: where its evidence came from (fleet/source.source_of): kind live (host, boot_id, machine_id) or replay
    #: (bundle, bundle_sha256); and why that does not show a live run of one boot (None where it does)
    source: dict = field(default_factory=dict)
    source_problem: str | None = None


#: what a fleet report writes into its OUT folder: a folder holding it is a report, never a node
REPORT_MARK = "fleet-results.json"


def find_node_dirs(paths: list[Path], exclude: list[Path] | None = None) -> tuple[list[Path], list[str]]:
    """(the node folders under the given paths, the folders that could not be listed, each with why). A path
    holding a results file is a node; else each folder directly below it (a folder holding nothing is kept: a
    node that started but never reported is named, not forgotten). A fleet report's own folder (``exclude``, or
    any folder holding a fleet-results.json) is never a node."""
    skip = {identity for p in exclude or [] if (identity := _folder_identity(p)) is not None}
    found: list[Path] = []
    unlisted: list[str] = []
    for path in paths:
        if not path.is_dir():
            raise ValueError(f"{path}: not a folder of node results")
        if (path / RESULTS_FILE).exists() or (path / RESULTS_FILE).is_symlink():
            found.append(path)
            continue
        try:
            children = sorted(path.iterdir())
        except OSError as exc:
            unlisted.append(f"{path}: {exc.strerror or exc}")
            continue
        for child in children:
            # one stat per folder: resolving each path would cost a stat per part of it, for ten thousand nodes
            identity = None if child.name.startswith(".") else _folder_identity(child)
            if identity is None or identity in skip:
                continue
            if (child / REPORT_MARK).exists():
                continue  # an earlier report written into the fleet's folder
            found.append(child)
    return found, unlisted


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a folder, through links: the same folder by whatever path it is named; None where
    ``path`` is no folder (or a link to none, or to itself)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


#: one object for each name and text that nodes share (the checks, GPUs and metrics they name, driver versions,
#: verdict reasons): a node's records then cost their numbers, and one pickled chunk of nodes holds each name once
_SHARED: dict = {}


def _shared(value):
    return _SHARED.setdefault(value, value)


def _text(value) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _joined(values) -> str | None:
    """One text for a node from its GPUs' values: the value, or the distinct values joined when GPUs differ."""
    distinct = sorted({str(v) for v in values if v is not None})
    return ", ".join(distinct) if distinct else None


def _inventory(document: dict) -> tuple[dict[str, str], list[str]]:
    machine = document.get("machine") or {}
    gpus = machine.get("gpus") or []
    fields = {
        "profile": (document.get("profile") or {}).get("name"),
        # the part of the acceptance the node's operator left out (the burn-in): nodes of another scope drift
        "scope": _scope(document.get("promised")),
        "driver": machine.get("driver_version"),
        "cuda": machine.get("cuda_driver_version"),
        "nccl": _joined((document.get("software") or {}).get("nccl") or []),
        "gpu_count": len(gpus) if gpus else None,
        "gpu_model": _joined(g.get("name") for g in gpus),
        "vbios": _joined(g.get("vbios_version") for g in gpus),
        "pcie": _joined(f"gen {(g.get('pcie') or {}).get('gen_max')} x{(g.get('pcie') or {}).get('width_max')}"
                        for g in gpus if g.get("pcie")),
        "nvlinks_per_gpu": _joined(g.get("nvlinks_active") for g in gpus),
        "nvlink_speed_gbps": _joined(g.get("nvlink_speed_gbps") for g in gpus),
    }
    serials = [str(g["serial"]) for g in gpus if g.get("serial") not in (None, "", "N/A")]
    return {k: _shared(text) for k, v in fields.items() if (text := _text(v)) is not None}, serials


def _scope(promised) -> str | None:
    """'whole acceptance', or what the run left out; None for results written before the scope was."""
    if not isinstance(promised, dict):
        return None
    return promised.get("scope") or "whole acceptance"


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


#: "GPU0 (serial 1654024032670)": the board's serial is the node's own; across the fleet the subject is "GPU0"
_SERIAL_SUFFIX = re.compile(r" \(serial [^)]*\)")


#: a unit as the fleet writes it (its pages and files use ASCII units)
_ASCII = {"µs": "us"}


def _metrics(checks: list[dict]) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str], tuple[str, int]]]:
    """(check, subject, metric) -> value for each figure a check's limits mark as compared across the fleet
    (checks/limits.py), and (check, metric) -> (unit, direction) for each."""
    out: dict[tuple[str, str, str], float] = {}
    units: dict[tuple[str, str], tuple[str, int]] = {}
    for check in checks:
        name, subject = str(check.get("name", "")), _SERIAL_SUFFIX.sub("", str(check.get("subject", "")))
        for limit in _limits(name, check):
            if limit.fleet and (number := _number(limit.value)) is not None:
                out[_shared((name, subject, limit.label))] = number
                unit = _ASCII.get(limit.unit, limit.unit) + (f" {limit.of}" if limit.of else "")
                units[_shared((name, limit.label))] = _shared((unit, limit.better))
    return out, _shared_dict(units)


def _limits(name: str, check: dict) -> list:
    """The limits a check record states, as kinds.record_limits reads them, its check's rule looked up once per
    check name (a node holds a hundred records of a dozen checks: the lookup was a tenth of a node's reading)."""
    rule = _RULES[name] if name in _RULES else _RULES.setdefault(name, check_rule(name))
    if rule is None or rule.limits is None:
        return []
    try:
        return rule.limits(check)
    except (ValueError, TypeError, KeyError, AttributeError):  # a record of a shape its reader cannot read
        return []


#: check name -> its rule among the shipped ones (kinds.check_rule; a fleet judges by the shipped rules only)
_RULES: dict = {}


def _shared_dict(value: dict) -> dict:
    """One dict for each content that nodes share (the units, the inventory and the promise counts of a fleet's
    nodes are alike): read it, never change it. A dict holding lists is its own."""
    try:
        return _SHARED.setdefault(("dict", *value.items()), value)
    except TypeError:  # a value that is not hashable
        return value


def _slowdowns(checks: list[dict]) -> dict[str, float]:
    """Each GPU's NVML slowdown temperature (nvmlDeviceGetTemperatureThreshold, SLOWDOWN), as the node's own
    power-hold check recorded it in ``found.thresholds_c``."""
    out = {}
    for check in checks:
        found = check.get("found")
        if isinstance(found, dict) and isinstance(found.get("thresholds_c"), dict):
            if (slowdown := _number(found["thresholds_c"].get("slowdown"))) is not None:
                out[_SERIAL_SUFFIX.sub("", str(check.get("subject", "")))] = slowdown
    return out


def _burn_in(checks: list[dict]) -> dict | None:
    """The burn-in per GPU as its verdicts say (rate, checks, wrong elements): a rejected board shows here first."""
    gpus = {}
    for check in checks:
        found = check.get("found")
        if check.get("name") == BURN_IN_GPU.name and isinstance(found, dict):
            subject = _SERIAL_SUFFIX.sub("", str(check.get("subject", "")))
            gpus[subject] = {"wrong_elements": int(found.get("errors_self") or 0) + int(found.get("errors_cross") or 0),
                             "checks": found.get("checks"), "tflops": found.get("tflops")}
    return gpus or None


def read_node(directory: Path, max_bytes: int = MAX_BYTES, digest: bool = False) -> Node:
    """The node in ``directory``. Its verdict is derived again from its own tests and checks (loader.py), never
    taken from the file's summary; a node whose results are missing or not a whole, valid results document comes
    back with ``verdict`` None and ``error`` saying why (the fleet then names it, and goes on with the others).
    ``digest``: keep the sha256 of the file's bytes (``file_sha256``, for --require-signed)."""
    node = Node(name=directory.name, directory=str(directory))
    path = directory / RESULTS_FILE
    try:
        document = load_results(path, max_bytes, digest)
    except FileNotFoundError:
        node.state, node.error = "never reported", f"no {RESULTS_FILE} in {directory}: the node never reported"
        return node
    except Unreadable as exc:
        node.state, node.error = "unreadable", f"unreadable: {exc}"
        return node
    node.state = "reported"
    node.file_sha256 = document.get(FILE_SHA256)
    node.signed = bool(document.get(FILE_SIGNED))
    node.schema_version = document["schema_version"]
    checks = document["checks"]
    try:
        node.verdict, node.reason, node.promises = judge_again(document, document.get(EMBEDDED_PROFILE, CHECK_HERE))
    except NotJudgeable as exc:  # never accepted; a failed check is a failure under every format's rules
        failed = any(c["verdict"] == "failed" for c in checks)
        node.verdict = "REJECTED" if failed else "INCOMPLETE"
        node.reason = f"not judged again: {exc}" + ("; a check failed" if failed else "")
    claimed = (document.get("summary") or {}).get("verdict")
    if claimed != node.verdict:
        node.reason += f" (its own summary says {claimed or 'no verdict'}: not trusted)"
    broken = document.get(FILE_INTEGRITY) or []
    if broken:  # changed since it was written or signed, as `gpufabric verify` finds: nothing in it is the run's
        node.verdict = node.verdict if node.verdict == "REJECTED" else "INCOMPLETE"
        node.reason = f"its results do not verify: {'; '.join(broken)}; {node.reason}"
    node.source, node.source_problem = source_of(document)
    node.reason = _shared(node.reason)
    profile = document.get("profile") or {}
    node.profile, node.profile_sha256 = _shared(_text(profile.get("name"))), _shared(_text(profile.get("sha256")))
    run = document.get("run") or {}
    node.fleet_id, node.host = _text(run.get("fleet_id")), _text(run.get("host"))
    node.failed = [{"check": c["name"], "subject": c["subject"], "message": c["message"][:2000]}
                   for c in checks if c["verdict"] == "failed"]
    node.remedies = remedies_by_class(document.get("promises") or [])
    node.inventory, node.serials = _inventory(document)
    node.inventory, node.promises = _shared_dict(node.inventory), _shared_dict(node.promises)
    node.metrics, node.units = _metrics(checks)
    node.burn_in = _burn_in(checks)
    node.slowdown_c = _slowdowns(checks)
    node.waivers = [f"{w['promise']}: {w['reason']} ({w['source']})" for w in document.get("waivers") or []
                    if w.get("matched")]
    node.report = node_report(directory)
    return node


#: node files whose reading a reader asks the kernel to start ahead of the one it reads: a fleet read off a disk or
#: a shared file system goes at the speed of the reads in flight, one per reader without it
READ_AHEAD = 8


def read_nodes_ahead(directories: list[Path], max_bytes: int = MAX_BYTES, digest: bool = False) -> list[Node]:
    """read_node of each folder in turn, the files of the next READ_AHEAD folders fetched meanwhile (each file is
    still read once, by read_node)."""
    for directory in directories[:READ_AHEAD]:
        _fetch_ahead(directory / RESULTS_FILE, max_bytes)
    nodes = []
    for i, directory in enumerate(directories):
        if i + READ_AHEAD < len(directories):
            _fetch_ahead(directories[i + READ_AHEAD] / RESULTS_FILE, max_bytes)
        nodes.append(read_node(directory, max_bytes, digest))
    return nodes


def _fetch_ahead(path: Path, max_bytes: int) -> None:
    """Ask the kernel to read ``path`` into its page cache in the background (posix_fadvise WILLNEED), only where it
    is a regular file read_node would read whole (no FIFO waited on, no sparse gigabytes fetched); anything else is
    left to read_node, which says what is wrong with it."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size <= max_bytes:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def node_report(directory: Path) -> str | None:
    """The node's own HTML report, by its name in ``directory``, or None."""
    return next((name for name in _HTML_NAMES if (directory / name).is_file()), None)
