"""DERIVED health records: ``health.json`` put together from what a shipped bundle already holds, for the bundles
recorded before `gpufabric snapshot` wrote health.json (the health check's tests plant their faults in copies).

From the bundle's ``nvml.json`` (what `gpufabric snapshot` read through NVML): the inventory (index, name, UUID,
serial, PCI bus id), the PCIe link, each NVLink's state, the ECC mode, the driver and the GPU count. From its
``nvidia-smi-q.xml`` (`nvidia-smi -q -x` of the same snapshot, matched to nvml.json's GPU by PCI bus id): volatile
ECC errors (corrected: SRAM + DRAM correctable; uncorrected: SRAM parity + SRAM SEC-DED + DRAM uncorrectable),
remapped rows, retired pages, the PCIe replay counter, the clock-event reasons (as NVML's bits), the temperature,
the power draw, persistence mode, the fabric state and status, the recovery action. Driver 580's XML gives the
thresholds relative to T.Limit: the absolute ones are ``gpu_temp + gpu_temp_tlimit`` (the GPU's maximum operating
temperature) minus each ``*_tlimit_threshold``; on the H100 of tests/data/bundles/h100-x1-diagnostics that gives
slowdown 89 C, shutdown 95 C, maximum 87 C, what NVML itself answered there (power-hold.json, thresholds_c). The
T.Limit margin is NVML's margin temperature (power-hold.json: 64 C with 23 C of margin to 87 C).

The mapping is the package's own (pytest_gpufabric/nodehealth/derive.py: the acceptance reads a bundle without
health.json through it). No kernel log was recorded: Xid lines are "not read". Run ``python tests/derive_health.py``
to write them again.
"""

from __future__ import annotations

import atexit
import json
import shutil
import sys
import tempfile
from pathlib import Path

from pytest_gpufabric.nodehealth.derive import derive as _derive

BUNDLES = Path(__file__).parent / "data" / "bundles"
DERIVED_BUNDLES = ("h100-x1", "h100-x2-identity", "h200-nvswitch-x2", "h200-nvswitch-x4")
#: a kernel log as a live read recorded it: h100-x2-health's (gpufabric snapshot as root, /dev/kmsg read, no Xid line)
READ_KERNEL_LOG_FROM = BUNDLES / "h100-x2-health" / "health.json"
_copies: dict[str, Path] = {}


def with_read_kernel_log(bundle: Path) -> Path:
    """A copy of a DERIVED bundle (made once per test process) whose health.json holds the kernel log a live read
    recorded (READ_KERNEL_LOG_FROM) in place of the one it never recorded: a derived record alone is could not tell
    (its Xid check cannot be done), so the tests of the other checks judge this copy. Same folder name."""
    if bundle.name not in _copies:
        root = Path(tempfile.mkdtemp(prefix="gpufabric-derived-"))
        atexit.register(shutil.rmtree, root, True)
        copy = root / bundle.name
        shutil.copytree(bundle, copy)
        data = json.loads((copy / "health.json").read_text(encoding="utf-8"))
        data["kernel_log"] = json.loads(READ_KERNEL_LOG_FROM.read_text(encoding="utf-8"))["kernel_log"]
        (copy / "health.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        _copies[bundle.name] = copy
    return _copies[bundle.name]


def derive(bundle: Path) -> dict:
    """The DERIVED health record of a bundle, as the package's reader makes it (nodehealth/derive.py): its note says
    what it was derived from, in the words a user of the shipped bundle reads."""
    return _derive(bundle)


def main() -> int:
    for name in DERIVED_BUNDLES:
        path = BUNDLES / name / "health.json"
        path.write_text(json.dumps(derive(BUNDLES / name), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
