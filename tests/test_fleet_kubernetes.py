"""examples/kubernetes/fleet-*.yaml against the Kubernetes API: each manifest valid by the strict JSON schema of a
batch/v1 Job of Kubernetes 1.29 (the oldest with backoffLimitPerIndex on by default) and 1.37 (vendored under
tests/data/kubernetes/ from kubernetes-validate, standalone; extract_job_schema.py says how), plus the rules the API
server checks beyond the schema (a pod failure policy needs restartPolicy Never, FailIndex needs
backoffLimitPerIndex, ...). No Kubernetes runs here (no container runtime in this container, no k3s or kind), so
the Job's commands are then run as its pods would run them, on a replay: one node's acceptance under the node name
Kubernetes passes down, and the report Job's fleet report over what it wrote."""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from pytest_gpufabric.fleet.hostlist import expand_hostlist
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.verdict import EXIT_CODES, INCOMPLETE, NOT_TESTED, REJECTED

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "kubernetes"
ACCEPTANCE, REPORT = EXAMPLES / "fleet-acceptance-job.yaml", EXAMPLES / "fleet-report-job.yaml"
SCHEMAS = sorted((REPO / "tests" / "data" / "kubernetes").glob("job-batch-v1-v*.json"))
BUNDLE = REPO / "tests" / "data" / "bundles" / "h200-nvswitch-x2-acceptance"
GPU_RESOURCE = "nvidia.com/gpu"
#: what the API server accepts for podFailurePolicy.rules[].action (the schema says so only in words)
ACTIONS = {"FailJob", "FailIndex", "Ignore", "Count"}
USAGE_ERROR = 4


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _schema_errors(manifest: dict, schema_path: Path) -> list[str]:
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
                  for error in validator.iter_errors(manifest))


def _api_server_errors(job: dict) -> list[str]:
    """The Job rules pkg/apis/batch/validation checks that a schema cannot say."""
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    errors = []
    containers = {c["name"] for c in pod["containers"]}
    policy = spec.get("podFailurePolicy")
    if policy and pod.get("restartPolicy") != "Never":
        errors.append("podFailurePolicy needs template.spec.restartPolicy Never")
    if "backoffLimitPerIndex" in spec and spec.get("completionMode") != "Indexed":
        errors.append("backoffLimitPerIndex needs completionMode Indexed")
    for rule in (policy or {}).get("rules", []):
        if rule["action"] not in ACTIONS:
            errors.append(f"unknown action {rule['action']}")
        if rule["action"] == "FailIndex" and "backoffLimitPerIndex" not in spec:
            errors.append("FailIndex needs backoffLimitPerIndex")
        codes = rule.get("onExitCodes")
        if codes:
            if codes.get("containerName") and codes["containerName"] not in containers:
                errors.append(f"onExitCodes.containerName {codes['containerName']} is no container of the pod")
            values = codes["values"]
            if values != sorted(set(values)) or not all(0 <= v <= 255 for v in values) or (
                    codes["operator"] == "In" and 0 in values):
                errors.append(f"onExitCodes.values {values}: sorted, unique, 0-255, no 0 with In")
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        errors.append("an Indexed Job needs completions")
    return errors


def _args(container: dict) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in container["args"] if "=" in arg)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda path: path.stem.rsplit("-", 1)[1])
@pytest.mark.parametrize("manifest", [ACCEPTANCE, REPORT], ids=lambda path: path.stem)
def test_the_manifests_are_valid_jobs(manifest, schema):
    job = _load(manifest)
    assert _schema_errors(job, schema) == []
    assert _api_server_errors(job) == []


def test_the_validation_refuses_what_the_api_server_would(tmp_path):
    """The checks bite: a misspelt field (the strict schema), a count given as text, and a failure policy the API
    server refuses."""
    job = _load(ACCEPTANCE)
    typo = copy.deepcopy(job)
    typo["spec"]["backoffLimitPerindex"] = typo["spec"].pop("backoffLimitPerIndex")
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["completions"] = "sixteen"
    for schema in SCHEMAS:
        assert any("'backoffLimitPerindex' was unexpected" in e for e in _schema_errors(typo, schema))
        assert any(e.startswith("spec.completions: 'sixteen' is not of type")
                   for e in _schema_errors(wrong_type, schema))
    assert "FailIndex needs backoffLimitPerIndex" in _api_server_errors(typo)
    restarting = copy.deepcopy(job)
    restarting["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert _api_server_errors(restarting) == ["podFailurePolicy needs template.spec.restartPolicy Never"]


def test_a_rejected_node_ends_only_its_own_index():
    """One pod per node; a node's verdict other than ACCEPTED fails its index and nothing else (no Job-wide
    backoffLimit that would terminate the running pods); an evicted pod is started again."""
    spec = _load(ACCEPTANCE)["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    assert spec["backoffLimitPerIndex"] == 0 and "backoffLimit" not in spec and "maxFailedIndexes" not in spec
    fail_index, ignore = spec["podFailurePolicy"]["rules"]
    assert fail_index["action"] == "FailIndex"
    assert fail_index["onExitCodes"] == {"containerName": "acceptance", "operator": "In", "values": sorted(
        [EXIT_CODES[REJECTED], EXIT_CODES[INCOMPLETE], EXIT_CODES[NOT_TESTED], USAGE_ERROR])}
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"


def test_the_pods_ask_for_the_gpus_the_profile_promises_and_memory_for_shm():
    pod = _load(ACCEPTANCE)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    profile = load_profile(_args(container)["gpu-profile"], REPO)
    assert container["resources"]["limits"] == {GPU_RESOURCE: profile.gpu_count}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (shm,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"


def test_the_report_job_reads_what_the_acceptance_job_writes():
    acceptance, report = _load(ACCEPTANCE), _load(REPORT)
    (node,) = acceptance["spec"]["template"]["spec"]["containers"]
    (judge,) = report["spec"]["template"]["spec"]["containers"]
    fleet = acceptance["metadata"]["name"]
    node_args, judge_args = _args(node), _args(judge)
    assert node_args["gpu-fleet-id"] == judge_args["fleet-id"] == fleet
    assert node_args["gpu-report-dir"] == f"/results/{fleet}/{{node}}" and f"/results/{fleet}" in judge["args"]
    assert len(expand_hostlist(judge_args["expect"])) == acceptance["spec"]["completions"]
    claims = [{v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}["results"]
              for job in (acceptance, report)]
    assert claims[0] == claims[1]
    assert report["spec"]["backoffLimit"] == 0
    assert report["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [1, 4, 6, 7]


def _pod_command(container: dict, results: Path, env: dict[str, str]) -> list[str]:
    """The container's command line as the kubelet runs it: $(VAR) filled from the env, /results where the test's
    volume is."""
    argv = [*container["command"], *container["args"]]
    argv = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg).replace("/results", str(results)) for arg in argv]
    return [sys.executable if arg == "python3" else arg for arg in argv]


def test_the_jobs_commands_accept_a_node_and_judge_the_fleet(tmp_path):
    """The pod of index 0 on node gpu-node01, replaying the recorded acceptance of a 2x H200 SXM 141GB host with its
    10-minute burn-in (PYTEST_ADDOPTS names the bundle, as the Slurm test does), then the report Job's command
    (with --allow-replays): the node ACCEPTED in its folder, the 15 nodes that never ran named, the fleet
    INCOMPLETE (exit 6)."""
    (node,) = _load(ACCEPTANCE)["spec"]["template"]["spec"]["containers"]
    (judge,) = _load(REPORT)["spec"]["template"]["spec"]["containers"]
    results = tmp_path / "results"
    env = {"NODE_NAME": "gpu-node01", "JOB_COMPLETION_INDEX": "0", "PYTHONPATH": str(REPO),
           "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "PYTEST_ADDOPTS": shlex.join(["--gpu-replay", str(BUNDLE), "--gpu-waive",
                                         "xid-events=the recording holds no kernel log; agreed for this test"]),
           **{v["name"]: v["value"] for v in node["env"] if "value" in v}}
    pod = subprocess.run(_pod_command(node, results, env), env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert pod.returncode == 0, pod.stdout[-3000:] + pod.stderr[-3000:]
    folder = results / "gpufabric-fleet-2026-11" / "gpu-node01"
    document = json.loads((folder / "gpufabric-results.json").read_text(encoding="utf-8"))
    assert document["summary"]["verdict"] == "ACCEPTED" and document["run"]["fleet_id"] == "gpufabric-fleet-2026-11"
    assert (folder / "acceptance.html").is_file()

    judged = subprocess.run([*_pod_command(judge, results, env), "--allow-replays"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert judged.returncode == EXIT_CODES[INCOMPLETE], judged.stdout + judged.stderr
    fleet = json.loads((results / "gpufabric-fleet-2026-11" / "report" / "fleet-results.json").read_text())
    assert [n["name"] for n in fleet["nodes"]] == ["gpu-node01"] and fleet["nodes"][0]["verdict"] == "ACCEPTED"
    assert fleet["missing"] == [f"gpu-node{i:02d}" for i in range(2, 17)]
