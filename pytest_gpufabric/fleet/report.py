"""``gpufabric fleet report DIR... [--expect HOSTLIST] [-o OUTDIR]``: read every node's results, write one fleet
verdict as ``fleet-results.json`` (fleet-results.schema.json), ``fleet.html`` and ``fleet-junit.xml`` (one test
case per node). Exit status as pytest's: 0 accepted, 1 rejected, 4 usage error."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from ..report.results import json_text
from .analysis import FleetSettings, analyse
from .fabric import FABRIC_FILE, judge_fabric
from .hostlist import expand_hostlist
from .nodes import Node, find_node_dirs, read_node

__all__ = ["SCHEMA_PATH", "build_fleet_document", "write_fleet_report"]

SCHEMA_PATH = Path(__file__).with_name("fleet-results.schema.json")
JSON_FILE, HTML_FILE, JUNIT_FILE = "fleet-results.json", "fleet.html", "fleet-junit.xml"


def expected_nodes(expect: str | None, env: dict[str, str]) -> list[str] | None:
    """--expect as a Slurm hostlist, else Slurm's SLURM_JOB_NODELIST (the report run inside the fleet's own job),
    else None: no node list to hold the results against."""
    text = expect or env.get("SLURM_JOB_NODELIST")
    return expand_hostlist(text) if text else None


def fleet_profile(profile_spec: str | None, nodes: list[Node]):
    """(the Profile that judges the fleet, by its ``fleet:`` and ``fabric:`` sections, or None; where it came
    from): ``--profile``, else the profile the nodes ran (by its path, else a shipped profile of its name)."""
    from ..errors import GpuFabricError
    from ..profile.loader import load_profile

    if profile_spec:
        profile = load_profile(profile_spec)  # the user named it: a bad one is their error to see
        return profile, f"profile {profile.name} ({profile.path})"
    names = {n.profile for n in nodes if n.profile}
    if len(names) == 1:
        name = names.pop()
        paths = {n.profile_path for n in nodes if n.profile == name and n.profile_path}
        for spec in [*sorted(paths), name]:
            try:
                profile = load_profile(spec)
            except GpuFabricError:
                continue
            if profile.name == name:
                return profile, f"profile {name} ({profile.path})"
        return None, f"defaults (the nodes' profile {name} could not be read here; pass --profile)"
    return None, "defaults" + (f" (the nodes ran {len(names)} profiles)" if names else "")


#: from this many nodes on, they are read by a process per CPU (reading is most of a large fleet's report)
PARALLEL_FROM = 1000


def read_nodes(directories: list[Path]) -> list[Node]:
    workers = min(os.cpu_count() or 1, 8)
    if len(directories) < PARALLEL_FROM or workers < 2:
        return [read_node(d) for d in directories]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(read_node, directories, chunksize=max(1, len(directories) // (workers * 8))))


def _fabric_result(paths: list[Path], fabric: Path | None) -> tuple[dict | None, str | None]:
    """The fabric run's result (workloads/fabric_pairs.py): ``--fabric FILE``, else a fabric.json beside the node
    folders. Raises ValueError for a file that is not one."""
    from ..formats.recordings import FABRIC_FORMAT

    candidates = [fabric] if fabric else [p / FABRIC_FILE for p in paths if (p / FABRIC_FILE).is_file()]
    if not candidates:
        return None, None
    path = candidates[0]
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a fabric result ({exc})") from None
    found = result.get("format") if isinstance(result, dict) else None
    if found != FABRIC_FORMAT:
        raise ValueError(f"{path}: not a fabric result (format {found!r}, expected {FABRIC_FORMAT!r})")
    return result, str(path)


def build_fleet_document(paths: list[Path], expected: list[str] | None, profile_spec: str | None = None,
                         fabric: Path | None = None) -> dict:
    """Read every node under ``paths`` (and the fabric run's result) and judge the fleet. Raises ValueError or
    GpuFabricError (usage errors: a path that is no folder, a bad hostlist, profile or fabric file)."""
    fabric_result, fabric_path = _fabric_result(paths, fabric)
    nodes = read_nodes(find_node_dirs(paths))
    profile, settings_from = fleet_profile(profile_spec, nodes)
    profile_data = profile.data if profile is not None else None
    settings = FleetSettings.from_section((profile_data or {}).get("fleet"))
    document = {"schema_version": 1, "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "inputs": [str(p) for p in paths], "settings_from": settings_from}
    document.update(analyse(nodes, expected, settings))
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


def _junit(document: dict) -> bytes:
    """One test case per node (missing ones too), failed where the node is not accepted or an outlier fails it."""
    cases = []
    fail_on_outlier = document["settings"]["fail_on_outlier"]
    for node in document["nodes"]:
        problems = []
        if node["verdict"] != "ACCEPTED":
            problems.append(f"{node['verdict'] or 'no results'}: {node['reason']}")
            problems += [f"{f['check']} {f['subject']}: {f['message']}" for f in node["failed"]]
        outliers = [f"outlier {o['check']} {o['subject']} {o['metric']}: {o['value']:.4g} against the fleet's median "
                    f"{o['median']:.4g} ({o['rule']})" for o in node["outliers"]]
        cases.append((node["name"], problems, outliers if fail_on_outlier else [], outliers))
    cases += [(name, ["missing: the node never reported"], [], []) for name in document["missing"]]
    root = ET.Element("testsuites", name="gpufabric fleet")
    suite = ET.SubElement(root, "testsuite", name="fleet", tests=str(len(cases)),
                          failures=str(sum(1 for _, p, o, _ in cases if p or o)))
    for name, problems, failing_outliers, outliers in cases:
        case = ET.SubElement(suite, "testcase", classname="fleet", name=name)
        if problems or failing_outliers:
            failure = ET.SubElement(case, "failure", message=(problems + failing_outliers)[0][:500])
            failure.text = "\n".join(problems + failing_outliers)
        elif outliers:
            ET.SubElement(case, "system-out").text = "\n".join(outliers)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_fleet_report(document: dict, out: Path) -> dict[str, Path]:
    """fleet-results.json, fleet.html and fleet-junit.xml in ``out``; each written whole or not at all."""
    from .html import fleet_html

    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / JSON_FILE, "html": out / HTML_FILE, "junit": out / JUNIT_FILE}
    page = fleet_html(document, out).encode("utf-8")
    # every node's value of every measurement draws the page's plots; the JSON keeps the statistics (ten thousand
    # nodes' values of 75 measurements would be most of its size)
    lean = {**document, "metrics": [{k: v for k, v in m.items() if k != "values"} for m in document["metrics"]]}
    # one line: json's C encoder (indent takes the pure-Python one, seconds for ten thousand nodes)
    text = json_text(lean, indent=None) + "\n"
    for key, data in (("json", text.encode("utf-8")), ("html", page), ("junit", _junit(document))):
        tmp = paths[key].with_suffix(paths[key].suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, paths[key])
    return paths


def validate_fleet_document(document: dict) -> None:
    """Raises jsonschema.ValidationError when the document is not what fleet-results.schema.json says."""
    from jsonschema import Draft202012Validator

    Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))).validate(document)
