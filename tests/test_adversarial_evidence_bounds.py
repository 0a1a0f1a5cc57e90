"""Evidence bound to this machine and consistent with itself (issue 40): an lspci capture of another machine, a
perftest line whose figures contradict each other or the port, and a record that announces more boards than it
describes. Each case is a copy of a shipped bundle (tests/data/bundles) with a real capture (tests/data/captures)
put in or a value edited in tmp_path (``# DERIVED:`` says how), replayed end to end; each pins the verdict, the exit
code and the promise's outcome and reason from gpufabric-results.json.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from replays import copy_bundle, edit_json, replay

DATA = Path(__file__).parent / "data"
BUNDLES = DATA / "bundles"
PUBLIC_PLATFORM = DATA / "captures" / "public" / "platform"
#: a laptop's lspci -vvvxxxx: the NVIDIA GP108M at 0000:02:00.0 below a root port whose ACS is off
GP108M = PUBLIC_PLATFORM / "lspci-vvvxxxx-sunrise-point-root-port-acs-off-above-gp108m.txt"


def _promises(document: dict) -> dict[str, tuple[str, str]]:
    return {p["id"]: (p["outcome"], p["reason"]) for p in document["promises"]}


def _profile(pytester: pytest.Pytester, name: str, document: dict) -> Path:
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **document}, sort_keys=False), encoding="utf-8")
    return path


# --- 1. an lspci capture is this machine's only where it shows this machine's GPUs --------------------------------


def _with_lspci(pytester: pytest.Pytester, base: Path, capture: Path) -> Path:
    bundle = copy_bundle(pytester, base)
    shutil.copy(capture, bundle / "lspci-vvv.txt")  # the name a customer sends `sudo lspci -vvv` under
    return bundle


def test_an_lspci_of_another_machine_judges_no_acs(pytester: pytest.Pytester):
    """The 2x H200 bundle (GPUs at 0000:00:06.0 and 0000:00:07.0) with a laptop's lspci, whose only NVIDIA device is
    a GP108M at 0000:02:00.0 below a root port with ACS off: that ACS is the laptop's, not this machine's."""
    bundle = _with_lspci(pytester, BUNDLES / "h200-nvswitch-x2-acceptance", GP108M)
    profile = _profile(pytester, "h200-acs", {"extends": "h200-nvswitch-x2", "platform": {"acs": "disabled"}})
    code, document = replay(pytester, profile, bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    outcome, reason = _promises(document)["platform-acs"]
    assert outcome == "not checked"
    assert reason == (
        f"{bundle}/lspci-vvv.txt shows NVIDIA GPU(s) 0000:02:00.0; this machine's GPUs are GPU0 "
        "0000:00:06.0, GPU1 0000:00:07.0 (PCI bus ids): it does not show GPU0 0000:00:06.0, GPU1 0000:00:07.0; "
        "0000:02:00.0 is not among them. An lspci of another machine, or of part of this one, shows nothing of this "
        "machine's PCIe path")
    assert [p for p, (o, _) in _promises(document).items() if o != "passed"] == ["platform-acs"]


def test_an_lspci_that_shows_only_some_of_the_gpus_judges_no_acs(pytester: pytest.Pytester):
    """DERIVED: the bundle's GPU0 recorded at the capture's bus id 0000:02:00.0 (nvml.json), so the capture shows
    GPU0 and not GPU1: the path of GPU1 is not in it, and ACS over the machine is not shown."""
    bundle = _with_lspci(pytester, BUNDLES / "h200-nvswitch-x2-acceptance", GP108M)
    edit_json(bundle / "nvml.json", lambda d: d["gpus"][0].update(pci_bus_id="00000000:02:00.0"))
    profile = _profile(pytester, "h200-acs", {"extends": "h200-nvswitch-x2", "platform": {"acs": "disabled"}})
    code, document = replay(pytester, profile, bundle, "-k", "test_platform")
    outcome, reason = _promises(document)["platform-acs"]
    assert outcome == "not checked"
    assert reason == (
        f"{bundle}/lspci-vvv.txt shows NVIDIA GPU(s) 0000:02:00.0; this machine's GPUs are GPU0 "
        "0000:02:00.0, GPU1 0000:00:07.0 (PCI bus ids): it does not show GPU1 0000:00:07.0. An lspci of another "
        "machine, or of part of this one, shows nothing of this machine's PCIe path")


def test_control_an_lspci_that_shows_every_gpu_is_judged(pytester: pytest.Pytester):
    """DERIVED: the one-H100 bundle's GPU0 recorded at the capture's bus id 0000:02:00.0 (nvml.json): the capture
    shows exactly the machine's GPUs, so the ACS of the root port above it is judged (off: passed)."""
    bundle = _with_lspci(pytester, BUNDLES / "h100-x1", GP108M)
    edit_json(bundle / "nvml.json", lambda d: d["gpus"][0].update(pci_bus_id="00000000:02:00.0"))
    profile = _profile(pytester, "h100-acs", {"gpus": {"count": 1}, "platform": {"acs": "disabled"}})
    code, document = replay(pytester, profile, bundle, "-k", "test_platform")
    assert _promises(document)["platform-acs"] == ("passed", "")
    (check,) = [c for c in document["checks"] if c["name"] == "platform-acs"]
    assert check["message"] == ("no peer-to-peer redirect (ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl-) on the 1 "
                                f"bridge(s) above GPU0 [{bundle}/lspci-vvv.txt]")
