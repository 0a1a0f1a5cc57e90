"""A snapshot recorded live with the current reader on 1x H100 SXM 80GB (tests/data/bundles/h100-x1-snapshot):
everything the health check reads is there, NVML's fabric answer of a GPU outside an NVSwitch fabric is not judged,
and the host's addresses come from /proc/net where `ip` was missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pytest_gpufabric.fabric.bundle import load_bundle
from pytest_gpufabric.fabric.host_addresses import read_host_addresses
from pytest_gpufabric.units import NA

DATA = Path(__file__).parent / "data"
BUNDLE = DATA / "bundles" / "h100-x1-snapshot"
PROFILE = DATA / "results" / "health-live-h100-x1" / "machine.yaml"  # profile init on the same machine


def test_the_live_snapshot_holds_everything_the_health_check_reads(tmp_path):
    out = tmp_path / "health.json"
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--replay", str(BUNDLE), "--profile",
                           str(PROFILE), "--json", str(out)], capture_output=True, text=True, timeout=120)
    result = json.loads(out.read_text(encoding="utf-8"))
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "gpufabric: HEALTHY 1 GPUs, profile machine"
    assert [g["serial"] for g in result["gpus"]] == ["1651724081675"]
    # nothing "not recorded", "predates" or DERIVED: the two notes left are about the command line
    assert result["notes"] == [
        "no accepted results: the GPUs are counted, not named by serial (give --accepted)",
        "counter rates not judged: no state folder keeps the last reading (--state-dir)"]
    record = json.loads((BUNDLE / "health.json").read_text(encoding="utf-8"))
    assert record["kernel_log"] == {"source": "/dev/kmsg", "error": None, "xids": [], "sxids": []}


def test_nvml_fabric_state_not_supported_is_not_judged():
    nvml = json.loads((BUNDLE / "nvml.json").read_text(encoding="utf-8"))
    assert nvml["gpus"][0]["fabric"]["state"] == 0  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
    fabric = load_bundle(BUNDLE).gpus[0].fabric
    assert fabric.state is NA and fabric.status is NA and fabric.clique_id is NA


def test_the_host_addresses_are_read_from_proc_net_where_ip_was_missing():
    manifest = json.loads((BUNDLE / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["commands"]["ip-addr.json"]["error"] == "ip not on PATH"
    read = read_host_addresses(BUNDLE)
    # fib_trie's "/32 host LOCAL" 192.0.2.2 and if_inet6's global fd00::2 (loopback and link-local left out)
    assert read.addresses == ["192.0.2.2", "fd00::2"] and read.why is None
