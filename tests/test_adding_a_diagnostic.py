"""docs/adding-a-diagnostic.md, followed: a trivial per-GPU diagnostic added to a copy of the package in two files
(its kind package and its section of profile.schema.json), then a shipped bundle replayed against a profile that
promises it. It reads a figure the bundle really recorded (nvml.json's pcie_gen_max: gen 5 on h100-x1-measured's
H100), so no tool output is invented: a floor at gen 5 passes, a floor at gen 6 fails with the kind's own remedy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
BUNDLE = ROOT / "tests" / "data" / "bundles" / "h100-x1-measured"
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for this test"

#: file 1 of 2: the kind's package, kinds/pcie_generation/__init__.py, as the doc's template has it
KIND_PACKAGE = '''"""The PCIe generation each GPU supports, as NVML recorded it (nvml.json): one promise per GPU
where the profile has a ``pcie_generation`` section."""

from __future__ import annotations

from ...checks.result import failed, passed, unknown
from ...diagnostics import Diagnostic, frozen
from ...errors import GpuFabricError
from ...formats.typed import BOARD, TEXT, reading
from ...remedy_classes import RMA
from ..base import Measurement, diagnostic_kind

POSITION = 65
OWN_MODULES = ("kinds/pcie_generation/__init__.py",)

PCIE_GENERATION = Diagnostic(
    name="pcie-generation", key="pcie_generation", what="PCIe generation the board supports",
    one="PCIe generation reading", recording="NVML snapshot", fixture="pcie_generation",
    doc="Each GPU's maximum PCIe generation as NVML reports it: the bundle's nvml.json.",
    measurement="pcie_generation", record_file="nvml.json", format="gpufabric-nvml/1",
    shape={"format": TEXT, "gpus": [{**BOARD, "pcie_gen_max": reading("generation")}]},
    script="", check="kinds/pcie_generation/__init__.py", per_gpu=False, measure_as="pcie_generation",
    measure_section=frozen({}))


def _launch(section, env, boards, fabric, *, repeats=1, plant_fault=None):
    raise GpuFabricError("pcie-generation reads a recorded nvml.json only")


def _judge(row, section, source, gpu):
    who, floor, found = f"GPU{row['index']} (serial {row.get('serial')})", section["min"], row.get("pcie_gen_max")
    expected = {"min": floor}
    if found is None:
        return unknown(PCIE_GENERATION.name, who, expected, f"{who}: NVML recorded no PCIe generation [{source}]")
    if found < floor:
        return failed(PCIE_GENERATION.name, who, expected, found,
                      f"{who}: PCIe gen {found} at most, below the gen {floor} promised [{source}]")
    return passed(PCIE_GENERATION.name, who, expected, found, f"{who}: PCIe gen {found} [{source}]")


def _phrase(check):
    return f"PCIe gen {(check.get('expected') or {}).get('min')} or later", f"gen {check.get('found')}"


def _remedy(check, ctx):
    return RMA, f"{check.get('subject')}: its PCIe supports gen {check.get('found')} at most: not the board sold"


KINDS = (diagnostic_kind(Measurement(PCIE_GENERATION, _launch, _judge), remedy=_remedy, phrase=_phrase),)
'''

#: file 2 of 2: its section of profile/profile.schema.json
SCHEMA_SECTION = {
    "type": "object", "additionalProperties": False, "required": ["min"],
    "description": "The PCIe generation each GPU supports (suites/test_diagnostics.py), from NVML.",
    "properties": {"min": {"type": "integer", "minimum": 1}},
}


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> Path:
    """A copy of the package with the diagnostic added, as the doc says (nothing else of it changed)."""
    root = tmp_path_factory.mktemp("added")
    package = root / "pytest_gpufabric"
    shutil.copytree(ROOT / "pytest_gpufabric", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "kinds" / "pcie_generation").mkdir()
    (package / "kinds" / "pcie_generation" / "__init__.py").write_text(KIND_PACKAGE, encoding="utf-8")
    schema_path = package / "profile" / "profile.schema.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    schema["properties"]["pcie_generation"] = SCHEMA_SECTION
    schema_path.write_text(json.dumps(schema, indent=2), encoding="utf-8")
    return root


def _replay(package_copy: Path, tmp_path: Path, floor: int) -> tuple[int, dict]:
    profile = yaml.safe_load((BUNDLE / "measured.yaml").read_text(encoding="utf-8"))
    profile["pcie_generation"] = {"min": floor}
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(profile), encoding="utf-8")
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    env = {**os.environ, "PYTHONPATH": str(package_copy)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--gpu-profile", "profile.yaml",
                          "--gpu-replay", str(bundle), "--gpu-waive", NO_KERNEL_LOG],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in run.stdout + run.stderr, run.stdout[-3000:] + run.stderr[-3000:]
    document = json.loads((tmp_path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8"))
    assert document["summary"]["exit_code"] == run.returncode
    return run.returncode, document


def _promise(document: dict, promise_id: str) -> dict:
    return next(p for p in document["promises"] if p["id"] == promise_id)


def test_the_copy_imports_the_added_kind(package_copy: Path):
    code = ("import pytest_gpufabric, pytest_gpufabric.kinds as k; "
            "print(pytest_gpufabric.__file__); print([d.name for d in k.diagnostics()])")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(package_copy)},
                         cwd=package_copy, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith(str(package_copy))
    assert out[1] == str(["hbm-bandwidth", "memory-pattern", "power-hold", "pcie-under-load", "pcie-generation"])


def test_a_floor_the_recorded_board_meets_passes(package_copy: Path, tmp_path: Path):
    code, document = _replay(package_copy, tmp_path, floor=5)
    promise = _promise(document, "pcie-generation[GPU0]")
    assert (promise["outcome"], promise["reason"]) == ("passed", "")
    assert promise["tests"][0].endswith("test_diagnostics.py::test_diagnostic[pcie-generation-GPU0]")
    assert "remedy" not in promise
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")


def test_a_floor_above_the_recorded_board_fails_with_the_kinds_own_remedy(package_copy: Path, tmp_path: Path):
    code, document = _replay(package_copy, tmp_path, floor=6)
    promise = _promise(document, "pcie-generation[GPU0]")
    assert promise["outcome"] == "failed"
    assert promise["reason"] == ("GPU0 (serial 1652624815179): PCIe gen 5 at most, below the gen 6 promised "
                                 f"[bundle {tmp_path / 'bundle'}]")
    assert promise["remedy"] == {"class": "return to the vendor",
                                 "why": "GPU0 (serial 1652624815179): its PCIe supports gen 5 at most: "
                                        "not the board sold"}
    assert document["summary"]["verdict"] == "REJECTED"
    assert {p["outcome"] for p in document["promises"] if p["id"] not in ("pcie-generation[GPU0]", "xid-events")} \
        == {"passed"}
    assert code == 1
