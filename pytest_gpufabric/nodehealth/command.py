"""`gpufabric health`: the check a scheduler runs between jobs. Exit 0 healthy, 1 drain, 6 could not tell; 2 a usage
error (no profile, a bundle that is not one, bad options), as every gpufabric command says bad input.

The first line printed is the verdict and, for a drain, the reason (output.py); the findings follow. ``--json``
prints the result document instead (``--json FILE`` writes it there and prints the text), ``--prom FILE`` writes
the node_exporter textfile; both files are replaced atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from ..errors import GpuFabricError, HardwareUnavailable
from ..formats.typed import Unreadable
from ..option_values import finite_number, whole_number
from ..remedy_classes import RERUN, RESET, SOFTWARE
from . import output
from .baseline import (
    ACCEPTED_ENV,
    DEFAULT_STATE_DIR,
    PROFILE_ENV,
    STATE_DIR_ENV,
    NoBaseline,
    resolve_baseline,
    state_dir,
)
from .counter_history import load_history, save_history
from .counters import rate_findings
from .finding import DRAIN_VERDICT, EXIT_CODES, UNKNOWN, Finding, verdict_of
from .metrics import prom_text
from .passive import DEFAULT_XID_WINDOW_S, passive_findings
from .record import HEALTH_FILE, NodeHealthRecord, health_from_record, read_live
from .state import (
    StateUnreadable,
    boot_id,
    clear,
    ignored_boot_id_override,
    load_state,
    locked,
    reconcile,
    refuse_another_node,
)

#: the root the live check reads sysfs and procfs below (the PCI GPUs, RDMA ports, peer-memory module; default /:
#: tests point it at a tree of their own)
SYSFS_ROOT_ENV = "GPUFABRIC_SYSFS_ROOT"
#: tests: seconds the reader sleeps before reading (a hung NVML call, planted)
TEST_READ_DELAY_ENV = "GPUFABRIC_TEST_READ_DELAY_S"
#: the shipped Slurm and node-problem-detector checks' interval
CHECK_INTERVAL_S = 300.0
#: the shortest --xid-window: three intervals, so an Xid logged just after one check is still judged by the next
#: even when that one starts or reads late (a window of one interval has no margin; 0 would judge none)
MIN_XID_WINDOW_S = 3 * CHECK_INTERVAL_S
#: below slurmd's HealthCheckProgram kill (60 s), the interpreter's start included
DEFAULT_DEADLINE_S = 50.0
HELP = "check this node between jobs: DRAIN (exit 1) with a reason a scheduler can use, or HEALTHY (0)"


def add_health_parser(sub, func) -> None:
    """`gpufabric health`'s options, on the gpufabric subcommand parser (cli/health.py)."""
    health = sub.add_parser(
        "health", help=HELP,
        description="The passive tier (default: NVML and the kernel log, no workload, nothing set) or --quick (also a "
                    "few seconds of GEMM, HBM bandwidth and a memory pattern on every GPU at once) against the node's "
                    "profile. The first line is the verdict and, for a drain, the reason (at most 128 characters: the "
                    "board by index and serial, what, and the remedy class). Exit 0 healthy, 1 drain, 6 could not "
                    "tell (a reading it needs could not be had: never healthy), 2 a usage error. docs/health.md")
    health.add_argument("--profile", metavar="NAME|FILE", help=f"the profile to hold the node to (default: "
                        f"${PROFILE_ENV}, else the one the accepted results name)")
    health.add_argument("--accepted", metavar="RESULTS.json", help="the results the node was accepted with: its "
                        f"boards by serial, its profile (default: ${ACCEPTED_ENV}, else "
                        "$GPUFABRIC_STATE_DIR/gpufabric-results.json, /var/lib/gpufabric/ by default, where it exists; "
                        "never the current folder); only an ACCEPTED run counts")
    health.add_argument("--replay", metavar="BUNDLE", help="judge a bundle's health.json (gpufabric snapshot) instead "
                        "of this machine")
    health.add_argument("--quick", action="store_true", help="also run the quick workloads (needs torch; live only)")
    health.add_argument("--json", nargs="?", const="-", metavar="FILE", help="the result as JSON: on standard output "
                        "instead of the text, or into FILE (replaced atomically) beside the text")
    health.add_argument("--prom", metavar="DIR|FILE", help="also write the node_exporter textfile (replaced "
                        "atomically, also on errors): into a folder, one file per tier (gpufabric-health-passive.prom, "
                        "gpufabric-health-quick.prom), e.g. /var/lib/node_exporter/textfile/; or the FILE named")
    health.add_argument("--xid-window", type=finite_number(MIN_XID_WINDOW_S, 10 * 365 * 86400),
                        default=DEFAULT_XID_WINDOW_S, metavar="SECONDS",
                        help="Xid and NVSwitch SXid lines younger than this are judged (default %(default)g, at "
                             f"least {MIN_XID_WINDOW_S:g}: three of the shipped checks' {CHECK_INTERVAL_S:g} s "
                             "interval, so no line ages out between two checks that run late); older ones stay in "
                             "the kernel log after the reset that cleared them")
    health.add_argument("--deadline", type=finite_number(0, 86400, above_low=True), default=DEFAULT_DEADLINE_S,
                        metavar="SECONDS", help="say UNKNOWN 'could not finish in N s' (exit 6) when the reads and "
                        "workloads have not returned by then (default %(default)g: inside slurmd's 60 s kill of a "
                        "HealthCheckProgram; give the epilog's quick tier more)")
    health.add_argument("--reason", action="store_true",
                        help="print the scheduler's drain reason first (the board and fault in its first 20 "
                             "characters, as sinfo -R shows them: 'gpufabric GPU3 xid79: ...'), then the verdict line")
    health.add_argument("--state-dir", metavar="DIR",
                        help="the folder of the node's health state (health-state.json: the drains remembered "
                             f"between runs; default ${STATE_DIR_ENV}, else {DEFAULT_STATE_DIR}); a --replay keeps "
                             "no state unless given one")
    health.add_argument("--clear", metavar="CHECK|all", help="lift the held drains of CHECK (a check such as xid or "
                        "quick-gemm, or a drain's key) or all of them, recorded with --by; runs no check")
    health.add_argument("--by", metavar="NAME", help="with --clear: who lifts the drain (recorded in the state)")
    health.add_argument("--now", type=finite_number(0, 1e11), metavar="UNIX_SECONDS",
                        help="with --replay: judge as at this time (tests, replays): the state's times, and the "
                             "record's Xid lines age by the time since it was recorded; with --clear, the clear's "
                             "time (never later than the real clock); refused on a live check")
    health.add_argument("--plant-fault", type=whole_number(0, 4095), metavar="CUDA_INDEX",
                        help="with --quick: one wrong GEMM element and one flipped memory bit on this device, to prove "
                             "the check catches them (tests, demonstrations)")
    health.set_defaults(func=func)


def _read_node(replay: str | None) -> tuple[NodeHealthRecord | None, Finding | None]:
    """The health record (live, or the bundle's: its health.json, else what its nvml.json and nvidia-smi-q.xml
    recorded, as the acceptance reads it: arrival_record.py), or the finding that says why there is none."""
    if replay:
        from ..fabric.bundle import bundle_directory
        from .arrival_record import read_arrival_bundle

        directory = bundle_directory(replay)  # a bundle that is not one: a usage error (BundleError)
        arrival = read_arrival_bundle(directory)
        if arrival is None:
            return None, Finding("health-record", UNKNOWN, "no health.json in the bundle", remedy=RERUN,
                                 evidence={"bundle": replay},
                                 detail=f"{directory / HEALTH_FILE} is missing, and no nvml.json with "
                                        "nvidia-smi-q.xml to read the counters from: record the bundle with gpufabric "
                                        "snapshot (it writes health.json)")
        if arrival.node is None:
            path = directory / HEALTH_FILE
            what = "health.json not readable" if path.is_file() else "health record not readable"
            return None, Finding("health-record", UNKNOWN, what, remedy=RERUN,
                                 evidence={"file": str(path)} if path.is_file() else {"bundle": replay},
                                 detail=str(arrival.why))
        from ..fabric.bundle import load_rdma_devices

        arrival.node.rdma, arrival.node.rdma_source = load_rdma_devices(directory), str(directory)
        return arrival.node, None
    try:
        from ..fabric.rdma import SYSFS_IB, discover_rdma

        root = os.environ.get(SYSFS_ROOT_ENV) or "/"
        node = health_from_record(json.loads(json.dumps(read_live(sysfs_root=root))), "NVML")
        node.rdma, node.rdma_source = discover_rdma(root), SYSFS_IB
        return node, None
    except HardwareUnavailable as exc:
        return None, Finding("nvml", UNKNOWN, "NVML not available", remedy=SOFTWARE, detail=exc.why,
                             evidence={"why": exc.why})
    except Unreadable as exc:  # NVML answered something the typed reading refuses: said, not judged
        return None, Finding("health-record", UNKNOWN, "NVML record not readable", remedy=RERUN, detail=str(exc))


def live_peer_memory(root: str) -> tuple[tuple[bool | None, str], str]:
    """Whether a peer-memory module is loaded below ``root`` (the machine's /, or a test's tree), as the acceptance
    judges it (fabric/platform_state.peer_memory_loaded), and where it was read."""
    from ..fabric.platform import read_peer_memory
    from ..fabric.platform_state import peer_memory_loaded

    platform = read_peer_memory(root)
    return peer_memory_loaded(platform), f"{platform.source}: /proc/modules, /sys/module"


def _peer_memory(node: NodeHealthRecord, replay: str | None) -> None:
    """Read the peer-memory module into the record (a node whose profile promises RDMA devices: peer_memory.py)."""
    if replay:
        from ..fabric.bundle import bundle_directory

        node.peer_memory, node.peer_memory_source = _replayed_peer_memory(bundle_directory(replay))
    else:
        node.peer_memory, node.peer_memory_source = live_peer_memory(os.environ.get(SYSFS_ROOT_ENV) or "/")


def _replayed_peer_memory(directory: Path) -> tuple[tuple[bool | None, str] | None, str | None]:
    """What a bundle recorded of the peer-memory module (its platform.json, else its platform/ copy read again, else
    lsmod.txt): None where it recorded neither the module list nor the files."""
    from ..fabric.platform import load_platform
    from ..fabric.platform_state import peer_memory_loaded

    try:
        platform = load_platform(directory)
    except GpuFabricError as exc:  # a platform record that is not one: said for this check alone
        return (None, str(exc)), str(directory)
    if platform is None or not any(r.known or r.unreadable for r in (platform.modules, platform.peer_memory_files)):
        return None, None
    return peer_memory_loaded(platform), platform.source


def _state_folder(args: argparse.Namespace) -> Path | None:
    """Where the node's state is kept: --state-dir, else (live) $GPUFABRIC_STATE_DIR or its default; a replay keeps
    none unless --state-dir names one (a bundle is not this node)."""
    if args.state_dir:
        return Path(args.state_dir)
    return None if args.replay else state_dir(dict(os.environ))


def _run_clear(args: argparse.Namespace, folder: Path | None, now: float) -> int:
    if folder is None:
        raise GpuFabricError("--clear with --replay: give --state-dir, the state to clear")
    if not args.by or not args.by.strip():
        raise GpuFabricError("--clear needs --by NAME: who lifts the drain is recorded")
    with locked(folder):
        try:
            state = load_state(folder)
        except StateUnreadable as exc:
            raise GpuFabricError(f"the health state cannot be read, nothing cleared: {exc}") from None
        # a clear covers the Xid lines logged before it: never a time past the real clock (a --now in the future
        # would hide the Xids of the days up to it); its boot id only narrows that (state.reconcile), so a test's
        # boot id file is honoured here as in a replay
        keys = clear(state, args.clear, args.by.strip(), min(now, time.time()), boot_id(replay=True))
        if not keys:
            held = ", ".join(sorted(state.drains)) or "none"
            raise GpuFabricError(f"--clear {args.clear}: no held drain of that check (held: {held})")
        state.save()
    print(f"gpufabric: cleared {', '.join(keys)} by {args.by.strip()}")
    return 0


def _on_cpu(profile) -> bool:
    return profile.burn_in.get("device") == "cpu"


def _aged(node: NodeHealthRecord, now: float) -> None:
    """A replayed record judged --now: its Xid and SXid lines are older by the time since it was recorded."""
    try:
        recorded = datetime.fromisoformat(str(node.recorded_at)).timestamp()
    except ValueError:
        return
    for line in node.kernel_log.xids + (node.kernel_log.sxids or []):
        line["age_s"] = round(line["age_s"] + max(now - recorded, 0.0), 3)


def _with_state(folder: Path, findings: list[Finding], tier: str, node_read: bool, now: float,
                gpus: list[dict], skipped: set[int], replay: bool) -> tuple[list[Finding], list[str], list[dict]]:
    """The run's findings with the drains the state holds (state.py), the state saved; a state that cannot be read
    or written is an unknown finding naming it, never silently reset. The third value: the node's last known GPUs."""
    try:
        with locked(folder):
            state = load_state(folder)
            refuse_another_node(state, gpus)
            findings, notes = reconcile(state, findings, tier=tier, node_read=node_read, now=now,
                                        boot=boot_id(replay=replay), gpus=gpus, quick_skipped=skipped)
            ignored = ignored_boot_id_override(replay=replay)
            state.save()
            return findings, notes + ([ignored] if ignored else []), state.known_gpus()
    except StateUnreadable as exc:
        return findings + [Finding("health-state", UNKNOWN, "health state not readable", remedy=SOFTWARE,
                                   evidence={"why": str(exc)},
                                   detail=f"{exc}: the drains it holds cannot be told; look at it, then move it "
                                          "aside (the next run starts a new one)")], [], []
    except OSError as exc:
        return findings + [Finding("health-state", UNKNOWN, "health state not writable", remedy=SOFTWARE,
                                   evidence={"why": str(exc)},
                                   detail=f"{folder}: {exc}: drains cannot be remembered between runs (run as root, "
                                          f"or set {STATE_DIR_ENV})")], [], []


def run_health(args: argparse.Namespace) -> int:
    """The check, within --deadline; its outputs (--json FILE, --prom) written whatever the exit, usage errors
    included."""
    now = args.now if args.now is not None else time.time()
    folder = _state_folder(args)
    if args.clear is not None:
        return _run_clear(args, folder, now)
    try:
        return _check(args, now, folder)
    except GpuFabricError as exc:
        _write_outputs(args, output.error_document(str(exc), "quick" if args.quick else "passive", now,
                                                   socket.gethostname(), args.replay), [])
        raise


def _check(args: argparse.Namespace, now: float, folder: Path | None) -> int:
    if args.by is not None:
        raise GpuFabricError("--by goes with --clear")
    if args.now is not None and not args.replay:
        raise GpuFabricError("--now goes with --replay or --clear: a live check judges at the real clock (the kernel "
                             "log's Xid ages, the counters' rates and an operator's clear are all real times)")
    if args.plant_fault is not None and not args.quick:
        raise GpuFabricError("--plant-fault plants its fault in the quick tier's workloads: give --quick")
    try:
        baseline, unjudged = resolve_baseline(args.profile, args.accepted), None
    except NoBaseline as exc:  # what the node should be is not known: said, never judged by a demo profile
        baseline, unjudged = None, Finding("baseline", UNKNOWN, "no profile or accepted results", remedy=SOFTWARE,
                                           detail=str(exc), evidence={"why": str(exc)})
    if args.quick and args.replay and not (baseline and _on_cpu(baseline.profile)):
        raise GpuFabricError("--quick runs workloads on this machine's GPUs: it cannot replay a bundle (a profile "
                             "with burn_in.device: cpu runs its CPU stand-ins beside a replay: tests)")
    progress = {"stage": "starting"}
    judged = within_deadline(lambda: _judge(args, baseline, unjudged, now, progress), args.deadline)
    if judged is None:  # the reads or workloads did not return: said, the held drains kept, outputs written
        node, seconds, notes = None, {"passive": float(args.deadline)}, []
        findings = [Finding("deadline", UNKNOWN, f"could not finish in {args.deadline:g} s", remedy=RESET,
                            evidence={"deadline_s": args.deadline, "stage": progress["stage"]},
                            detail=f"still {progress['stage']} after --deadline {args.deadline:g} s: a hung NVML "
                                   "call or driver (a GPU that stopped answering; dmesg: Xid 79, 119) or a hung "
                                   "workload; nothing it had read is judged")]
    else:
        node, findings, notes, seconds = judged
    skipped = progress.get("quick_skipped") or []
    gpus = [] if node is None else [
        {"index": g.index, "serial": g.serial, "uuid": g.uuid, "name": g.name, "pci_bus_id": g.pci_bus_id,
         "lost": g.lost, "not_applicable": g.not_applicable, "unreadable": g.unreadable} for g in node.gpus]
    known_gpus: list[dict] = []
    if folder is not None:
        ran = "quick" if "quick" in seconds else "passive"
        findings, state_notes, known_gpus = _with_state(folder, findings, ran,
                                                        node is not None and baseline is not None, now, gpus,
                                                        {s["gpu"] for s in skipped}, bool(args.replay))
        notes += state_notes
    verdict = verdict_of(findings)
    line = output.verdict_line(verdict, findings, node.gpu_count if node else None,
                               baseline.profile.name if baseline else None, quick_skipped=len(skipped))
    document = output.result_document(
        verdict=verdict, line=line, tier="quick" if args.quick else "passive", findings=findings, notes=notes,
        source=node.source if node else (args.replay or "NVML"), baseline=baseline.to_dict() if baseline else None,
        gpus=gpus, seconds=seconds, host=(node.hostname if node and args.replay else socket.gethostname()),
        checked_at=datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"), replay=args.replay,
        quick_skipped=skipped)
    _write_outputs(args, document, known_gpus)
    if args.json == "-":
        sys.stdout.write(json.dumps(document, indent=1) + "\n")
    else:
        if args.reason:
            print(document["reason"])
        print(line)
        for detail in output.detail_lines(findings, notes):
            print(detail)
    if judged is None:  # the worker thread is still in its hung call: leave without waiting for it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_CODES[verdict])
    return EXIT_CODES[verdict]


def _judge(args: argparse.Namespace, baseline, unjudged: Finding | None, now: float, progress: dict) \
        -> tuple[NodeHealthRecord | None, list[Finding], list[str], dict[str, float]]:
    """Read the node and judge it (the passive tier, then the quick one): (node, findings, notes, seconds)."""
    started = time.monotonic()
    progress["stage"] = "reading the GPUs (NVML) and the kernel log" if not args.replay else f"reading {args.replay}"
    delay = os.environ.get(TEST_READ_DELAY_ENV)
    if delay:
        time.sleep(float(delay))  # tests: a reader that hangs
    node, failure = _read_node(args.replay)
    if node is not None and baseline is not None and baseline.profile.rdma_devices:
        _peer_memory(node, args.replay)
    if node is not None and args.replay and args.now is not None:
        _aged(node, now)
    progress["stage"] = "judging the passive tier"
    if unjudged is not None:
        findings, notes = [unjudged], []
    else:
        findings, notes = ([failure], []) if node is None else passive_findings(node, baseline, args.xid_window)
        notes = baseline.notes + notes
    if node is not None and baseline is not None:
        rated, rate_notes = _counter_rates(node, _state_folder(args), now, bool(args.replay))
        findings += rated
        notes += rate_notes
    seconds = {"passive": round(time.monotonic() - started, 3)}
    if args.quick:
        if verdict_of(findings) == DRAIN_VERDICT or node is None or baseline is None:
            notes.append("quick tier not run: " + ("the GPUs could not be read" if node is None else
                                                    "nothing to judge it by" if baseline is None else
                                                    "the passive tier drains the node already"))
        else:
            from .quick import run_quick
            from .quick_gpus import none_exercised, quick_gpus

            progress["stage"] = "running the quick tier's workloads"
            began = time.monotonic()
            selected, progress["quick_skipped"], gpu_notes = quick_gpus(node)
            notes += gpu_notes
            unexercised = none_exercised(selected, progress["quick_skipped"])
            findings += [unexercised] if unexercised else []
            quick_findings, quick_notes, _ = run_quick(node, baseline, plant_fault=args.plant_fault, gpus=selected)
            findings += quick_findings
            notes += quick_notes
            seconds["quick"] = round(time.monotonic() - began, 3)
    return node, findings, notes, seconds


def _counter_rates(node: NodeHealthRecord, folder: Path | None, now: float, replay: bool) \
        -> tuple[list[Finding], list[str]]:
    """The error counters' rates since the last run's reading (counters.py), this run's reading kept for the next."""
    if folder is None:
        return rate_findings(node, None, now, None)
    boot = boot_id(replay=replay)
    history, notes = load_history(folder)
    findings, rate_notes = rate_findings(node, history, now, boot)
    try:
        save_history(folder, node, now, boot)
    except OSError as exc:
        rate_notes.append(f"{folder}: the counters' reading not kept ({exc}): no rate next run")
    return findings, notes + rate_notes


def within_deadline(work, deadline_s: float):
    """``work()``'s value, or None when it has not returned within ``deadline_s`` (it runs in a daemon thread: a
    hung NVML call cannot be interrupted, only left behind). Its exception is raised here."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="gpufabric-health", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        return None
    if "error" in box:
        raise box["error"]
    return box["value"]


def _write_outputs(args: argparse.Namespace, document: dict, known_gpus: list[dict]) -> None:
    if args.json and args.json != "-":
        output.write_atomically(Path(args.json), json.dumps(document, indent=1) + "\n")
    if args.prom:
        output.write_atomically(output.prom_path(Path(args.prom), document["tier"]),
                                prom_text(document, time.time(), known_gpus))
