"""Each per-GPU diagnostic is one kind (kinds/<family>/) carrying its measurement (its descriptor, diagnostics/,
and its launcher, --measure step and check) and every layer follows from it: a kind that lacks a piece, or a layer
that forgets one, fails here (docs/adding-a-diagnostic.md). The layers are read as they are loaded, and the
report's and the fleet's numbers from a results file of a real run. A kind need not have an equivalent in another
tool, nor a live recording yet."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path

import jsonschema
import pytest
from replays import copy_bundle, replay

from pytest_gpufabric import kinds
from pytest_gpufabric.catalogue import KINDS
from pytest_gpufabric.checks.limits import HIGHER, Limit, figure
from pytest_gpufabric.checks.pcie_load import check_pcie_under_load
from pytest_gpufabric.diagnostics import Diagnostic, recorded
from pytest_gpufabric.diagnostics.hbm import HBM
from pytest_gpufabric.diagnostics.memory_pattern import MEMORY_PATTERN
from pytest_gpufabric.diagnostics.pcie_load import PCIE_LOAD
from pytest_gpufabric.diagnostics.power_hold import POWER_HOLD
from pytest_gpufabric.fleet.nodes import _metrics
from pytest_gpufabric.formats import records
from pytest_gpufabric.kinds import record_limits
from pytest_gpufabric.measurements import REGISTRY
from pytest_gpufabric.profile import measure
from pytest_gpufabric.report import check_words, phrases
from pytest_gpufabric.report.figures import report_figures
from pytest_gpufabric.units import parse_bytes
from pytest_gpufabric.workloads import diagnostics as hbm_pattern_launchers
from pytest_gpufabric.workloads import power_pcie

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "pytest_gpufabric"
SCHEMA = json.loads((PACKAGE / "profile" / "profile.schema.json").read_text(encoding="utf-8"))
#: a real single-GPU acceptance holding all four diagnostics (H100 80GB HBM3)
RECORDED = json.loads((ROOT / "tests/data/results/single-gpu-on-h100-x1/run-6/acceptance-results.json").read_text())
#: the per-GPU diagnostics as the registry declares them, and their descriptors
DIAGNOSTIC_KINDS = kinds.diagnostics()
DIAGNOSTICS = tuple(kind.measurement.diagnostic for kind in DIAGNOSTIC_KINDS)
IDS = [d.name for d in DIAGNOSTICS]

#: the command line each launcher builds for a profile section
COMMANDS = {HBM.name: hbm_pattern_launchers.hbm_command, MEMORY_PATTERN.name: hbm_pattern_launchers.mem_pattern_command,
            POWER_HOLD.name: power_pcie.power_hold_command, PCIE_LOAD.name: power_pcie.pcie_load_command}


def _schema_diagnostics() -> set[str]:
    """The profile sections the schema says suites/test_diagnostics.py judges."""
    return {key for key, spec in SCHEMA["properties"].items()
            if "suites/test_diagnostics.py" in spec.get("description", "")}


def _recorded(name: str) -> dict:
    return next(check for check in RECORDED["checks"] if check["name"] == name)


# --- the descriptors are whole ------------------------------------------------------------------------------


def test_every_diagnostic_section_of_the_schema_has_a_descriptor_and_no_other():
    assert {d.key for d in DIAGNOSTICS} == _schema_diagnostics()


@pytest.mark.parametrize("field", ["name", "key", "fixture", "measurement", "record_file", "format", "script",
                                   "measure_as"])
def test_no_two_descriptors_share_a_name(field: str):
    values = [getattr(d, field) for d in DIAGNOSTICS]
    assert len(set(values)) == len(values), values


@pytest.mark.parametrize("diagnostic", DIAGNOSTICS, ids=IDS)
def test_its_defaults_are_the_schemas_and_no_one_elses(diagnostic: Diagnostic):
    keys = SCHEMA["properties"][diagnostic.key]["properties"]
    assert diagnostic.defaults == {key: spec["default"] for key, spec in keys.items() if "default" in spec}
    assert diagnostic.settings({}) == diagnostic.defaults
    assert diagnostic.settings({"seconds": 0.5})["seconds"] == 0.5  # what the section says wins


@pytest.mark.parametrize("diagnostic", [d for d in DIAGNOSTICS if d.name in COMMANDS],
                         ids=[name for name in IDS if name in COMMANDS])
def test_its_launcher_passes_every_setting_and_its_script_requires_them(diagnostic: Diagnostic):
    """The command for an empty section carries the schema's defaults, and the standalone script has none of its
    own to drift from them: each setting it is given is a required argument."""
    command = COMMANDS[diagnostic.name]({})
    assert Path(command[1]) == PACKAGE / "workloads" / diagnostic.script
    given = {flag for flag in command[2:] if flag.startswith("--")} - {"--device", "--workers"}
    assert given
    tree = ast.parse((PACKAGE / "workloads" / diagnostic.script).read_text(encoding="utf-8"))
    required = {call.args[0].value for call in ast.walk(tree)
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument"
                and any(k.arg == "required" and getattr(k.value, "value", None) is True for k in call.keywords)
                and not any(k.arg == "default" for k in call.keywords)}
    assert given <= required, sorted(given - required)
    values = dict(zip(command[2::2], command[3::2], strict=False))
    for key, default in diagnostic.defaults.items():
        flag = "--" + key.removesuffix("_s").replace("_", "-")
        if flag not in given:
            continue  # not the script's: the launcher's timeout, the check's replay allowance
        if isinstance(default, list):
            assert values[flag] == ",".join(default)
        elif isinstance(default, str) and default[0].isdigit():
            assert int(values[flag]) == parse_bytes(default)
        elif isinstance(default, str):
            assert values[flag] == default
        else:
            assert float(values[flag]) == default, (flag, values[flag], default)


def test_the_memory_pattern_times_out_by_the_schemas_seconds(monkeypatch):
    """The launcher's timeout follows the schema's 5 s (it once said 60 s while the command said 5)."""
    pytest.importorskip("torch")
    seen = {}

    def run_workload(cmd, timeout_s, env):
        seen.update(cmd=cmd, timeout_s=timeout_s)
        return {"format": MEMORY_PATTERN.format, "gpus": []}

    monkeypatch.setattr(hbm_pattern_launchers, "run_workload", run_workload)
    hbm_pattern_launchers.measure_mem_pattern({}, env={})
    seconds = MEMORY_PATTERN.defaults["seconds"]
    assert seen["timeout_s"] == 3 * seconds + 300
    assert seen["cmd"][seen["cmd"].index("--seconds") + 1] == repr(float(seconds))


@pytest.mark.parametrize("kind", DIAGNOSTIC_KINDS, ids=IDS)
def test_the_descriptor_names_what_exists(kind):
    diagnostic, measurement = kind.measurement.diagnostic, kind.measurement
    if diagnostic.script:
        script = (PACKAGE / "workloads" / diagnostic.script).read_text(encoding="utf-8")
        assert f'FORMAT = "{diagnostic.format}"' in script
    for function in (measurement.launch, measurement.judge):
        assert callable(function)
    assert measurement.measure is None or callable(measurement.measure)
    parameters = inspect.signature(measurement.launch).parameters
    assert list(parameters)[:4] == ["section", "env", "boards", "fabric"]
    assert {"repeats", "plant_fault"} <= set(parameters)
    assert list(inspect.signature(measurement.judge).parameters) == ["row", "section", "source", "gpu"]
    assert (PACKAGE / diagnostic.check).is_file()
    assert "gpus" in diagnostic.shape and "index" in diagnostic.shape["gpus"][0]  # a row per GPU, by board
    section = {"type": "object", **SCHEMA["properties"][diagnostic.key], "$defs": SCHEMA["$defs"]}  # its $refs
    jsonschema.validate(dict(diagnostic.measure_section), section)  # what --measure promises is a valid section


# --- every layer knows each one, and none knows another ----------------------------------------------------------


@pytest.mark.parametrize("kind", DIAGNOSTIC_KINDS, ids=IDS)
def test_every_layer_knows_it(kind, tmp_path: Path):
    diagnostic = kind.measurement.diagnostic
    assert KINDS[diagnostic.name] is kind
    assert (kind.name, kind.suite, kind.what, kind.sections) == (diagnostic.name, "test_diagnostics.py",
                                                                  diagnostic.what, (diagnostic.key,))
    entry = REGISTRY[diagnostic.measurement]
    assert (entry.fixture, entry.record_file) == (diagnostic.fixture, diagnostic.record_file)
    assert entry.check == diagnostic.check
    assert records.KINDS[diagnostic.record_file][:2] == (diagnostic.format, diagnostic.shape)
    assert all(kinds.equivalents(tool)[test] == kind.name for tool, test in kind.equivalents)
    assert diagnostic.measure_as in measure._recorded(tmp_path, [kind.measurement])
    assert [rule.name for rule in kind.checks] == [kind.name]
    assert f"## `{diagnostic.key}`" in (ROOT / "docs" / "profile-reference.md").read_text(encoding="utf-8")


def test_no_layer_lists_a_diagnostic_without_a_kind():
    names = {d.name for d in DIAGNOSTICS}
    assert {k.name for k in KINDS.values() if k.suite == "test_diagnostics.py"} == names
    assert {m.name for m in REGISTRY.values() if m.suite == "suites/test_diagnostics.py"} == \
        {d.measurement for d in DIAGNOSTICS}
    assert set(records.KINDS) - {records.MEMORY_FILE} == {d.record_file for d in DIAGNOSTICS}
    assert recorded() == DIAGNOSTICS  # the descriptors below kinds/ are the kinds' own, in promise order
    assert set(kinds.equivalents("dcgm").values()) <= names


def test_dcgm_tests_speak_to_the_shipped_diagnostics():
    """`dcgmi diag`'s tests judged as our promises, as each kind declares its equivalents."""
    assert kinds.equivalents("dcgm") == {
        "memory_bandwidth": HBM.name, "memory": MEMORY_PATTERN.name, "targeted_power": POWER_HOLD.name,
        "targeted_stress": POWER_HOLD.name, "pulse_test": POWER_HOLD.name, "pcie": PCIE_LOAD.name}


def test_the_suite_binds_each_case_to_its_own_kinds_promise(pytester: pytest.Pytester):
    """One generic test judges every diagnostic; each case's promise id is its kind's name and its GPU."""
    bundle = ROOT / "tests" / "data" / "bundles" / "h100-x1-measured"
    code, document = replay(pytester, bundle / "measured.yaml", copy_bundle(pytester, bundle))
    assert code == 0 and document["summary"]["verdict"] == "ACCEPTED"
    judged = {p["id"]: (p["outcome"], [test.split("/")[-1] for test in p["tests"]]) for p in document["promises"]
              if p["id"].split("[")[0] in IDS}
    assert judged == {f"{name}[GPU0]": ("passed", [f"test_diagnostics.py::test_diagnostic[{name}-GPU0]"])
                      for name in IDS}


# --- the report and the fleet follow from the check's limits --------------------------------------------------


#: those a real run recorded (a kind with no live recording yet is held to the rest)
RECORDED_DIAGNOSTICS = [d for d in DIAGNOSTICS if any(c["name"] == d.name for c in RECORDED["checks"])]


@pytest.mark.parametrize("diagnostic", RECORDED_DIAGNOSTICS, ids=[d.name for d in RECORDED_DIAGNOSTICS])
def test_the_report_and_the_fleet_follow_from_the_checks_limits(diagnostic: Diagnostic):
    record = _recorded(diagnostic.name)
    limits = record_limits(record)
    assert limits, f"{diagnostic.check} states no limits for {diagnostic.name}"
    assert all(isinstance(limit, Limit) and limit.unit for limit in limits)
    expected, found = check_words.phrase(record)
    assert (expected, found) != phrases.settings_phrase(record)  # its own words, not the generic ones
    bounded = [limit for limit in limits if limit.bound is not None]
    assert (check_words.margin(record) is not None) == bool(bounded)
    bars = [bar["label"] for group in report_figures({"checks": [record]}) if group["id"] == "floors"
            for chart in group["charts"] for bar in chart["bars"]]
    assert bars == list(dict.fromkeys(limit.bar for limit in bounded if limit.chart))
    metrics, units = _metrics([record])
    assert {metric for _, _, metric in metrics} == {limit.label for limit in limits if limit.fleet}
    assert all(units[(diagnostic.name, limit.label)][1] == limit.better for limit in limits if limit.fleet)


def test_the_recorded_diagnostics_state_their_bounds():
    """HBM against its floors, the pattern's coverage, the power hold's clock: each a margin on the report."""
    assert check_words.margin(_recorded(HBM.name))[0].startswith("+")
    assert [limit.label for limit in record_limits(_recorded(MEMORY_PATTERN.name))] == ["coverage"]
    assert [(limit.label, limit.bound) for limit in record_limits(_recorded(POWER_HOLD.name))
            if limit.bound is not None] == [("sm_clock_mhz_median_at_limit", 1215)]


def test_a_diagnostic_without_a_phrase_of_its_own_is_phrased_from_its_limits(monkeypatch):
    record = {**_recorded(PCIE_LOAD.name), "expected": {**_recorded(PCIE_LOAD.name)["expected"], "min_gbps": 50}}
    rule = dataclasses.replace(kinds.check_rule(PCIE_LOAD.name), phrase=None)
    monkeypatch.setattr(check_words, "check_rule", lambda name, site_kinds=(): rule if name == PCIE_LOAD.name else None)
    expected, found = check_words.phrase(record)
    assert expected == "≥ 50 GB/s h2d; ≥ 50 GB/s d2h"
    assert found == "; ".join(f"{key}: {phrases.number(record['found'][f'{key}_gbps'], 'GB/s')}"
                              for key in ("h2d", "d2h"))
    assert check_words.margin(record)[1].endswith("vs min 50 GB/s")


def test_a_check_result_carries_its_limits():
    """The PCIe load's copy rates against their floor, as the result itself says them (ReFrame's reference)."""
    row = {"index": 0, "serial": "1654", "h2d_gbps": 54.2, "d2h_gbps": 48.1, "copies": {"h2d": 60, "d2h": 60},
           "link": {"under_load": {"gen_min": 5, "width_min": 16, "reads": 200}, "max": {"gen": 5, "width": 16}},
           "replay_counter": {"before": 0, "after": 0}}
    result = check_pcie_under_load(row, {"min": "50 GB/s"}, "a test row")
    assert result.verdict == "failed"
    limits = record_limits(result.to_dict())  # by the reader its kind declares (kinds/pcie_load/)
    assert [(limit.label, limit.value, limit.bound, limit.unit, limit.higher_is_better) for limit in limits] \
        == [("h2d_gbps", 54.2, 50.0, "GB/s", True), ("d2h_gbps", 48.1, 50.0, "GB/s", True)]


def test_a_figure_without_a_bound_is_one_unbounded_limit():
    assert figure("tflops", 600.0, [], "TFLOP/s", HIGHER, fleet=True) == [
        Limit("tflops", 600.0, None, "TFLOP/s", HIGHER, fleet=True)]
    assert [limit.bound for limit in figure("x", 1.0, [(0.5, "min 0.5"), (0.8, "min 0.8")], "", HIGHER)] == [0.5, 0.8]
