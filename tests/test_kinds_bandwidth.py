"""The bandwidth, NVLink traffic, RDMA and evidence kinds, each declared once in its family (kinds/): the registry
reads their records (phrase, remedy, limits), and the legacy tables no longer hold them. Records are copied from
the repo's recorded results and changed in the copy."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_gpufabric.catalogue import KINDS
from pytest_gpufabric.kinds import (
    bandwidth,
    check_rule,
    claimed_sections,
    evidence,
    nvlink_traffic,
    rdma,
    record_limits,
)
from pytest_gpufabric.remedy import remedy_of_check
from pytest_gpufabric.remedy_classes import RERUN, SOFTWARE
from pytest_gpufabric.report.check_words import margin, phrase

RESULTS = Path(__file__).parent / "data" / "results"
PACKAGE = Path(__file__).resolve().parents[1] / "pytest_gpufabric"


def _record(results: str, name: str) -> dict:
    """A copy of the first check record of that name in a recorded results file."""
    document = json.loads((RESULTS / results).read_text(encoding="utf-8"))
    return copy.deepcopy(next(c for c in document["checks"] if c["name"] == name))


#: check name -> (the family that reads it, the rule's name there)
RULE_OF = {"bandwidth-all_reduce": (bandwidth, "bandwidth-"), "nccl-tests-sendrecv": (bandwidth, "nccl-tests-"),
           "copy-host_to_device": (bandwidth, "copy-"),
           "nvlink-traffic-links": (nvlink_traffic, "nvlink-traffic-links"),
           "nvlink-traffic-volume": (nvlink_traffic, "nvlink-traffic-volume"),
           "rdma-port": (rdma, "rdma-port"), "rdma-locality": (rdma, "rdma-locality"),
           "ib-write-bw": (rdma, "ib-write-bw"), "rdma-counters": (rdma, "rdma-counters"),
           "dcgm-memory": (evidence, "dcgm-")}


@pytest.mark.parametrize("name", sorted(RULE_OF))
def test_the_family_reads_the_check_and_no_legacy_table_does(name):
    family, rule_name = RULE_OF[name]
    rule = check_rule(name)
    declared = [*(r for kind in getattr(family, "KINDS", ()) for r in kind.checks), *getattr(family, "CHECKS", ())]
    assert rule is not None and rule.name == rule_name and rule in declared
    assert rule.remedy is not None and (rule.phrase is not None or rule.limits is not None)


def test_the_families_make_their_promises_in_the_catalogue_and_claim_their_sections():
    mine = {kind.name for family in (bandwidth, nvlink_traffic, rdma) for kind in family.KINDS}
    assert mine == {"collective-bandwidth", "copy-bandwidth", "nvlink-traffic", "nvlink-traffic-volume", "rdma-port",
                    "rdma-locality", "ib-write-bw", "rdma-counters"}
    order = list(KINDS)  # in the families' order, as before they moved
    assert order[order.index("affinity") + 1:order.index("memory-estimate")] == [
        "collective-bandwidth", "copy-bandwidth", "nvlink-traffic", "nvlink-traffic-volume"]
    assert order[order.index("platform-pcie") + 1:order.index("burn-in-gpu")] == [
        "rdma-port", "rdma-locality", "ib-write-bw", "rdma-counters"]
    sections = claimed_sections()
    assert sections["bandwidth"] == ("collective-bandwidth", "copy-bandwidth")
    assert sections["nvlink_traffic"] == ("nvlink-traffic", "nvlink-traffic-volume")
    assert sections["rdma"] == ("rdma-port", "rdma-locality", "ib-write-bw", "rdma-counters")
    for family in (bandwidth, nvlink_traffic, rdma, evidence):
        assert all((PACKAGE / own).is_file() for own in family.OWN_MODULES), family.__name__


def test_a_copy_reads_its_limits_from_its_family_only():
    record = _record("h200-nvswitch-x2-bandwidth-live-on-h200-x2.json", "copy-gpu_to_gpu")
    limits = record_limits(record)
    assert [(limit.label, limit.bound, limit.unit, limit.chart) for limit in limits] == [
        ("GPU0->GPU1 (p2p)", 375.0, "GB/s", "Copies"), ("GPU1->GPU0 (p2p)", 375.0, "GB/s", "Copies")]
    assert phrase(record) == ("≥ 375 GB/s GPU-to-GPU copy of every pair", "393.1 GB/s at worst (GPU0->GPU1 (p2p))")
    assert margin(record) == ("+18.1 GB/s (+4.8%)", "worst 393.11 GB/s vs min 375 GB/s", True)


def test_a_failed_copy_points_to_a_rerun_with_its_shortfall():
    record = _record("h200-nvswitch-x2-bandwidth-live-on-h200-x2.json", "copy-gpu_to_gpu")
    record["verdict"] = "failed"
    record["found"]["GPU0->GPU1 (p2p)"] = 300.0
    assert remedy_of_check(record) == (RERUN, "gpu_to_gpu: 300 GB/s below its 375 GB/s floor, 80% of it, and no "
                                              "platform setting recorded explains it: one measurement can miss by "
                                              "noise; measure it once more")
    record["found"]["GPU0->GPU1 (p2p)"] = 100.0
    assert remedy_of_check(record)[0] == SOFTWARE  # far below: the transport's settings first


def test_an_nccl_tests_record_gets_the_collective_remedy():
    """A record named as nccl-tests' collective reads as ours: its shortfall, not "no rule reads this check"."""
    record = _record("h200-nvswitch-x2-bandwidth-live-on-h200-x2.json", "bandwidth-all_reduce")
    record.update(name="nccl-tests-all_reduce", verdict="failed", message="all_reduce slow.")
    record["found"]["time_us"] = 80.0
    assert remedy_of_check(record) == (RERUN, "all_reduce 1MiB: 80 µs above its 68 µs limit, 85% of it, and no "
                                              "platform setting recorded explains it: one measurement can miss by "
                                              "noise; measure it once more")


def test_the_burn_in_collectives_keep_the_bandwidth_remedy():
    record = _record("burn-in-10min-live-on-h200-x2.json", "burn-in-collectives")
    record.update(verdict="failed")
    record["found"]["busbw_min"] = 300.0
    assert remedy_of_check(record) == (RERUN, "all_reduce: 300 GB/s below its 330 GB/s floor, 91% of it, "
                                              "and no platform setting recorded explains it: one measurement can "
                                              "miss by noise; measure it once more")


def test_a_volume_record_reads_its_phrase_limits_and_remedy_from_its_family():
    record = _record("nvlink-traffic-p2p-disabled-on-h200-x2.json", "nvlink-traffic-volume")
    assert phrase(record) == ("≥ 23.76 GiB each way (95% of the 25.01 GiB the all-reduce moves)", "TX 0 B, RX 0 B")
    assert margin(record) == ("−23.76 GiB (−100.0%)", "worst 0 B vs min 23.76 GiB", False)
    assert remedy_of_check(record)[1] == ("GPU0: its NVLinks carried no training traffic: a bridge or cable not "
                                          "seated, or the links down")
