"""The topology and platform kinds are declared once, in their families (kinds/topology.py, kinds/platform.py): the
catalogue lists them from there, their records read by the family's rules (phrase, remedy, limits), and no legacy
table names them any more. Judged on real results: a 1-GPU H100 run against the 2-GPU H200 profile, and a platform
capture of a 2x H100 SXM host."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_gpufabric import remedy_rules
from pytest_gpufabric.catalogue import KINDS
from pytest_gpufabric.checks import limits as legacy_limits
from pytest_gpufabric.kinds import check_rule, claimed_sections, platform, record_limits, topology
from pytest_gpufabric.remedy import remedy_of_check, remedy_of_promise
from pytest_gpufabric.remedy_classes import RESEAT, RMA, SOFTWARE
from pytest_gpufabric.remedy_rules import Context
from pytest_gpufabric.report import phrases
from pytest_gpufabric.report.check_words import margin, phrase

DATA = Path(__file__).parent / "data"
ONE_H100_AS_H200 = DATA / "results" / "h200-nvswitch-x2-live-on-h100-x1.json"
PLATFORM_H100 = DATA / "captures" / "platform" / "h100-sxm-x2" / "results-platform-all-live.json"

TOPOLOGY_KINDS = ["gpu-count", "gpu-model", "gpu-memory", "pcie-link", "ecc-mode", "topology-matrix", "nvlinks",
                  "affinity"]
PLATFORM_KINDS = ["platform-acs", "platform-iommu", "platform-peer-memory", "platform-persistence-mode",
                  "platform-driver", "platform-vbios", "platform-nic-firmware", "platform-cpu-governor",
                  "platform-numa-balancing", "platform-hugepages", "platform-pcie"]
CHECK_NAMES = ["gpu-count", "gpu-model", "gpu-memory", "pcie-link", "ecc-mode", "topology-matrix", "nvlink-links",
               "affinity", "platform-"]


def _failed(path: Path) -> dict[str, dict]:
    document = json.loads(path.read_text(encoding="utf-8"))
    return {check["name"]: check for check in document["checks"] if check.get("verdict") == "failed"}


def test_the_families_declare_their_kinds_in_promise_order():
    assert [kind.name for kind in topology.KINDS] == TOPOLOGY_KINDS
    assert [kind.name for kind in platform.KINDS] == PLATFORM_KINDS
    names = list(KINDS)
    assert names[names.index("gpu-count"):names.index("gpu-count") + 8] == TOPOLOGY_KINDS
    assert all(KINDS[kind.name] is kind for kind in (*topology.KINDS, *platform.KINDS))
    assert {kind.suite for kind in topology.KINDS} == {"test_topology.py"}
    assert {kind.suite for kind in platform.KINDS} == {"test_platform.py"}
    sections = claimed_sections()
    assert sections["gpus"] == ("gpu-count", "gpu-model", "gpu-memory", "pcie-link", "ecc-mode")
    assert sections["topology"] == ("topology-matrix", "affinity")
    assert sections["nvlink"] == ("nvlinks",)
    assert sections["platform"] == tuple(PLATFORM_KINDS)


def test_no_table_but_the_registry_names_a_check():
    """The tables keyed by check name are gone: each kind's rules are read from the registry alone."""
    assert not hasattr(remedy_rules, "RULES") and not hasattr(phrases, "_PHRASES")
    assert not hasattr(legacy_limits, "_READERS") and not hasattr(legacy_limits, "limits_of")
    for name in CHECK_NAMES:
        assert check_rule(name) is not None, name


def test_a_lone_h100_judged_as_an_h200_pair_reads_by_the_topology_rules():
    failed = _failed(ONE_H100_AS_H200)
    ctx = Context()
    assert remedy_of_check(failed["gpu-count"], ctx) == (
        RESEAT, "1 of the 2 GPUs promised answer: a board that is not on the bus is reseated first (its slot, riser "
                "and power cables)")
    assert remedy_of_check(failed["gpu-model"], ctx) == (
        RMA, "GPU0: expected a NVIDIA H200, found NVIDIA H100 80GB HBM3 (serial 1752624010498): a board of another "
             "model than sold")
    assert remedy_of_check(failed["gpu-memory"], ctx) == (
        RMA, "GPU0 has 79.65 GiB of the 140.00 GiB promised: a board of another SKU than sold")
    assert remedy_of_check(failed["topology-matrix"], ctx) == (
        RESEAT, "GPU0-GPU1: expected NV18, found no such device: a device the profile names is not on the bus: "
                "reseat it")
    assert remedy_of_check(failed["nvlink-links"], ctx) == (RESEAT, "GPU0: 0 active NVLinks of 18: a bridge or cable "
                                                                     "not seated")
    assert remedy_of_check(failed["affinity"], ctx)[0] == SOFTWARE
    assert phrase(failed["gpu-count"]) == ("2 GPU(s)", "1 GPU(s)")
    assert phrase(failed["gpu-memory"]) == ("≥ 140.00 GiB", "79.65 GiB")
    assert phrase(failed["topology-matrix"]) == ("GPU0-GPU1 NV18", "one GPU")
    assert phrase(failed["nvlink-links"]) == ("18 NVLinks, all active, ≥ 26.5 GB/s each", "0 active")
    assert phrase(failed["affinity"]) == ("CPUs 0-31, NUMA node 0", "CPUs 0-15, NUMA node 0")
    # gpu-memory's limit is the family's reader, no longer the check module's registration
    assert [(limit.value, limit.bound) for limit in record_limits(failed["gpu-memory"])] == [
        (85520809984, 150323855360)]
    assert margin(failed["gpu-memory"]) == ("−60.35 GiB (−43.1%)", "worst 79.65 GiB vs min 140.00 GiB", False)


def test_a_promise_of_the_missing_gpu_points_to_the_gpu_count():
    failed = _failed(ONE_H100_AS_H200)
    ctx = Context(checks={"suites/test_topology.py::test_gpu_count": [failed["gpu-count"]]},
                  tests={"suites/test_topology.py::test_gpu_model[GPU1]": "error"})
    why = ("its GPU is missing: 1 of the 2 GPUs promised answer: a board that is not on the bus is reseated first "
           "(its slot, riser and power cables)")
    assert remedy_of_promise({"id": "gpu-model[GPU1]", "outcome": "failed",
                              "tests": ["suites/test_topology.py::test_gpu_model[GPU1]"]}, ctx) == (RESEAT, why)
    assert remedy_of_promise({"id": "gpu-model[GPU1]", "outcome": "not checked", "reason": "the test broke",
                              "tests": ["suites/test_topology.py::test_gpu_model[GPU1]"]}, ctx) == (RESEAT, why)


def test_a_platform_setting_reads_by_the_platform_rule():
    failed = _failed(PLATFORM_H100)
    peer = failed["platform-peer-memory"]
    assert remedy_of_check(peer) == (SOFTWARE, f"{remedy_rules._lead(peer)}: a host setting, version or module")
    assert phrase(peer) == phrases.settings_phrase(peer)
    assert check_rule("platform-hugepages").phrase is phrases.settings_phrase
