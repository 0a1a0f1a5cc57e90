"""Evidence bound to this machine and consistent with itself (issue 40): an lspci capture of another machine, a
perftest line whose figures contradict each other or the port, and a record that announces more boards than it
describes. Each case is a copy of a shipped bundle (tests/data/bundles) with a real capture (tests/data/captures)
put in or a value edited in tmp_path (``# DERIVED:`` says how), replayed end to end; each pins the verdict, the exit
code and the promise's outcome and reason from gpufabric-results.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from replays import copy_bundle, edit_json, replay

from pytest_gpufabric.cli import main
from pytest_gpufabric.formats.perftest import parse_perftest, row_disagreement

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
    assert list(_not_passed(document)) == ["platform-acs"]


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


def test_an_lspci_of_another_device_at_the_gpus_bus_id_judges_no_acs(pytester: pytest.Pytester):
    """DERIVED: the one-H100 bundle's GPU0 recorded at the capture's bus id 0000:02:00.0 (nvml.json), its PCI device
    id left the H100's (0x233010DE): the capture's GP108M (10de:1d10) at that bus id is another device."""
    bundle = _with_lspci(pytester, BUNDLES / "h100-x1", GP108M)
    edit_json(bundle / "nvml.json", lambda d: d["gpus"][0].update(pci_bus_id="00000000:02:00.0"))
    profile = _profile(pytester, "h100-acs", {"gpus": {"count": 1}, "platform": {"acs": "disabled"}})
    code, document = replay(pytester, profile, bundle, "-k", "test_platform")
    assert _promises(document)["platform-acs"] == ("not checked", (
        f"{bundle}/lspci-vvv.txt shows 0000:02:00.0 as PCI device 10de:1d10; this machine's GPU0 at that bus id is "
        "10de:2330 (NVML's PCI device id): an lspci of another machine shows nothing of this machine's PCIe path"))


def test_control_an_lspci_that_shows_every_gpu_is_judged(pytester: pytest.Pytester):
    """DERIVED: the one-H100 bundle's GPU0 recorded at the capture's bus id 0000:02:00.0 and device id 0x1D1010DE
    (nvml.json): the capture shows exactly the machine's GPUs, so the ACS of the root port above it is judged (off:
    passed)."""
    bundle = _with_lspci(pytester, BUNDLES / "h100-x1", GP108M)
    edit_json(bundle / "nvml.json", lambda d: d["gpus"][0].update(pci_bus_id="00000000:02:00.0",
                                                                   pci_device_id="0x1D1010DE"))
    profile = _profile(pytester, "h100-acs", {"gpus": {"count": 1}, "platform": {"acs": "disabled"}})
    code, document = replay(pytester, profile, bundle, "-k", "test_platform")
    assert _promises(document)["platform-acs"] == ("passed", "")
    (check,) = [c for c in document["checks"] if c["name"] == "platform-acs"]
    assert check["message"] == ("no peer-to-peer redirect (ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl-) on the 1 "
                                f"bridge(s) above GPU0 [{bundle}/lspci-vvv.txt]")


# --- 2. a perftest row is judged only where its figures agree with each other and with the port -----------------

ROCE = BUNDLES / "a100-pcie-roce"
ROW = "65536      1324156          0.00               23.14              0.044138"


def _floor_profile(pytester: pytest.Pytester) -> Path:
    """DERIVED: the shipped a100-pcie-roce profile with an absolute floor instead of a promised line rate, so that
    only the figures themselves and the port can bound the reading."""
    return _profile(pytester, "a100-roce-floor", {"extends": "a100-pcie-roce", "rdma": {
        "devices": [{"name": "irdma0", "port": 1, "link_layer": "Ethernet", "mtu": 1024}],
        "ib_write_bw": {"device": "irdma0", "peer": "10.100.100.1", "gid_index": 1, "size": "64 KiB",
                        "duration_s": 10, "extra_args": ["-R"], "min": "20 Gb/s"}}})


def _edited_row(pytester: pytest.Pytester, row: str) -> Path:
    bundle = copy_bundle(pytester, ROCE)
    path = bundle / "ib_write_bw.txt"
    text = path.read_text(encoding="utf-8")
    assert text.count(ROW) == 1
    path.write_text(text.replace(ROW, row), encoding="utf-8")
    return bundle


@pytest.mark.parametrize("side", ["client", "server"])
def test_the_real_captures_rows_agree_with_themselves(side):
    """Both sides of the two-node capture: 65536 B x 0.044138 Mpps = 23.14 Gb/s, as printed."""
    result = parse_perftest((DATA / "captures" / "a100-pcie-roce-2node" / f"ib_write_bw-{side}.txt").read_text())
    assert [row_disagreement(row, result["units_printed"]) for row in result["results"]] == [None]


def test_control_the_roce_capture_passes_the_floor_as_before(pytester: pytest.Pytester):
    code, document = replay(pytester, _floor_profile(pytester), copy_bundle(pytester, ROCE))
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert _promises(document)["ib-write-bw"] == ("passed", "")
    (check,) = [c for c in document["checks"] if c["name"] == "ib-write-bw"]
    assert check["message"] == ("ib_write_bw irdma0: 23.14 Gb/s average at 64.00 KiB messages, 1324156 iterations, "
                                f"MTU 1024 [{pytester.path}/a100-pcie-roce-edited/"
                                "ib_write_bw.txt]")


def test_a_perftest_row_ten_times_its_own_message_rate_is_not_judged(pytester: pytest.Pytester):
    """DERIVED: the captured row with its BW average ten times over (231.40 Gb/s), its #bytes and MsgRate as
    printed: 65536 B x 0.044138 Mpps is 23.14 Gb/s, and the port (4X at 25 Gbps: 100 Gb/s reported) cannot carry
    231.40 either."""
    bundle = _edited_row(pytester, "65536      1324156          0.00               231.40             0.044138")
    code, document = replay(pytester, _floor_profile(pytester), bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")  # the port itself passes
    assert _promises(document)["ib-write-bw"] == ("not checked", (
        f"{bundle}/ib_write_bw.txt: the row at 64.00 KiB: its BW average 231.40 Gb/s is not #bytes x MsgRate = "
        "65536 B x 0.044138 Mpps = 23.14 Gb/s: perftest computes both from one count of iterations and cycles, so "
        "they agree within the rounding of the printed figures and 1%; a row that does not was not printed by one "
        "run; not judged"))


def test_a_perftest_row_above_the_ports_reported_rate_is_not_judged(pytester: pytest.Pytester):
    """DERIVED: BW average and MsgRate both ten times the capture's (231.40 Gb/s, 0.441380 Mpps: consistent with
    each other), more than the 100 Gb/s the port reports (ibv_devinfo: active_width 4X, active_speed 25.0 Gbps)."""
    bundle = _edited_row(pytester, "65536      1324156          0.00               231.40             0.441380")
    code, document = replay(pytester, _floor_profile(pytester), bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")  # the port itself passes
    assert _promises(document)["ib-write-bw"] == ("not checked", (
        f"{bundle}/ib_write_bw.txt: the row at 64.00 KiB: 231.40 Gb/s is more than the 100 Gb/s irdma0 port 1 "
        "carries (the rate it reports: 100 Gb/sec (4X, ibv_devinfo: 25.0 Gbps)): not a reading of this port, "
        "not judged"))


def test_a_perftest_run_over_another_link_type_than_the_port_is_not_judged(pytester: pytest.Pytester):
    """DERIVED: the header's `Link type : Ethernet` made `IB`; the port irdma0 is Ethernet (RoCE)."""
    bundle = copy_bundle(pytester, ROCE)
    path = bundle / "ib_write_bw.txt"
    path.write_text(path.read_text(encoding="utf-8").replace("Link type       : Ethernet", "Link type       : IB"),
                    encoding="utf-8")
    code, document = replay(pytester, _floor_profile(pytester), bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")  # the port itself passes
    assert _promises(document)["ib-write-bw"] == ("not checked", (
        f"{bundle}/ib_write_bw.txt: the row at 64.00 KiB: perftest ran over Link type IB, but irdma0 port 1 is "
        "Ethernet: not a reading of this port, not judged"))


# --- 3. a record that announces more boards or ranks than it describes: the others are unknown -------------------

ACCEPTANCE = BUNDLES / "h200-nvswitch-x2-acceptance"


def _not_passed(document: dict) -> dict[str, tuple[str, str]]:
    """Each promise neither passed nor waived (the replays waive the kernel log no bundle holds: replays.py)."""
    return {pid: value for pid, value in _promises(document).items() if value[0] not in ("passed", "waived")}


def test_control_the_acceptance_bundle_is_accepted(pytester: pytest.Pytester):
    code, document = replay(pytester, "h200-nvswitch-x2", copy_bundle(pytester, ACCEPTANCE))
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")


def test_an_nvml_record_announcing_two_gpus_and_describing_one(pytester: pytest.Pytester):
    """DERIVED: nvml.json alone (the nvidia-smi texts removed), its `gpus` cut to GPU0 while `gpu_count` still says
    2: GPU1 is announced and not described. Its promises are unknown, never failed as a GPU the machine lacks."""
    bundle = copy_bundle(pytester, ACCEPTANCE)
    for name in ("nvidia-smi-topo-m.txt", "nvidia-smi-q.xml", "nvidia-smi-nvlink-s.txt"):
        (bundle / name).unlink()
    edit_json(bundle / "nvml.json", lambda d: d.update(gpus=d["gpus"][:1], pairs=[]))
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    why = ("nvml.json announces 2 GPU(s) (gpu_count) but describes 1 (gpus): GPU1 is not described, so "
           "nothing of it is known")
    not_passed = _not_passed(document)
    assert not [p for p, (outcome, _) in not_passed.items() if outcome != "not checked"]
    for promise in ("gpu-model[GPU1]", "gpu-memory[GPU1]", "pcie-link[GPU1]", "ecc-mode[GPU1]", "nvlinks[GPU1]",
                    "affinity[GPU1]", "nvlink-traffic[GPU1]", "nvlink-traffic-volume[GPU1]"):
        assert not_passed[promise] == ("not checked", why), promise
    assert not_passed["gpu-count"] == ("not checked", "GPU count 2 in nvml.json (gpu_count) disagrees with "
                                                      "the 1 GPU(s) it lists (gpus): the record is not whole")
    assert not_passed["topology-matrix"][1].endswith(
        "GPU0-GPU1: expected NV18, not readable (nvml.json announces 2 GPU(s) (gpu_count) but describes 1 (gpus): "
        "GPU1 is not described, so nothing of it is known)")
    assert _promises(document)["gpu-model[GPU0]"] == ("passed", "")


def test_an_nvidia_smi_query_of_one_gpu_of_two(pytester: pytest.Pytester):
    """DERIVED: the 2x H200 texts (topo -m, nvlink -s, -q -x) with the second `<gpu>` cut from nvidia-smi-q.xml,
    as `nvidia-smi -q -x -i 0` prints it: `<attached_gpus>2</attached_gpus>` and one GPU described. GPU1 is
    unknown (it was refused as texts of two machines before), GPU0 is judged."""
    bundle = copy_bundle(pytester, BUNDLES / "h200-nvswitch-x2-nccl-tests")
    path = bundle / "nvidia-smi-q.xml"
    text = path.read_text(encoding="utf-8")
    second = text.index("<gpu id=", text.index("<gpu id=") + 1)
    path.write_text(text[:second] + text[text.index("</gpu>", second) + len("</gpu>"):], encoding="utf-8")
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    promises = _promises(document)
    why = ("nvidia-smi-q.xml announces 2 GPU(s) (attached_gpus) but describes 1 (gpu): GPU1 is not described, so "
           "nothing of it is known")
    for promise in ("gpu-model[GPU1]", "gpu-memory[GPU1]", "pcie-link[GPU1]", "ecc-mode[GPU1]", "nvlinks[GPU1]",
                    "affinity[GPU1]"):
        assert promises[promise] == ("not checked", why), promise
    assert promises["gpu-count"] == ("not checked", f"nvidia-smi -q -x of bundle {bundle} says 2 GPU(s) attached "
                                                    "(attached_gpus) and lists 1 (gpu): it is not whole")
    for promise in ("gpu-model[GPU0]", "gpu-memory[GPU0]", "pcie-link[GPU0]", "ecc-mode[GPU0]", "topology-matrix"):
        assert promises[promise] == ("passed", ""), promise
    assert not [p for p, (outcome, _) in promises.items() if outcome == "failed"]


def test_a_platform_record_of_one_gpus_path_of_two_judges_no_acs(pytester: pytest.Pytester):
    """DERIVED: the 2x H100 bundle's platform.json with GPU1's endpoint dropped and its VM flag cleared (so that
    GPU0 on the root bus reads as a path without a bridge): the record describes one of the machine's two GPUs'
    PCI paths, and ACS above GPU1 is unknown."""
    bundle = copy_bundle(pytester, BUNDLES / "h100-x2-health")
    edit_json(bundle / "platform.json", lambda d: d.update(
        endpoints=d["endpoints"][:1], hypervisor={**d["hypervisor"], "value": False}))
    profile = _profile(pytester, "h100-acs", {"gpus": {"count": 2}, "platform": {"acs": "disabled"}})
    code, document = replay(pytester, profile, bundle, "-k", "test_platform")
    assert _promises(document)["platform-acs"] == ("not checked", (
        f"{bundle}/platform.json records the PCI path of GPU0 and not of GPU1: the bridges above it are "
        "unknown, so ACS over the machine is not shown"))


def test_parse_perftest_calls_a_row_that_contradicts_itself_inconsistent(tmp_path, capsys):
    """DERIVED: the captured row with MsgRate ten times lower (0.004414 Mpps): its 23.14 Gb/s is no longer
    65536 B x MsgRate (2.31 Gb/s); `gpufabric parse perftest` says so instead of calling it normal."""
    path = tmp_path / "ib_write_bw.txt"
    path.write_text((ROCE / "ib_write_bw.txt").read_text(encoding="utf-8").replace(
        ROW, "65536      1324156          0.00               23.14              0.004414"), encoding="utf-8")
    code = main(["parse", "perftest", str(path), "--line-rate", "25Gb/s"])
    captured = capsys.readouterr()
    assert code == 0
    (judgement,) = json.loads(captured.out)["reference"]["judgements"]
    assert judgement["verdict"] == "inconsistent"
    assert captured.err.splitlines() == [
        "RDMA_Write BW Test at 64 KiB: 23.14 Gb/s average, 93 % of the 25 Gb/s line rate: not a measurement to judge: "
        "its BW average 23.14 Gb/s is not #bytes x MsgRate = 65536 B x 0.004414 Mpps = 2.31 Gb/s: perftest computes "
        "both from one count of iterations and cycles, so they agree within the rounding of the printed figures and "
        "1%; a row that does not was not printed by one run"]


def test_a_users_gpu_marker_on_an_undescribed_gpu_is_not_checked(pytester: pytest.Pytester):
    """The same nvml.json announcing two GPUs and describing one, under a user's test marked `gpu(count=2)`: the
    second GPU is unknown, so the test is not checked rather than failed as a GPU the machine lacks."""
    bundle = copy_bundle(pytester, ACCEPTANCE)
    for name in ("nvidia-smi-topo-m.txt", "nvidia-smi-q.xml", "nvidia-smi-nvlink-s.txt"):
        (bundle / name).unlink()
    edit_json(bundle / "nvml.json", lambda d: d.update(gpus=d["gpus"][:1], pairs=[]))
    pytester.makepyfile(test_mine="""
        import pytest

        @pytest.mark.gpu(count=2)
        def test_two_gpus():
            pass
    """)
    code, document = replay(pytester, "h200-nvswitch-x2", bundle, "test_mine.py")
    outcome, reason = _promises(document)["test_mine.py::test_two_gpus"]
    assert outcome == "not checked"
    assert reason.endswith("nvml.json announces 2 GPU(s) (gpu_count) but describes 1 (gpus): GPU1 is not described, "
                           "so nothing of it is known")
