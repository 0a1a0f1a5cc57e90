"""Writing a profile by hand, as the docs say: YAML's `off`, memory as sold, and the hints a mistake gets."""

from __future__ import annotations

import pytest

from pytest_gpufabric.errors import GpuFabricError
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.reference import load_references

BASE = "name: hand\ndescription: written by hand\ngpus: {count: 1}\n"


def _profile(tmp_path, text: str):
    path = tmp_path / "hand.yaml"
    path.write_text(BASE + text)
    return load_profile(str(path))


def test_off_is_text_as_the_schema_spells_it(tmp_path):
    """YAML 1.1 reads off/on/yes/no as booleans: `iommu: off` arrived as False and failed validation."""
    profile = _profile(tmp_path, "platform:\n  iommu: off\n  persistence_mode: true\n  numa_balancing: false\n")
    assert profile.data["platform"] == {"iommu": "off", "persistence_mode": True, "numa_balancing": False}


def test_a_switch_spelled_off_where_the_schema_has_other_words_says_which(tmp_path):
    with pytest.raises(GpuFabricError, match=r"\$\.platform\.acs: 'off' is not one of \['disabled', 'all_off'\]"):
        _profile(tmp_path, "platform:\n  acs: off\n")


def test_every_model_has_at_least_the_memory_it_is_sold_with():
    """So a profile promises memory as sold, in GB of 1e9 bytes ("80 GB"), and a healthy board passes it: NVML's
    figure of every catalogued model is at least that (an H100 80GB shows 81559 MiB = 85.5e9 bytes)."""
    checked = 0
    for reference in load_references().values():
        if reference.memory_gb_sold and reference.memory_bytes_nvml:
            assert reference.memory_gb_sold * 10**9 <= reference.memory_bytes_nvml, reference.model
            checked += 1
    assert checked >= 6  # the models whose NVML figure the catalogue records


def test_memory_in_gib_for_a_board_sold_in_gb_fails_with_how_to_write_it(pytester: pytest.Pytester):
    """The recorded H100 (81559 MiB): `80 GiB` fails, saying to promise `80 GB`; `80 GB` passes."""
    for memory, outcome in (("80 GiB", "failed"), ("80 GB", "passed")):
        pytester.makefile(".yaml", h100=f"name: h100\ndescription: one H100\ngpus: {{count: 1, memory: {memory}}}\n")
        result = pytester.runpytest("--gpu-profile", "h100.yaml", "--gpu-replay", "h100-x1", "-k", "gpu_memory")
        assert result.parseoutcomes().get(outcome) == 1
    pytester.makefile(".yaml", h100="name: h100\ndescription: one H100\ngpus: {count: 1, memory: 80 GiB}\n")
    result = pytester.runpytest("--gpu-profile", "h100.yaml", "--gpu-replay", "h100-x1", "-k", "gpu_memory")
    result.stdout.fnmatch_lines(["*expected at least 80.00 GiB of memory, found 79.65 GiB. The board is sold as 80 GB"
                                 "*promise memory as sold, `memory: 80 GB`, not GiB.*"])


def test_profile_init_writes_memory_as_sold(tmp_path):
    from pytest_gpufabric.cli import main

    for bundle, sold in (("h100-x1", "80 GB"), ("h200-nvswitch-x2", "141 GB")):
        output = tmp_path / f"{bundle}.yaml"
        assert main(["profile", "init", "--replay", bundle, "-o", str(output)]) == 0
        assert f"  memory: {sold}\n" in output.read_text()


def test_an_unknown_profile_names_each_folder_searched_once(monkeypatch):
    """In a source checkout the project's profiles/ is also the shipped one: it was listed twice."""
    from pathlib import Path

    from pytest_gpufabric.paths import shipped_profiles_dir

    checkout = Path(shipped_profiles_dir()).parent
    monkeypatch.delenv("GPUFABRIC_PROFILE_PATH", raising=False)
    with pytest.raises(GpuFabricError) as raised:
        load_profile("no-such-profile", checkout)
    searched = str(raised.value).split("(searched ", 1)[1].rstrip(")").split(", ")
    assert len(searched) == len(set(searched)) == 1 and "h200-nvswitch-x2" in str(raised.value)


def test_an_rdma_port_serving_a_gpu_the_profile_does_not_have_is_refused(tmp_path):
    text = "rdma:\n  devices:\n    - {name: mlx5_0, gpus: [0, 9]}\n"
    with pytest.raises(GpuFabricError, match=r"\$\.rdma\.devices\[0\]\.gpus: GPU 9 is not among the profile's 1 GPUs"):
        _profile(tmp_path, text)
