"""The per-model floors of memory bandwidth (a fraction of NVML's peak) live in references/hbm-fraction-floors.json,
read by one function that the acceptance's hbm-bandwidth test and gpufabric health --quick both call."""

from __future__ import annotations

import ast
import json
import shutil

import pytest

from pytest_gpufabric import reference
from pytest_gpufabric.reference import HBM_FRACTION_FLOORS_PATH, ReferenceDataError, hbm_fraction_floor


@pytest.mark.parametrize(("name", "floor"), [
    ("NVIDIA H100 80GB HBM3", 0.88), ("NVIDIA H100 PCIe", 0.88), ("NVIDIA H200", 0.88), ("NVIDIA H200 NVL", 0.88),
    ("NVIDIA A100-SXM4-80GB", None), ("NVIDIA B200", None), ("", None), (None, None),
])
def test_the_floor_of_each_model(name, floor):
    assert hbm_fraction_floor(name) == floor


def test_both_callers_read_the_one_function():
    """Neither the HBM kind nor the quick health check holds a table of its own."""
    for module in ("kinds/hbm/__init__.py", "nodehealth/quick.py"):
        source = (reference.PACKAGE_DIR / module).read_text(encoding="utf-8")
        names = {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
        assert "hbm_fraction_floor" in names and "MODEL_MIN_FRACTION" not in source, module


def test_a_floor_out_of_range_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / HBM_FRACTION_FLOORS_PATH.name
    shutil.copyfile(HBM_FRACTION_FLOORS_PATH, bad)
    document = json.loads(bad.read_text(encoding="utf-8"))
    document["floors"][1]["min_fraction_of_peak"] = 1.5
    bad.write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.setattr(reference, "HBM_FRACTION_FLOORS_PATH", bad)
    reference._hbm_fraction_floors.cache_clear()
    try:
        with pytest.raises(ReferenceDataError, match=r"hbm-fraction-floors\.json: \$\.floors\[1\]: a model name and "
                                                     r"a fraction in \(0, 1\] are needed"):
            hbm_fraction_floor("NVIDIA H200")
    finally:
        reference._hbm_fraction_floors.cache_clear()
