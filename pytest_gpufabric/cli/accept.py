"""`gpufabric accept`: the acceptance suites against a profile as one pytest run, with the HTML report and the
results beside each other; what it checks before pytest starts (profile, bundle, report folder) and says on the
terminal (a replay instead of this machine, a burn-in that a replay does not run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuFabricError, HardwareUnavailable
from ..fabric.nvml import nvml_available
from ..fleet.launch import expand_report_dir
from ..report.results import check_writable_dir

#: the demo a machine without an NVIDIA driver replays when no profile is given: a whole recorded acceptance
DEMO_PROFILE = "h100-sxm-x1"


def register(sub: argparse._SubParsersAction) -> None:
    accept = sub.add_parser(
        "accept", help="run the acceptance suites against a profile, writing the HTML report and JSON results",
        description="Extra arguments go to pytest: any of its options (-k topology, --junitxml=reports/junit.xml) "
                    "and any of this plugin's --gpu-* options (--gpu-waive ID=REASON, --gpu-evidence FILE, "
                    "--gpu-plant-memory-fault GPU, ...; `pytest --help` lists them).",
    )
    accept.add_argument("--profile", help="profile name or path (`gpufabric profile list`); without it, a machine "
                        f"without an NVIDIA driver replays the demo {DEMO_PROFILE} and a GPU server is told how to "
                        "get its own profile")
    accept.add_argument("--replay", metavar="BUNDLE", help="judge a bundle; default: this machine, or the "
                        "profile's shipped bundle when this machine has no NVIDIA driver")
    accept.add_argument("--html", metavar="FILE", help="the HTML report (default: acceptance.html in the report "
                        "folder, --report-dir or reports/)")
    accept.add_argument("--sign-key", metavar="KEY.pem", help="sign the results and the report with this Ed25519 "
                        "private key (`openssl genpkey -algorithm ed25519 -out KEY.pem`)")
    accept.add_argument("--customer", metavar="NAME", help="the customer named on the report's cover")
    accept.add_argument("--operator", metavar="NAME", help="who ran the acceptance, named on the cover (default: the "
                        "user it runs as)")
    accept.add_argument("--burn-in", metavar="DURATION", help="also run the burn-in for DURATION (90s, 10m, 2h)")
    accept.add_argument("--report-dir", metavar="DIR", help="where gpufabric-results.json and the HTML report go "
                        "(default: reports/); {node}, {host}, {task} and {fleet} are filled in as --gpu-report-dir's "
                        "are")
    # the arguments argparse does not know go on to pytest (main passes them)
    accept.set_defaults(func=cmd_accept, takes_pytest_args=True)


def cmd_accept(args: argparse.Namespace, pytest_args: list[str]) -> int:
    """The main job: the acceptance suites against a profile, with the HTML report and JSON results.

    With no --replay, the machine is read live; where it has no NVIDIA driver, the shipped bundle recorded for
    the profile is replayed instead, and the run says so: ``<profile>-acceptance`` (a whole acceptance run of such
    a machine, burn-in included) where there is one, else the bundle of the profile's name.
    """
    import pytest

    from ..profile.loader import load_profile
    from ..report.finishing import FinishWhole

    refuse_near_misses(pytest_args)
    if args.profile is None:
        args.profile = _demo_or_refuse(args.replay)
    load_profile(args.profile, Path.cwd())  # a bad profile is the first thing to say, driver or not
    replay, instead = args.replay, None
    if replay is not None:
        from ..fabric.bundle import bundle_directory

        try:
            bundle_directory(replay)  # a bundle that is not there is said here, by this command's flag
        except GpuFabricError as exc:
            raise GpuFabricError(f"--replay: {exc}") from None
    else:
        from ..fabric.bundle import available_bundles

        usable, why = nvml_available()
        if not usable:
            shipped = available_bundles()
            replay = next((b for b in (f"{args.profile}-acceptance", args.profile) if b in shipped), None)
            if replay is None:
                raise HardwareUnavailable(f"{why}; use --replay BUNDLE to check a recorded bundle")
            instead = f"gpufabric: {why}; replaying the shipped bundle {replay} instead"
    html = _report_file(args, pytest_args)  # the last input to check, and the first thing made
    if instead:
        print(instead, file=sys.stderr)
    if replay and args.burn_in:
        print(_replayed_burn_in(args.burn_in, replay), file=sys.stderr)
    # this command has imported the package before pytest loads it as a plugin; pytest says so once, harmlessly
    quiet = "ignore:Module already imported so cannot be rewritten; pytest_gpufabric:pytest.PytestAssertRewriteWarning"
    argv = ["--gpu-profile", args.profile, "--html", str(html), "--self-contained-html", "-W", quiet]
    # the verdict block names every failure once, grouped by cause: pytest's own list of them (46 lines for seven
    # missing GPUs) is left out unless asked for
    if not any(arg.startswith(("-r", "--tb")) for arg in pytest_args):
        argv += ["-rN", "--tb=no"]
    if not any("cache_dir" in arg or "cacheprovider" in arg for arg in pytest_args):
        argv += ["-o", f"cache_dir={html.parent / '.pytest_cache'}"]  # beside the report, not where it was started
    if args.sign_key:
        argv += ["--gpu-sign-key", args.sign_key]
    for flag, value in (("--gpu-customer", args.customer), ("--gpu-operator", args.operator),
                        ("--gpu-burn-in", args.burn_in), ("--gpu-report-dir", args.report_dir)):
        if value:
            argv += [flag, value]
    if replay:
        argv += ["--gpu-replay", replay]
    finish = FinishWhole(until_exit=True)  # a Ctrl-C once the results are being written waits for the exit code
    try:
        return int(pytest.main(argv + pytest_args, plugins=[finish]))
    finally:
        finish.release()


def _demo_or_refuse(replay: str | None) -> str:
    """No --profile: the demo profile where it replays (no driver here, or a bundle given); on a GPU server a usage
    error that says what this machine is and how to get its profile: a profile it was not sold under would only
    reject it."""
    usable, _ = nvml_available()
    if replay is not None or not usable:
        return DEMO_PROFILE
    raise GpuFabricError(f"no profile given. {_this_machine()} Accept it against the profile it was sold under: "
                         "`gpufabric accept --profile NAME|FILE` (`gpufabric profile list` shows the shipped ones). "
                         "No profile yet? On a machine known to be good, `gpufabric profile init --measure -o "
                         "my-server.yaml` writes one with floors below what it measures, then `gpufabric accept "
                         "--profile my-server.yaml` (docs/profiles.md)")


def _this_machine() -> str:
    """'This machine: 1x NVIDIA H200 (catalogue: h200-sxm).' from NVML, or what could not be read."""
    from ..fabric.nvml import collect_fabric
    from ..reference import find_reference, load_references

    try:
        fabric = collect_fabric()
    except GpuFabricError as exc:
        return f"This machine could not be read: {exc}."
    names = sorted({gpu.name for gpu in fabric.gpus if isinstance(gpu.name, str)})
    if not names:
        return "This machine's NVML answers, but lists no GPU."
    references = load_references()
    models = [f"{name} (`gpufabric reference {ref.model}`)" if (ref := find_reference(name, references)) else
              f"{name} (not in the reference catalogue)" for name in names]
    return f"This machine: {len(fabric.gpus)} GPU(s), {', '.join(models)}."


def refuse_near_misses(pytest_args: list[str]) -> None:
    """An argument meant for this command but mistyped (--profle) is said now, with the option it is close to,
    not passed on for pytest to refuse after the run has begun. Only a name that pytest does not know either."""
    from ..paths import did_you_mean

    ours = ["--profile", "--replay", "--html", "--sign-key", "--customer", "--operator", "--burn-in",
            "--report-dir"]
    for arg in pytest_args:
        name = arg.split("=", 1)[0]
        if not name.startswith("--") or name in ours or name.startswith("--gpu-"):
            continue
        hint = did_you_mean(name, ours)
        if hint and not _pytest_knows(name):
            raise GpuFabricError(f"unknown option {name}{hint}")


def _pytest_knows(name: str) -> bool:
    """Whether pytest (with the plugins installed here) takes the long option ``name``; True when it cannot be
    asked, so that an option is never refused on a guess."""
    try:
        from _pytest.config import get_config

        config = get_config()
        config.pluginmanager.load_setuptools_entrypoints("pytest11")
        parser = config._parser  # pytest's own parser, every installed plugin's options added (private API)
        optparser = getattr(parser, "optparser", None) or parser._getparser()
        return name in optparser._option_string_actions
    except Exception:
        return True


def _replayed_burn_in(asked: str, replay: str) -> str:
    """A replay runs no burn-in: --burn-in asks for one, and the run judges the bundle's own log. Said before the
    run, so that a 90 s burn-in asked for is not read from a report that judged a recorded 10-minute one."""
    from ..fabric.bundle import bundle_directory
    from ..workloads.burn_in import LOG_FILE, read_log

    directory = bundle_directory(replay)
    records = read_log(directory / LOG_FILE)
    start = records[0] if records and records[0].get("type") == "start" else {}
    seconds = start.get("duration_s")
    if not isinstance(seconds, (int, float)):
        return (f"gpufabric: --burn-in {asked}: nothing runs on a replay, and bundle {directory.name} records no "
                "burn-in: its promises will be not checked")
    length = f"{seconds / 60:g} min" if seconds >= 120 else f"{seconds:g} s"
    state = "" if any(r.get("type") == "end" for r in records) else ", not finished"
    return (f"gpufabric: --burn-in {asked}: nothing runs on a replay; judging the {length} burn-in bundle "
            f"{directory.name} recorded{state} instead")


def _report_file(args: argparse.Namespace, pytest_args: list[str]) -> Path:
    """The HTML report: --html, else acceptance.html beside the results (--report-dir, its placeholders filled as
    the plugin fills them, else reports/ where the command runs). Its folder is made and written to now: pytest-html
    would make it only after the run has started, and fail with an internal error."""
    import os

    if args.html:
        flag, html = "--html", Path(args.html)
    elif args.report_dir:
        try:
            folder = expand_report_dir(args.report_dir, dict(os.environ), _pytest_option(pytest_args, "--gpu-fleet-id"))
        except ValueError as exc:
            raise GpuFabricError(f"--report-dir: {exc}") from None
        flag, html = "--report-dir", Path(folder) / "acceptance.html"
    else:
        flag, html = None, Path("reports") / "acceptance.html"
    try:
        check_writable_dir(html.parent)
    except GpuFabricError as exc:
        raise GpuFabricError(f"{flag}: {exc}" if flag else f"{exc}; give --report-dir DIR to write elsewhere") from None
    return html


def _pytest_option(pytest_args: list[str], flag: str) -> str | None:
    """The value of ``flag`` among the arguments passed on to pytest (``--flag VALUE`` or ``--flag=VALUE``)."""
    for index, arg in enumerate(pytest_args):
        if arg == flag and index + 1 < len(pytest_args):
            return pytest_args[index + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None
