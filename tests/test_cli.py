"""The `gpufabric` command on real captures and recorded bundles; bad input gets one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpufabric.cli import EXIT_BAD_INPUT, EXIT_NO_HARDWARE, EXIT_NOT_TESTED, EXIT_USAGE, main
from pytest_gpufabric.fabric.nvml import nvml_available

needs_no_driver = pytest.mark.skipif(nvml_available()[0], reason="this machine has a working NVIDIA driver")


def test_parse_topo_prints_the_documented_json(captures, capsys):
    assert main(["parse", "topo", str(captures / "titan-rtx-nvlink" / "nvidia-smi-topo-m.txt")]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "devices": ["GPU0", "GPU1"],
        "matrix": {"GPU0": {"GPU0": "X", "GPU1": "NV2"}, "GPU1": {"GPU0": "NV2", "GPU1": "X"}},
        "cpu_affinity": {"GPU0": "0-17,36-53", "GPU1": "18-35,54-71"},
    }


def test_parse_topo_of_something_else_is_bad_input(captures, capsys):
    code = main(["parse", "topo", str(captures / "h200-nvswitch-x2" / "nvidia-smi-nvlink-s.txt")])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("gpufabric: ") and "nvidia-smi-nvlink-s.txt" in err and len(err.splitlines()) == 1


def test_parse_missing_file_is_bad_input(tmp_path, capsys):
    assert main(["parse", "topo", str(tmp_path / "absent.txt")]) == EXIT_BAD_INPUT
    assert "cannot read" in capsys.readouterr().err


def test_show_a_recorded_bundle(capsys):
    assert main(["show", "--replay", "h200-nvswitch-x2"]) == 0
    out = capsys.readouterr().out
    assert "GPU0: NVIDIA H200  serial 1653824016477  bus 00000000:00:06.0  PCIe gen 5 x16  NVLinks 18" in out
    assert "GPU0  X     NV18  0-31" in out


def test_show_json(capsys):
    assert main(["show", "--replay", "h100-x1", "--json"]) == 0
    fabric = json.loads(capsys.readouterr().out)
    assert [g["name"] for g in fabric["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert fabric["gpus"][0]["nvlinks"] == []


def test_show_unknown_bundle_lists_shipped_ones(capsys):
    assert main(["show", "--replay", "no-such-bundle"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "replay bundle not found: no-such-bundle" in err and "h200-nvswitch-x2" in err


@needs_no_driver
def test_live_commands_without_driver_say_so(tmp_path, capsys):
    assert main(["show"]) == EXIT_NO_HARDWARE
    assert main(["snapshot", str(tmp_path / "bundle")]) == EXIT_NO_HARDWARE
    err = capsys.readouterr().err
    assert err.count("NVML not available") == 2 and "Traceback" not in err
    assert not (tmp_path / "bundle").exists()
    # each hint names a flag of the command that printed it (they said --gpu-replay, a flag only pytest has)
    assert "use --replay BUNDLE to check a recorded bundle" in err and "--gpu-replay" not in err
    assert "run `gpufabric snapshot` on the GPU machine" in err
    assert main(["profile", "init", "-o", str(tmp_path / "x.yaml")]) == EXIT_NO_HARDWARE
    assert main(["bench", "all_reduce"]) == EXIT_NO_HARDWARE
    err = capsys.readouterr().err
    assert "use --replay BUNDLE" in err and "use --backend gloo to run on CPUs" in err and "--gpu-replay" not in err


def test_accept_names_a_missing_bundle_by_its_own_flag(capsys):
    assert main(["accept", "--replay", "no-such-bundle"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("gpufabric: --replay: replay bundle not found: no-such-bundle") and "--gpu-" not in err


def test_accept_takes_what_a_delivery_needs(tmp_path):
    """--customer, --burn-in and --report-dir reach the run (accept --customer ACME was "unrecognized")."""
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "rtx-2080ti-pcie",
                           "--replay", "rtx-2080ti-pcie", "--customer", "ACME <GPU> Corp", "--report-dir", "out",
                           "--html", "out/acceptance.html", "-q", "-p", "no:cacheprovider", "-k", "topology"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "out" / "gpufabric-results.json").is_file(), done.stdout + done.stderr
    assert "ACME &lt;GPU&gt; Corp" in (tmp_path / "out" / "acceptance.html").read_text()
    helped = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--help"], capture_output=True,
                            text=True, timeout=60).stdout
    helped = " ".join(helped.split())
    for flag in ("--customer", "--operator", "--burn-in", "--report-dir", "any of this plugin's --gpu-* options"):
        assert flag in helped


def test_fleet_fabric_outside_a_launcher_says_how_to_launch_it(monkeypatch, tmp_path, capsys):
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert main(["fleet", "fabric", "-o", str(tmp_path / "out")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "one rank of a run across nodes" in err and "srun" in err and "torchrun" in err and "mpirun" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("bundle", ["h200-nvswitch-x2", "h100-x1", "titan-rtx-nvlink", "rtx-2080ti-pcie"])
def test_profile_init_writes_a_profile_its_machine_passes(pytester: pytest.Pytester, bundle):
    output = pytester.path / f"{bundle}-init.yaml"
    assert main(["profile", "init", "--replay", bundle, "-o", str(output)]) == 0
    assert main(["profile", "validate", str(output)]) == 0
    result = pytester.runpytest("--gpu-profile", str(output), "--gpu-replay", bundle)
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 4 and "failed" not in outcomes
    # what the bundle recorded passes; a promise it cannot show (NVLink traffic of a snapshot taken at rest) is
    # not checked, saying what the bundle lacks, and the run INCOMPLETE for it, never ACCEPTED
    results = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    unchecked = [p for p in results["promises"] if p["outcome"] == "not checked"]
    assert all("holds no" in p["reason"] for p in unchecked), unchecked
    assert (results["summary"]["verdict"], result.ret) == (("INCOMPLETE", 6) if unchecked else ("ACCEPTED", 0))


def test_profile_validate_names_the_problem(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ngpus: {count: 2}\nnvlink: {min_speed: fast}\n")
    assert main(["profile", "validate", str(bad)]) == EXIT_BAD_INPUT
    assert f"{bad} at $.nvlink.min_speed: 'fast' does not match" in capsys.readouterr().err


@needs_no_driver
def test_accept_without_driver_replays_the_shipped_bundle(tmp_path):
    """The README's first command: runs end to end on a machine without a GPU, on the whole acceptance run of a
    1x H100 SXM 80GB machine (its snapshot with the kernel log, every suite its profile promises, the burn-in)."""
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "-q", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "replaying the shipped bundle h100-sxm-x1-acceptance instead" in done.stderr
    assert "gpufabric: ACCEPTED (profile h100-sxm-x1" in done.stdout
    assert "ACCEPTED: all 22 promise(s) checked passed" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("gpufabric: ACCEPTED; results: ")
    assert " warning" not in done.stdout  # pytest's note that this command imported the plugin first is dropped
    assert (tmp_path / "reports" / "acceptance.html").is_file()
    results = json.loads((tmp_path / "reports" / "gpufabric-results.json").read_text())
    assert results["summary"]["verdict"] == "ACCEPTED" and results["summary"]["passed"] == 22
    assert results["burn_in"]["finished"] and len(results["burn_in"]["chunks"]) == 3  # 60, 60 and 24 s of GEMMs


@needs_no_driver
def test_accept_without_driver_replays_the_bundle_of_the_profiles_name(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "h200-nvswitch-x4",
                           "-q", "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 6, done.stdout + done.stderr  # its bundle holds no kernel log: xid-events not checked
    assert "replaying the shipped bundle h200-nvswitch-x4 instead" in done.stderr


def test_accept_rejects_the_wrong_machine(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "titan-rtx-nvlink",
         "--replay", "rtx-2080ti-pcie", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1
    assert "GPU0-GPU1: expected NV2, found PHB" in done.stdout


def test_console_script_is_installed():
    done = subprocess.run(["gpufabric", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("pytest-gpufabric ")


def test_help_imports_no_heavy_library():
    """`gpufabric --help` builds every command family's parser and imports what a command needs only when it runs:
    no NVML, YAML, schema, templates, signatures or torch."""
    heavy = ("pynvml", "yaml", "jsonschema", "fastjsonschema", "jinja2", "cryptography", "torch")
    code = ("import sys\nfrom pytest_gpufabric.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n"
            f"    pass\nprint([m for m in {heavy!r} if m in sys.modules], file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("usage: gpufabric ") and done.stderr.strip() == "[]", done.stderr


def test_profile_init_into_a_missing_directory_is_bad_input(tmp_path, capsys):
    code = main(["profile", "init", "--replay", "titan-rtx-nvlink", "-o", str(tmp_path / "absent" / "x.yaml")])
    assert code == EXIT_BAD_INPUT
    assert "No such file or directory" in capsys.readouterr().err


def test_profile_init_refuses_a_name_that_is_no_profile_name(tmp_path, capsys):
    """The name comes from the file's: one that is no profile name says so and offers --name."""
    output = tmp_path / "My Box.yaml"
    code = main(["profile", "init", "--replay", "titan-rtx-nvlink", "-o", str(output)])
    assert code == EXIT_BAD_INPUT and not output.exists()
    assert capsys.readouterr().err == (
        f"gpufabric: -o {output}: the profile is named after the file, and 'My Box' is not a profile name "
        "(lower-case letters, digits, '.', '_' and '-'): give one with --name, e.g. --name my-box\n")
    assert main(["profile", "init", "--replay", "titan-rtx-nvlink", "-o", str(output), "--name", "My"]) == 2
    assert capsys.readouterr().err == ("gpufabric: --name 'My': a profile's name is lower-case letters, digits, '.', "
                                       "'_' and '-', e.g. my\n")
    assert main(["profile", "init", "--replay", "titan-rtx-nvlink", "-o", str(output), "--name", "my-box"]) == 0
    assert "name: my-box\n" in output.read_text()


def test_profile_init_leaves_an_existing_file_unless_forced(tmp_path, capsys):
    """A profile edited by hand is not overwritten by a second `profile init`: one line, exit 2; --force replaces
    it. A directory as -o is named as one."""
    output = tmp_path / "titan.yaml"
    assert main(["profile", "init", "--replay", "titan-rtx-nvlink", "-o", str(output)]) == 0
    edited = output.read_text() + "# checked by hand: the NVLink floor is the vendor's\n"
    output.write_text(edited)
    capsys.readouterr()
    for source in (["--replay", "rtx-2080ti-pcie"], ["--measure", "--replay", "h100-x1-measured"],
                   ["--from-fleet", str(tmp_path)]):
        assert main(["profile", "init", *source, "-o", str(output)]) == EXIT_BAD_INPUT
        captured = capsys.readouterr()
        assert captured.err == f"gpufabric: -o {output}: the file exists and was left as it is; give --force to " \
                               "replace it\n" and captured.out == ""
        assert output.read_text() == edited
    assert main(["profile", "init", "--replay", "rtx-2080ti-pcie", "-o", str(output), "--force"]) == 0
    assert "checked by hand" not in output.read_text() and "count: 2" in output.read_text()
    assert capsys.readouterr().out.startswith(f"wrote {output} (profile titan, sha256 ")
    assert main(["profile", "init", "--replay", "titan-rtx-nvlink", "-o", str(tmp_path)]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (f"gpufabric: -o {tmp_path}: a directory; give the profile file to write, e.g. "
                                       f"{tmp_path}/NAME.yaml\n")


def test_a_directory_given_as_a_profile_is_named_as_one(tmp_path, capsys, monkeypatch):
    """`--profile profiles/` or a folder's name: said to be a directory, not an unknown profile."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "site").mkdir()
    for spec in ("site", "site/", str(tmp_path / "site")):
        assert main(["profile", "validate", spec]) == EXIT_BAD_INPUT
        assert capsys.readouterr().err == (f"gpufabric: {spec} is a directory, not a profile: give a profile's YAML "
                                           f"file (such as {spec.rstrip('/')}/NAME.yaml) or a profile's name\n")
    assert main(["accept", "--profile", "site"]) == EXIT_USAGE
    assert "site is a directory, not a profile" in capsys.readouterr().err


def test_profile_init_measure_from_a_bundle_says_it_reads_the_bundle(tmp_path, capsys):
    """`--measure --replay` measures nothing: each line says which recording it reads from the bundle, and a
    recording the bundle lacks is said as such (h100-x1-measured has no burn-in log: no GEMM floor)."""
    output = tmp_path / "h100.yaml"
    assert main(["profile", "init", "--measure", "--replay", "h100-x1-measured", "-o", str(output)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "measuring" not in " ".join(err)
    assert err == [f"gpufabric: reading {key} from the bundle h100-x1-measured" for key in
                   ("copy", "hbm", "power", "pcie", "gemm")] + [
        "gpufabric: gemm: not recorded in the bundle h100-x1-measured: no floor for it"] + [
        f"gpufabric: reading {key} from the bundle h100-x1-measured" for key in ("memory", "pattern")]
    assert "#   gemm: not recorded" in output.read_text()


def test_accept_reports_an_unknown_profile_first(capsys):
    assert main(["accept", "--profile", "titan-rtx"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown profile 'titan-rtx' (did you mean 'titan-rtx-nvlink'?); available profiles:" in err


def test_every_command_and_argument_has_help():
    """`gpufabric snapshot --help` said nothing of its dir, nor `profile validate` of its files (issue 25)."""
    import argparse

    from pytest_gpufabric.cli import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest for choice in action._choices_actions if choice.help}
                for name, sub in action.choices.items():
                    if name not in helps:
                        missing.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "gpufabric")
    assert missing == []


# --- exit codes, command by command (docs/exit-codes.md) ---------------------------------------------------------

EXIT_CODES_DOC = Path(__file__).resolve().parents[1] / "docs" / "exit-codes.md"


@pytest.mark.parametrize("argv, code, message", [
    (["accept", "--replay", "no-such-bundle"], EXIT_USAGE, "gpufabric: --replay: replay bundle not found: no-such-"),
    (["accept", "--profile", "no-such-profile"], EXIT_USAGE, "gpufabric: unknown profile 'no-such-profile'; "),
    (["accept", "--report-dir", "{nosuch}"], EXIT_USAGE, "gpufabric: --report-dir: '{nosuch}': unknown placeholder"),
    (["fleet", "report", "no-such-folder"], EXIT_USAGE, "gpufabric fleet report: no-such-folder: not a folder"),
    (["fleet", "fabric", "--profile", "no-such-profile"], EXIT_USAGE, "gpufabric: unknown profile 'no-such-profile'"),
    (["verify", "no-such.json"], EXIT_BAD_INPUT, "gpufabric: cannot read no-such.json"),
    (["bench", "alltoall"], EXIT_BAD_INPUT, "gpufabric: unknown operation(s) ['alltoall']"),
    (["show", "--replay", "no-such-bundle"], EXIT_BAD_INPUT, "gpufabric: replay bundle not found: no-such-bundle"),
    (["snapshot", "/dev/null/bundle"], None, "gpufabric: "),  # 3 without a driver, 2 with one: the folder
    (["profile", "init", "--replay", "no-such-bundle", "-o", "x.yaml"], EXIT_BAD_INPUT,
     "gpufabric: replay bundle not found: no-such-bundle"),
    (["profile", "validate", "no-such-profile"], EXIT_BAD_INPUT, "gpufabric: unknown profile 'no-such-profile'"),
    (["parse", "topo", "no-such.txt"], EXIT_BAD_INPUT, "gpufabric: cannot read no-such.txt"),
    (["reference", "no-such-gpu"], EXIT_BAD_INPUT, "gpufabric: unknown GPU model 'no-such-gpu'"),
], ids=lambda value: "-".join(value[:2]) if isinstance(value, list) else "")
def test_each_command_exits_on_bad_input_as_documented(argv, code, message, tmp_path, monkeypatch, capsys):
    """Every command's bad input: one line on stderr, the code docs/exit-codes.md gives it (4 for the commands that
    end in a verdict, as pytest's usage error; 2 for the others), nothing written."""
    monkeypatch.chdir(tmp_path)
    if code is None:
        code = EXIT_NO_HARDWARE if not nvml_available()[0] else EXIT_BAD_INPUT
    if argv[:2] == ["fleet", "fabric"]:
        monkeypatch.setenv("RANK", "0")
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith(message) and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, code", [(["accept", "--profile"], EXIT_USAGE), (["fleet", "report"], EXIT_USAGE),
                                        (["show", "--nope"], EXIT_BAD_INPUT), (["nosuch"], EXIT_BAD_INPUT)])
def test_a_bad_argument_is_argparses_usage_error_in_the_commands_code(argv, code, capsys):
    try:
        returned = main(argv)
    except SystemExit as exc:
        returned = exc.code
    assert returned == code
    assert "error: " in capsys.readouterr().err


@needs_no_driver
def test_without_a_driver_bench_copy_and_accept_of_an_unshipped_profile_say_so(tmp_path, monkeypatch, capsys):
    """bench copy exited 2 with its child's "no CUDA device" (documented: 3, no GPU); accept of a profile with no
    shipped bundle to replay is NOT TESTED (7): the machine cannot be examined."""
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "copy", "--sizes", "1M"]) == EXIT_NO_HARDWARE
    err = capsys.readouterr().err
    assert err.startswith("gpufabric: NVML not available") and len(err.splitlines()) == 1
    assert err.endswith("; copies are between host and GPU memory\n")
    (tmp_path / "mine.yaml").write_text("name: mine\ngpus: {count: 2}\n")
    assert main(["accept", "--profile", "mine.yaml"]) == EXIT_NOT_TESTED
    err = capsys.readouterr().err
    assert err.startswith("gpufabric: NOT TESTED: NVML not available") and len(err.splitlines()) == 1
    assert err.endswith("; use --replay BUNDLE to check a recorded bundle\n")


def test_the_exit_codes_page_names_every_command():
    """docs/exit-codes.md has a row for each command the parser knows, and the codes this module returns."""
    import argparse

    from pytest_gpufabric import cli

    text = EXIT_CODES_DOC.read_text(encoding="utf-8")
    commands = set()
    for action in cli.build_parser()._subparsers._group_actions:
        for name, sub in action.choices.items():
            # `parse KIND` is one command (its kinds are the tools it reads)
            nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction) and name != "parse"]
            commands |= {f"{name} {inner}" for a in nested for inner in a.choices} if nested else {name}
    for command in commands - {"fleet report", "fleet fabric", "accept"}:
        assert f"| `gpufabric {command}` |" in text, command
    for command in ("gpufabric accept", "gpufabric fleet report", "gpufabric fleet fabric"):
        assert command in text.split("## The other")[0], command
    table = dict(line.strip("| ").split(" | ", 1) for line in text.splitlines() if line.startswith("| ") and
                 line[2].isdigit())
    assert {int(k) for k in table} == set(range(8))
    assert table["4"].startswith("usage error") and table["7"].startswith("NOT TESTED")
    assert (cli.EXIT_USAGE, cli.EXIT_NOT_TESTED, cli.EXIT_BAD_INPUT, cli.EXIT_NO_HARDWARE) == (4, 7, 2, 3)


def _accept(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "-q", "-p", "no:cacheprovider",
                           "--report-dir", "out", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_burn_in_asked_of_a_replay_says_which_it_judges(tmp_path):
    """`accept --burn-in 90s` on a replay runs no burn-in: before the run, one line says that the recorded 10-minute
    one is judged (or that the bundle has none) rather than a report that looks like a 90 s burn-in passed."""
    done = _accept(tmp_path, "--burn-in", "90s", "--profile", "h200-nvswitch-x2", "--replay", "h200-burn-in-10min",
                   "-k", "burn_in")
    assert done.returncode == 6, done.stdout[-2000:] + done.stderr[-2000:]  # INCOMPLETE: -k left the rest out
    assert done.stderr.splitlines()[0] == ("gpufabric: --burn-in 90s: nothing runs on a replay; judging the 10 min "
                                           "burn-in bundle h200-burn-in-10min recorded instead")
    results = json.loads((tmp_path / "out" / "gpufabric-results.json").read_text())
    assert results["burn_in"]["duration_s"] == 600.0
    assert {p["id"]: p["outcome"] for p in results["promises"] if p["id"].startswith("burn-in")} == {
        "burn-in-gpu[GPU0]": "passed", "burn-in-gpu[GPU1]": "passed", "burn-in-collectives": "passed",
        "burn-in-memory": "passed"}
    done = _accept(tmp_path, "--burn-in", "90s", "--profile", "titan-rtx-nvlink", "--replay", "titan-rtx-nvlink",
                   "-k", "burn_in")
    assert done.returncode == 7, done.stdout[-2000:] + done.stderr[-2000:]  # NOT TESTED: nothing it could show
    assert "not checked: burn-in-gpu[GPU0]: the bundle holds no burn-in log (gpufabric-burnin.jsonl)" in done.stdout
    assert done.stderr.splitlines()[0] == ("gpufabric: --burn-in 90s: nothing runs on a replay, and bundle "
                                           "titan-rtx-nvlink records no burn-in: its promises will be not checked")
    done = _accept(tmp_path, "--profile", "h200-nvswitch-x2", "--replay", "h200-burn-in-10min", "-k", "burn_in")
    assert "--burn-in" not in done.stderr  # not asked: nothing to say


@needs_no_driver
def test_a_burn_in_asked_without_a_driver_says_the_shipped_bundles_is_judged(tmp_path):
    done = _accept(tmp_path, "--burn-in", "90s", "-k", "burn_in")
    assert done.stderr.splitlines()[:2] == [
        done.stderr.splitlines()[0],  # NVML not available ...; replaying the shipped bundle ... instead
        "gpufabric: --burn-in 90s: nothing runs on a replay; judging the 2.5 min burn-in bundle "
        "h100-sxm-x1-acceptance recorded instead"]
    assert done.stderr.splitlines()[0].endswith("replaying the shipped bundle h100-sxm-x1-acceptance instead")
