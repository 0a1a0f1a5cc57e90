"""Nodes for the fleet tests, made of real results.

A fleet is judged by one profile, by content: its nodes must have run the same profile. The results recorded live
on real GPU machines (tests/data/results/) ran several versions of the shipped profiles over the weeks, so a fleet
of them is, truthfully, a fleet of several profiles. The fleet tests therefore build their nodes from *replays* of
recorded bundles under today's profiles (real machines' evidence, judged now), run once per test process:

- ``accepted``: the whole acceptance run of a 2x H200 SXM 141GB machine (every suite and a 10-minute burn-in), ACCEPTED
  (xid-events waived: NO_KERNEL_LOG);
- ``planted``: the burn-in log of the planted-fault run on 2x H200 SXM 141GB alone, REJECTED by GPU1's wrong results;
- ``x4``: the 4x H200 SXM 141GB bundle under the h200-nvswitch-x4 profile, ACCEPTED (another machine class).

``derived`` makes a node of another host from one of them: its hostname, its GPU serials and (by a factor) its
measured figures changed, and marked ``"synthetic"`` at the top level. Everything so made is DERIVED.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_gpufabric.report.integrity import INTEGRITY_KEY, sign_document

DATA = Path(__file__).parent / "data"
RESULTS_FILE = "gpufabric-results.json"
PLANTED_LOG = DATA / "results" / "burn-in-planted-fault-on-h200-x2.jsonl"
#: kind -> (profile, bundle)
REPLAYS = {"accepted": ("h200-nvswitch-x2", DATA / "bundles" / "h200-nvswitch-x2-acceptance"),
           "planted": ("h200-nvswitch-x2", None),
           "x4": ("h200-nvswitch-x4", DATA / "bundles" / "h200-nvswitch-x4")}
#: no bundle recorded the kernel log (docs/verdict.md, the arrival state): its nodes waive xid-events, in writing,
#: so that a fleet of them is judged as the machines' other evidence says
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the fleet's tests"
#: check name prefix -> the found fields a node's speed scales (None: every number; time_us goes the other way)
SCALED = {"bandwidth-": ("busbw_gbps", "algbw_gbps", "time_us"), "copy-": None, "burn-in-gpu": ("tflops",)}

#: the fleet run every replayed node is of (--gpu-fleet-id)
FLEET_ID = "fleet-tests"
_CACHE: dict[str, dict] = {}
_WORK: list[Path] = []


def replayed(kind: str, profile: Path | None = None) -> dict:
    """The results document of a replay (a fresh copy each call); each replay runs once per process. ``profile``:
    the replay of the kind's bundle under that profile file instead (a fleet whose profile adds a fabric: section)."""
    key = kind if profile is None else f"{kind}-{hashlib.sha256(profile.read_bytes()).hexdigest()[:12]}"
    if key not in _CACHE:
        if not _WORK:
            _WORK.append(Path(tempfile.mkdtemp(prefix="gpufabric-fleet-nodes-")))
        work = _WORK[0] / key
        default_profile, bundle = REPLAYS[kind]
        profile = str(profile or default_profile)
        if bundle is None:  # the planted-fault burn-in log alone, as a bundle
            bundle = work / "bundle"
            bundle.mkdir(parents=True)
            shutil.copy(PLANTED_LOG, bundle / "gpufabric-burnin.jsonl")
        report_dir = work / "reports"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-profile",
                               profile, "--gpu-replay", str(bundle), "--gpu-fleet-id", FLEET_ID,
                               "--gpu-waive", NO_KERNEL_LOG,
                               "--gpu-report-dir", str(report_dir),
                               "--html", str(report_dir / "acceptance.html"), "--self-contained-html"],
                              cwd=_WORK[0], capture_output=True, text=True, timeout=600)
        path = report_dir / RESULTS_FILE
        assert path.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
        _CACHE[key] = json.loads(path.read_text(encoding="utf-8"))
    return copy.deepcopy(_CACHE[key])


def report_of(kind: str) -> Path:
    """The HTML report the replay wrote (a node's own report, for the fleet page's links)."""
    replayed(kind)
    return _WORK[0] / kind / "reports" / "acceptance.html"


def derived(document: dict, host: str, factor: float = 1.0) -> dict:
    """DERIVED: the results of another host: hostname and GPU serials its own, every compared figure scaled by
    ``factor`` (below 1: slower), marked synthetic."""
    out = copy.deepcopy(document)
    out["synthetic"] = {"derived_from": (document.get("run") or {}).get("host"), "factor": factor}
    out["run"]["host"] = host
    if out.get("machine"):
        out["machine"]["hostname"] = host
        for gpu in out["machine"]["gpus"]:
            gpu["serial"] = f"{gpu['serial']}-{host}"
    for check in out["checks"]:
        found = check.get("found")
        if not isinstance(found, dict):
            continue
        if isinstance(check.get("subject"), str) and "(serial " in check["subject"]:
            check["subject"] = check["subject"].replace(")", f"-{host})", 1)
        for prefix, fields in SCALED.items():
            if check["name"].startswith(prefix):
                for key, value in found.items():
                    if isinstance(value, float) and (fields is None or key in fields):
                        found[key] = value / factor if key == "time_us" else value * factor
    return out


def write_node(root: Path, name: str, document: dict | None, report: Path | None = None, indent: int = 2,
               seal: bool = True) -> Path:
    """A node folder holding the results (as the plugin writes them: indent 2) and, if given, its own report.
    ``seal``: an unsigned document's digests made again from what it holds now (it is DERIVED: the fleet checks
    digests as `gpufabric verify` does); a signed one is written as it is."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    block = (document or {}).get(INTEGRITY_KEY)
    if seal and isinstance(block, dict) and block.get("signature") is None:
        document = sign_document(document, None)
    if document is not None:
        (folder / RESULTS_FILE).write_text(json.dumps(document, indent=indent) + "\n", encoding="utf-8")
    if report is not None:
        shutil.copy(report, folder / "acceptance.html")
    return folder
