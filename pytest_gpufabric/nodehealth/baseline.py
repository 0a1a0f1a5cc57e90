"""What a node is held to between jobs: the profile it was accepted with, and the boards its acceptance saw.

The profile: ``--profile`` (or ``GPUFABRIC_HEALTH_PROFILE``), else the one the node's accepted results name
(``--accepted``, ``GPUFABRIC_HEALTH_ACCEPTED``, else ``$GPUFABRIC_STATE_DIR/gpufabric-results.json`` where it
exists; never the current folder): the file it was read from where that is still there with the same content,
else the shipped profile of that name with the same content. The boards (index, serial, UUID, PCIe width, active
NVLinks) come from the accepted results alone: without
them the GPUs are counted, not named. With neither a profile nor accepted results the node cannot be judged
(NoBaseline: the check says UNKNOWN with the fix), never against a shipped demo profile.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import GpuFabricError
from .model import AcceptedBoard, Baseline

PROFILE_ENV, ACCEPTED_ENV = "GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED"
#: the node's own folder (root-owned): the accepted results live there, never taken from the current folder
STATE_DIR_ENV, DEFAULT_STATE_DIR = "GPUFABRIC_STATE_DIR", Path("/var/lib/gpufabric")
ACCEPTED_FILE = "gpufabric-results.json"


class NoBaseline(Exception):
    """Neither a profile nor accepted results: what the node should be is not known (the check says UNKNOWN)."""


def state_dir(env: dict[str, str]) -> Path:
    """The node's own gpufabric folder: $GPUFABRIC_STATE_DIR, default /var/lib/gpufabric."""
    return Path(env.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def default_accepted(env: dict[str, str]) -> Path:
    """Where a node keeps the results it was accepted with: $GPUFABRIC_STATE_DIR/gpufabric-results.json."""
    return state_dir(env) / ACCEPTED_FILE


def resolve_baseline(profile_spec: str | None, accepted_spec: str | None, env: dict[str, str] | None = None) \
        -> Baseline:
    """The profile and accepted boards, as the module says. Raises NoBaseline when there is neither a profile nor
    accepted results, GpuFabricError (a usage error) when a profile or results file named is not one."""
    from ..profile.loader import load_profile

    env = dict(os.environ) if env is None else env
    profile_said = "--profile" if profile_spec else PROFILE_ENV
    profile_spec = profile_spec or env.get(PROFILE_ENV) or None
    accepted_spec = accepted_spec or env.get(ACCEPTED_ENV) or None
    default = default_accepted(env)
    accepted_path = Path(accepted_spec) if accepted_spec else (default if default.is_file() else None)
    results = _read_results(accepted_path) if accepted_path is not None else None
    if results is not None and (verdict := (results.get("summary") or {}).get("verdict")) != "ACCEPTED":
        raise GpuFabricError(f"{accepted_path} holds a run judged {verdict}, not the node's acceptance: give "
                             "--accepted with the results of the run that ACCEPTED this node")
    notes: list[str] = []
    if profile_spec:
        profile = load_profile(profile_spec)
        profile_from = profile_said
    elif results is not None:
        profile, profile_from = _accepted_profile(results, accepted_path, load_profile)
    else:
        raise NoBaseline(f"no profile to judge the node by: give --profile NAME|FILE (or set {PROFILE_ENV}; "
                         f"gpufabric profile init writes one from a machine that passes), or --accepted RESULTS.json, "
                         f"the results the node was ACCEPTED with (default {default}, not found; the current folder "
                         "is never read)")
    baseline = Baseline(profile, profile_from, notes=notes)
    if results is None:
        notes.append("no accepted results: the GPUs are counted, not named by serial (give --accepted)")
        return baseline
    recorded = results.get("profile") or {}
    if recorded.get("sha256") and recorded.get("sha256") != profile.sha256:
        notes.append(f"the node was accepted with profile {recorded.get('name')} (sha256 "
                     f"{str(recorded.get('sha256'))[:12]}), judged here by {profile.name} (sha256 "
                     f"{profile.sha256[:12]})")
    machine = results.get("machine") or {}
    baseline.accepted_from = str(accepted_path)
    baseline.accepted_driver = machine.get("driver_version") if isinstance(machine.get("driver_version"), str) else None
    baseline.accepted_verdict = (results.get("summary") or {}).get("verdict")
    baseline.boards = [_board(gpu) for gpu in machine.get("gpus") or [] if isinstance(gpu, dict)] or None
    if baseline.boards is None:
        notes.append(f"{accepted_path} records no GPUs: they are counted, not named by serial")
    return baseline


def _read_results(path: Path) -> dict:
    from ..fleet.loader import Unreadable, load_results

    try:
        return load_results(path)
    except FileNotFoundError:
        raise GpuFabricError(f"--accepted {path}: no such file") from None
    except Unreadable as exc:
        raise GpuFabricError(f"--accepted {path}: {exc}") from None


def _accepted_profile(results: dict, path: Path, load_profile) -> tuple[object, str]:
    """The profile the results were judged by: its file where it is still there with that content, else the
    shipped one of its name with that content; never another version of it."""
    recorded = results.get("profile") or {}
    name, sha, where = recorded.get("name"), recorded.get("sha256"), recorded.get("path")
    tried = []
    for spec in (where, name):
        if not spec:
            continue
        try:
            profile = load_profile(spec)
        except GpuFabricError as exc:
            tried.append(f"{spec}: {exc}")
            continue
        if profile.sha256 == sha:
            return profile, f"the accepted results {path}"
        tried.append(f"{spec} is another version (sha256 {profile.sha256[:12]}, the results' {str(sha)[:12]})")
    raise GpuFabricError(f"the profile {name!r} the node was accepted with ({path}) cannot be read here: "
                         + "; ".join(tried or ["the results name none"]) + "; give it with --profile")


def _board(gpu: dict) -> AcceptedBoard:
    pcie = gpu.get("pcie") if isinstance(gpu.get("pcie"), dict) else {}
    return AcceptedBoard(index=gpu.get("index") if isinstance(gpu.get("index"), int) else -1,
                         serial=gpu.get("serial") if isinstance(gpu.get("serial"), str) else None,
                         uuid=gpu.get("uuid") if isinstance(gpu.get("uuid"), str) else None,
                         pcie_width_current=_whole(pcie.get("width_current")),
                         nvlinks_active=_whole(gpu.get("nvlinks_active")))


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
