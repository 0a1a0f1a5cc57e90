"""Every reader strict, every option value checked at start, one cleaning layer for text from a machine, a bundle or
a user (issue 40: "Readers that are not strict", "Text from evidence reaches terminals and YAML raw").

Each case edits a COPY of a shipped profile, bundle or fleet node in tmp_path, the way a hostile or damaged file
arrives, and asserts the exact outcome beside what the unedited copy gives:

1. a key named twice in a JSON or YAML file is refused, naming the file, the key and the line;
2. YAML aliases are refused (a 541-byte "billion laughs" returns at once);
3. option values are checked when the options are read: a usage error naming the option and the value;
4. escape sequences in a GPU's name and serial reach no terminal, page or printed JSON;
5. the YAML the tool writes comes from a serializer: a fleet folder's name cannot add a key to a golden profile.

Sources: tests/data/bundles/h200-nvswitch-x2 and h200-nvswitch-x4 (recorded on 2x and 4x H200 SXM 141GB), the
shipped profile h200-nvswitch-x2.yaml, the ib_write_bw capture of tests/data/captures/a100-pcie-roce-2node and the
fleet nodes of tests/fleet_nodes.py (replays of recorded bundles).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from derive_health import with_read_kernel_log
from fleet_nodes import derived, replayed, write_node

from pytest_gpufabric.cli import main
from pytest_gpufabric.formats.clean import clean_line, clean_text, yaml_comment
from pytest_gpufabric.formats.strict import StrictReadError, load_json_text, load_yaml_text
from pytest_gpufabric.reference import REFERENCES_DIR, ReferenceDataError, load_reference_file

DATA = Path(__file__).parent / "data"
BUNDLES = DATA / "bundles"
SHIPPED_PROFILE = Path(__file__).parent.parent / "profiles" / "h200-nvswitch-x2.yaml"
IB_WRITE_BW = DATA / "captures" / "a100-pcie-roce-2node" / "ib_write_bw-client.txt"
#: what a hostile GPU name or serial carries: erase the line, go up one, print a green verdict of its own
FORGED = "\x1b[2K\x1b[1A\x1b[32mgpufabric: ACCEPTED\x1b[0m"
ESC = b"\x1b"


def _copy_bundle(tmp_path: Path, name: str) -> Path:
    target = tmp_path / f"copy-of-{name}"
    shutil.copytree(BUNDLES / name, target)
    return target


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= count, (path, old)
    path.write_text(text.replace(old, new, count), encoding="utf-8")


def _line_after(path: Path, anchor: str, added: str) -> None:
    """``added`` (a whole line) put after the first line holding ``anchor``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    at = next(i for i, line in enumerate(lines) if anchor in line)
    path.write_text("\n".join(lines[:at + 1] + [added] + lines[at + 1:]), encoding="utf-8")


# --- 1. a key named twice ----------------------------------------------------------------------------------------


def _profile_with_topology_twice(tmp_path: Path) -> Path:
    """The shipped profile with a second ``topology:`` (one that promises nothing) appended at the end."""
    text = SHIPPED_PROFILE.read_text(encoding="utf-8")
    assert text.count("\ntopology:") == 1
    path = tmp_path / "h200-nvswitch-x2-twice.yaml"
    path.write_text(text.rstrip("\n") + "\ntopology:\n  matrix: {}\n", encoding="utf-8")
    return path


def test_control_the_shipped_profile_copy_validates(tmp_path, capsys):
    path = tmp_path / "h200-nvswitch-x2-copy.yaml"
    shutil.copy(SHIPPED_PROFILE, path)
    assert main(["profile", "validate", str(path)]) == 0
    assert "valid profile h200-nvswitch-x2" in capsys.readouterr().out


def test_a_profile_with_a_key_twice_is_refused_naming_key_and_lines(tmp_path, capsys):
    path = _profile_with_topology_twice(tmp_path)
    first = SHIPPED_PROFILE.read_text(encoding="utf-8").split("\n").index("topology:") + 1
    second = len(path.read_text(encoding="utf-8").rstrip("\n").split("\n")) - 1
    assert main(["profile", "validate", str(path)]) == 2
    assert capsys.readouterr().err == (f"gpufabric: {path}: the key 'topology' appears twice in one mapping (lines "
                                       f"{first} and {second}): a file states each key once\n")


def test_a_profile_with_a_key_twice_is_a_usage_error_under_pytest(pytester: pytest.Pytester):
    path = _profile_with_topology_twice(pytester.path)
    result = pytester.runpytest("--gpu-profile", str(path), "--gpu-replay", str(BUNDLES / "h200-nvswitch-x2"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the key 'topology' appears twice in one mapping*"])
    assert not (pytester.path / "reports" / "gpufabric-results.json").exists()


def test_an_nvml_record_with_a_serial_twice_is_refused(pytester: pytest.Pytester):
    bundle = _copy_bundle(pytester.path, "h200-nvswitch-x2")
    nvml = bundle / "nvml.json"
    _line_after(nvml, '"serial": "1653824016477"', '      "serial": "1653824099999",')
    line = nvml.read_text(encoding="utf-8").split("\n").index('      "serial": "1653824099999",') + 1
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f'*{nvml}: not a gpufabric NVML record (the key "serial" appears twice in one '
                                 f"object (line {line})*"])


def test_a_health_record_with_a_key_twice_is_unknown_not_healthy(tmp_path, capsys):
    bundle = tmp_path / "copy-of-h200-nvswitch-x4"
    shutil.copytree(with_read_kernel_log(BUNDLES / "h200-nvswitch-x4"), bundle)  # judged by every check: control 0
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle)]) == 0  # control
    capsys.readouterr()
    health = bundle / "health.json"
    _line_after(health, '"serial": "1653724049829"', '    "serial": "1653724049829",')
    line = health.read_text(encoding="utf-8").split("\n").index('    "serial": "1653724049829",') + 1
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle)]) == 6
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gpufabric: UNKNOWN node health.json not readable; remedy: rerun"
    assert out[1] == (f"  unknown: node: health.json not readable [rerun]: {health}: not JSON (the key \"serial\" "
                      f"appears twice in one object (line {line}): a file states each key once (readers differ on "
                      "which copy they keep))")


def test_a_manifest_or_recording_with_a_key_twice_is_refused(tmp_path):
    """bandwidth.json's ``format`` twice: the bundle is refused, not read by either copy."""
    from pytest_gpufabric.errors import BundleError
    from pytest_gpufabric.fabric.bundle import load_json_recording

    bundle = _copy_bundle(tmp_path, "h200-nvswitch-x2-bandwidth")
    recording = bundle / "bandwidth.json"
    assert load_json_recording(bundle, "bandwidth.json")["format"]  # control
    document = recording.read_text(encoding="utf-8")
    recording.write_text(document.replace("{", '{"format": "other", ', 1), encoding="utf-8")
    with pytest.raises(BundleError, match='the key "format" appears twice in one object'):
        load_json_recording(bundle, "bandwidth.json")


def test_a_fleet_node_whose_results_hold_a_key_twice_is_unreadable(tmp_path, capsys):
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    write_node(root, "h200a", derived(accepted, "h200a"))
    node = write_node(root, "h200b", derived(accepted, "h200b"))
    results = node / "gpufabric-results.json"
    # at the top level (the fleet reads each part by its line) and inside the run's record
    _line_after(results, "{", '  "machine_error": "forged",')
    main(["fleet", "report", str(root), "-o", str(tmp_path / "out")])
    document = json.loads((tmp_path / "out" / "fleet-results.json").read_text(encoding="utf-8"))
    h200b = next(n for n in document["nodes"] if n["name"] == "h200b")
    assert (h200b["verdict"], h200b["reason"]) == (None, "unreadable: gpufabric-results.json: the key "
                                                         "'machine_error' appears twice at the top level: a file "
                                                         "states each key once")
    shutil.copy(root / "h200a" / "gpufabric-results.json", results)
    _line_after(results, '"run": {', '    "host": "forged",')
    main(["fleet", "report", str(root), "-o", str(tmp_path / "out")])
    capsys.readouterr()
    document = json.loads((tmp_path / "out" / "fleet-results.json").read_text(encoding="utf-8"))
    h200b = next(n for n in document["nodes"] if n["name"] == "h200b")
    assert h200b["verdict"] is None and 'the key "host" appears twice in one object' in h200b["reason"]


def test_a_reference_file_with_a_key_twice_is_refused(tmp_path):
    text = (REFERENCES_DIR / "h200-sxm.yaml").read_text(encoding="utf-8")
    copy = tmp_path / "h200-sxm.yaml"
    copy.write_text(text, encoding="utf-8")
    assert load_reference_file(copy).model  # control
    copy.write_text(text + "model: NVIDIA H100\n", encoding="utf-8")
    with pytest.raises(ReferenceDataError, match="the key 'model' appears twice in one mapping"):
        load_reference_file(copy)


def test_a_dcgm_json_with_a_status_twice_is_refused(tmp_path, capsys):
    """dcgmi diag -j's first result given "FAIL" then "PASS": refused, not read as either."""
    source = DATA / "captures" / "public" / "dcgm" / "dcgm-3.1.0-nvvs-json-8gpu-null-entries-uppercase-status.json"
    copy = tmp_path / source.name
    copy.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["parse", "dcgm-diag", str(copy)]) == 0  # control
    capsys.readouterr()
    _edit(copy, '"status" : "PASS"', '"status" : "FAIL", "status" : "PASS"')
    assert main(["parse", "dcgm-diag", str(copy)]) == 2
    assert capsys.readouterr().err == (f"gpufabric: {copy}: not `dcgmi diag` output: the key \"status\" appears "
                                       "twice in one object\n")


def test_the_strict_readers_name_the_second_copy():
    with pytest.raises(StrictReadError) as caught:
        load_json_text('{"gpus": [{"serial": "1"},\n {"serial": "2",\n  "serial": "3"}]}', "x.json")
    assert (caught.value.key, caught.value.line) == ("serial", 3)
    assert str(caught.value).startswith('x.json: the key "serial" appears twice in one object (line 3)')
    assert load_json_text('{"a": {"a": 1}, "b": [{"a": 2}]}') == {"a": {"a": 1}, "b": [{"a": 2}]}
    with pytest.raises(StrictReadError, match=r"the key 'a' appears twice in one mapping \(lines 1 and 3\)"):
        load_yaml_text("a: 1\nb: {a: 2}\na: 3\n")
    with pytest.raises(StrictReadError, match=r"a YAML merge key \(<<\) on line 2: merge keys are refused"):
        load_yaml_text("a: 1\n<<: {a: 2}\n")


# --- 2. YAML aliases -------------------------------------------------------------------------------------------

#: nine levels of nine aliases each: 9^9 (387 million) leaves once expanded; 541 bytes with the description
BILLION_LAUGHS = "name: laughs\ndescription: laughs, nested\n" + "a0: &a0 [lol]\n" + "".join(
    f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]\n" for n in range(1, 10))


def test_billion_laughs_is_refused_at_once(tmp_path, capsys):
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS, encoding="utf-8")
    assert len(BILLION_LAUGHS.encode()) == 541
    started = time.monotonic()
    assert main(["profile", "validate", str(path)]) == 2
    assert time.monotonic() - started < 5
    assert capsys.readouterr().err == (f"gpufabric: {path}: a YAML alias (*a0) on line 4: aliases are refused; write "
                                       "the value out where it is used\n")


def test_billion_laughs_is_a_usage_error_under_pytest(pytester: pytest.Pytester):
    path = pytester.path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS, encoding="utf-8")
    result = pytester.runpytest("--gpu-profile", str(path), "--gpu-replay", str(BUNDLES / "h200-nvswitch-x2"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a YAML alias (*a0) on line 4: aliases are refused*"])


# --- 3. option values checked at start -------------------------------------------------------------------------


BAD_OPTIONS = [
    (["--gpu-metrics-port", "99999"], "--gpu-metrics-port '99999': not a TCP port; give a number from 1 to 65535"),
    (["--gpu-metrics-port", "-1"], "--gpu-metrics-port '-1': not a TCP port; give a number from 1 to 65535"),
    (["--gpu-burn-in", "10m", "--gpu-burn-in-plant-fault", "\u00b2"],
     "--gpu-burn-in-plant-fault \u00b2: not a GPU of the profile (give 0 to 1)"),
    (["--gpu-plant-memory-fault", "\u00b3"],
     "--gpu-plant-memory-fault \u00b3: not a GPU of the profile (give 0 to 1)"),
    (["--gpu-burn-in", "1e9s"], "--gpu-burn-in: '1e9s' is longer than a week (168h): write the burn-in's duration, "
                                "e.g. 10m or 2h"),
    (["--gpu-customer", "ACME" + FORGED], "--gpu-customer 'ACME\\x1b[2K\\x1b[1A\\x1b[32mgpufabric: "
                                          "ACCEPTED\\x1b[0m': holds a control character (a newline or an escape "
                                          "sequence); give plain text"),
    (["--gpu-waive", "gpu-model=agreed\nACCEPTED"], "--gpu-waive 'gpu-model=agreed\\x0aACCEPTED': holds a control "
                                                     "character (a newline or an escape sequence); give plain text"),
    (["--gpu-evidence", "no-such-dcgm.txt"], "--gpu-evidence no-such-dcgm.txt: no such file; give the saved output "
                                             "of dcgmi diag or nvbandwidth"),
]


@pytest.mark.parametrize("args,said", BAD_OPTIONS, ids=[" ".join(a).encode("ascii", "backslashreplace").decode()
                                                         for a, _ in BAD_OPTIONS])
def test_a_bad_option_value_is_a_usage_error_naming_it(pytester: pytest.Pytester, args, said):
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(BUNDLES / "h200-nvswitch-x2"),
                                *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert errors == [f"ERROR: {said}"]
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_bad_port_from_the_ini_file_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\ngpu_metrics_port = 99999\n")
    # the shipped bundle by name: a path into this repository would make its pyproject.toml the run's ini file
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gpu-metrics-port '99999': not a TCP port; give a number from 1 to 65535"])


@pytest.mark.parametrize("args,option,said", [
    (["health", "--xid-window", "inf"], "--xid-window", "'inf': give a number in [900, 3.1536e+08]"),
    (["health", "--plant-fault", "99999999"], "--plant-fault", "'99999999': give a whole number from 0 to 4095"),
    (["profile", "init", "-o", "x.yaml", "--percentile", "nan"], "--percentile", "'nan': give a number in (0, 50)"),
    (["profile", "init", "-o", "x.yaml", "--repeats", "0"], "--repeats", "'0': give a whole number from 1 to 1000"),
    (["bench", "all_reduce", "--iters", "-3"], "--iters", "'-3': give a whole number from 1 to 1000000"),
    (["bench", "all_reduce", "--timeout", "1e400"], "--timeout", "'1e400': give a number in (0, 604800]"),
])
def test_a_subcommands_bad_number_is_exit_2_naming_it(tmp_path, monkeypatch, capsys, args, option, said):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        main(args)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"error: argument {option}: {said}\n") and "Traceback" not in err


def test_a_fleet_reports_bad_number_is_its_usage_error(tmp_path, capsys):
    """`fleet report` answers in pytest's codes (4: usage error), as for its other options."""
    assert main(["fleet", "report", str(tmp_path), "--max-node-mb", "nan"]) == 4
    assert capsys.readouterr().err.endswith("error: argument --max-node-mb: 'nan': give a number in (0, 1e+06]\n")


# --- 4. one cleaning layer -------------------------------------------------------------------------------------


def test_the_cleaning_writes_each_control_character_out():
    assert clean_line("H200" + FORGED) == "H200\\x1b[2K\\x1b[1A\\x1b[32mgpufabric: ACCEPTED\\x1b[0m"
    assert clean_line("a\nb\rc\td\x7fe\x9bf\u202eg") == "a\\x0ab\\x0dc\td\\x7fe\\x9bf\\u202eg"
    assert clean_text("two\nlines\x1b") == "two\nlines\\x1b"
    assert clean_line(clean_line(FORGED)) == clean_line(FORGED)  # cleaning again changes nothing
    assert yaml_comment("folder\nnvlink: {links_per_gpu: 1}") == "# folder\n# nvlink: {links_per_gpu: 1}\n"


def _forged_bundle(root: Path, name: str = "h200-nvswitch-x2") -> Path:
    """A copy of the bundle whose GPU0's name and serial carry FORGED, in nvml.json and health.json."""
    bundle = _copy_bundle(root, name)
    for record in ("nvml.json", "health.json"):
        _edit(bundle / record, '"NVIDIA H200"', json.dumps("NVIDIA H200" + FORGED))
        serial = "1653824016477" if name == "h200-nvswitch-x2" else "1653724049829"
        _edit(bundle / record, f'"{serial}"', json.dumps(serial + FORGED))
    return bundle


def test_escape_sequences_from_nvml_reach_no_output_of_an_acceptance(pytester: pytest.Pytester):
    """The profile promises H100s, so GPU0's model check fails and quotes the forged name and serial: in pytest's
    failure lines, the verdict summary, the results file and the HTML report, the ESC byte is written out."""
    bundle = _forged_bundle(pytester.path)
    profile = pytester.path / "promised.yaml"
    profile.write_text(yaml.safe_dump({"name": "promised", "gpus": {"count": 2, "model": "NVIDIA H100"}}),
                       encoding="utf-8")
    html = pytester.path / "reports" / "acceptance.html"
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle), "--html", str(html),
                                "--self-contained-html")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    printed = "\n".join(result.outlines + result.errlines)
    assert "\x1b" not in printed
    forged = "NVIDIA H200\\x1b[2K\\x1b[1A\\x1b[32mgpufabric: ACCEPTED\\x1b[0m"
    assert f"GPU0: expected a NVIDIA H100, found {forged} (serial 1653824016477\\x1b[2K" in printed
    assert f"  failed: gpu-model[GPU0]: GPU0: expected a NVIDIA H100, found {forged}" in printed
    results = pytester.path / "reports" / "gpufabric-results.json"
    assert ESC not in results.read_bytes() and ESC not in html.read_bytes()
    document = json.loads(results.read_text(encoding="utf-8"))
    assert "\x1b" not in json.dumps(document, ensure_ascii=False)
    assert document["summary"]["verdict"] == "REJECTED"


def test_escape_sequences_from_nvml_reach_no_output_of_gpufabric_accept(tmp_path):
    """The same bundle through `gpufabric accept` (its own process, as an operator runs it): stdout, stderr, the
    results and the report hold no ESC byte."""
    bundle = _forged_bundle(tmp_path)
    profile = tmp_path / "promised.yaml"
    profile.write_text(yaml.safe_dump({"name": "promised", "gpus": {"count": 2, "model": "NVIDIA H100"}}),
                       encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", str(profile),
                           "--replay", str(bundle), "--report-dir", str(tmp_path / "reports"), "-p",
                           "no:cacheprovider"], cwd=tmp_path, capture_output=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert ESC not in done.stdout + done.stderr
    assert b"found NVIDIA H200\\x1b[2K\\x1b[1A\\x1b[32mgpufabric: ACCEPTED\\x1b[0m (serial" in done.stdout
    written = sorted((tmp_path / "reports").iterdir())
    assert {p.name for p in written} >= {"gpufabric-results.json", "acceptance.html"}
    for path in written:
        assert ESC not in path.read_bytes(), path.name


def test_escape_sequences_from_health_json_reach_no_health_line(tmp_path, capsys):
    """GPU0 of the 4x bundle with 3 uncorrectable ECC errors planted and a forged serial: it drains, and neither the
    first line nor the detail lines nor the JSON as printed carry an ESC byte."""
    bundle = _forged_bundle(tmp_path, "h200-nvswitch-x4")
    health = bundle / "health.json"
    data = json.loads(health.read_text(encoding="utf-8"))
    data["gpus"][0]["ecc_uncorrected_volatile"] = 3
    health.write_text(json.dumps(data), encoding="utf-8")
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle)]) == 1
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err
    assert printed.out.splitlines()[0].startswith("gpufabric: DRAIN GPU0 (serial 1653724049829")
    assert "  drain: GPU0 (serial 1653724049829\\x1b[2K\\x1b[1A\\x1b[32mgpufabric: ACCEPTED\\x1b[0m)" in printed.out
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle), "--json"]) == 1
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err
    serials = {f.get("serial") for f in json.loads(printed.out)["findings"]}
    assert clean_line("1653724049829" + FORGED) in serials  # the text itself is clean, not only its printing


def test_escape_sequences_in_a_perftest_capture_reach_no_parse_output(tmp_path, capsys):
    capture = tmp_path / "ib_write_bw-client.txt"
    capture.write_text(IB_WRITE_BW.read_text(encoding="utf-8").replace("irdma0", "irdma0" + FORGED, 1),
                       encoding="utf-8")
    assert main(["parse", "perftest", str(capture), "--line-rate", "100"]) == 0
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err
    assert json.loads(printed.out)["device"] == clean_line("irdma0" + FORGED)


def test_escape_sequences_in_a_fleet_node_reach_no_fleet_output(tmp_path, capsys):
    """A node folder named with an escape sequence, whose results carry it in the GPU name and serial and in the
    host name: the fleet's terminal lines, JSON, HTML and JUnit files hold no ESC byte."""
    accepted = replayed("accepted")
    root = tmp_path / "fleet"
    write_node(root, "h200a", derived(accepted, "h200a"))
    forged = derived(accepted, "h200b" + FORGED)
    forged["machine"]["gpus"][0]["name"] += FORGED
    write_node(root, "h200b" + FORGED, forged)
    out = tmp_path / "out"
    main(["fleet", "report", str(root), "-o", str(out), "--allow-replays"])  # the nodes are replays of a bundle
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err
    assert printed.out.startswith("fleet: ACCEPTED: all 2 node(s) accepted")
    for written in sorted(out.iterdir()):
        assert ESC not in written.read_bytes(), written.name
    assert "h200b\\x1b[2K\\x1b[1A" in (out / "fleet.html").read_text(encoding="utf-8")


# --- 5. YAML the tool writes -----------------------------------------------------------------------------------


def test_a_fleet_folder_name_cannot_add_a_key_to_a_golden_profile(tmp_path, capsys):
    """The control fleet's golden profile and one whose third node's folder name carries an nvlink: section (after
    a newline, ending in a comment) load back with the same keys, and no nvlink: promise."""
    accepted = replayed("accepted")
    injected = "h200c\nnvlink: {links_per_gpu: 1, all_active: false}\n#"
    profiles = {}
    for case, third in (("control", "h200c"), ("injected", injected)):
        root = tmp_path / case
        for name in ("h200a", "h200b"):
            write_node(root, name, derived(accepted, name))
        write_node(root, third, derived(accepted, "h200c"))
        output = tmp_path / f"{case}.yaml"
        assert main(["profile", "init", "--from-fleet", str(root), "-o", str(output), "--name", "golden",
                     "--allow-replays"]) == 0
        profiles[case] = output.read_text(encoding="utf-8")
    capsys.readouterr()
    control, written = (yaml.safe_load(profiles[c]) for c in ("control", "injected"))
    assert list(written) == list(control) and "nvlink" not in written
    assert written == control
    # each line of the name is a comment line of its own
    assert ("# 3 accepted node(s) of 3, profile h200-nvswitch-x2; floors from: h200a, h200b, h200c\n"
            "# nvlink: {links_per_gpu: 1, all_active: false}\n# #.\n") in profiles["injected"]


def test_profile_init_writes_comments_only_as_comment_lines(tmp_path, capsys):
    """A bundle folder whose name holds a newline and a key: `profile init --replay` writes it into a comment only,
    and the profile loads back with the keys the unedited bundle gives."""
    control = tmp_path / "control.yaml"
    assert main(["profile", "init", "--replay", str(BUNDLES / "h200-nvswitch-x2"), "-o", str(control)]) == 0
    bundle = tmp_path / "x2\nnvlink: {links_per_gpu: 1}\n#"
    shutil.copytree(BUNDLES / "h200-nvswitch-x2", bundle)
    output = tmp_path / "injected.yaml"
    assert main(["profile", "init", "--replay", str(bundle), "-o", str(output), "--name", "control"]) == 0
    capsys.readouterr()
    written, expected = (yaml.safe_load(p.read_text(encoding="utf-8")) for p in (output, control))
    assert written == expected
    assert "x2\n# nvlink: {links_per_gpu: 1}\n# #\n" in output.read_text(encoding="utf-8")
