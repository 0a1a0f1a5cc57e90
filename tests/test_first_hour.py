"""A new user's first hour (issue 42): names are found by one search path in every command, close misses are
named, the lists can be asked for, every command says what it is for, and a GPU server without a profile is told
how to get one instead of being judged against a profile it was never sold under."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from derive_health import with_read_kernel_log

from pytest_gpufabric.cli import EXIT_BAD_INPUT, EXIT_USAGE, build_parser, main
from pytest_gpufabric.fabric.bundle import load_bundle
from pytest_gpufabric.paths import shipped_bundles_dir, shipped_profiles_dir


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder of the user's own, holding ./profiles/site-h200.yaml (the shipped 2x H200 profile under another
    name) and ./bundles/site-bundle (a copy of the shipped 2x H200 snapshot), and no search path from outside."""
    for name in ("GPUFABRIC_PROFILE_PATH", "GPUFABRIC_BUNDLE_PATH", "GPUFABRIC_HEALTH_PROFILE",
                 "GPUFABRIC_HEALTH_ACCEPTED", "GPUFABRIC_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "profiles").mkdir()
    text = (shipped_profiles_dir() / "h200-nvswitch-x2.yaml").read_text()
    (tmp_path / "profiles" / "site-h200.yaml").write_text(text.replace("name: h200-nvswitch-x2", "name: site-h200"))
    (tmp_path / "bundles").mkdir()
    shutil.copytree(shipped_bundles_dir() / "h200-nvswitch-x2", tmp_path / "bundles" / "site-bundle")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_profile_in_the_start_folder_is_found_with_a_report_dir_elsewhere(project, tmp_path_factory):
    """pytest's rootdir becomes the common parent of the arguments: the search follows where pytest was started."""
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "out"
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "site-h200",
                           "--replay", "site-bundle", "--report-dir", str(elsewhere), "-q", "-p", "no:cacheprovider"],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode != EXIT_USAGE, done.stdout + done.stderr
    results = json.loads((elsewhere / "gpufabric-results.json").read_text())
    assert results["profile"]["name"] == "site-h200"
    assert Path(results["profile"]["path"]).name == "site-h200.yaml"


def test_health_finds_a_profile_in_the_start_folder(project, capsys):
    bundle = with_read_kernel_log(shipped_bundles_dir() / "h200-nvswitch-x2")  # DERIVED alone: could not tell
    assert main(["health", "--profile", "site-h200", "--replay", str(bundle)]) == 0
    assert capsys.readouterr().out.startswith("gpufabric: HEALTHY 2 GPUs, profile site-h200\n")


def test_close_names_are_named(project, capsys):
    assert main(["profile", "validate", "site-h20"]) == EXIT_BAD_INPUT
    assert "unknown profile 'site-h20' (did you mean 'site-h200'?)" in capsys.readouterr().err
    assert main(["show", "--replay", "site-bundl"]) == EXIT_BAD_INPUT
    assert "replay bundle not found: site-bundl (did you mean 'site-bundle'?)" in capsys.readouterr().err
    assert main(["profile", "validate", "h200-nvswitch-x9"]) == EXIT_BAD_INPUT
    assert "(did you mean 'h200-nvswitch-x" in capsys.readouterr().err


def test_a_mistyped_option_of_accept_is_said_before_anything_runs(project):
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profle", "site-h200"],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip() == "gpufabric: unknown option --profle (did you mean '--profile'?)"
    assert not (project / "reports").exists()


def test_an_option_pytest_knows_is_passed_on(project):
    """--rootdir is close to --report-dir but is pytest's own: it goes through."""
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "site-h200", "--replay",
                           "site-bundle", f"--rootdir={project}", "-q", "-p", "no:cacheprovider"],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert "unknown option" not in done.stderr and done.returncode != EXIT_USAGE, done.stdout + done.stderr
    assert "gpufabric: " in done.stdout


def test_the_lists_name_the_start_folders_own_first(project, capsys):
    assert main(["profile", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("site-h200  2x NVIDIA H200  2x NVIDIA H200 SXM 141 GB on NVSwitch (NV18)  ")
    assert any(line.startswith("titan-rtx-nvlink  2x TITAN RTX  ") for line in lines)
    assert lines[-1].startswith(f"searched: {project / 'profiles'}, ")
    assert main(["bundle", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("site-bundle  (") and lines[0].endswith(str(project / "bundles" / "site-bundle"))
    assert any(line.startswith("h200-nvswitch-x2-acceptance  (") for line in lines)
    assert main(["reference", "--list"]) == 0
    assert "h100-sxm  NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def test_every_command_says_what_it_is_for():
    parser = build_parser()
    missing = [" ".join(path) for path, sub in _commands(parser) if not (sub.description or "").strip()]
    assert missing == []
    assert "gpufabric accept --profile NAME|FILE" in parser.format_help()
    assert "gpufabric profile list" in parser.format_help()


def test_a_gpu_server_without_a_profile_is_told_how_to_get_one(project, monkeypatch, capsys):
    """On a GPU server `gpufabric accept` alone names the machine and the way to its profile (here the machine is
    the recorded 1x H100 SXM 80GB snapshot, standing in for NVML), and judges nothing."""
    from pytest_gpufabric.cli import accept
    from pytest_gpufabric.fabric import nvml

    monkeypatch.setattr(accept, "nvml_available", lambda: (True, ""))
    monkeypatch.setattr(nvml, "collect_fabric", lambda: load_bundle("h100-x1"))
    assert main(["accept"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("gpufabric: no profile given. This machine: 1 GPU(s), NVIDIA H100 80GB HBM3 "
                          "(`gpufabric reference h100-sxm`).")
    assert "gpufabric profile init --measure -o my-server.yaml" in err and "gpufabric profile list" in err
    assert not (project / "reports").exists()


def test_the_bundles_page_names_every_shipped_bundle():
    text = (Path(__file__).parents[1] / "docs" / "bundles.md").read_text(encoding="utf-8")
    shipped = sorted(p.name for p in shipped_bundles_dir().iterdir() if p.is_dir())
    assert [name for name in shipped if f"`{name}`" not in text] == []


def test_accept_leaves_its_cache_beside_the_report(project):
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "site-h200", "--replay",
                           "site-bundle", "-q"], cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode != EXIT_USAGE, done.stdout + done.stderr
    assert not (project / ".pytest_cache").exists() and (project / "reports" / ".pytest_cache").is_dir()
    assert "deselected" not in done.stdout  # the platform suite this profile does not promise is not collected


def test_memory_in_gib_that_no_healthy_board_has_is_refused(tmp_path, capsys):
    """`memory: 80 GiB` on an H100 sold as 80 GB (81559 MiB as NVML counts, tests/data/bundles/h100-x1) fails every
    healthy board: refused at validation with the unit to use; `80 GB` is valid."""
    bad = tmp_path / "h100-gib.yaml"
    bad.write_text("name: h100-gib\ngpus: {count: 1, model: NVIDIA H100 80GB HBM3, memory: 80 GiB}\n")
    assert main(["profile", "validate", str(bad)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{bad} at $.gpus.memory: '80 GiB' is more than a healthy NVIDIA H100 SXM5 80GB has (85520809984" in err
    assert "promise memory as sold, `memory: 80 GB`, not GiB." in err
    bad.write_text("name: h100-gib\ngpus: {count: 1, model: NVIDIA H100 80GB HBM3, memory: 80GiB}\n")  # no space
    assert main(["profile", "validate", str(bad)]) == EXIT_BAD_INPUT
    assert "'80GiB' is more than a healthy NVIDIA H100 SXM5 80GB has" in capsys.readouterr().err
    good = tmp_path / "h100-gb.yaml"
    good.write_text("name: h100-gb\ngpus: {count: 1, model: NVIDIA H100 80GB HBM3, memory: 80 GB}\n")
    assert main(["profile", "validate", str(good)]) == 0


def test_the_output_is_grouped_by_cause_and_ends_with_the_verdict(tmp_path):
    """The 4x H200 profile against the recorded 1x H100 SXM 80GB: three missing GPUs are one line naming them (21
    promises), pytest's own FAILED list is left out, and the last line is the verdict with the results' path."""
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "--profile", "h200-nvswitch-x4",
                           "--replay", "h100-x1", "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    missing = [line for line in lines if "GPU1-GPU3 is promised by profile h200-nvswitch-x4 but missing" in line]
    assert len(missing) == 1 and missing[0].startswith("  failed (21 promises: gpu-health, gpu-model, gpu-memory, ")
    assert not [line for line in lines if line.startswith("FAILED ") or "GPU2 is promised" in line]
    assert lines[-1] == ("gpufabric: REJECTED without the burn-in the profile promises; results: "
                         f"{tmp_path / 'reports' / 'gpufabric-results.json'}")
