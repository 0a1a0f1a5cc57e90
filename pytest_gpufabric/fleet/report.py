"""``gpufabric fleet report DIR... [--expect HOSTLIST] [-o OUTDIR]``: read every node's results, write one fleet
verdict as ``fleet-results.json`` (fleet-results.schema.json), ``fleet.html`` and ``fleet-junit.xml`` (one test
case per node). Exit status as pytest's: 0 accepted, 1 rejected, 4 usage error."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import os
import tempfile
import threading
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..errors import GpuFabricError
from ..formats.clean import clean_line
from ..profile.loader import load_profile
from ..reference import load_references
from ..report.html_signing import signed_page
from ..report.integrity import INTEGRITY_KEY, integrity_block
from ..report.results import json_text, published_mode
from .analysis import FleetSettings, analyse
from .fabric import FABRIC_FILE, judge_fabric, load_fabric_result
from .health import fleet_health
from .hostlist import expand_hostlist
from .html import fleet_html
from .loader import MAX_BYTES, prepare
from .nodes import Node, find_node_dirs, read_nodes_ahead
from .provenance import FleetRun, fleet_run, hold_to_source, replayed_nodes

__all__ = ["SCHEMA_PATH", "build_fleet_document", "write_fleet_report"]

SCHEMA_PATH = Path(__file__).with_name("fleet-results.schema.json")
JSON_FILE, HTML_FILE, JUNIT_FILE = "fleet-results.json", "fleet.html", "fleet-junit.xml"


def expected_nodes(expect: str | None, env: dict[str, str]) -> list[str] | None:
    """--expect as a Slurm hostlist, else Slurm's SLURM_JOB_NODELIST (the report run inside the fleet's own job),
    else None: no node list to hold the results against."""
    text = expect or env.get("SLURM_JOB_NODELIST")
    return expand_hostlist(text) if text else None


@dataclass
class Yardstick:
    """The one profile a fleet is judged by: its name and content (sha256), the Profile when it can be read here
    (its fleet: and fabric: sections set the rules), and where it came from, in words."""

    name: str | None
    sha256: str | None
    profile: object  # profile.model.Profile, or None: the rules' defaults
    said: str
    problem: str | None = None  # why there is none: the nodes ran several profiles and nobody named one


def fleet_profile(profile_spec: str | None, nodes: list[Node]) -> Yardstick:
    """``--profile``, else the profile (by name and content) a strict majority of the nodes ran. Its rules come
    from the file the operator named, or the shipped profile of that name when its content is the nodes' one;
    never from a path a node's own file names (a node must not choose its own yardstick)."""
    if profile_spec:
        profile = load_profile(profile_spec)  # the user named it: a bad one is their error to see
        return Yardstick(profile.name, profile.sha256, profile, f"profile {profile.name} (--profile, sha256 "
                                                                f"{profile.sha256[:12]})")
    ran = Counter((n.profile, n.profile_sha256) for n in nodes if n.state == "reported")
    if not ran:
        return Yardstick(None, None, None, "defaults (no node's results could be read)")
    (name, sha), count = ran.most_common(1)[0]
    if count * 2 <= sum(ran.values()):
        kinds = ", ".join(f"{n} ({(h or '?')[:12]}) on {c}" for (n, h), c in ran.most_common(5))
        return Yardstick(None, None, None, "defaults", problem=(
            f"the nodes ran {len(ran)} profiles ({kinds}), none on a majority: name the one to judge by with "
            "--profile"))
    try:
        shipped = load_profile(name) if name else None
    except GpuFabricError:
        shipped = None
    if shipped is not None and shipped.sha256 == sha:
        return Yardstick(name, sha, shipped, f"profile {name} (ran by {count} of {sum(ran.values())} nodes; "
                                             f"sha256 {sha[:12]})")
    why = ("no profile of that name here" if shipped is None else
           f"the one here is another version, sha256 {shipped.sha256[:12]}")
    return Yardstick(name, sha, None, f"defaults: the nodes' profile {name} (sha256 {(sha or '?')[:12]}) cannot "
                                      f"be read here ({why}); pass --profile for its fleet: rules")


def hold_to(yardstick: Yardstick, nodes: list[Node]) -> None:
    """Every node judged by the fleet's one profile: a node that ran another (by name or content) is not accepted,
    with the reason; a failure it found under its own stays a failure."""
    for node in nodes:
        if node.state != "reported":
            continue
        if yardstick.problem:
            mismatch = yardstick.problem
        elif (node.profile, node.profile_sha256) != (yardstick.name, yardstick.sha256):
            mismatch = (f"ran profile {node.profile} (sha256 {(node.profile_sha256 or '?')[:12]}), not the fleet's "
                        f"{yardstick.name} (sha256 {(yardstick.sha256 or '?')[:12]}): not judged against it")
        else:
            continue
        if node.verdict != "REJECTED":
            node.verdict = "INCOMPLETE"
        node.reason = f"{mismatch}; {node.reason}"


#: from this many nodes on, they are read by a process per CPU (reading is most of a large fleet's report)
PARALLEL_FROM = 1000


def usable_cpus() -> int:
    """The CPUs this process may run on: a Slurm step or a container confined to a few of a large host's CPUs gets
    those few (os.cpu_count counts the host's), so its node readers do not crowd them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this system
        return os.cpu_count() or 1


def read_nodes(directories: list[Path], max_bytes: int = MAX_BYTES, digest: bool = False) -> list[Node]:
    """Every node in ``directories``, in their order (``digest``: with each file's sha256, see read_node)."""
    workers = min(usable_cpus(), 8)
    read = functools.partial(read_nodes_ahead, max_bytes=max_bytes, digest=digest)
    if len(directories) < PARALLEL_FROM or workers < 2:
        return read(directories)
    from concurrent.futures import ProcessPoolExecutor

    size = max(1, len(directories) // (workers * 8))
    chunks = [directories[i:i + size] for i in range(0, len(directories), size)]
    prepare()  # the validators compiled once, before the workers fork
    with ProcessPoolExecutor(max_workers=workers) as pool:
        read_all = (node for chunk in pool.map(read, chunks) for node in chunk)
        # the workers forked: while they read, this process, idle, reads what judging by a profile will need
        warm = threading.Thread(target=_warm_up, daemon=True)
        warm.start()
        nodes = list(read_all)
    warm.join()
    return nodes


def _warm_up() -> None:
    """Load the shipped reference data (the profile loader checks a profile against it: half a second of YAML), so
    that the report's own process does it while its workers read nodes, not after. A failure is left to the real
    load, which reports it."""
    with contextlib.suppress(Exception):
        load_references()


def _fabric_result(paths: list[Path], fabric: Path | None) -> tuple[dict | None, str | None]:
    """The fabric run's result (workloads/fabric_pairs.py): ``--fabric FILE``, else a fabric.json beside the node
    folders. Raises ValueError for a file that is not a valid one."""
    candidates = [fabric] if fabric else [p / FABRIC_FILE for p in paths if (p / FABRIC_FILE).is_file()]
    if not candidates:
        return None, None
    return load_fabric_result(candidates[0]), str(candidates[0])


def judged_nodes(paths: list[Path], profile_spec: str | None = None, out: Path | None = None,
                 max_bytes: int = MAX_BYTES, signed: dict[str, str] | None = None, fleet_id: str | None = None,
                 allow_replays: bool = False) -> tuple[list[Node], Yardstick, list[str], FleetRun]:
    """(every node under ``paths``, each judged again from its own checks and held to the fleet's one profile and
    run; that profile; the folders that could not be listed; that run). ``out``: a report's own folder, never a node.
    ``signed``: with --require-signed, each node folder -> the sha256 of the results bytes whose signature was
    checked; a node whose file reads otherwise now was changed in between, and is unreadable. ``fleet_id``
    (--fleet-id) and ``allow_replays`` (--allow-replays): fleet/provenance.py."""
    directories, unlisted = find_node_dirs(paths, exclude=[out] if out else None)
    nodes = read_nodes(directories, max_bytes, digest=signed is not None)
    for node in nodes if signed is not None else []:
        if node.state == "reported" and node.file_sha256 != signed.get(node.directory):
            node.state, node.verdict = "unreadable", None
            node.error = ("unreadable: its results changed between the check of their signature and their reading "
                          "(--require-signed): not judged on bytes no signature covered")
    yardstick = fleet_profile(profile_spec, nodes)
    hold_to(yardstick, nodes)
    run = fleet_run(fleet_id, nodes)
    hold_to_source(nodes, run, allow_replays)
    return nodes, yardstick, unlisted, run


@contextlib.contextmanager
def _no_cycle_collection():
    """Python's cycle collector paused: a large fleet's records are millions of objects and none is in a cycle
    (reference counting frees them), but each full collection walks them all: 6 s of a report over 100,000 nodes,
    the same peak memory without."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_fleet_document(paths: list[Path], expected: list[str] | None, profile_spec: str | None = None,
                         fabric: Path | None = None, out: Path | None = None, max_bytes: int = MAX_BYTES,
                         signed: dict[str, str] | None = None, fleet_id: str | None = None,
                         allow_replays: bool = False) -> dict:
    """Read every node under ``paths`` (and the fabric run's result) and judge the fleet. ``out``: the report's
    own folder, never read as a node. ``fleet_id``, ``allow_replays``: judged_nodes. Raises ValueError or
    GpuFabricError (usage errors: a path that is no folder, a bad hostlist, profile or fabric file); a node's bad
    file is that node's finding, never an error."""
    with _no_cycle_collection():
        return _fleet_document(paths, expected, profile_spec, fabric, out, max_bytes, signed, fleet_id,
                               allow_replays)


def _fleet_document(paths: list[Path], expected: list[str] | None, profile_spec: str | None,
                    fabric: Path | None, out: Path | None, max_bytes: int, signed: dict[str, str] | None,
                    fleet_id: str | None, allow_replays: bool) -> dict:
    fabric_result, fabric_path = _fabric_result(paths, fabric)
    nodes, yardstick, unlisted, run = judged_nodes(paths, profile_spec, out, max_bytes, signed, fleet_id,
                                                   allow_replays)
    profile_data = yardstick.profile.data if yardstick.profile is not None else None
    settings = FleetSettings.from_section((profile_data or {}).get("fleet"))
    document = {"schema_version": 1, "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "run_id": uuid.uuid4().hex, "inputs": [str(p) for p in paths], "settings_from": yardstick.said,
                "profile": {"name": yardstick.name, "sha256": yardstick.sha256, "problem": yardstick.problem},
                "unlisted": unlisted}
    document.update(analyse(nodes, expected, settings))
    document["duplicate_hosts"] = duplicate_hosts(nodes)
    replayed = replayed_nodes(nodes)
    document["provenance"] = {"fleet_id": run.fleet_id, "fleet_id_from": run.said, "replays_allowed": allow_replays,
                              "replayed": replayed}
    if replayed and allow_replays:
        document["reason"] += (f"; {len(replayed)} node(s) judged from replays of recorded bundles (--allow-replays): "
                               "recorded evidence, not live runs of these nodes")
    document["health"] = fleet_health(nodes)  # the nodes' last `gpufabric health` (fleet/health.py): shown, not judged
    if unlisted and document["verdict"] == "ACCEPTED":
        document["verdict"] = "INCOMPLETE"
        document["reason"] = f"{len(unlisted)} folder(s) could not be listed: {'; '.join(unlisted[:3])}"
    if fabric_result is not None:
        fabric_nodes = [str(n) for n in fabric_result.get("nodes") or []]
        fleet_nodes = sorted({n.name for n in nodes} | set(expected or []))
        strangers = [n for n in fabric_nodes if n not in fleet_nodes]
        if strangers:
            raise ValueError(f"{fabric_path}: the fabric run's nodes ({', '.join(fabric_nodes)}) are not this "
                             f"fleet's ({', '.join(fleet_nodes) or 'none'}): {', '.join(strangers)} not among them. "
                             "Pass the fabric.json of this fleet's own run (--fabric), named by the same hostnames")
        judged = judge_fabric(fabric_result, profile_data)
        unmeasured = sorted(n.name for n in nodes if n.name not in fabric_nodes)
        document["fabric"] = {"source": fabric_path, **judged, "not_measured": unmeasured}
        if unmeasured and document["verdict"] == "ACCEPTED":
            document["verdict"] = "INCOMPLETE"
            document["reason"] = (f"the fabric run did not include {len(unmeasured)} node(s): "
                                  + ", ".join(unmeasured[:10]))
        if judged["verdict"] == "failed":
            document["verdict"] = "REJECTED"
            reasons = [] if document["reason"].startswith("all ") else [document["reason"]]
            document["reason"] = "; ".join(reasons + [f"fabric: {judged['problems'][0]}"
                                                      + (f" (+{len(judged['problems']) - 1} more)"
                                                         if len(judged["problems"]) > 1 else "")])
    return document


def duplicate_hosts(nodes: list[Node]) -> list[dict]:
    """Folders whose results name one host ({"host", "nodes"}): one machine's results filed twice (a rerun beside
    the first), or machines that share a hostname (many VM images call themselves alike). Named for the operator;
    the GPU serials tell the two apart, and a serial on two nodes rejects the fleet on its own."""
    folders: dict[str, list[str]] = {}
    for node in nodes:
        if node.state == "reported" and node.host:
            folders.setdefault(node.host, []).append(node.name)
    return [{"host": host, "nodes": sorted(names)} for host, names in sorted(folders.items()) if len(names) > 1]


def _junit(document: dict) -> bytes:
    """One test case per node (missing ones too), failed where the node is not accepted or an outlier fails it.
    Each text a node wrote is cleaned of control characters (XML 1.0 has none of them): only the texts written, not
    a copy of the whole document (a tenth of a large fleet's report time)."""
    cases = []
    fail_on_outlier = document["settings"]["fail_on_outlier"]
    for node in document["nodes"]:
        problems = []
        if node["verdict"] != "ACCEPTED":
            problems.append(clean_line(f"{node['verdict'] or 'no results'}: {node['reason']}"))
            problems += [clean_line(f"{f['check']} {f['subject']}: {f['message']}") for f in node["failed"]]
        outliers = [clean_line(f"outlier {o['check']} {o['subject']} {o['metric']}: {o['value']:.4g} against the "
                               f"fleet's median {o['median']:.4g} ({o['rule']})") for o in node["outliers"]]
        cases.append((clean_line(node["name"]), problems, outliers if fail_on_outlier else [], outliers))
    cases += [(clean_line(name), ["missing: the node never reported"], [], []) for name in document["missing"]]
    root = ET.Element("testsuites", name="gpufabric fleet")
    suite = ET.SubElement(root, "testsuite", name="fleet", tests=str(len(cases)),
                          failures=str(sum(1 for _, p, o, _ in cases if p or o)))
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run_id", document.get("run_id")), ("verdict", document["verdict"])):
        ET.SubElement(properties, "property", name=name, value=clean_line(str(value)))
    for group in document.get("groups") or []:  # nodes shifted together: one finding, accusing no node
        ET.SubElement(properties, "property", name=clean_line(str(group.get("id"))),
                      value=clean_line(str(group.get("summary"))))
    for name, problems, failing_outliers, outliers in cases:
        case = ET.SubElement(suite, "testcase", classname="fleet", name=name)
        if problems or failing_outliers:
            failure = ET.SubElement(case, "failure", message=(problems + failing_outliers)[0][:500])
            failure.text = "\n".join(problems + failing_outliers)
        elif outliers:
            ET.SubElement(case, "system-out").text = "\n".join(outliers)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


LOCK_FILE = ".fleet-report.lock"


def write_fleet_report(document: dict, out: Path, sign_key=None) -> dict[str, Path]:
    """fleet-results.json, fleet.html and fleet-junit.xml in ``out``, each written whole or not at all, and the three
    of one run together: each goes to a temporary file of its own (two reports at once never share one), and the
    three are renamed into place while this run holds the folder's lock, so a reader never finds the JSON of one
    run beside the HTML or JUnit of another. All three carry the run's ``run_id``. The JSON and the page carry their
    integrity blocks (report/integrity.py), signed with ``sign_key`` (an Ed25519 private key) where given."""
    with _no_cycle_collection():
        return _write_fleet_report(document, out, sign_key)


def _write_fleet_report(document: dict, out: Path, sign_key) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / JSON_FILE, "html": out / HTML_FILE, "junit": out / JUNIT_FILE}
    # every node's value of every measurement draws the page's plots; the JSON keeps the statistics (ten thousand
    # nodes' values of 75 measurements would be most of its size)
    lean = {**document, "metrics": [{k: v for k, v in m.items() if k != "values"} for m in document["metrics"]]}
    lean[INTEGRITY_KEY] = integrity_block(lean, (document.get("profile") or {}).get("sha256"), None, None, sign_key)
    page = signed_page(fleet_html(document, out), sign_key, lean[INTEGRITY_KEY]["results_sha256"],
                       kind="fleet").encode("utf-8")
    # one line: json's C encoder (indent takes the pure-Python one, seconds for ten thousand nodes)
    text = json_text(lean, indent=None) + "\n"
    staged = {}
    try:
        for key, data in (("json", text.encode("utf-8")), ("html", page), ("junit", _junit(document))):
            fd, tmp = tempfile.mkstemp(prefix=f".{paths[key].name}.", suffix=".tmp", dir=out)
            staged[key] = tmp
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, published_mode())
        with open(out / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for key, tmp in staged.items():
                os.replace(tmp, paths[key])
    finally:
        for tmp in staged.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
    return paths


def validate_fleet_document(document: dict) -> None:
    """Raises jsonschema.ValidationError when the document is not what fleet-results.schema.json says."""
    import json

    from jsonschema import Draft202012Validator

    Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))).validate(document)
