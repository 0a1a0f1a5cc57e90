"""docs/profile-reference.md is what the schema says (regenerate with `python -m
pytest_gpufabric.profile.schema_doc > docs/profile-reference.md`), and its worked example is a valid profile whose
topology a real 8-GPU H200 `nvidia-smi topo -m` passes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpufabric.profile import schema_doc
from pytest_gpufabric.profile.loader import load_profile

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "hgx-h200-8gpu.yaml"
CAPTURE = ROOT / "tests/data/captures/public/nvidia-smi/topo-m-hgx-h200-8gpu-nv18-12nic-emoji-prompt-tabs.txt"


def test_the_page_is_what_the_schema_says():
    assert (ROOT / "docs" / "profile-reference.md").read_text() == schema_doc.render(), \
        "regenerate: python -m pytest_gpufabric.profile.schema_doc > docs/profile-reference.md"


def test_every_key_of_the_schema_is_on_the_page():
    schema = json.loads(schema_doc.SCHEMA_PATH.read_text())
    page = schema_doc.render()
    for key, node in schema["properties"].items():
        assert f"## `{key}`" in page
        for child in node.get("properties", {}):
            assert f"`{key}.{child}`" in page


def test_the_worked_example_is_valid_and_its_topology_is_the_real_machines(pytester: pytest.Pytester):
    profile = load_profile(str(EXAMPLE))
    assert profile.gpu_count == 8 and len(profile.rdma_devices) == 8
    bundle = pytester.path / "hgx"
    bundle.mkdir()
    shutil.copy(CAPTURE, bundle / "nvidia-smi-topo-m.txt")
    result = pytester.runpytest("--gpu-profile", str(EXAMPLE), "--gpu-replay", str(bundle), "-k",
                                "test_topology_matrix or test_affinity")
    result.assert_outcomes(passed=9)  # the matrix, and the affinity of each of the 8 GPUs
