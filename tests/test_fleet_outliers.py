"""Fleet outliers an operator can act on (issue 25): a node is flagged only past both the statistical test (k MAD)
and a practical margin in the measurement's own terms (a share of the median for bandwidths; degrees for
temperatures, with the headroom to the GPU's own NVML slowdown threshold where its results carry it); nodes
shifted together are one group, reported once with its count.

The nodes are copies of real runs: the replay of a 2x H200 SXM 141GB machine's whole acceptance (tests/fleet_nodes.py;
its burn-in recorded each GPU's maximum temperature, its results carry no slowdown threshold) and the acceptance
run recorded on 1x H100 SXM 80GB (tests/data/results/single-gpu-on-h100-x1/run-2: its power-hold check recorded
68 C at most and NVML's slowdown threshold, 89 C). Every temperature or speed changed from the recorded one is
DERIVED, as marked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fleet_nodes import derived, replayed, write_node

from pytest_gpufabric.fleet.analysis import FleetSettings, analyse, natural_key
from pytest_gpufabric.fleet.html import fleet_html
from pytest_gpufabric.fleet.report import build_fleet_document, judged_nodes, validate_fleet_document

H100_RUN = Path(__file__).parent / "data" / "results" / "single-gpu-on-h100-x1" / "run-2" / "acceptance-results.json"
#: DERIVED: healthy spread of burn-in maximum temperatures around the recorded one, C (median 0, MAD 1)
SPREAD = [0, -1, 1, 0, 1, -1, 0, 2, -2, 0]


def _burn_in_temperatures(document: dict) -> list[dict]:
    return [c for c in document["checks"] if c["name"] == "burn-in-gpu"]


def _with_temperatures(document: dict, gpu0: int, gpu1: int) -> dict:
    first, second = _burn_in_temperatures(document)
    first["found"]["max_temperature_c"], second["found"]["max_temperature_c"] = gpu0, gpu1  # DERIVED
    return document


def _recorded_temperatures() -> tuple[int, int]:
    first, second = _burn_in_temperatures(replayed("accepted"))
    return first["found"]["max_temperature_c"], second["found"]["max_temperature_c"]


def _node(document: dict, name: str) -> dict:
    return next(n for n in document["nodes"] if n["name"] == name)


def _outlier(document: dict, name: str, check: str, subject: str, metric: str) -> dict | None:
    return next((o for o in _node(document, name)["outliers"]
                 if (o["check"], o["subject"], o["metric"]) == (check, subject, metric)), None)


def test_the_recorded_temperatures_the_fleets_are_built_around():
    # read off the replayed burn-in by hand: GPU0 ran at 57 C at most, GPU1 at 64 C
    assert _recorded_temperatures() == (57, 64)
    # the H100 run: 68 C at most under its power hold, NVML's slowdown threshold 89 C
    hold = next(c for c in json.loads(H100_RUN.read_text(encoding="utf-8"))["checks"] if c["name"] == "power-hold")
    assert (hold["found"]["temperature_c_max"], hold["found"]["thresholds_c"]["slowdown"]) == (68, 89)


def test_hot_warm_slow_and_noisy_nodes_each_judged_in_their_own_terms(tmp_path):
    """Ten healthy nodes spread by 2 C and 0.2 % (DERIVED), then: 3 C warmer, 16 C hotter, 12 % slower, 1 %
    slower. Only the 16 C and the 12 % are flagged; each record carries the figures it rests on."""
    gpu0, gpu1 = _recorded_temperatures()
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    for i, offset in enumerate(SPREAD):
        name = f"h200n{i + 1:02d}"
        factor = 1 + (i % 5 - 2) * 0.001  # DERIVED: within 0.2 % of the recorded speed
        write_node(root, name, _with_temperatures(derived(accepted, name, factor), gpu0 + offset, gpu1 + offset))
    write_node(root, "h200warm", _with_temperatures(derived(accepted, "h200warm"), gpu0 + 3, gpu1))  # DERIVED +3 C
    write_node(root, "h200hot", _with_temperatures(derived(accepted, "h200hot"), gpu0 + 16, gpu1))  # DERIVED +16 C
    write_node(root, "h200slow", _with_temperatures(derived(accepted, "h200slow", 0.88), gpu0, gpu1))  # DERIVED 12 %
    write_node(root, "h200bit", _with_temperatures(derived(accepted, "h200bit", 0.99), gpu0, gpu1))  # DERIVED 1 %
    document = build_fleet_document([root], None, allow_replays=True)
    validate_fleet_document(document)
    assert document["verdict"] == "ACCEPTED" and document["groups"] == []
    flagged = sorted(n["name"] for n in document["nodes"] if n["outliers"])
    assert flagged == ["h200hot", "h200slow"]

    # GPU0 over the 14 nodes: 55 56 56 57 57 57 57 57 57 58 58 59 60 73 (+ 57 - 57 offsets): median 57, MAD 1
    hot = _outlier(document, "h200hot", "burn-in-gpu", "GPU0", "max_temperature_c")
    assert [o["subject"] for o in _node(document, "h200hot")["outliers"]] == ["GPU0"]
    assert (hot["value"], hot["median"], hot["mad"], hot["excess"], hot["margin"]) == (73, 57, 1, 16, 10)
    assert hot["compared_with"] == "fleet" and hot["z"] == pytest.approx(0.6745 * 16)
    assert hot["slowdown_c"] is None and hot["headroom_c"] is None
    assert hot["rule"] == ("16 C over the median (at least 10 C) and 16.0 MAD past it (more than 5); margin to its "
                           "slowdown threshold not known (its results carry no NVML threshold for this GPU)")
    # the +3 C node: 3 MAD and 3 C past the median, neither test passed
    assert not _node(document, "h200warm")["outliers"]

    slow = _outlier(document, "h200slow", "bandwidth-all_reduce", "all_reduce 4GiB", "busbw_gbps")
    metric = next(m for m in document["metrics"] if (m["check"], m["subject"], m["metric"]) ==
                  ("bandwidth-all_reduce", "all_reduce 4GiB", "busbw_gbps"))
    recorded = next(c["found"]["busbw_gbps"] for c in accepted["checks"]
                    if c["name"] == "bandwidth-all_reduce" and c["subject"] == "all_reduce 4GiB")
    assert slow["value"] == pytest.approx(recorded * 0.88) and slow["median"] == metric["median"]
    assert slow["worse_by"] == pytest.approx(1 - recorded * 0.88 / metric["median"]) and slow["worse_by"] > 0.11
    assert slow["mad"] == metric["mad"] > 0 and slow["excess"] == pytest.approx(metric["median"] - slow["value"])
    assert slow["rule"].startswith(f"{slow['worse_by']:.1%} worse than the median (at least 3%) and ")
    # 1 % slower is many MADs of a fleet agreeing to 0.2 %, but inside the run-to-run noise: not flagged
    assert (metric["median"] - recorded * 0.99) / metric["mad"] > 5
    assert not _node(document, "h200bit")["outliers"]


def test_a_warm_row_is_one_group_and_its_hot_node_is_still_named(tmp_path, capsys):
    """Rack r01: ten healthy nodes; rack r02: six nodes 6 C warmer (DERIVED) and one 16 C hotter than its own
    rack. The rack is reported once, with its count; only the hot node is flagged, against its rack's median."""
    gpu0, gpu1 = _recorded_temperatures()
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    for i, offset in enumerate(SPREAD):
        name = f"r01n{i + 1:02d}"
        write_node(root, name, _with_temperatures(derived(accepted, name), gpu0 + offset, gpu1 + offset))
    for i, offset in enumerate([0, -1, 1, 0, 1, -1]):
        name = f"r02n{i + 1:02d}"
        write_node(root, name, _with_temperatures(derived(accepted, name), gpu0 + 6 + offset, gpu1 + 6 + offset))
    write_node(root, "r02n07", _with_temperatures(derived(accepted, "r02n07"), gpu0 + 6 + 16, gpu1 + 6))
    document = build_fleet_document([root], None, allow_replays=True)
    validate_fleet_document(document)

    rack = [f"r02n{i:02d}" for i in range(1, 8)]
    assert len(document["groups"]) == 1 and document["counts"]["groups"] == 1
    group = document["groups"][0]
    assert (group["id"], group["count"], group["nodes"], group["first"], group["last"]) == (
        "group 1", 7, rack, "r02n01", "r02n07")
    # found on both GPUs' temperatures, one group: r02 GPU0 62 62 63 63 64 64 79 against r01's 55-59
    shifts = {m["subject"]: m for m in group["measurements"]}
    assert set(shifts) == {"GPU0", "GPU1"}
    assert (shifts["GPU0"]["median"], shifts["GPU0"]["fleet_median"], shifts["GPU0"]["shift"],
            shifts["GPU0"]["mad"]) == (gpu0 + 6, gpu0, 6, 1)
    assert shifts["GPU0"]["headroom_c_min"] is None and shifts["GPU0"]["slowdown_known"] == 0
    assert group["summary"].startswith("7 nodes, r02n01 to r02n07, shifted together: ")
    assert "1 group(s) of nodes shifted together" in document["reason"]
    assert all(_node(document, n)["groups"] == ["group 1"] for n in rack)

    # one node by one: only the hot one, against its rack's median (gpu0 + 6), not the hall's
    assert sorted(n["name"] for n in document["nodes"] if n["outliers"]) == ["r02n07"]
    hot = _outlier(document, "r02n07", "burn-in-gpu", "GPU0", "max_temperature_c")
    assert (hot["value"], hot["median"], hot["excess"], hot["mad"]) == (gpu0 + 22, gpu0 + 6, 16, 1)
    assert hot["compared_with"] == "group 1 (its own group's median)"

    # the page shows the group once, with its count, and the hot node among the outliers
    page = fleet_html(document, tmp_path / "out")
    section = page[page.index("Groups of nodes shifted together (1)"):page.index("Outliers among the passing nodes")]
    assert section.count(">group 1<") == 1 and ">7<" in section and "r02n01, r02n02" in section
    assert "r02n07" in page[page.index("Outliers among the passing nodes"):page.index('id="distributions"')]

    # JUnit: the group as a property of the suite, the hot node's case carrying its outlier
    from xml.etree import ElementTree

    from pytest_gpufabric.fleet.report import _junit

    suite = ElementTree.fromstring(_junit(document)).find("testsuite")
    assert {p.get("name"): p.get("value") for p in suite.find("properties")}["group 1"] == group["summary"]

    # the terminal: the group on one line of its own, the hot node as an outlier
    from pytest_gpufabric.cli import main

    main(["fleet", "report", "--allow-replays", str(root), "-o", str(tmp_path / "cli-out")])
    out = capsys.readouterr().out
    assert f"  group 1: {group['summary']}" in out.splitlines()
    assert "  outlier r02n07: burn-in-gpu GPU0 max_temperature_c" in out
    # the line says the rule the flag rests on, with its figures
    assert f"  outlier r02n07: burn-in-gpu GPU0 max_temperature_c {gpu0 + 22} C against the fleet's median " \
           f"{gpu0 + 6}: {hot['rule']}" in out.splitlines()


def test_scattered_slow_nodes_are_not_a_group():
    """Groups are stretches of consecutively named nodes: the same shift every tenth node is ten findings."""
    assert sorted(["node10", "node9", "rack2-n1", "rack10-n1"], key=natural_key) == [
        "node9", "node10", "rack2-n1", "rack10-n1"]
    from pytest_gpufabric.fleet.analysis import _Distribution, _judge

    values = {f"node{i:03d}": 100.0 * (0.88 if i % 10 == 3 else 1 + (i % 7 - 3) * 0.001) for i in range(100)}
    distribution = _Distribution("2x H200", "bandwidth-all_reduce", "all_reduce 4GiB", "busbw_gbps", "GB/s", +1,
                                 values)
    _, flagged, groups = _judge(distribution, FleetSettings())
    assert groups == [] and sorted(n for n, _ in flagged) == [f"node{i:03d}" for i in range(3, 100, 10)]
    # the same ten slow nodes in one stretch: one group, no accusation
    together = {f"node{i:03d}": 100.0 * (0.88 if 40 <= i < 50 else 1 + (i % 7 - 3) * 0.001) for i in range(100)}
    _, flagged, groups = _judge(_Distribution("2x H200", "bandwidth-all_reduce", "all_reduce 4GiB", "busbw_gbps",
                                              "GB/s", +1, together), FleetSettings())
    assert flagged == [] and [g["members"] for g in groups] == [[f"node{i:03d}" for i in range(40, 50)]]
    assert groups[0]["measurement"]["shift_share"] == pytest.approx(0.12, abs=0.002)


def _h100_fleet(root: Path, temperatures: dict[str, int]) -> Path:
    recorded = json.loads(H100_RUN.read_text(encoding="utf-8"))
    for name, temperature in temperatures.items():
        document = derived(recorded, name)
        hold = next(c for c in document["checks"] if c["name"] == "power-hold")
        hold["found"]["temperature_c_max"] = temperature  # DERIVED
        write_node(root, name, document)
    return root


def _h100_judged(root: Path, temperatures: dict[str, int]) -> dict:
    """The fleet's findings over copies of the H100 run. DERIVED: each node taken as accepted; the run is results
    format 2, which embeds no profile to judge its promises by again, so the fleet itself never accepts it."""
    nodes = judged_nodes([_h100_fleet(root, temperatures)], allow_replays=True)[0]
    for node in nodes:
        node.verdict = "ACCEPTED"
    return analyse(nodes, None, FleetSettings())


def test_the_margin_to_the_gpus_own_slowdown_threshold(tmp_path):
    """On the H100 run, whose power-hold check recorded NVML's slowdown threshold (89 C): a node 16 C over its
    fleet is flagged with its headroom (5 C); in a hall running at 80 C, a node 7 C over it (under the 10 C margin,
    past 5 MAD) is flagged because it is 2 C from slowing down."""
    spread = {f"h100n{i + 1:02d}": 68 + offset for i, offset in enumerate(SPREAD)}  # DERIVED around 68 C
    document = _h100_judged(tmp_path / "cool", {**spread, "h100hot": 84})
    assert document["verdict"] == "ACCEPTED"
    assert sorted(n["name"] for n in document["nodes"] if n["outliers"]) == ["h100hot"]
    hot = _outlier(document, "h100hot", "power-hold", "GPU0", "temperature_c_max")
    assert (hot["value"], hot["median"], hot["mad"], hot["excess"], hot["slowdown_c"], hot["headroom_c"]) == (
        84, 68, 1, 16, 89, 5)
    assert hot["rule"] == ("16 C over the median (at least 10 C) and 16.0 MAD past it (more than 5); 5 C below its "
                           "GPU's slowdown threshold (89 C)")

    warm_hall = {f"h100n{i + 1:02d}": 80 + offset for i, offset in enumerate(SPREAD)}  # DERIVED around 80 C
    document = _h100_judged(tmp_path / "warm", {**warm_hall, "h100edge": 87})
    assert sorted(n["name"] for n in document["nodes"] if n["outliers"]) == ["h100edge"]
    edge = _outlier(document, "h100edge", "power-hold", "GPU0", "temperature_c_max")
    assert (edge["value"], edge["median"], edge["excess"], edge["headroom_c"]) == (87, 80, 7, 2)
    assert edge["rule"].startswith("2 C below its slowdown threshold (less than 5 C) and 7.0 MAD past it")
    # the same 7 C with 10 C of headroom left is not flagged
    assert FleetSettings().min_degrees_c > 7


def test_the_rules_come_from_the_profile(tmp_path):
    settings = FleetSettings.from_section({"min_degrees_c": 15, "group_min_nodes": 8, "slowdown_headroom_c": 3})
    assert (settings.min_degrees_c, settings.group_min_nodes, settings.slowdown_headroom_c, settings.k) == (
        15, 8, 3, 5)
    from pytest_gpufabric.errors import ProfileError
    from pytest_gpufabric.profile.loader import load_profile

    profile = tmp_path / "p.yaml"
    profile.write_text("name: p\nextends: h200-nvswitch-x2\nfleet: {min_degrees_c: 12, group_min_degrees_c: 3}\n")
    assert load_profile(str(profile)).data["fleet"]["min_degrees_c"] == 12
    profile.write_text("name: p\nextends: h200-nvswitch-x2\nfleet: {fraction: 0.9}\n")
    with pytest.raises(ProfileError, match="fraction"):  # the old either-or rule is gone, not silently ignored
        load_profile(str(profile))


def _slower(document: dict, check: str, subject: str, factor: float) -> dict:
    """DERIVED: one measurement of the node (one check record: its bandwidths and time) ``factor`` as fast."""
    record = next(c for c in document["checks"] if (c["name"], c["subject"]) == (check, subject))
    for key in ("busbw_gbps", "algbw_gbps"):
        record["found"][key] *= factor
    record["found"]["time_us"] /= factor
    return document


def test_no_node_accused_on_one_noisy_number(tmp_path):
    """Ten healthy nodes within 0.2 % (DERIVED), then three with measurements made slower (DERIVED): one all_reduce
    size 4 % slower (past 3 % and k MAD, but one number: not flagged); that size and the sendrecv 4 % slower (two
    measurements agree: flagged on both, each naming the other); one all_reduce size 6 % slower (past the 5 % a
    figure needs alone, SuperBench's variance rule: flagged)."""
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    for i in range(10):
        name = f"h200n{i + 1:02d}"
        write_node(root, name, derived(accepted, name, 1 + (i % 5 - 2) * 0.001))
    size, sendrecv = ("bandwidth-all_reduce", "all_reduce 256MiB"), ("bandwidth-sendrecv", "sendrecv 1GiB")
    write_node(root, "h200noisy", _slower(derived(accepted, "h200noisy"), *size, 0.96))
    write_node(root, "h200two", _slower(_slower(derived(accepted, "h200two"), *size, 0.96), *sendrecv, 0.96))
    write_node(root, "h200six", _slower(derived(accepted, "h200six"), *size, 0.94))
    document = build_fleet_document([root], None, allow_replays=True)
    validate_fleet_document(document)
    assert document["settings"]["alone_deviation"] == 0.05
    assert sorted(n["name"] for n in document["nodes"] if n["outliers"]) == ["h200six", "h200two"]

    busbw = next(m for m in document["metrics"] if (m["check"], m["subject"], m["metric"]) == (*size, "busbw_gbps"))
    assert busbw["flagged"] == ["h200six", "h200two"]  # the noisy node is in no metric's flagged list either
    assert (busbw["median"] - accepted_busbw(accepted, size) * 0.96) / busbw["mad"] > 5  # it was past k MAD

    two = {(o["check"], o["subject"], o["metric"]): o for o in _node(document, "h200two")["outliers"]}
    assert set(two) == {(*size, "busbw_gbps"), (*size, "time_us"), (*sendrecv, "busbw_gbps"), (*sendrecv, "time_us")}
    confirmed = two[(*size, "busbw_gbps")]
    assert confirmed["confirmed_by"] == ["bandwidth-sendrecv sendrecv 1GiB"]
    assert two[(*sendrecv, "time_us")]["confirmed_by"] == ["bandwidth-all_reduce all_reduce 256MiB"]
    assert 0.03 < confirmed["worse_by"] < 0.05
    assert confirmed["rule"].endswith("; under 5% worse, confirmed by 1 other measurement(s) of this node past both "
                                      "tests: bandwidth-sendrecv sendrecv 1GiB")

    # the page's outlier table shows the rule each flag rests on, the confirmation with it
    page = fleet_html(document, tmp_path / "out")
    table = page[page.index("Outliers among the passing nodes"):page.index('id="distributions"')]
    assert "h200noisy" not in table and "confirmed by 1 other measurement(s) of this node past both tests: " \
        "bandwidth-sendrecv sendrecv 1GiB" in table

    six = _outlier(document, "h200six", *size, "busbw_gbps")
    assert six["confirmed_by"] == [] and six["worse_by"] > 0.05
    assert six["rule"].startswith(f"{six['worse_by']:.1%} worse than the median (at least 3%) and ")
    assert six["rule"].endswith(f"; {six['worse_by']:.1%} worse stands alone (at least 5%)")


def accepted_busbw(document: dict, measurement: tuple[str, str]) -> float:
    return next(c["found"]["busbw_gbps"] for c in document["checks"] if (c["name"], c["subject"]) == measurement)
