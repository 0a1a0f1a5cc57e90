"""Writes job-batch-v1-<version>.json here: the strict JSON schema of a batch/v1 Job of one Kubernetes version,
standalone (only the definitions a Job reaches), from the schemas the kubernetes-validate wheel ships.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv && unzip -q /tmp/kv/*.whl -d /tmp/kv
    python3 tests/data/kubernetes/extract_job_schema.py /tmp/kv v1.29.0 v1.37.0
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SOURCE = ("kubernetes-validate 1.37.0 (https://github.com/willthames/kubernetes-validate, Apache-2.0): "
          "kubernetes_validate/kubernetes-json-schema/{version}-local-strict/, generated from Kubernetes' OpenAPI")


def local_refs(node, found: set[str]) -> None:
    """Rewrites every reference into _definitions.json to a local "#/$defs/NAME" and collects the names."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and "#/$defs/" in ref:
            node["$ref"] = "#/$defs/" + ref.split("#/$defs/", 1)[1]
            found.add(node["$ref"].removeprefix("#/$defs/"))
        for value in node.values():
            local_refs(value, found)
    elif isinstance(node, list):
        for value in node:
            local_refs(value, found)


def reached(definitions: dict, wanted: set[str]) -> dict:
    """The definitions ``wanted`` names and every one they reach in turn (their references made local), sorted."""
    kept: dict = {}
    while wanted - kept.keys():
        name = sorted(wanted - kept.keys())[0]
        kept[name] = definitions[name]
        local_refs(kept[name], wanted)
    return dict(sorted(kept.items()))


def extract(root: Path, version: str) -> dict:
    folder = root / "kubernetes_validate" / "kubernetes-json-schema" / f"{version}-local-strict"
    job = json.loads((folder / "job-batch-v1.json").read_text(encoding="utf-8"))
    definitions = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))["$defs"]
    wanted: set[str] = set()
    local_refs(job, wanted)
    job["$defs"] = reached(definitions, wanted)
    job["$comment"] = SOURCE.format(version=version)
    return job


if __name__ == "__main__":
    source = Path(sys.argv[1])
    for version in sys.argv[2:]:
        schema = extract(source, version)
        out = Path(__file__).with_name(f"job-batch-v1-{version}.json")
        out.write_text(json.dumps(schema, indent=None, separators=(",", ":"), sort_keys=False) + "\n",
                       encoding="utf-8")
        print(f"{out}: {len(schema['$defs'])} definitions, {out.stat().st_size} bytes")
