"""The state the machine arrives in, judged by the acceptance with the health check's own reader (record.py) and
its own checks and limits (passive.py): a machine `gpufabric health` drains is never ACCEPTED.

Two kinds of promise (catalogue.py): ``gpu-health[GPUi]`` per GPU (uncorrectable ECC errors since the driver loaded,
row remapping failed or pending, page retirement pending, retired pages, the NVSwitch fabric registration, the
driver's recovery action, a GPU off the bus) and ``xid-events`` for the machine (an Xid in the kernel log that
drains a node). A live run reads NVML and /dev/kmsg once (and writes health.json to the report folder, so that it
replays the same); a replay reads the bundle's health.json, else the counters its nvml.json and nvidia-smi-q.xml
recorded (derive.py). What no recording holds leaves its promise not checked, saying what is missing.

A record's GPU is bound to the machine's by UUID and serial, never by its place in the file: a record of another
board, or a board the record counts (``gpu_count``) but does not describe, leaves the promise not checked.
"""

from __future__ import annotations

from dataclasses import replace

from ..checks.result import CheckResult, failed, passed, unknown
from .arrival_record import ArrivalRecord
from .finding import DRAIN, UNKNOWN, WARN, Finding
from .model import Baseline
from .passive import DEFAULT_XID_WINDOW_S, _Checker
from .record import GpuHealthRecord, NodeHealthRecord

GPU_HEALTH, XID_EVENTS = "gpu-health", "xid-events"
#: the passive checks (passive._Checker's methods) a GPU's arrival state is judged by, and the findings of theirs it
#: keeps (ecc-mode is a promise of its own; the GPU count is gpu-count's)
_GPU_CHECKS = ("gpus_present", "ecc", "memory_repair", "fabric", "recovery_action", "clock_events", "temperature")
_GPU_FINDINGS = frozenset({"gpu-lost", "gpu-handle", "ecc-uncorrected", "remapped-rows-failure",
                           "remapped-rows-pending", "retired-pages-pending", "retired-pages", "fabric",
                           "recovery-action", "clock-events", "temperature"})
EXPECTED_GPU = ("no uncorrectable ECC error since the driver loaded, no row remapping failed or pending, no page "
                "retirement pending, registered with the NVSwitch fabric where there is one, no recovery action asked, "
                "idle clocks not held down, below its slowdown temperature")
EXPECTED_XIDS = f"no Xid that drains a node in the kernel log's last {DEFAULT_XID_WINDOW_S:g} s"


def _baseline(profile) -> Baseline:
    return Baseline(profile, "the acceptance's profile")


def _bound(node: NodeHealthRecord, gpu) -> tuple[GpuHealthRecord | None, str | None]:
    """The record's GPU that is this machine's ``gpu`` (by UUID and serial), or why there is none."""
    where, label = node.source, gpu.label
    board = f"{label} (serial {gpu.serial})" if gpu.serial else label
    if not gpu.serial and not gpu.uuid:
        return None, f"{board}: the machine's inventory names no serial or UUID for it, so no health record binds to it"
    same = [g for g in node.gpus if (gpu.uuid and g.uuid == gpu.uuid) or (gpu.serial and g.serial == gpu.serial)]
    if len(same) > 1:
        return None, f"{where} describes {board} {len(same)} times: its arrival state cannot be told"
    if same:
        found = same[0]
        for key in ("serial", "uuid"):
            mine, theirs = getattr(gpu, key), getattr(found, key)
            if mine and theirs and mine != theirs:
                return None, (f"{where}'s GPU{found.index} has {key} {theirs}, this machine's {board} {key} {mine}: "
                              "a record of another board shows nothing of this one")
        return found, None
    at_index = next((g for g in node.gpus if g.index == gpu.index), None)
    if at_index is not None and at_index.lost is not None and not at_index.serial and not at_index.uuid:
        return at_index, None  # NVML cannot name a board that fell off the bus: its index is all there is
    if at_index is not None:
        return None, (f"{where}'s GPU{at_index.index} is serial {at_index.serial or 'not recorded'}, this machine's "
                      f"{board}: a record of another board shows nothing of this one")
    if node.gpu_count is not None and gpu.index < node.gpu_count:
        return None, (f"{where} counts {node.gpu_count} GPUs (gpu_count) but describes {len(node.gpus)}: {board} is "
                      "not described, its arrival state is unknown")
    return None, f"{where} does not describe {board}: its arrival state is unknown"


def _split(findings: list[Finding]) -> tuple[list[Finding], list[Finding], list[Finding]]:
    return ([f for f in findings if f.severity == DRAIN], [f for f in findings if f.severity == UNKNOWN],
            [f for f in findings if f.severity == WARN])


def _found(node: NodeHealthRecord, findings: list[Finding], **more) -> dict:
    return {"source": node.source, **more, "findings": [f.to_dict() for f in findings]}


def check_gpu_health(profile, gpu, arrival: ArrivalRecord | None, nothing_recorded: str = "") -> CheckResult:
    """gpu-health[GPUi]: the GPU's arrival state by the health check's own checks; a drain fails it."""
    if arrival is None or arrival.node is None:
        return unknown(GPU_HEALTH, gpu.label, EXPECTED_GPU, arrival.why if arrival else nothing_recorded)
    node = arrival.node
    record, why = _bound(node, gpu)
    if record is None:
        return unknown(GPU_HEALTH, gpu.label, EXPECTED_GPU, why)
    checker = _Checker(replace(node, gpus=[record], gpu_count=1, pci_gpus=None, unreadable={}), _baseline(profile),
                       DEFAULT_XID_WINDOW_S)
    for name in _GPU_CHECKS:
        getattr(checker, name)()
    findings = [f for f in checker.findings if f.check in _GPU_FINDINGS]
    for finding in findings:
        finding.gpu, finding.serial = gpu.index, finding.serial or gpu.serial
    drains, unknowns, warns = _split(findings)
    board = findings[0].board if findings else (f"{gpu.label} (serial {gpu.serial})" if gpu.serial else gpu.label)
    found = _found(node, findings, serial=record.serial, uuid=record.uuid,
                   readings={k: v for k, v in record.values.items()
                             if k.startswith(("ecc_", "remapped_rows.", "retired_pages.", "fabric.", "recovery"))})
    derived = f" (a record DERIVED from {node.source})" if node.derived else ""
    if drains:
        return failed(GPU_HEALTH, gpu.label, EXPECTED_GPU, found,
                      f"{board}: {', '.join(f.what for f in drains)} in {node.source}: the health check drains this "
                      f"machine. {drains[0].detail}",
                      details=[f"{f.check}: {f.what}: {f.detail}" for f in drains + warns])
    if unknowns:
        return unknown(GPU_HEALTH, gpu.label, EXPECTED_GPU,
                       f"{board}: " + "; ".join(f.detail or f.what for f in unknowns))
    shown = f"; shown: {', '.join(f.what for f in warns)}" if warns else ""
    return passed(GPU_HEALTH, gpu.label, EXPECTED_GPU, found,
                  f"{board}: arrived healthy in {node.source}{derived}{shown}")


def check_xid_events(profile, arrival: ArrivalRecord | None, nothing_recorded: str = "", gpus=()) -> CheckResult:
    """xid-events: the kernel log's Xid lines by the health check's own table and window; a drain fails it. The log
    counts only where its record describes this machine's GPUs (``gpus``) by serial and UUID: another machine's
    health.json shows nothing of this one's kernel."""
    subject = "machine"
    if arrival is None or arrival.node is None:
        return unknown(XID_EVENTS, subject, EXPECTED_XIDS, arrival.why if arrival else nothing_recorded)
    node = arrival.node
    unbound = [why for gpu in gpus for found, why in [_bound(node, gpu)] if found is None]
    if unbound or not gpus:
        why = unbound[0] if unbound else "this machine's GPUs are not known"
        return unknown(XID_EVENTS, subject, EXPECTED_XIDS,
                       f"the kernel log in {node.source} is not bound to this machine ({why}): Xid events not judged")
    if node.kernel_log.error is not None:
        return unknown(XID_EVENTS, subject, EXPECTED_XIDS,
                       f"Xid events cannot be told from {node.source}: its kernel log is {node.kernel_log.error}; "
                       "gpufabric snapshot keeps the kernel log in health.json (read live from /dev/kmsg, as root)")
    checker = _Checker(node, _baseline(profile), DEFAULT_XID_WINDOW_S)
    checker.xids()
    drains, _, warns = _split(checker.findings)
    found = _found(node, checker.findings, xid_lines=len(node.kernel_log.xids), notes=checker.notes)
    if drains:
        return failed(XID_EVENTS, subject, EXPECTED_XIDS, found,
                      "; ".join(f"{f.board}: {f.what}" for f in drains) + f" in {node.source}: the health check "
                      f"drains this machine. {drains[0].detail}",
                      details=[f"{f.board}: {f.what}: {f.detail}" for f in drains + warns])
    shown = f"; shown: {', '.join(f'{f.board}: {f.what}' for f in warns)}" if warns else ""
    notes = f" ({'; '.join(checker.notes)})" if checker.notes else ""
    return passed(XID_EVENTS, subject, EXPECTED_XIDS, found,
                  f"no Xid that drains a node in {node.source}{shown}{notes}")
