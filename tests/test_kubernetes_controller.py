"""The Kubernetes node-health path as shipped: examples/kubernetes/gpufabric-npd.yaml sets the node condition,
gpufabric-draino.yaml cordons and drains on it, the Dockerfile builds NPD's image with this project's wheel.

draino's arguments are checked against the flag definitions of the commit its image is built from (vendored under
tests/data/draino/, SOURCE.md says from where), parsed as draino parses them; NPD's config against the keys NPD
v1.36.0 reads (tests/data/node-problem-detector/); the standard kinds of both manifests
against the strict JSON schemas of Kubernetes 1.29 and 1.37 (tests/data/kubernetes/standard-kinds-*.json,
extract_kind_schemas.py says how). No cluster runs here, and no image is built: registry.k8s.io cannot be reached."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml

import pytest_gpufabric

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "kubernetes"
DRAINO, NPD, DOCKERFILE = EXAMPLES / "gpufabric-draino.yaml", EXAMPLES / "gpufabric-npd.yaml", EXAMPLES / "Dockerfile"
DRAINO_SOURCE = REPO / "tests" / "data" / "draino"
NPD_SOURCE = REPO / "tests" / "data" / "node-problem-detector"
KIND_SCHEMAS = sorted((REPO / "tests" / "data" / "kubernetes").glob("standard-kinds-v*.json"))
#: the current node-problem-detector release (kubernetes/node-problem-detector tag v1.36.0, 2026-07-11)
NPD_IMAGE = "registry.k8s.io/node-problem-detector/node-problem-detector:v1.36.0"
#: core/v1 ConditionStatus values
CONDITION_STATUSES = {"True", "False", "Unknown"}
#: Go's time.ParseDuration, for the units a flag here would use
GO_DURATION = re.compile(r"^0$|^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
#: what draino's ConvertLabelsToFilterExpr writes for one label: the expression form draino's own tests cover
LABEL_EXPRESSION = re.compile(r"^metadata\.labels\['([^']+)'\] == '([^']*)'$")


@dataclass(frozen=True)
class SuppliedCondition:
    type: str
    status: str
    duration: str


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def _one(documents: list[dict], kind: str) -> dict:
    (found,) = [doc for doc in documents if doc["kind"] == kind]
    return found


def _kind_errors(document: dict, schema_path: Path) -> list[str]:
    schemas = json.loads(schema_path.read_text(encoding="utf-8"))
    key = f"{document.get('apiVersion')}/{document.get('kind')}"
    if key not in schemas["kinds"]:
        return [f"{key}: no schema kept for this kind"]
    validator = jsonschema.Draft202012Validator({**schemas["kinds"][key], "$defs": schemas["$defs"]})
    return sorted(f"{key} {'.'.join(map(str, error.absolute_path))}: {error.message}"
                  for error in validator.iter_errors(document))


def _draino_flags() -> dict[str, str]:
    """draino's flags by name, each with its kingpin type (Bool, String, Strings, StringMap, Duration), from its
    main.go."""
    source = (DRAINO_SOURCE / "draino.go").read_text(encoding="utf-8")
    return {name: kind for name, kind in re.findall(r'app\.Flag\("([a-z-]+)".*\.(\w+)\(\)\s*$', source, re.M)}


def _parse_condition(arg: str) -> SuppliedCondition:
    """One positional argument as draino's ParseConditions reads it: `Type` (True for 0s) or
    `Type=Status,duration`. Its Go indexes past a missing `,duration` (a panic) and turns a duration it cannot
    parse into an empty condition that matches nothing; both are errors here."""
    if "=" not in arg:
        return SuppliedCondition(arg, "True", "0s")
    condition_type, rest = arg.split("=", 1)
    if "," not in rest:
        raise ValueError(f"{arg}: no ,duration after the status (draino panics on it)")
    status, duration = rest.split(",", 1)
    if not GO_DURATION.match(duration):
        raise ValueError(f"{arg}: duration {duration!r} is not a Go duration (draino ignores the condition)")
    if status not in CONDITION_STATUSES:
        raise ValueError(f"{arg}: status {status!r} is none of {sorted(CONDITION_STATUSES)}")
    return SuppliedCondition(condition_type, status, duration)


def _draino_args(container: dict) -> tuple[dict[str, str | None], list[SuppliedCondition]]:
    """The container's command as draino's kingpin parser takes it: its flags (name to value, None for a bool)
    and its node conditions. A flag it does not define, a bool given a value or another flag given none, and a
    duration Go cannot parse are errors."""
    binary, *args = container["command"] + container.get("args", [])
    if binary != "/draino":
        raise ValueError(f"{binary}: not draino's binary")
    known = _draino_flags()
    flags: dict[str, str | None] = {}
    conditions = []
    for arg in args:
        if not arg.startswith("--"):
            conditions.append(_parse_condition(arg))
            continue
        name, _, value = arg.removeprefix("--").partition("=")
        kind = known.get(name)
        if kind is None:
            raise ValueError(f"--{name}: draino has no such flag")
        if (kind == "Bool") != (value == ""):
            raise ValueError(f"--{name}: a {kind} flag {'takes no' if kind == 'Bool' else 'needs a'} value")
        if kind == "Duration" and not GO_DURATION.match(value):
            raise ValueError(f"--{name}={value}: not a Go duration")
        flags[name] = value if kind != "Bool" else None
    if not conditions:
        raise ValueError("no node condition: draino requires at least one")
    if "node-label" in flags and "node-label-expr" in flags:
        raise ValueError("--node-label and --node-label-expr cannot both be set (draino exits)")
    return flags, conditions


def _draino_container(documents: list[dict]) -> dict:
    (container,) = _one(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _npd_monitor() -> dict:
    """The custom plugin monitor's JSON gpufabric-npd.yaml gives NPD."""
    config_map = _one(_documents(NPD), "ConfigMap")
    return json.loads(config_map["data"]["gpufabric-health-monitor.json"])


def _npd_condition_type() -> str:
    """The one condition gpufabric-npd.yaml's monitor sets: the condition it declares and its rule's."""
    monitor = _npd_monitor()
    declared = {condition["type"] for condition in monitor["conditions"]}
    ruled = {rule["condition"] for rule in monitor["rules"] if rule["type"] == "permanent"}
    assert len(declared) == 1 and declared == ruled
    return declared.pop()


def _go_json_keys(path: Path, struct: str) -> set[str]:
    """The JSON keys of one Go struct: its fields' `json:"..."` tags, less the ones marked "-"."""
    match = re.search(rf"^type {struct} struct {{\n(.*?)^}}", path.read_text(encoding="utf-8"), re.M | re.S)
    assert match is not None, f"no struct {struct} in {path.name}"
    return {tag for tag in re.findall(r'json:"([^",]*)', match.group(1)) if tag not in ("-", "")}


def _unread_npd_keys(monitor: dict) -> list[str]:
    """The keys of a custom plugin monitor config that NPD v1.36.0 does not read (its encoding/json drops them
    silently), and rule types it does not know."""
    config, rules = NPD_SOURCE / "custompluginmonitor-config.go", NPD_SOURCE / "custompluginmonitor-types.go"
    rule_types = set(re.findall(r'^\s*\w+ Type = "(\w+)"', (NPD_SOURCE / "types.go").read_text(encoding="utf-8"),
                                re.M))
    unread = sorted(set(monitor) - _go_json_keys(config, "CustomPluginConfig"))
    unread += [f"pluginConfig.{key}" for key in sorted(set(monitor.get("pluginConfig", {}))
                                                       - _go_json_keys(config, "pluginGlobalConfig"))]
    for condition in monitor.get("conditions", []):
        unread += [f"conditions[].{key}" for key in sorted(set(condition) - _go_json_keys(NPD_SOURCE / "types.go",
                                                                                       "Condition"))]
    for rule in monitor.get("rules", []):
        unread += [f"rules[].{key}" for key in sorted(set(rule) - _go_json_keys(rules, "CustomRule"))]
        unread += [f"rules[].type {rule.get('type')}"] if rule.get("type") not in rule_types else []
    return unread


def test_the_npd_monitor_config_says_only_what_npd_reads():
    monitor = _npd_monitor()
    assert _unread_npd_keys(monitor) == []
    assert "skip_initial_status" in _go_json_keys(NPD_SOURCE / "custompluginmonitor-config.go",
                                                  "pluginGlobalConfig")
    misspelt = copy.deepcopy(monitor)
    misspelt["pluginConfig"]["skip_intial_status"] = misspelt["pluginConfig"].pop("skip_initial_status")
    misspelt["rules"][0]["type"] = "permanant"
    assert _unread_npd_keys(misspelt) == ["pluginConfig.skip_intial_status", "rules[].type permanant"]


def test_the_npd_daemonset_runs_the_binary_where_npds_image_has_it():
    """The command is NPD's binary as its v1.36.0 Dockerfile places it, in an image whose base has apt-get (NPD
    installs its own packages with Debian's clean-install), which examples/kubernetes/Dockerfile relies on."""
    npd_dockerfile = (NPD_SOURCE / "Dockerfile").read_text(encoding="utf-8")
    (binary,) = re.findall(r"^COPY --from=builder /src/bin/node-problem-detector (\S+)$", npd_dockerfile, re.M)
    (container,) = _one(_documents(NPD), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["command"][0] == binary == "/node-problem-detector"
    final_base = re.findall(r"^FROM (\S+) AS base$", npd_dockerfile, re.M)
    assert [image.split("@")[0] for image in final_base] == ["registry.k8s.io/build-image/debian-base:bookworm-v1.0.8"]
    assert re.search(r"^RUN clean-install ", npd_dockerfile, re.M)


def test_draino_flags_are_read_from_its_source():
    flags = _draino_flags()
    assert flags["dry-run"] == flags["evict-emptydir-pods"] == flags["skip-drain"] == "Bool"
    assert flags["drain-buffer"] == flags["max-grace-period"] == "Duration"
    assert flags["node-label-expr"] == "String" and flags["node-label"] == "StringMap"
    assert len(flags) == 21


@pytest.mark.parametrize("schema", KIND_SCHEMAS, ids=lambda path: path.stem.rsplit("-", 1)[1])
@pytest.mark.parametrize("manifest", [DRAINO, NPD], ids=lambda path: path.stem)
def test_the_standard_kinds_are_valid(manifest, schema):
    documents = _documents(manifest)
    assert documents
    assert [error for document in documents for error in _kind_errors(document, schema)] == []


def test_the_draino_arguments_are_ones_draino_defines():
    flags, conditions = _draino_args(_draino_container(_documents(DRAINO)))
    assert flags == {"node-label-expr": "metadata.labels['nvidia.com/gpu.present'] == 'true'",
                     "evict-emptydir-pods": None, "drain-buffer": "10m", "max-grace-period": "8m"}
    assert conditions == [SuppliedCondition("GPUFabricUnhealthy", "True", "0s")]


def test_draino_acts_on_the_condition_npd_sets_when_true_only():
    """One condition name, read from both files; draino drains on NPD's True (a drain) and not on Unknown (could
    not tell: an alert; docs/health.md says why) or False."""
    _, conditions = _draino_args(_draino_container(_documents(DRAINO)))
    assert {condition.type for condition in conditions} == {_npd_condition_type()}
    assert {condition.status for condition in conditions} == {"True"}


def test_draino_acts_on_the_gpu_nodes_the_npd_daemonset_runs_on():
    flags, _ = _draino_args(_draino_container(_documents(DRAINO)))
    label = LABEL_EXPRESSION.match(flags["node-label-expr"])
    assert label is not None
    node_selector = _one(_documents(NPD), "DaemonSet")["spec"]["template"]["spec"]["nodeSelector"]
    assert {label.group(1): label.group(2)} == node_selector
    assert "dry-run" not in flags and "skip-drain" not in flags


def test_a_restarted_npd_does_not_report_the_node_healthy_before_its_first_run():
    """NPD reports its default (False) when it starts unless skip_initial_status is set: a restarted NPD pod would
    have draino uncordon a drained node until the check's first run sets True again."""
    assert _npd_monitor()["pluginConfig"]["skip_initial_status"] is True


def test_the_draino_account_may_do_what_draino_does():
    """The Deployment runs as the account the binding names, bound to the role that lets it cordon, evict, mark
    the node's DrainScheduled condition, read the owners of the pods it leaves, and hold its leader lock (an
    Endpoints object, as its main.go elects)."""
    documents = _documents(DRAINO)
    deployment, binding = _one(documents, "Deployment"), _one(documents, "ClusterRoleBinding")
    account, role = _one(documents, "ServiceAccount"), _one(documents, "ClusterRole")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    needed = {("", "nodes", "update"), ("", "nodes", "watch"), ("", "nodes/status", "patch"),
              ("", "pods", "list"), ("", "pods/eviction", "create"), ("", "events", "create"),
              ("apps", "daemonsets", "get"), ("apps", "statefulsets", "get")}
    source = (DRAINO_SOURCE / "draino.go").read_text(encoding="utf-8")
    assert "resourcelock.EndpointsResourceLock" in source
    needed |= {("", "endpoints", "get"), ("", "endpoints", "create"), ("", "endpoints", "update")}
    assert needed - granted == set()


def test_the_checks_refuse_what_draino_or_the_api_server_would():
    """A misspelt flag, a condition without its duration (draino panics), a status that is not one, a bool given
    a value, and a misspelt Deployment field (the strict schema)."""
    documents = _documents(DRAINO)
    container = _draino_container(documents)

    def refused(*args: str) -> str:
        broken = copy.deepcopy(container)
        broken["command"] = ["/draino", *args]
        with pytest.raises(ValueError) as refusal:
            _draino_args(broken)
        return str(refusal.value)

    assert refused("--evict-emptydir-pod", "GPUFabricUnhealthy") == "--evict-emptydir-pod: draino has no such flag"
    assert refused("GPUFabricUnhealthy=True") == (
        "GPUFabricUnhealthy=True: no ,duration after the status (draino panics on it)")
    assert refused("GPUFabricUnhealthy=Yes,0s") == (
        "GPUFabricUnhealthy=Yes,0s: status 'Yes' is none of ['False', 'True', 'Unknown']")
    assert refused("GPUFabricUnhealthy=True,10 min") == (
        "GPUFabricUnhealthy=True,10 min: duration '10 min' is not a Go duration (draino ignores the condition)")
    assert refused("--dry-run=true", "GPUFabricUnhealthy") == "--dry-run: a Bool flag takes no value"
    assert refused("--drain-buffer=10", "GPUFabricUnhealthy") == "--drain-buffer=10: not a Go duration"
    assert refused("--evict-emptydir-pods") == "no node condition: draino requires at least one"
    deployment = copy.deepcopy(_one(documents, "Deployment"))
    deployment["spec"]["template"]["spec"]["serviceAcountName"] = "gpufabric-draino"
    for schema in KIND_SCHEMAS:
        assert any("'serviceAcountName' was unexpected" in error for error in _kind_errors(deployment, schema))


def test_the_npd_image_is_the_current_release_built_with_this_projects_wheel():
    """The Dockerfile starts from the current NPD release and copies the wheel `pip wheel --no-deps` names for
    this project (hatchling's wheel name: the project name normalised, the version, py3-none-any), built from
    the repository's root, the only context that holds dist/."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    (base,) = re.findall(r"^FROM (\S+)", text, re.M)
    assert base == NPD_IMAGE
    (name,) = re.findall(r'^name = "([^"]+)"$', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    wheel = f"{re.sub(r'[-_.]+', '_', name).lower()}-{pytest_gpufabric.__version__}-py3-none-any.whl"
    patterns = re.findall(r"\S*/(pytest_gpufabric-\*\.whl)", text)
    assert len(patterns) == 2 and all(fnmatch.fnmatch(wheel, pattern) for pattern in patterns)
    assert "COPY dist/pytest_gpufabric-*.whl" in text
    for path in (DOCKERFILE, NPD):
        builds = [line for line in path.read_text(encoding="utf-8").splitlines() if "docker build" in line]
        assert builds and all(re.search(r"docker build -f examples/kubernetes/Dockerfile -t \S+ \.(\s|$)", line)
                              for line in builds)
