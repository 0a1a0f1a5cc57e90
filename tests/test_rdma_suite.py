"""The RDMA suite end to end (pytester): replay of the real RoCE bundle, bundles built from real sysfs trees,
the live runner on a machine without RDMA (the real perftest binary and its real failure), the runner's
command lines, the rdma marker, and the bundle loaders.

Every tool output read here is a file under tests/data/ or what the installed binary prints on this machine.
Profiles and bundles written to tmp_path are marked DERIVED: they extend or copy shipped ones, and a bundle's
files are copied from the recorded trees, never written by hand.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pytest_gpufabric.checks.rdma import check_rdma_port
from pytest_gpufabric.errors import ToolMissing
from pytest_gpufabric.fabric.bundle import load_rdma_bandwidth, load_rdma_devices
from pytest_gpufabric.fabric.rdma import discover_rdma, line_rate
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.workloads.ib_write_bw import (
    IbWriteBwSettings,
    RdmaUnavailable,
    client_command,
    run_ib_write_bw,
    server_command,
)

DATA = Path(__file__).parent / "data"
ROCE_BUNDLE = DATA / "bundles" / "a100-pcie-roce"
PROCFS_SYS = DATA / "sysfs" / "procfs-class" / "sys"
NO_RDMA = DATA / "captures" / "ci-no-rdma"
SHIPPED_ROCE_PROFILE = Path(__file__).parents[1] / "profiles" / "a100-pcie-roce.yaml"

ROCE_ARGS = ("--gpu-profile", "a100-pcie-roce", "--gpu-replay", "a100-pcie-roce")
#: the a100 profile's promise, as profiles/a100-pcie-roce.yaml writes it (lists replace, so a derived profile
#: that changes one field restates the rest)
IRDMA0 = {"name": "irdma0", "port": 1, "link_layer": "Ethernet", "rate": "25 Gb/s", "mtu": 1024}


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def _outcomes(results: dict) -> dict[str, str]:
    """The RDMA suite's tests (name after the file part of the node id) -> outcome, as gpufabric-results.json
    records them."""
    return {nodeid.split("::", 1)[1]: outcome for nodeid, outcome in results["tests"].items()
            if nodeid.split("::", 1)[0].endswith("test_rdma.py")}


def _others(results: dict) -> set[str]:
    """The outcomes of every other suite's tests (GPU tests: skipped when the bundle holds no GPU evidence)."""
    return {outcome for nodeid, outcome in results["tests"].items()
            if not nodeid.split("::", 1)[0].endswith("test_rdma.py")}


def _assert_counts(result: pytest.RunResult, passed: int = 0, failed: int = 0) -> None:
    """Exactly these passed and failed, no error, every other test skipped (the shipped suites grow: the count
    of skips is not pinned)."""
    counts = result.parseoutcomes()
    assert (counts.get("passed", 0), counts.get("failed", 0), counts.get("errors", 0)) == (passed, failed, 0)
    assert counts["skipped"] >= 10


def _derived_profile(pytester: pytest.Pytester, name: str, rdma: dict) -> Path:
    """DERIVED: a tmp profile that extends the shipped a100-pcie-roce and overrides its `rdma` section."""
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "extends": "a100-pcie-roce", "rdma": rdma}, sort_keys=False))
    return path


# --- 1. replay of the RoCE bundle ------------------------------------------------------------------------


def test_roce_bundle_replay_passes_ib_write_bw_and_is_incomplete(pytester: pytest.Pytester):
    """The write-up recorded ib_write_bw, not the GPU nor the port's rate: ib_write_bw passes, and the run is
    INCOMPLETE (exit 6), naming the GPU, port-rate and counter promises the bundle cannot show: never ACCEPTED."""
    result = pytester.runpytest(*ROCE_ARGS, "-rs")
    assert result.ret == 6
    _assert_counts(result, passed=1)
    out = result.stdout.str()
    assert "Traceback" not in out
    # the rate of the port cannot be judged: irdma's hard-coded 4X (EDR, 25 Gbps a lane) and no netdev speed
    result.stdout.fnmatch_lines([
        "SKIPPED*irdma0 port 1: ACTIVE/LinkUp, Ethernet, rate unknown, MTU 1024; not judged: line rate "
        "(irdma0 reports 100 Gb/sec (4X, ibv_devinfo: 25.0 Gbps), which irdma/i40iw hard-coded before Linux 6.1; "
        "the netdev's speed (ethtool) was not recorded) [bundle a100-pcie-roce]*",
    ])
    # the bundle holds no GPU evidence: the GPU tests skip as not recorded
    result.stdout.fnmatch_lines(["SKIPPED*records no GPUs (nvidia-smi-topo-m.txt, nvidia-smi-q.xml or nvml.json)*"])
    result.stdout.fnmatch_lines(["SKIPPED*not recorded by bundle*a100-pcie-roce*"])
    # a bare client output has no counters read around the run
    result.stdout.fnmatch_lines(["SKIPPED*the recording holds no port counters read around the run*"])
    result.stdout.fnmatch_lines(["*gpufabric: INCOMPLETE (profile a100-pcie-roce*",
                                 "INCOMPLETE: 6 promise(s) not checked: gpu-health[[]GPU0[]], xid-events, gpu-count, "
                                 "gpu-model[[]GPU0[]], rdma-port[[]irdma0:1[]], rdma-counters"])

    results = _results(pytester)
    assert results["summary"]["verdict"] == "INCOMPLETE"
    assert results["summary"]["promises"] == {"passed": 1, "failed": 0, "not_checked": 6, "waived": 0}
    outcomes = _outcomes(results)
    assert outcomes["test_ib_write_bw"] == "passed"
    assert outcomes["test_rdma_port[irdma0:1]"] == "skipped"
    assert [name for name, outcome in outcomes.items() if outcome == "passed"] == ["test_ib_write_bw"]
    assert _others(results) == {"skipped"}
    bw = next(c for c in results["checks"] if c["name"] == "ib-write-bw")
    assert bw["verdict"] == "passed"
    assert bw["found"]["bw_avg_gbit"] == 23.14 and bw["found"]["bytes"] == 65536
    assert bw["expected"]["floors_gbit"] == [pytest.approx(22.5)]  # 90 % of 25 Gb/s
    assert "(93% of 25 Gb/s)" in bw["message"]  # 23.14 / 25 = 92.56 %


def test_roce_bundle_replay_rejects_a_100_gbit_promise(pytester: pytest.Pytester):
    # DERIVED: the shipped profile with the port sold as 100 Gb/s (what irdma's constant claims)
    profile = _derived_profile(pytester, "a100-roce-100g", {"devices": [{**IRDMA0, "rate": "100 Gb/s"}]})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "a100-pcie-roce", "-rA")
    assert result.ret == 1
    _assert_counts(result, failed=1)
    result.stdout.fnmatch_lines([
        "*ib_write_bw irdma0: 23.14 Gb/s average at 64.00 KiB messages, 1324156 iterations, MTU 1024 "
        "(23% of 100 Gb/s)*",
    ])
    assert "23.14 Gb/s < 90% of the promised 100 Gb/s line rate (90.00 Gb/s)" in result.stdout.str()
    result.stdout.fnmatch_lines(["*gpufabric: REJECTED (profile a100-roce-100g*"])
    assert "Traceback" not in result.stdout.str()
    results = _results(pytester)
    assert results["summary"]["verdict"] == "REJECTED"
    assert _outcomes(results)["test_ib_write_bw"] == "failed"
    # the port's rate is still not judged (irdma's rate is not the line rate): a skip, not a pass
    assert _outcomes(results)["test_rdma_port[irdma0:1]"] == "skipped"
    bw = next(c for c in results["checks"] if c["name"] == "ib-write-bw")
    assert bw["verdict"] == "failed" and bw["expected"]["floors_gbit"] == [90.0]


def test_roce_bundle_replay_fails_an_mtu_4096_promise(pytester: pytest.Pytester):
    # DERIVED: the shipped profile asking for jumbo frames on the RoCE port
    profile = _derived_profile(pytester, "a100-roce-mtu4096", {"devices": [{**IRDMA0, "mtu": 4096}]})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "a100-pcie-roce", "-rA")
    assert result.ret == 1
    _assert_counts(result, passed=1, failed=1)
    assert "active MTU 1024, expected >= 4096" in result.stdout.str()
    assert "Traceback" not in result.stdout.str()
    results = _results(pytester)
    assert results["summary"]["verdict"] == "REJECTED"
    outcomes = _outcomes(results)
    assert outcomes["test_rdma_port[irdma0:1]"] == "failed"
    assert outcomes["test_ib_write_bw"] == "passed"
    port = next(c for c in results["checks"] if c["name"] == "rdma-port")
    assert port["verdict"] == "failed"
    assert port["found"]["active_mtu"] == 1024 and port["found"]["rate_gbit"] is None


# --- 2. bundles built from a real sysfs tree --------------------------------------------------------------


def _sysfs_bundle(where: Path) -> Path:
    """DERIVED: an RDMA-only bundle whose sysfs/ is the recorded prometheus/procfs tree, copied unchanged.

    Under pytester.path for the runs: pytest takes the rootdir (and so reports/) from every path on the command
    line, option values included."""
    bundle = where / "procfs-bundle"
    shutil.copytree(PROCFS_SYS, bundle / "sysfs" / "sys")
    return bundle


def test_sysfs_bundle_judges_the_ports_the_tree_holds(pytester: pytest.Pytester):
    bundle = _sysfs_bundle(pytester.path)
    # What the tree's files say: mlx4_0 port 1 "4: ACTIVE", "5: LinkUp", InfiniBand, "40 Gb/sec (4X QDR)";
    # mlx5_0 port 1 "4: ACTIVE", InfiniBand, "25 Gb/sec (1X EDR)" but phys_state "4: ACTIVE" (as recorded,
    # see tests/data/sysfs/README.md), which is not LinkUp.
    profile = _derived_profile(pytester, "procfs-ib", {"devices": [
        {"name": "mlx4_0", "port": 1, "link_layer": "InfiniBand", "rate": "40 Gb/s"},
        {"name": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "rate": "25 Gb/s"},
        {"name": "mlx5_9", "port": 1, "link_layer": "InfiniBand"},
    ]})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle), "-rA")
    assert result.ret == 1
    out = result.stdout.str()
    assert "Traceback" not in out
    outcomes = _outcomes(_results(pytester))
    assert outcomes["test_rdma_port[mlx4_0:1]"] == "passed"
    assert outcomes["test_rdma_port[mlx5_0:1]"] == "failed"
    assert outcomes["test_rdma_port[mlx5_9:1]"] == "failed"
    # the inherited ib_write_bw promise has no output in this bundle: skipped, nothing is run
    assert outcomes["test_ib_write_bw"] == "skipped"
    assert "the bundle holds no ib_write_bw output (ib_write_bw.txt or rdma-bw.json)" in out
    result.stdout.fnmatch_lines(["PASSED*test_rdma_port?mlx4_0:1?*"])
    assert "mlx5_0 port 1: ACTIVE/ACTIVE, InfiniBand, 25 Gb/s, MTU None: physical state ACTIVE, expected LinkUp" in out
    # the suite's rdma_port fixture reports a device the tree lacks, with what the tree holds
    assert ("RDMA port mlx5_9:1 is promised by profile procfs-ib but missing (found: hfi1_0, mlx4_0, mlx5_0)"
            in out)
    results = _results(pytester)
    assert results["summary"]["verdict"] == "REJECTED"
    port = next(c for c in results["checks"] if c["subject"] == "mlx4_0 port 1")
    assert port["verdict"] == "passed"
    assert port["found"]["rate_gbit"] == 40.0 and port["found"]["rate_source"] == "port rate 40 Gb/sec (4X QDR)"


def test_sysfs_bundle_accepts_a_port_that_is_there(pytester: pytest.Pytester):
    bundle = _sysfs_bundle(pytester.path)
    profile = _derived_profile(pytester, "procfs-mlx4", {"devices": [
        {"name": "mlx4_0", "port": 2, "link_layer": "InfiniBand", "rate": "40 Gb/s"},
    ]})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle))
    _assert_counts(result, passed=1)
    results = _results(pytester)
    assert _outcomes(results)["test_rdma_port[mlx4_0:2]"] == "passed"
    # a sysfs copy alone shows the port; the GPU and ib_write_bw promises inherited from a100-pcie-roce stay
    # not checked, each saying what the bundle lacks
    assert results["summary"]["verdict"] == "INCOMPLETE" and result.ret == 6
    unchecked = {p["id"]: p["reason"] for p in results["promises"] if p["outcome"] == "not checked"}
    assert set(unchecked) == {"ib-write-bw", "rdma-counters", "gpu-count", "gpu-model[GPU0]", "gpu-health[GPU0]",
                              "xid-events"}
    assert unchecked["ib-write-bw"] == "the bundle holds no ib_write_bw output (ib_write_bw.txt or rdma-bw.json)"


def test_check_rdma_port_names_a_device_missing_from_the_tree(tmp_path: Path):
    devices = load_rdma_devices(_sysfs_bundle(tmp_path))
    assert [d.name for d in devices] == ["hfi1_0", "mlx4_0", "mlx5_0"]
    result = check_rdma_port({"name": "mlx5_9", "port": 1}, devices, "bundle procfs")
    assert result.verdict == "failed"
    assert result.message.startswith("mlx5_9 port 1: no RDMA device mlx5_9 (bundle procfs shows: hfi1_0, mlx4_0, "
                                     "mlx5_0). ")
    assert check_rdma_port({"name": "mlx4_0", "port": 3}, devices, "x").message == "mlx4_0 port 3: mlx4_0 has no port 3"


# --- 3. the live runner on a machine without RDMA ---------------------------------------------------------


def _loopback_profile(pytester: pytest.Pytester) -> Path:
    """DERIVED: profiles/a100-pcie-roce.yaml with its ib_write_bw section replaced by a loopback run on irdma0.

    Not an `extends:` profile: extends merges maps key by key, so the shipped `peer: 10.100.100.1` would be
    inherited and cannot be removed (the schema allows no null). A copy of the shipped document is the only
    way to a loopback section without a peer."""
    doc = yaml.safe_load(SHIPPED_ROCE_PROFILE.read_text())
    doc["name"] = "a100-roce-loopback"
    doc["rdma"]["ib_write_bw"] = {"device": "irdma0", "duration_s": 2, "timeout_s": 30, "size": "64 KiB",
                                  "min_fraction_of_rate": 0.9}
    path = pytester.path / "a100-roce-loopback.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_profile(path)
    assert "peer" not in loaded.rdma["ib_write_bw"] and "ssh" not in loaded.rdma["ib_write_bw"]
    assert loaded.rdma["devices"] == [IRDMA0]
    return path


def _no_device_line() -> str:
    """The first line the installed ib_write_bw prints without RDMA devices, as captured in CI."""
    return (NO_RDMA / "ib_write_bw-no-device.txt").read_text().splitlines()[0].strip()


def test_extends_cannot_drop_the_inherited_peer(pytester: pytest.Pytester):
    # why _loopback_profile copies instead of extending: the merged profile keeps the shipped peer
    profile = _derived_profile(pytester, "a100-roce-extends", {"ib_write_bw": {"device": "irdma0", "duration_s": 2}})
    assert load_profile(profile).rdma["ib_write_bw"]["peer"] == "10.100.100.1"


needs_perftest = pytest.mark.skipif(shutil.which("ib_write_bw") is None, reason="perftest's ib_write_bw not on PATH")


def _live_run(pytester: pytest.Pytester) -> pytest.RunResult:
    if shutil.which("ib_write_bw") is None:
        pytest.skip("perftest's ib_write_bw is not installed (apt install perftest)")
    profile = _loopback_profile(pytester)
    return pytester.runpytest_subprocess("--gpu-profile", str(profile), "-k", "test_rdma", "-rA", timeout=120)


def test_live_run_without_rdma_fails_with_the_binarys_words(pytester: pytest.Pytester):
    result = _live_run(pytester)
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out
    assert result.ret == 1
    results = _results(pytester)
    assert results["run"]["mode"] == "live"
    assert results["summary"]["verdict"] == "REJECTED"
    outcomes = _outcomes(results)
    assert _others(results) == set()  # -k test_rdma: no GPU test ran
    assert {"test_rdma_port[irdma0:1]", "test_ib_write_bw", "test_rdma_counters_rise"} <= set(outcomes)
    assert outcomes["test_rdma_gpu_locality[irdma0:1]"] == "skipped"  # the profile pairs no GPU with irdma0
    assert outcomes["test_rdma_port[irdma0:1]"] == "failed"
    result.stdout.fnmatch_lines([
        "RDMA port irdma0:1 is promised by profile a100-roce-loopback but missing (found: no RDMA device)",
    ])
    # ib_write_bw ran for real and said it found no device; both tests of its run fail on that, one line each
    assert outcomes["test_ib_write_bw"] == "failed"
    assert outcomes["test_rdma_counters_rise"] == outcomes["test_ib_write_bw"]
    line = _no_device_line()
    assert line == "Did not detect devices"
    messages = [text for text in result.stdout.lines if text.startswith("no RDMA device:")]
    assert messages, out
    assert all(m.startswith("no RDMA device: server `") and m.endswith(f"found no usable RDMA device: '{line}'")
               and " -d irdma0 " in m and " -D 2" in m for m in messages)
    result.stdout.fnmatch_lines(["*test_rdma.py::test_ib_write_bw - Failed: no RDMA device: *"])
    result.stdout.fnmatch_lines(["*test_rdma.py::test_rdma_counters_rise - Failed: no RDMA device: *"])
    assert "10.100.100.1" not in out  # nothing pointed at the capture's peer


def test_live_run_without_rdma_is_a_one_line_failure(pytester: pytest.Pytester):
    result = _live_run(pytester)
    outcomes = _outcomes(_results(pytester))
    assert outcomes["test_ib_write_bw"] == "failed"
    assert "During handling of the above exception" not in result.stdout.str()


@needs_perftest
def test_run_ib_write_bw_without_a_device_raises_rdma_unavailable():
    with pytest.raises(RdmaUnavailable) as raised:
        run_ib_write_bw(IbWriteBwSettings(device="irdma0", duration_s=1, timeout_s=20))
    message = str(raised.value)
    assert _no_device_line() in message
    assert message.startswith("no RDMA device: server `")
    assert "\n" not in message


def test_run_ib_write_bw_without_the_binary_says_install_perftest():
    """A missing tool, not a missing device: the promise is not checked (ToolMissing), never failed."""
    with pytest.raises(ToolMissing, match="ib_write_bw-not-installed not found on PATH: install perftest"):
        run_ib_write_bw(IbWriteBwSettings(device="irdma0", binary="ib_write_bw-not-installed"))


# --- 4. command lines -------------------------------------------------------------------------------------


def test_server_and_client_commands():
    settings = IbWriteBwSettings(device="mlx5_0", gid_index=3, duration_s=7, use_cuda=1, extra_args=("-R", "-a"))
    common = ["--report_gbits", "-F", "-s", "65536", "-q", "1", "-p", "18515", "-d", "mlx5_0", "-x", "3", "-D", "7",
              "--use_cuda=1", "-R", "-a"]
    assert server_command(settings) == ["ib_write_bw", *common]
    assert client_command(settings, "127.0.0.1") == ["ib_write_bw", *common, "127.0.0.1"]


def test_commands_server_device_port_and_iteration_mode():
    settings = IbWriteBwSettings(device="mlx5_0", server_device="mlx5_1", ib_port=2, duration_s=None,
                                 iterations=5000, size=4096, qps=4, tcp_port=20000, binary="/opt/perftest/ib_write_bw")
    server = server_command(settings)
    client = client_command(settings, "127.0.0.1")
    assert server == ["/opt/perftest/ib_write_bw", "--report_gbits", "-F", "-s", "4096", "-q", "4", "-p", "20000",
                      "-d", "mlx5_1", "-i", "2", "-n", "5000"]
    assert client == [*server[:9], "-d", "mlx5_0", "-i", "2", "-n", "5000", "127.0.0.1"]
    bare = server_command(IbWriteBwSettings())
    assert bare == ["ib_write_bw", "--report_gbits", "-F", "-s", "65536", "-q", "1", "-p", "18515", "-D", "5"]
    assert "-x" not in bare and "-d" not in bare and not any(a.startswith("--use_cuda") for a in bare)


def test_settings_from_the_a100_profile():
    profile = load_profile("a100-pcie-roce")
    settings = IbWriteBwSettings.from_profile(profile.rdma["ib_write_bw"])
    assert settings == IbWriteBwSettings(device="irdma0", peer="10.100.100.1", gid_index=1, size=65536,
                                         duration_s=10, extra_args=("-R",))
    assert server_command(settings) == ["ib_write_bw", "--report_gbits", "-F", "-s", "65536", "-q", "1", "-p", "18515",
                                        "-d", "irdma0", "-x", "1", "-D", "10", "-R"]
    # the profile's device wins over the default the suite passes (the first promised device)
    assert IbWriteBwSettings.from_profile({"device": "irdma0"}, device="mlx5_0").device == "irdma0"
    assert IbWriteBwSettings.from_profile({"size": "1 MiB"}, device="mlx5_0") == IbWriteBwSettings(
        device="mlx5_0", size=1048576)


# --- 5. the rdma marker -----------------------------------------------------------------------------------


def test_rdma_marker_against_the_roce_profile_and_bundle(pytester: pytest.Pytester):
    pytester.makepyfile(test_user_rdma="""
        import pytest

        @pytest.mark.rdma(link_layer="InfiniBand")
        def test_user_infiniband():
            raise AssertionError("must not run: the profile promises no InfiniBand port")

        @pytest.mark.rdma(count=2)
        def test_user_two_ports():
            raise AssertionError("must not run: the profile promises one port")

        @pytest.mark.rdma(link_layer="Ethernet")
        def test_user_roce(rdma_devices):
            assert [d.name for d in rdma_devices] == ["irdma0"]
            assert rdma_devices[0].port(1).state == "ACTIVE"
    """)
    result = pytester.runpytest("test_user_rdma.py", *ROCE_ARGS, "-k", "test_user_", "-rA")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "SKIPPED*profile a100-pcie-roce promises 0 RDMA port(s) InfiniBand; the test needs 1",
    ])
    result.stdout.fnmatch_lines(["SKIPPED*profile a100-pcie-roce promises 1 RDMA port(s); the test needs 2"])
    result.stdout.fnmatch_lines(["PASSED test_user_rdma.py::test_user_roce"])
    assert "must not run" not in result.stdout.str()


# --- 6. the bundle loaders --------------------------------------------------------------------------------


def test_load_rdma_bandwidth_reads_the_client_output():
    recorded = load_rdma_bandwidth(ROCE_BUNDLE)
    assert recorded["source"] == str(ROCE_BUNDLE / "ib_write_bw.txt")
    client = recorded["client"]
    assert client["results"] == [{"bytes": 65536, "iterations": 1324156, "bw_peak_gbps": None, "bw_avg_gbps": 23.14,
                                  "msg_rate_mpps": 0.044138}]
    assert (client["device"], client["link_type"], client["mtu"], client["gid_index"]) == ("irdma0", "Ethernet",
                                                                                          1024, 1)
    assert client["rdma_cm"] is True and client["units_printed"] == "Gb/sec" and client["bw_peak_reported"] is False
    assert recorded["client_output"] == (ROCE_BUNDLE / "ib_write_bw.txt").read_text()


def test_load_rdma_devices_reads_ibv_devinfo():
    devices = load_rdma_devices(ROCE_BUNDLE)
    assert [d.name for d in devices] == ["irdma0"]
    device = devices[0]
    assert (device.fw_ver, device.node_guid) == ("1.53", "b696:91ff:feec:a458")
    port = device.port(1)
    assert (port.state, port.phys_state, port.link_layer) == ("ACTIVE", "LinkUp", "Ethernet")
    assert (port.active_mtu, port.active_mtu_source) == (1024, "ibv_devinfo")
    assert (port.rate_gbit, port.width) == (100.0, "4X")  # irdma's constant, not the 25 Gb/s of the wire
    assert port.gids == ["fe80::b696:91ff:feec:a458", "::ffff:10.100.100.1"]
    rate, why = line_rate(port)
    assert rate is None and "hard-coded before Linux 6.1" in why
    assert device.port(2) is None


def test_load_rdma_devices_of_an_empty_or_absent_record(tmp_path: Path):
    assert load_rdma_devices(tmp_path) is None
    (tmp_path / "sysfs" / "sys" / "class" / "infiniband").mkdir(parents=True)
    assert load_rdma_devices(tmp_path) == []
    assert discover_rdma(str(tmp_path / "nothing-here")) == []
