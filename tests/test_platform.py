"""The platform suite: PCI configuration space and lspci text, the sysfs/procfs readers, the checks and their
messages, bundles, `profile init`, the suite end to end (pytester), and a failing bandwidth check naming the
platform findings.

Every tool output read here is a file under tests/data/captures/public/platform/ (its README names the source and
the values read off it by hand, which the assertions repeat), a recorded bundle under tests/data/bundles/, or this
machine's own sysfs/procfs read live. Anything put together here is marked DERIVED, with why.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_gpufabric.checks import platform as checks
from pytest_gpufabric.checks.result import FAILED, NOT_CHECKED, PASSED
from pytest_gpufabric.fabric import platform as pf
from pytest_gpufabric.fabric import platform_record as pr
from pytest_gpufabric.fabric import platform_state
from pytest_gpufabric.fabric import platform_text as pt
from pytest_gpufabric.fabric.bundle import load_bundle
from pytest_gpufabric.formats.lspci import lspci_parents, parse_lspci, parse_lspci_hex
from pytest_gpufabric.formats.pci_config import parse_config_space

DATA = Path(__file__).parent / "data"
PUBLIC = DATA / "captures" / "public" / "platform"
RECORDED = DATA / "captures" / "platform"  # hardware/record-platform.sh's outputs, one folder per machine
ACS_ON = PUBLIC / "lspci-vvvxxxx-haswell-e-root-port-acs-on-above-connectx3-pro.txt"
ACS_OFF_GPU = PUBLIC / "lspci-vvvxxxx-sunrise-point-root-port-acs-off-above-gp108m.txt"
PLX_TITAN = PUBLIC / "lspci-vvv-plx-pex8747-downstream-port-acs-off-above-titan-x.txt"
PLX_GREP = PUBLIC / "lspci-grep-acsctl-plx-acs-on-nccl-304-excerpt.txt"
IOMMU_LOG = PUBLIC / "dmesg-grep-iommu-proxmox-intel-iommu-on-translated-excerpt.txt"
NO_PEERMEM = PUBLIC / "lsmod-grep-a100-8x-ib-no-peer-memory-nccl-988-excerpt.txt"
H200_BUNDLE = DATA / "bundles" / "h200-nvswitch-x2"
MESSAGE_SOURCE = " ["  # messages end with "[where it was read]"

ALL_OFF = dict.fromkeys(("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl",
                         "DirectTrans"), False)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _lspci_platform(path: Path, **kw) -> pr.Platform:
    platform = pr.Platform(source=path.name)
    pt.apply_lspci(platform, _read(path), path.name, **kw)
    return platform


# --- 1. PCI configuration space and lspci text -------------------------------------------------------------------


def _without_hex(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not parse_lspci_hex_line(line))


def parse_lspci_hex_line(line: str) -> bool:
    import re

    return bool(re.match(r"^[0-9a-f]{2,3}:( [0-9a-f]{2}){16}\s*$", line))


@pytest.mark.parametrize("path", [ACS_ON, ACS_OFF_GPU], ids=["haswell-e+connectx3", "sunrise-point+gp108m"])
def test_config_space_parser_agrees_with_lspcis_own_decoding(path):
    """pciutils' test dumps hold lspci's decoding and the 4096 bytes it decoded: the config-space parser must
    read the same registers from the bytes as lspci printed from them."""
    hexes = parse_lspci_hex(_read(path))
    decoded = {d.bdf: d.facts for d in parse_lspci(_without_hex(_read(path)))}
    assert set(hexes) == set(decoded) and all(len(b) == 4096 for b in hexes.values())
    compared = 0
    for bdf, data in hexes.items():
        facts = parse_config_space(data)
        text = decoded[bdf]
        for name in ("secondary_bus", "subordinate_bus", "port_type", "max_payload_supported", "max_payload",
                     "max_read_request", "acs_control", "acs_capability"):
            if getattr(text, name) is not None:
                assert getattr(facts, name) == getattr(text, name), (bdf, name)
                compared += 1
    assert compared >= 4 * len(hexes)  # port type, DevCap and DevCtl of every function, bridges more


def test_acs_on_root_port_above_the_connectx3_as_read_by_hand():
    devices = {d.bdf: d for d in parse_lspci(_read(ACS_ON))}
    port, nic = devices["0000:00:02.0"].facts, devices["0000:03:00.0"].facts
    # README: secondary=03, Root Port, DevCtl 256/128, ACSCtl SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+
    assert (port.secondary_bus, port.subordinate_bus, port.port_type) == (3, 3, "root port")
    assert (port.max_payload_supported, port.max_payload, port.max_read_request) == (256, 256, 128)
    assert port.acs_control == {**ALL_OFF, "SrcValid": True, "TransBlk": True, "ReqRedir": True,
                                "CmpltRedir": True, "UpstreamFwd": True}
    assert port.redirects() == ["ReqRedir", "CmpltRedir", "UpstreamFwd"]
    assert (nic.port_type, nic.max_payload, nic.max_read_request, nic.acs) == ("endpoint", 256, 512, False)
    assert nic.vendor_id == 0x15B3 and port.vendor_id == 0x8086  # hex 00: b3 15 ... / 86 80 ...
    assert lspci_parents(list(devices.values())) == {"0000:03:00.0": "0000:00:02.0"}


def test_plx_downstream_port_acs_capable_but_off_above_the_titan_x():
    devices = {d.bdf: d for d in parse_lspci(_read(PLX_TITAN))}
    assert list(devices) == ["0000:03:08.0", "0000:04:00.0"]
    bridge, gpu = devices["0000:03:08.0"], devices["0000:04:00.0"]
    assert bridge.facts.port_type == "switch downstream port" and bridge.facts.secondary_bus == 4
    assert bridge.facts.max_payload_supported == 2048 and bridge.facts.max_payload == 256
    assert bridge.facts.acs_capability == dict.fromkeys(ALL_OFF, True) and bridge.facts.acs_control == ALL_OFF
    assert (gpu.facts.port_type, gpu.facts.max_payload, gpu.facts.max_read_request) == ("legacy endpoint", 256, 512)
    assert gpu.driver == "nvidia" and gpu.facts.class_code >> 8 == 0x0300
    assert lspci_parents(list(devices.values())) == {"0000:04:00.0": "0000:03:08.0"}


def test_a_grep_of_acsctl_lines_keeps_them_without_a_device():
    (line,) = parse_lspci(_read(PLX_GREP))
    assert line.bdf is None and line.line == 2
    assert line.facts.redirects() == ["ReqRedir", "CmpltRedir", "UpstreamFwd"]


def test_what_an_unprivileged_reader_and_a_vm_without_ecam_get_of_the_same_root_port():
    """DERIVED: the first 64 and 256 bytes of the real 4096-byte dump are what the kernel gives an unprivileged
    reader of /sys/bus/pci/devices/<bdf>/config, and a kernel without ECAM (many VMs)."""
    data = parse_lspci_hex(_read(ACS_ON))["0000:00:02.0"]
    header = parse_config_space(data[:64])
    assert header.pcie is None and header.capabilities_unreadable.startswith("config space beyond 64 bytes needs root")
    assert header.secondary_bus == 3 and header.vendor_id == 0x8086  # the standard header is still there
    legacy = parse_config_space(data[:256])
    assert legacy.max_payload == 256 and legacy.acs is None
    assert legacy.extended_unreadable.startswith("extended configuration space (beyond 256 bytes) not readable")
    with pytest.raises(ValueError, match="at least the 64-byte standard header"):
        parse_config_space(data[:32])


def test_text_that_is_not_lspci_output_is_refused_naming_the_line():
    with pytest.raises(ValueError, match="line 1 is not lspci output"):
        parse_lspci(_read(IOMMU_LOG))
    with pytest.raises(ValueError, match="no PCI function"):
        parse_lspci("")


# --- 2. other text: module lists, kernel logs, nvidia-smi -q -x ---------------------------------------------------


def test_a_grep_of_lsmod_that_printed_nothing_proves_both_modules_absent():
    modules = pt.modules_reading(_read(NO_PEERMEM), "lsmod.txt")
    assert modules.value == {"loaded": [], "complete": False, "searched": ["nvidia_peermem", "nv_peer_mem"],
                             "commands": ["lsmod | grep nvidia_peermem", "lsmod | grep nv_peer_mem"]}
    assert pt.module_state(modules, "nvidia_peermem") is False and pt.module_state(modules, "nv_peer_mem") is False
    assert pt.module_state(modules, "mlx5_ib") is None  # not searched for: unknown, not absent


def test_the_kernel_log_of_an_intel_iommu_on_host_says_translated():
    facts, cmdline = pt.kernel_log_reading(_read(IOMMU_LOG), "dmesg.txt")
    assert facts.value["default_domain"] == "Translated" and facts.value["iommu"] == "enabled"
    assert cmdline.value == "BOOT_IMAGE=/boot/vmlinuz-6.8.12-2-pve root=/dev/mapper/pve-root ro quiet intel_iommu=on"
    platform = pr.Platform(source="dmesg.txt", kernel_log=facts, kernel_cmdline=cmdline)
    mode, evidence = platform_state.machine_iommu_mode(platform)
    assert mode == "translated" and "iommu: Default domain type: Translated" in evidence


def test_persistence_mode_of_the_h200s_from_nvidia_smi_q_x():
    readings = pt.persistence_from_query_xml(_read(H200_BUNDLE / "nvidia-smi-q.xml"), "nvidia-smi-q.xml")
    assert {k: r.value for k, r in readings.items()} == {"GPU0": True, "GPU1": True}  # <persistence_mode>Enabled


# --- 3. the checks on the real outputs: each failure with its message ---------------------------------------------


def test_acs_on_fails_naming_the_bridge_the_device_below_the_bits_and_the_cost():
    result = checks.check_acs("disabled", _lspci_platform(ACS_ON))
    assert result.verdict == FAILED
    assert result.message.startswith(
        "ACS on the root port 0000:00:02.0, Intel Corporation Haswell-E PCI Express Root Port 2 above NIC "
        "0000:03:00.0 (Mellanox Technologies MT27520 Family [ConnectX-3 Pro]): ACSCtl ReqRedir+ CmpltRedir+ "
        "UpstreamFwd+ (SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-) "
        "[lspci -vvv text and hex dump (4096 bytes)]. Expected no peer-to-peer redirect")
    assert "redirected up through the CPU's root complex instead of across the switch" in result.message
    assert result.found["bridges"] == {"0000:00:02.0": ["ReqRedir", "CmpltRedir", "UpstreamFwd"]}


def test_acs_on_a_plx_bridge_a_grep_does_not_name_fails_saying_so():
    result = checks.check_acs("disabled", _lspci_platform(PLX_GREP))
    assert result.verdict == FAILED
    assert result.message.startswith(f"ACS on 1 function(s) the paste does not name (line 2 of {PLX_GREP.name}, a "
                                     "grep of lspci -vvv without the device headers): ACSCtl SrcValid+ TransBlk- "
                                     "ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-.")


def test_acs_off_above_a_gpu_passes_even_strictly():
    platform = _lspci_platform(ACS_OFF_GPU)
    (gpu,) = platform.endpoints
    assert gpu.kind == "gpu" and len(gpu.bridges) == 1 and gpu.above_unknown is None  # a root port: the whole path
    for want in ("disabled", "all_off"):
        assert checks.check_acs(want, platform).verdict == PASSED


def test_acs_off_on_a_switch_port_whose_upstream_port_the_paste_lacks_is_not_judged():
    """The two pastes `lspci -vvv -s 03:08.0` and `-s 04:00` show the PLX downstream port (ACS off) above the TITAN X,
    not the switch's upstream port and root port above it: judged as far as shown, not passed."""
    platform = _lspci_platform(PLX_TITAN)
    (gpu,) = platform.endpoints
    assert gpu.bridges == ["0000:03:08.0"]
    for want in ("disabled", "all_off"):
        result = checks.check_acs(want, platform)
        assert result.verdict == NOT_CHECKED
        assert (f"NVIDIA GPU 0000:04:00.0: {PLX_TITAN.name} shows 0000:03:08.0 but not the switch's upstream port and "
                "the ports above it up to the root port (judged without a redirect: 0000:03:08.0)") in result.message


def test_all_off_also_fails_on_source_validation_alone():
    result = checks.check_acs("all_off", _lspci_platform(ACS_ON))
    assert result.verdict == FAILED and result.found["bridges"]["0000:00:02.0"][:2] == ["SrcValid", "TransBlk"]


def test_iommu_translated_fails_with_the_log_line_and_the_command_line():
    facts, cmdline = pt.kernel_log_reading(_read(IOMMU_LOG), "dmesg.txt")
    result = checks.check_iommu("passthrough", pr.Platform(source="dmesg.txt", kernel_log=facts,
                                                           kernel_cmdline=cmdline))
    assert result.verdict == FAILED
    assert result.message.startswith(
        "IOMMU translated for the machine (dmesg.txt: '[    0.440538] iommu: Default domain type: Translated'; "
        "kernel command line (dmesg.txt, 'Kernel command line:'): intel_iommu=on); expected passthrough")
    assert "boot with iommu=pt" in result.message
    assert checks.check_iommu("translated", pr.Platform(kernel_log=facts, kernel_cmdline=cmdline)).verdict == PASSED


def test_no_peer_memory_module_fails_naming_the_greps_and_the_cost():
    platform = pr.Platform(source="lsmod.txt", modules=pt.modules_reading(_read(NO_PEERMEM), "lsmod.txt"))
    result = checks.check_peer_memory(True, platform)
    assert result.verdict == FAILED
    assert result.message.startswith(
        "GPUDirect RDMA peer-memory module not loaded: neither nvidia_peermem nor nv_peer_mem in lsmod.txt (its "
        "`grep nvidia_peermem` and `grep nv_peer_mem` printed nothing); expected nvidia_peermem (or nv_peer_mem) "
        "loaded (peer_memory: true")
    assert "GPU Direct RDMA Disabled for HCA" in result.message and "modprobe nvidia-peermem" in result.message


def test_pcie_sizes_pass_and_fail_against_the_profile():
    platform = _lspci_platform(ACS_ON)
    nic = platform.endpoints[0].label
    assert checks.check_pcie_sizes({"min_max_payload": 256, "min_max_read_request": 512}, nic, platform).verdict \
        == PASSED
    result = checks.check_pcie_sizes({"min_max_read_request": 1024}, nic, platform)
    assert result.verdict == FAILED
    assert result.message == (
        f"{nic} (0000:03:00.0): MaxPayload 256 bytes (device supports 256), MaxReadReq 512 bytes [DevCtl, lspci -vvv "
        "text and hex dump (4096 bytes)]: MaxReadReq 512 bytes, expected at least 1024. " + checks._PCIE_COST)


def test_versions_compare_part_by_part():
    assert checks.version_key("550.127.05") > checks.version_key("550.54.15")
    assert checks.version_key("96.00.A5.00.1A", hexadecimal=True) > checks.version_key("96.00.9F.00.01",
                                                                                        hexadecimal=True)
    fabric = load_bundle(H200_BUNDLE)
    assert checks.check_driver({"min": "580.159.04"}, fabric).verdict == PASSED
    failed = checks.check_driver({"min": "590.1"}, fabric)
    assert failed.verdict == FAILED and failed.message.startswith("NVIDIA driver 580.159.04 [bundle ")
    assert checks.check_vbios({"exact": "96.00.a5.00.1a"}, fabric.gpu(0), fabric.source).verdict == PASSED
    assert "VBIOS 96.00.A5.00.1A" in checks.check_vbios({"exact": "96.00.A5.00.1B"}, fabric.gpu(1),
                                                        fabric.source).message


# --- 4. this machine, read live -----------------------------------------------------------------------------------

needs_linux_sysfs = pytest.mark.skipif(not os.path.isdir("/sys/bus/pci/devices") or not os.path.isfile(
    "/proc/cmdline"), reason="needs Linux sysfs and procfs")


@needs_linux_sysfs
def test_every_live_reading_has_a_value_or_says_why_not():
    platform = pf.read_platform("/")
    readings = {"kernel_cmdline": platform.kernel_cmdline, "iommu_units": platform.iommu_units,
                "modules": platform.modules, "peer_memory_files": platform.peer_memory_files,
                "cpu_governors": platform.cpu_governors, "numa_balancing": platform.numa_balancing,
                "hugepages": platform.hugepages}
    for name, reading in readings.items():
        assert reading.known or reading.unreadable.startswith("not readable here: "), (name, reading)
        assert reading.source, name
    if not os.path.isdir("/sys/devices/system/cpu/cpu0/cpufreq"):  # VMs and kernels without cpufreq
        assert platform.cpu_governors.unreadable.startswith("not readable here: no cpufreq in this kernel/VM")
        result = checks.check_cpu_governor("performance", platform)
        assert result.verdict == NOT_CHECKED and result.message.startswith("not readable here: no cpufreq")
    if not os.path.exists("/proc/modules"):  # a kernel without loadable modules (this project's CI VM)
        assert checks.check_peer_memory(True, platform).verdict == FAILED  # /sys/module/nvidia_peermem absent


@needs_linux_sysfs
def test_a_snapshot_reads_back_the_same(tmp_path):
    """gpufabric snapshot's copy: the same readers on the copy give the same readings (but the hypervisor flag:
    /proc/cpuinfo is not copied), and platform.json gives them back whole. DERIVED: the last PCI function of this
    machine stands in for a GPU, so that a config space and its path are copied too (this machine may have none)."""
    functions = sorted(os.listdir("/sys/bus/pci/devices"))
    ids = {0: functions[-1]} if functions else None
    live = pf.read_platform("/", ids)
    pf.snapshot_platform(live, tmp_path)
    again = pf.read_platform(str(tmp_path / pr.PLATFORM_DIR), ids)
    skip = {"source", "files", "links", "format"}
    expected = {k: v for k, v in live.to_record().items() if k not in skip}
    copied = {k: v for k, v in again.to_record().items() if k not in skip}
    assert copied.pop("hypervisor") == {"value": None, "source": "", "unreadable": None}
    assert copied == {k: v for k, v in expected.items() if k != "hypervisor"}
    assert not (tmp_path / pr.PLATFORM_DIR / "proc" / "cpuinfo").exists()
    record = json.loads((tmp_path / pr.PLATFORM_FILE).read_text())
    assert {k: v for k, v in pr.platform_from_record(record).to_record().items() if k not in skip} == expected


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("runuser")
                    or not os.path.isdir("/sys/bus/pci/devices") or not os.listdir("/sys/bus/pci/devices"),
                    reason="needs root, runuser and a PCI function, to read as an unprivileged user")
def test_an_unprivileged_reader_gets_64_bytes_and_is_told_it_needs_root():
    bdf = sorted(os.listdir("/sys/bus/pci/devices"))[0]
    done = subprocess.run(["runuser", "-u", "nobody", "--", "head", "-c", "4096", f"/sys/bus/pci/devices/{bdf}/config"],
                          capture_output=True, timeout=30)
    assert done.returncode == 0 and len(done.stdout) == 64
    facts = parse_config_space(done.stdout)
    if facts.capabilities_unreadable:  # a function with a capability list
        assert facts.capabilities_unreadable.startswith("config space beyond 64 bytes needs root")


# --- 5. bundles, profile init -------------------------------------------------------------------------------------


def _derived_bundle(root: Path, *, base: Path = H200_BUNDLE, text: dict[str, Path]) -> Path:
    """DERIVED: a bundle of real files from different machines (the H200's snapshot, a public lspci/dmesg/lsmod
    under the names a customer would send them), so that every platform failure can be judged in one run."""
    bundle = root / "bundle"
    shutil.copytree(base, bundle)
    for name, path in text.items():
        shutil.copy(path, bundle / name)
    return bundle


def test_a_bundle_reads_the_text_a_customer_sends(tmp_path):
    """The kernel log and the module list are read; the lspci (a Haswell-E host with a ConnectX-3 Pro and no NVIDIA
    GPU) is another machine's than the H200's: its PCI functions are left out, saying why (issue 40)."""
    bundle = _derived_bundle(tmp_path, text={pr.LSPCI_FILE: ACS_ON, pr.KERNEL_LOG_FILE: IOMMU_LOG,
                                             pr.MODULES_FILE: NO_PEERMEM})
    platform = pf.load_platform(bundle, load_bundle(bundle))
    assert platform.endpoints == [] and platform.devices == {}
    assert platform.pci_foreign == (
        f"{bundle / pr.LSPCI_FILE} shows no NVIDIA GPU; this machine's GPUs are GPU0 0000:00:06.0, GPU1 0000:00:07.0 "
        "(PCI bus ids): it does not show GPU0 0000:00:06.0, GPU1 0000:00:07.0. An lspci of another machine, or of "
        "part of this one, shows nothing of this machine's PCIe path")
    assert platform.kernel_cmdline.value.endswith("intel_iommu=on")
    assert platform.modules.known
    assert {k: r.value for k, r in platform.persistence_mode.items()} == {"GPU0": True, "GPU1": True}
    assert checks.bandwidth_findings(platform) == [
        f"IOMMU translated for the machine ({bundle / pr.KERNEL_LOG_FILE}: '[    0.440538] iommu: Default domain "
        f"type: Translated'; kernel command line ({bundle / pr.KERNEL_LOG_FILE}, 'Kernel command line:'): "
        "intel_iommu=on): DMA goes through IOMMU page tables",
    ]


def test_a_bundle_without_platform_evidence_has_none(bundles):
    assert pf.load_platform(bundles / "titan-rtx-nvlink") is None


def test_profile_init_writes_the_platform_values_the_machine_passes(pytester: pytest.Pytester):
    from pytest_gpufabric.cli import main

    output = pytester.path / "h200-init.yaml"
    assert main(["profile", "init", "--replay", "h200-nvswitch-x2", "-o", str(output)]) == 0
    document = yaml.safe_load(output.read_text())
    assert document["platform"] == {"driver": {"min": "580.159.04"}, "vbios": {"exact": "96.00.A5.00.1A"},
                                    "persistence_mode": True}
    result = pytester.runpytest("--gpu-profile", str(output), "--gpu-replay", "h200-nvswitch-x2", "-k",
                                "test_platform")
    assert result.parseoutcomes()["passed"] == 5  # driver, 2 VBIOS, 2 persistence
    assert result.ret == 6  # -k: the platform promises passed; the rest of the profile was not run (INCOMPLETE)


# --- 6. the suite end to end --------------------------------------------------------------------------------------


def _profile(pytester: pytest.Pytester, name: str, **sections) -> Path:
    """DERIVED: the shipped h200-nvswitch-x2 profile with the sections given (maps merge, lists replace)."""
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "extends": "h200-nvswitch-x2", **sections}, sort_keys=False))
    return path


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def test_the_suite_fails_each_wrong_setting_with_its_message(pytester: pytest.Pytester, tmp_path):
    bundle = _derived_bundle(tmp_path, text={pr.LSPCI_FILE: ACS_ON, pr.KERNEL_LOG_FILE: IOMMU_LOG,
                                             pr.MODULES_FILE: NO_PEERMEM})
    profile = _profile(pytester, "h200-platform", platform={
        "acs": "disabled", "iommu": "passthrough", "peer_memory": True, "persistence_mode": True,
        "driver": {"min": "580.159.04"}, "vbios": {"exact": "96.00.A5.00.1A"}, "cpu_governor": "performance",
        "pcie": {"min_max_payload": 256}})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle), "-k",
                                "test_platform or test_topology", "-rs")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = {t.split("::")[-1]: o for t, o in _results(pytester)["tests"].items() if "test_platform" in t}
    assert outcomes == {
        "test_acs": "skipped", "test_iommu": "failed", "test_peer_memory": "failed",
        "test_persistence_mode[GPU0]": "passed", "test_persistence_mode[GPU1]": "passed",
        "test_driver_version": "passed", "test_vbios_version[GPU0]": "passed", "test_vbios_version[GPU1]": "passed",
        "test_nic_firmware": "skipped", "test_cpu_governor": "skipped", "test_numa_balancing": "skipped",
        "test_hugepages": "skipped", "test_pcie_payload[GPU0]": "skipped", "test_pcie_payload[GPU1]": "skipped"}
    result.stdout.fnmatch_lines_random([
        f"*{bundle}/lspci-vvv.txt shows no NVIDIA GPU; this machine's GPUs are GPU0 0000:00:06.0, GPU1 0000:00:07.0*",
        "*IOMMU translated for the machine*Default domain type: Translated*expected passthrough*",
        "*GPUDirect RDMA peer-memory module not loaded*",
        f"*the CPU frequency governor: not recorded by bundle {bundle}: a bundle needs platform.json (gpufabric "
        "snapshot)*",

        "*profile h200-platform promises no NUMA balancing*",
    ])
    judged = {c["name"]: c["verdict"] for c in _results(pytester)["checks"] if c["name"].startswith("platform-")}
    assert judged["platform-acs"] == "not checked" and judged["platform-persistence"] == "passed"


def test_a_profile_without_a_platform_section_leaves_the_run_as_it_was(pytester: pytest.Pytester):
    """The shipped profiles promise no platform settings: the suite is not collected (no skip, no test id, not
    counted as deselected), so runs and results recorded before it existed replay unchanged."""
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2",
                                "-k", "test_topology or test_platform")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 14 and "skipped" not in outcomes
    assert not [t for t in _results(pytester)["tests"] if "test_platform" in t]
    whole = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2")
    assert "deselected" not in whole.parseoutcomes()
    listed = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--collect-only", "-q")
    assert "test_platform.py" not in listed.stdout.str() and "test_topology.py" in listed.stdout.str()


def test_a_failing_bandwidth_check_names_the_platform_findings(pytester: pytest.Pytester, bundles, tmp_path):
    bundle = _derived_bundle(tmp_path, base=bundles / "h200-nvswitch-x2-bandwidth",
                             text={pr.LSPCI_FILE: ACS_ON, pr.KERNEL_LOG_FILE: IOMMU_LOG})
    # DERIVED: a floor the recorded 297.4 GB/s at 256 MiB does not reach
    profile = _profile(pytester, "h200-too-fast", bandwidth={"collectives": {"all_reduce": [
        {"size": "256 MiB", "min_busbw": "400 GB/s"}]}})
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle), "-k",
                                "test_collective_bandwidth and all_reduce")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (check,) = [c for c in _results(pytester)["checks"] if c["name"] == "bandwidth-all_reduce"]
    assert check["verdict"] == "failed"
    # the lspci is another machine's (no NVIDIA GPU in it): its ACS explains nothing here (issue 40)
    assert "\nPlatform findings that explain it:\n  IOMMU translated for the machine" in check["message"]
    assert "ACS on the root port" not in check["message"]
    assert check["details"][-1:] == [line for line in check["message"].split("\n  ")[-1:]]


def test_a_passing_bandwidth_check_reads_no_platform(pytester: pytest.Pytester, bundles, tmp_path):
    """DERIVED: an lspci-vvv.txt that is not lspci output would fail the run if the platform were read."""
    bundle = _derived_bundle(tmp_path, base=bundles / "h200-nvswitch-x2-bandwidth", text={pr.LSPCI_FILE: IOMMU_LOG})
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle), "-k",
                                "test_collective_bandwidth and all_reduce and 256MiB")
    assert result.ret == 6 and result.parseoutcomes()["passed"] == 1  # -k: one promise of many, INCOMPLETE


# --- 7. machines recorded with hardware/record-platform.sh --------------------------------------------------------


def _recorded_machines() -> list[Path]:
    return sorted(p for p in RECORDED.iterdir() if (p / "snapshot").is_dir()) if RECORDED.is_dir() else []


@pytest.mark.parametrize("machine", _recorded_machines(), ids=lambda p: p.name)
@pytest.mark.parametrize("profile", ["machine", "platform-all"])
def test_a_recorded_machine_replays_to_its_live_platform_outcomes(pytester: pytest.Pytester, machine, profile):
    """hardware/record-platform.sh ran the platform suite live and recorded the snapshot in the same minute: the
    snapshot replays to the same outcome for every platform test."""
    live = json.loads((machine / f"results-{profile}-live.json").read_text())
    for name in ("machine.yaml", "platform-all.yaml"):
        shutil.copy(machine / name, pytester.path / name)
    pytester.runpytest("--gpu-profile", str(pytester.path / f"{profile}.yaml"), "--gpu-replay",
                       str(machine / "snapshot"), "-k", "test_platform or test_topology")
    replay = _results(pytester)

    def platform_outcomes(document: dict) -> dict:
        return {t.split("::")[-1]: o for t, o in document["tests"].items() if "test_platform" in t}

    assert platform_outcomes(replay) == platform_outcomes(live)
    assert platform_outcomes(live), "the live run judged no platform setting"


def test_the_live_reader_runs_in_a_child_like_the_cli(tmp_path):
    """`python -m pytest_gpufabric` imports nothing of the platform code until a command needs it."""
    done = subprocess.run([sys.executable, "-c", "import pytest_gpufabric.cli, sys; "
                           "print('pytest_gpufabric.fabric.platform' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False"


@needs_linux_sysfs
def test_in_a_vm_the_hosts_bridges_are_not_readable_here():
    """DERIVED: this machine's last PCI function stands in for a GPU. In a VM (the hypervisor flag of
    /proc/cpuinfo) a device on the guest's root bus says why its ACS cannot be judged; on bare metal it has no
    bridge to redirect."""
    functions = sorted(os.listdir("/sys/bus/pci/devices"))
    if not functions:
        pytest.skip("this machine shows no PCI function")
    platform = pf.read_platform("/", {0: functions[-1]})
    (gpu,) = platform.endpoints
    if gpu.bridges:
        pytest.skip(f"{functions[-1]} sits below a bridge here")
    result = checks.check_acs("disabled", platform)
    if platform.hypervisor.value:
        assert result.verdict == NOT_CHECKED
        assert result.message == ("not readable here: PCIe ACS above the GPUs and NICs: GPU0 sits directly on the "
                                  "root bus of this VM's PCI tree: the host's PCIe switches and their ACS are hidden "
                                  "from the guest")
    else:
        assert result.verdict == PASSED


def test_snapshot_records_the_platform_beside_the_nvml_record(tmp_path, monkeypatch, capsys):
    """`gpufabric snapshot` on this machine with NVML answering as the H200 machine did (DERIVED: its recorded
    nvml.json stands in for NVML, which this machine lacks; the platform is this machine's, read live)."""
    from pytest_gpufabric import cli

    # the module cli imports: a pytester run before this one may have dropped it from sys.modules, leaving the
    # package's attribute on a copy cli no longer sees
    nvml = importlib.import_module("pytest_gpufabric.fabric.nvml")
    record = json.loads((H200_BUNDLE / "nvml.json").read_text())
    monkeypatch.setattr(nvml, "collect_record", lambda **_: record)
    assert cli.main(["snapshot", str(tmp_path / "bundle")]) == 0
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert "platform.json" in manifest["files"] and manifest["commands"]["platform.json"]["copied_files"] > 0
    saved = pr.platform_from_record(json.loads((tmp_path / "bundle" / "platform.json").read_text()))
    assert [(e.label, e.bdf) for e in saved.endpoints] == [("GPU0", "0000:00:06.0"), ("GPU1", "0000:00:07.0")]
    assert pf.load_platform(tmp_path / "bundle", load_bundle(tmp_path / "bundle")).kernel_cmdline.known
