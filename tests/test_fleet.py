"""Fleet acceptance: node folders holding the results of real machines' runs, judged as one fleet by one profile.

The nodes are replays of recorded bundles under today's profiles (tests/fleet_nodes.py): a 2x H200 SXM 141GB
machine's whole acceptance run, the planted-fault burn-in of another, a 4x H200 SXM 141GB machine; the other hosts of
a fleet are DERIVED from them (their hostname, serials and figures changed, marked synthetic). The live results
recorded on real GPU machines over the weeks ran several versions of the profile, and a fleet of them is judged as
such.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from fleet_nodes import derived, replayed, report_of, write_node

from pytest_gpufabric.cli import main
from pytest_gpufabric.fleet.analysis import FleetSettings, analyse
from pytest_gpufabric.fleet.hostlist import expand_hostlist
from pytest_gpufabric.fleet.launch import expand_report_dir
from pytest_gpufabric.fleet.report import build_fleet_document, judged_nodes, validate_fleet_document
from pytest_gpufabric.profile.loader import load_profile

RESULTS = Path(__file__).parent / "data" / "results"
#: DERIVED hosts of the fleet: each a copy of the accepted replay under its own name, serials and speed
HEALTHY = {"h200a": 1.0, "h200b": 0.998, "h200c": 1.002, "h200e": 0.999, "h200f": 1.001}


def _fleet(root: Path, healthy: dict[str, float] = HEALTHY, planted: bool = True, x4: bool = True) -> Path:
    accepted = replayed("accepted")
    for name, factor in healthy.items():
        write_node(root, name, derived(accepted, name, factor), report_of("accepted"))
    if planted:
        write_node(root, "h200d", derived(replayed("planted"), "h200d"))  # REJECTED: wrong GEMM results on GPU1
    if x4:
        write_node(root, "h200x4a", derived(replayed("x4"), "h200x4a"))  # ran h200-nvswitch-x4
    return root


def _node(document: dict, name: str) -> dict:
    return next(n for n in document["nodes"] if n["name"] == name)


def test_hostlists_as_slurm_writes_them():
    assert expand_hostlist("node[01-03]") == ["node01", "node02", "node03"]
    assert expand_hostlist("gpu[1-2,9],login1") == ["gpu1", "gpu2", "gpu9", "login1"]
    assert expand_hostlist("rack[1-2]-n[08-09]") == ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]
    assert len(expand_hostlist("node[0001-1000]")) == 1000
    for bad, why in (("node[3-1]", "runs backwards"), ("node[1-", "without"), ("node[a-b]", "not a number"),
                     ("node[1-99999999]", "more than")):
        with pytest.raises(ValueError, match=why):
            expand_hostlist(bad)


def test_report_dir_placeholders():
    env = {"SLURM_PROCID": "3", "SLURM_JOB_ID": "4711"}
    assert expand_report_dir("reports/fleet/{host}", env, hostname="node17.cluster") == "reports/fleet/node17"
    assert expand_report_dir("r/{fleet}/{task}", env) == "r/4711/3"
    assert expand_report_dir("r/{fleet}", {}, "acme-2026-11") == "r/acme-2026-11"
    assert expand_report_dir("r/{task}", {"JOB_COMPLETION_INDEX": "12"}) == "r/12"  # a Kubernetes Indexed Job
    # {node}: Slurm's NodeName (the nodelist's name, not always the host's), a Kubernetes node's, else the host's
    assert expand_report_dir("r/{node}", {**env, "SLURMD_NODENAME": "gpu-st-p5-1"}, hostname="ip-10-0-1-11") == \
        "r/gpu-st-p5-1"
    assert expand_report_dir("r/{node}", {"NODE_NAME": "gpu-node07"}, hostname="gpufabric-fleet-7-x2b4q") == \
        "r/gpu-node07"
    assert expand_report_dir("r/{node}", env, hostname="ip-10-0-1-11.ec2.internal") == "r/ip-10-0-1-11"
    with pytest.raises(ValueError, match=r"unknown placeholder \{nodename\} \(known: \{node\}, \{host\}"):
        expand_report_dir("r/{nodename}", env)
    with pytest.raises(ValueError, match=r"\{task\} cannot be filled here: no launcher variable"):
        expand_report_dir("r/{task}", {})


def test_the_fleet_judged_by_its_one_profile(tmp_path):
    root = _fleet(tmp_path / "fleet")
    (root / "h200h").mkdir()  # a node that started and never wrote its results
    document = build_fleet_document([root], [*HEALTHY, "h200d", "h200x4a", "h200h", "h200i"], allow_replays=True)
    validate_fleet_document(document)
    profile = load_profile("h200-nvswitch-x2")
    assert document["profile"] == {"name": "h200-nvswitch-x2", "sha256": profile.sha256, "problem": None}
    assert document["settings_from"].startswith("profile h200-nvswitch-x2 (ran by 6 of 7 nodes")
    assert document["verdict"] == "REJECTED" and document["missing"] == ["h200i"]
    assert document["counts"] == {"nodes": 8, "expected": 9, "accepted": 5, "rejected": 1, "incomplete": 1,
                                  "not_tested": 0, "unreadable": 0, "never_reported": 1, "missing": 1,
                                  "outlier_nodes": 0, "groups": 0, "drifted_nodes": 1, "unsigned": 7}
    assert document["reason"].startswith("1 node(s) rejected: h200d; ")
    # the rejected node and its failed check, as its own results say
    h200d = _node(document, "h200d")
    assert h200d["verdict"] == "REJECTED" and [f["check"] for f in h200d["failed"]] == ["burn-in-gpu"]
    assert "1682 wrong elements" in h200d["failed"][0]["message"]
    assert _node(document, "h200h")["state"] == "never reported"
    # the 4-GPU node ran another profile: not accepted, not accused, and its GPU count drifts from the fleet's
    x4 = _node(document, "h200x4a")
    x4_sha = load_profile("h200-nvswitch-x4").sha256
    assert x4["verdict"] == "INCOMPLETE" and x4["reason"].startswith(
        f"ran profile h200-nvswitch-x4 (sha256 {x4_sha[:12]}), not the fleet's h200-nvswitch-x2 (sha256 "
        f"{profile.sha256[:12]}): not judged against it")
    assert {"field": "gpu_count", "value": "4", "majority": "2"} in x4["drift"]
    assert not document["duplicate_serials"]
    # healthy hosts agree within the noise: nothing is flagged, and the median is the middle host's figure
    busbw = sorted(c["found"]["busbw_gbps"] * factor for factor in HEALTHY.values()
                   for c in replayed("accepted")["checks"]
                   if c["name"] == "bandwidth-all_reduce" and c["subject"] == "all_reduce 4GiB")
    metric = next(m for m in document["metrics"] if m["subject"] == "all_reduce 4GiB" and m["metric"] == "busbw_gbps")
    assert (metric["class"], metric["n"]) == ("2x NVIDIA H200", 5)
    assert metric["median"] == pytest.approx(busbw[2]) and metric["flagged"] == []


def test_a_slow_node_among_passing_ones_is_named_with_the_measurement(tmp_path):
    root = _fleet(tmp_path / "fleet", planted=False, x4=False)
    slow = derived(replayed("accepted"), "h200s", 0.88)  # DERIVED: 12 % slower, still above the floors
    write_node(root, "h200s", slow)
    value = next(c["found"]["busbw_gbps"] for c in slow["checks"]
                 if c["name"] == "bandwidth-all_reduce" and c["subject"] == "all_reduce 4GiB")
    document = build_fleet_document([root], None, allow_replays=True)
    outliers = {(o["check"], o["subject"], o["metric"]): o for o in _node(document, "h200s")["outliers"]}
    outlier = outliers[("bandwidth-all_reduce", "all_reduce 4GiB", "busbw_gbps")]
    # both tests, in the measurement's own terms: 12 % worse than the median (at least 3 %) and past 5 MAD
    assert outlier["value"] == pytest.approx(value) and outlier["rule"].startswith(
        f"{outlier['worse_by']:.1%} worse than the median (at least 3%) and ")
    assert outlier["worse_by"] > 0.11 and outlier["excess"] > 5 * outlier["mad"] > 0
    assert outlier["z"] < -3
    assert not any(n["outliers"] for n in document["nodes"] if n["name"] != "h200s")
    assert document["verdict"] == "ACCEPTED" and "outlier(s) reported, not failing" in document["reason"]
    nodes, _, _, _ = judged_nodes([root], allow_replays=True)
    strict = analyse(nodes, None, FleetSettings(fail_on_outlier=True))
    assert strict["verdict"] == "REJECTED" and "h200s" in strict["reason"]


def test_a_serial_on_two_nodes_rejects_the_fleet(tmp_path):
    # one host's results filed as two nodes: the same serials in both folders
    root = tmp_path / "fleet"
    one = derived(replayed("accepted"), "one")
    write_node(root, "one", one)
    two = json.loads(json.dumps(one))
    two["run"]["host"] = "two"
    write_node(root, "two", two)
    document = build_fleet_document([root], None, allow_replays=True)
    serials = [g["serial"] for g in one["machine"]["gpus"]]
    assert document["duplicate_serials"] == [{"serial": s, "nodes": ["one", "two"]} for s in sorted(serials)]
    assert document["verdict"] == "REJECTED"


def test_fleet_report_command(tmp_path, capsys):
    root = _fleet(tmp_path / "fleet")
    out = tmp_path / "out"
    names = [*HEALTHY, "h200d", "h200x4a"]
    assert main(["fleet", "report", "--allow-replays", str(root), "--expect", ",".join(names), "-o", str(out)]) == 1
    printed = capsys.readouterr().out
    assert printed.startswith("fleet: REJECTED: 1 node(s) rejected: h200d")
    assert "drift h200x4a: gpu_count 4 (fleet: 2)" in printed
    assert "  not accepted h200x4a: INCOMPLETE: ran profile h200-nvswitch-x4" in printed
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    validate_fleet_document(document)
    cases = ET.parse(out / "fleet-junit.xml").getroot().iter("testcase")
    failures = {c.get("name"): c.find("failure") is not None for c in cases}
    assert failures == {**{name: False for name in HEALTHY}, "h200d": True, "h200x4a": True}
    assert (out / "fleet.html").is_file()
    accepted_only = _fleet(tmp_path / "accepted", planted=False, x4=False)
    assert main(["fleet", "report", "--allow-replays", str(accepted_only), "-o", str(out)]) == 0
    # usage errors: exit 4, as pytest's
    assert main(["fleet", "report", "--allow-replays", str(tmp_path / "nope"), "-o", str(out)]) == 4
    assert main(["fleet", "report", "--allow-replays", str(root), "--expect", "node[9-1]", "-o", str(out)]) == 4
    assert main(["fleet", "report"]) == 4
    assert "runs backwards" in capsys.readouterr().err


def test_the_recorded_live_runs_of_format_1_are_never_accepted(tmp_path, capsys):
    """The results recorded live on real GPU machines before the verdict had promises (results format 1), one folder
    each: their verdicts cannot be judged again from promises, so the fleet accepts none, naming the format (one
    whose checks failed stays rejected)."""
    root = tmp_path / "recorded"
    runs = {"h200a": "h200-nvswitch-x2-bandwidth-live-after-copy-refactor-on-h200-x2",
            "h200b": "burn-in-2min-window-from-set-up-on-h200-x2", "h200c": "acceptance-with-10min-burn-in-on-h200-x2",
            "h200e": "h200-nvswitch-x2-bandwidth-live-on-h200-x2", "h200f": "h200-nvswitch-x2-live-on-h200-x2",
            "h200g": "h200-nvswitch-x2-with-nvlink-traffic-on-h200-x2",
            "h200x4a": "h200-nvswitch-x4-shipped-profile-live-on-h200-x4"}
    for name, run in runs.items():
        (root / name).mkdir(parents=True)
        shutil.copy(RESULTS / f"{run}.json", root / name / "gpufabric-results.json")
    document = build_fleet_document([root], None, "h200-nvswitch-x2", allow_replays=True)
    assert document["counts"]["accepted"] == 0 and document["verdict"] in ("INCOMPLETE", "REJECTED")
    said = "not judged again: it is results format 1, written before the verdict had promises"
    assert all(said in n["reason"] for n in document["nodes"])
    assert {n["verdict"] for n in document["nodes"]} <= {"INCOMPLETE", "REJECTED"}


def test_golden_profile_from_the_fleet(tmp_path, capsys):
    root = _fleet(tmp_path / "fleet", planted=False, x4=False)
    output = tmp_path / "golden.yaml"
    assert main(["profile", "init", "--allow-replays", "--from-fleet", str(root), "-o", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    assert document["extends"] == "h200-nvswitch-x2"
    busbw = sorted(c["found"]["busbw_gbps"] * factor for factor in HEALTHY.values()
                   for c in replayed("accepted")["checks"]
                   if c["name"] == "bandwidth-all_reduce" and c["subject"] == "all_reduce 256MiB")
    floor = next(t for t in document["bandwidth"]["collectives"]["all_reduce"] if t["size"] == "256 MiB")
    assert floor == {"size": "256 MiB", "min_busbw": f"{busbw[0] * 0.95:.1f} GB/s"}  # p5 of 5 is the lowest
    assert f"#   all_reduce 256MiB busbw: p5 {busbw[0]:.1f} GB/s x 0.95 over 5 node(s)" in text
    assert ("# 5 accepted node(s) of 5, profile h200-nvswitch-x2; floors from: h200a, h200b, h200c, h200e, "
            "h200f.") in text
    assert "floors from 5 accepted node(s): h200a, h200b, h200c, h200e, h200f" in capsys.readouterr().out
    assert main(["profile", "validate", str(output)]) == 0
    mixed = _fleet(tmp_path / "mixed", {"h200a": 1.0}, planted=False)
    assert main(["profile", "init", "--allow-replays", "--from-fleet", str(mixed), "-o", str(tmp_path / "x.yaml")]) == 2
    assert "none on a majority" in capsys.readouterr().err


def test_golden_floors_only_from_accepted_nodes_and_never_from_copied_results(tmp_path, capsys):
    """A rejected node is left out and named; a fleet where one GPU serial is on two nodes (a results file copied
    into another node's folder) gets no golden profile at all: its figures cannot be trusted to be each node's."""
    root = _fleet(tmp_path / "fleet", {k: HEALTHY[k] for k in ("h200a", "h200c", "h200e")}, x4=False)
    output = tmp_path / "golden.yaml"
    assert main(["profile", "init", "--allow-replays", "--from-fleet", str(root), "-o", str(output)]) == 0
    assert "# Left out, not accepted: h200d (REJECTED)." in output.read_text(encoding="utf-8")
    printed = capsys.readouterr().out
    assert "floors from 3 accepted node(s): h200a, h200c, h200e" in printed
    assert "left out, not accepted: h200d" in printed

    copied = _fleet(tmp_path / "copied", {k: HEALTHY[k] for k in ("h200a", "h200c", "h200e")}, planted=False,
                    x4=False)
    (copied / "h200z").mkdir()
    shutil.copy(copied / "h200a" / "gpufabric-results.json", copied / "h200z" / "gpufabric-results.json")
    refused = tmp_path / "refused.yaml"
    assert main(["profile", "init", "--allow-replays", "--from-fleet", str(copied), "-o", str(refused)]) == 2
    err = capsys.readouterr().err
    serial = derived(replayed("accepted"), "h200a")["machine"]["gpus"][0]["serial"]
    assert f"GPU serials on more than one node ({serial} on h200a and h200z" in err
    assert "Traceback" not in err and not refused.exists()
