"""Writes standard-kinds-<version>.json here: the strict JSON schemas of the standard kinds the node-health manifests
use (examples/kubernetes/gpufabric-npd.yaml and gpufabric-draino.yaml), one file per Kubernetes version, the kinds
sharing one "$defs" (only the definitions they reach), from the schemas the kubernetes-validate wheel ships.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv && unzip -q /tmp/kv/*.whl -d /tmp/kv
    python3 tests/data/kubernetes/extract_kind_schemas.py /tmp/kv v1.29.0 v1.37.0

A kind's schema is `{**kinds[KIND], "$defs": $defs}` (KIND as `apiVersion/Kind`, e.g. `apps/v1/Deployment`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from extract_job_schema import SOURCE, local_refs, reached  # the same wheel, references and closure as the Job's

#: the file kubernetes-validate keeps each kind's top-level schema in, by apiVersion/Kind
KIND_FILES = {
    "v1/ConfigMap": "configmap-v1.json",
    "v1/ServiceAccount": "serviceaccount-v1.json",
    "apps/v1/DaemonSet": "daemonset-apps-v1.json",
    "apps/v1/Deployment": "deployment-apps-v1.json",
    "rbac.authorization.k8s.io/v1/ClusterRole": "clusterrole-rbac-v1.json",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding": "clusterrolebinding-rbac-v1.json",
}


def extract(root: Path, version: str) -> dict:
    folder = root / "kubernetes_validate" / "kubernetes-json-schema" / f"{version}-local-strict"
    definitions = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))["$defs"]
    wanted: set[str] = set()
    kinds = {}
    for kind, name in KIND_FILES.items():
        schema = json.loads((folder / name).read_text(encoding="utf-8"))
        schema.pop("$id", None)
        local_refs(schema, wanted)
        kinds[kind] = schema
    return {"$comment": SOURCE.format(version=version), "kinds": kinds, "$defs": reached(definitions, wanted)}


if __name__ == "__main__":
    source = Path(sys.argv[1])
    for version in sys.argv[2:]:
        extracted = extract(source, version)
        out = Path(__file__).with_name(f"standard-kinds-{version}.json")
        out.write_text(json.dumps(extracted, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{out}: {len(extracted['kinds'])} kinds, {len(extracted['$defs'])} definitions, "
              f"{out.stat().st_size} bytes")
