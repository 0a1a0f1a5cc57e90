"""NVML record -> Fabric, the NVML funnel, and PCIe labels from sysfs.

This machine has no GPU, so no NVML answer is made up here: the NVML tests use what pynvml really does
without a driver, the label tests use facts of the real 2x H200 (tests/data/captures/h200-nvswitch-x2),
and the sysfs tests run on a directory tree laid out as Linux lays out /sys.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpufabric.errors import HardwareUnavailable
from pytest_gpufabric.fabric import nvml, nvml_format, nvml_record, sysfs_pci
from pytest_gpufabric.formats.gpu import Gpu, NvLink
from pytest_gpufabric.units import NA, parse_bytes, parse_gbps

DATA = Path(__file__).parent / "data"
H200 = DATA / "captures" / "h200-nvswitch-x2"


def _nvml_works() -> bool:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


needs_no_nvml = pytest.mark.skipif("_nvml_works()", reason="NVML works on this machine")


# --------------------------------------------------------------------------------------------------------
# reading the real captures


def parse_topo_matrix(text: str) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """`nvidia-smi topo -m` -> (matrix, the row's remaining columns such as the CPU affinity)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    header = next(line for line in lines if line.split() and line.split()[0] == "GPU0")
    cols = [tok for tok in header.split() if re.match(r"^(GPU|NIC)\d+$", tok)]
    matrix, rest = {}, {}
    for line in lines[lines.index(header) + 1:]:
        tokens = line.split()
        if not tokens or tokens[0] not in cols:
            break
        matrix[tokens[0]] = dict(zip(cols, tokens[1:1 + len(cols)], strict=True))
        rest[tokens[0]] = tokens[1 + len(cols):]
    return matrix, rest


def _per_link(text: str) -> dict[int, dict[int, str]]:
    """`nvidia-smi nvlink -s` / `-p` -> {gpu: {link: the text after 'Link n: '}}."""
    out: dict[int, dict[int, str]] = {}
    gpu = None
    for line in text.splitlines():
        if m := re.match(r"^GPU (\d+):", line):
            gpu = int(m.group(1))
            out[gpu] = {}
        elif (m := re.match(r"^\s+Link (\d+): (.*)$", line)) and gpu is not None:
            out[gpu][int(m.group(1))] = m.group(2).strip()
    return out


def h200_record_from_captures() -> dict:
    """A gpufabric-nvml/1 record transcribed from the H200's tool text and FACTS.md (not an NVML recording).

    FACTS.md: NVLink version enum 6, remote device type SWITCH (2), nvmlDeviceGetNumaNodeId NOT_SUPPORTED,
    NVML field GET_SPEED = 26562 MBps. The rest is nvidia-smi's own text of the same machine.
    """
    with open(H200 / "nvidia-smi-query-gpu.txt", newline="") as fh:
        reader = csv.DictReader(fh, skipinitialspace=True)
        rows = [{k.strip(): v.strip() for k, v in row.items()} for row in reader]
    speeds = _per_link((H200 / "nvidia-smi-nvlink-s.txt").read_text())
    remotes = _per_link((H200 / "nvidia-smi-nvlink-p.txt").read_text())
    _, rest = parse_topo_matrix((H200 / "nvidia-smi-topo-m.txt").read_text())
    gpus = []
    for row in rows:
        i = int(row["index"])
        gpus.append({
            "index": i,
            "name": row["name"],
            "uuid": row["uuid"],
            "serial": row["serial"],
            "pci_bus_id": row["pci.bus_id"],
            "memory_total_bytes": parse_bytes(row["memory.total [MiB]"]),
            "pcie_gen_max": int(row["pcie.link.gen.max"]),
            "pcie_gen_current": int(row["pcie.link.gen.current"]),
            "pcie_width_max": int(row["pcie.link.width.max"]),
            "pcie_width_current": int(row["pcie.link.width.current"]),
            "vbios_version": row["vbios_version"],
            "ecc_mode": {"current": 1 if row["ecc.mode.current"] == "Enabled" else 0},
            "cpu_affinity": rest[f"GPU{i}"][0],
            "numa_node_nvml": {"error": "NOT_SUPPORTED"},
            "numa_node": {"error": "NOT_SUPPORTED"},
            "numa_node_source": "nvmlDeviceGetNumaNodeId",
            "nvlinks": [
                {
                    "link": link,
                    "state": 1,
                    "version": 6,
                    "remote_pci_bus_id": remotes[i][link],
                    "remote_device_type": 2,
                    "speed_mbps": round(parse_gbps(speed) * 1000),
                    "speed_field": "NVML_FI_DEV_NVLINK_GET_SPEED",
                }
                for link, speed in sorted(speeds[i].items())
            ],
        })
    return {
        "format": nvml_format.FORMAT,
        "driver_version": rows[0]["driver_version"],
        "cuda_driver_version": 13000,  # nvidia-smi: "CUDA Version : 13.0"
        "gpu_count": len(gpus),
        "gpus": gpus,
        "pairs": [],  # the common ancestor of the pair was not captured
        "nics": [],
    }


def _h200_gpus() -> list[Gpu]:
    return nvml_record.fabric_from_record(h200_record_from_captures()).gpus


# --------------------------------------------------------------------------------------------------------
# the module and the funnel, against the real pynvml


def test_importing_the_module_does_not_import_pynvml():
    code = "import sys, pytest_gpufabric.fabric.nvml; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@needs_no_nvml
def test_collect_record_without_nvml_raises_hardware_unavailable():
    with pytest.raises(HardwareUnavailable) as info:
        nvml.collect_record()
    message = str(info.value)
    assert message.startswith("NVML not available: ")
    assert "--gpu-replay" in message
    with pytest.raises(HardwareUnavailable):
        nvml.collect_fabric()


@needs_no_nvml
def test_query_lets_uninitialized_through():
    pynvml = pytest.importorskip("pynvml")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.query(pynvml.nvmlDeviceGetCount)


def test_query_records_a_function_this_pynvml_lacks():
    pytest.importorskip("pynvml")
    assert nvml.query("nvmlDeviceGetNoSuchFunction", 0) == {"error": "FUNCTION_NOT_FOUND"}


@pytest.mark.parametrize(
    "name, recorded",
    [
        ("NOT_SUPPORTED", True),
        ("NOT_FOUND", True),
        ("NO_PERMISSION", True),
        ("FUNCTION_NOT_FOUND", True),
        ("INVALID_ARGUMENT", True),
        ("GPU_IS_LOST", False),
        ("UNKNOWN", False),
        ("UNINITIALIZED", False),
    ],
)
def test_query_sorts_pynvml_errors(name, recorded):
    """The funnel's sorting of pynvml's own exception classes (no hardware answer is made up here)."""
    pynvml = pytest.importorskip("pynvml")
    code = getattr(pynvml, f"NVML_ERROR_{name}")

    def call():
        raise pynvml.NVMLError(code)

    if recorded:
        assert nvml.query(call) == {"error": name}
        assert nvml_format.is_error(json.loads(json.dumps(nvml.query(call))))
    else:
        with pytest.raises(pynvml.NVMLError) as info:
            nvml.query(call)
        assert info.value.value == code


def test_our_nvml_constants_match_the_installed_pynvml():
    pynvml = pytest.importorskip("pynvml")
    assert (nvml_format.TOPOLOGY_INTERNAL, nvml_format.TOPOLOGY_SINGLE, nvml_format.TOPOLOGY_MULTIPLE,
            nvml_format.TOPOLOGY_HOSTBRIDGE, nvml_format.TOPOLOGY_NODE, nvml_format.TOPOLOGY_SYSTEM) == (
        pynvml.NVML_TOPOLOGY_INTERNAL, pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_MULTIPLE,
        pynvml.NVML_TOPOLOGY_HOSTBRIDGE, pynvml.NVML_TOPOLOGY_NODE, pynvml.NVML_TOPOLOGY_SYSTEM)
    assert nvml_format.REMOTE_TYPES[pynvml.NVML_NVLINK_DEVICE_TYPE_GPU] == "GPU"
    assert nvml_format.REMOTE_TYPES[pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU] == "IBMNPU"
    assert nvml_format.REMOTE_TYPES[pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH] == "SWITCH"
    assert nvml._enum(pynvml, "NVML_P2P_CAPS_INDEX_READ", 0) == 0
    assert nvml._enum(pynvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2) == 2
    assert isinstance(pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, int)
    assert pynvml.NVML_DEVICE_PCI_BUS_ID_FMT % (0, 0, 6) == "00000000:00:06.0"  # busId, as nvidia-smi prints
    assert nvml.error_name(pynvml.NVML_ERROR_NOT_SUPPORTED) == "NOT_SUPPORTED"


# --------------------------------------------------------------------------------------------------------
# labels


@pytest.mark.parametrize(
    "level, label",
    [(0, "PIX"), (10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"), (50, "SYS"), (25, "PHB"), (60, "SYS")],
)
def test_pcie_label_from_the_common_ancestor(level, label):
    assert nvml_format.pcie_label(level) == label


def test_nvswitch_pair_is_nv18_as_the_h200_prints_it():
    gpu0, gpu1 = _h200_gpus()
    assert gpu0.pci_bus_id == "00000000:00:06.0" and gpu1.pci_bus_id == "00000000:00:07.0"
    assert {link.remote_pci_bus_id for link in gpu0.nvlinks} == {"FFFFFFFF:FF:FF.0"}
    assert {link.remote_type for link in gpu0.nvlinks} == {"SWITCH"}
    # bus ids never name the peer behind a switch: matching them alone finds nothing
    assert nvml_format.direct_nvlink_count(gpu0, gpu1) == 0
    assert nvml_format.switch_nvlink_count(gpu0) == nvml_format.switch_nvlink_count(gpu1) == 18
    assert nvml_format.nvlink_pair_count(gpu0, gpu1) == 18
    assert nvml_format.pair_label(gpu0, gpu1) == "NV18"
    assert nvml_format.pair_label(gpu1, gpu0, nvml_format.TOPOLOGY_HOSTBRIDGE) == "NV18"  # NVLink wins over PCIe
    assert nvml_format.pair_label(gpu0, gpu0) == "X"


def test_switch_pair_takes_the_smaller_link_count():
    gpu0, gpu1 = _h200_gpus()
    gpu1.nvlinks[17].active = False
    assert nvml_format.pair_label(gpu0, gpu1) == "NV17"
    assert nvml_format.pair_label(gpu1, gpu0) == "NV17"


def test_switch_link_known_by_its_bus_id_when_the_type_is_not():
    gpu0, gpu1 = _h200_gpus()
    for gpu in (gpu0, gpu1):
        for link in gpu.nvlinks:
            link.remote_type = NA  # an old pynvml without nvmlDeviceGetNvLinkRemoteDeviceType
    assert nvml_format.pair_label(gpu0, gpu1) == "NV18"


def test_direct_links_count_those_that_reach_the_peer():
    """A bridged pair (the TITAN RTX capture prints NV2): the links' remote bus id is the peer GPU's."""
    a = Gpu(index=0, pci_bus_id="00000000:00:06.0", nvlinks=[
        NvLink(link=n, active=True, remote_pci_bus_id="0000:00:07.0", remote_type="GPU") for n in range(2)
    ])
    b = Gpu(index=1, pci_bus_id="00000000:00:07.0", nvlinks=[
        NvLink(link=n, active=True, remote_pci_bus_id="00000000:00:06.0", remote_type="GPU") for n in range(2)
    ])
    c = Gpu(index=2, pci_bus_id="00000000:00:08.0", nvlinks=[])
    assert nvml_format.pair_label(a, b) == nvml_format.pair_label(b, a) == "NV2"
    assert nvml_format.pair_label(a, c, nvml_format.TOPOLOGY_HOSTBRIDGE) == "PHB"
    assert nvml_format.pair_label(a, c) is None  # no NVLink and no common ancestor recorded: unknown
    assert nvml_format.pair_label(a, c, NA) == "N/A"


def test_bus_ids_and_versions_normalize():
    assert nvml_format.normalize_bus_id("0000:00:06.0") == "00000000:00:06.0"
    assert nvml_format.normalize_bus_id("ffffffff:ff:ff.0") == nvml_format.NVSWITCH_BUS_ID
    assert nvml_format.normalize_bus_id("3b:00.0") == "00000000:3B:00.0"
    assert sysfs_pci.sysfs_bdf("00000000:3B:00.0") == "0000:3b:00.0"
    assert nvml_format.cuda_version_text(13000) == "13.0"  # the H200's driver: CUDA Version 13.0
    assert nvml_format.cuda_version_text(12040) == "12.4"


# --------------------------------------------------------------------------------------------------------
# record -> Fabric


def test_fabric_from_the_h200_record_matches_its_topo_m():
    record = json.loads(json.dumps(h200_record_from_captures()))  # as read back from nvml.json
    fabric = nvml_record.fabric_from_record(record, source="test")
    topo, _ = parse_topo_matrix((H200 / "nvidia-smi-topo-m.txt").read_text())
    assert fabric.matrix == topo
    assert fabric.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"}
    assert fabric.driver_version == "580.159.04"
    assert fabric.cuda_driver_version == "13.0"
    assert fabric.source == "test"
    gpu0 = fabric.gpu(0)
    assert gpu0.serial == "1653924042173"
    assert gpu0.memory_bytes == 143771 * 1024**2
    assert gpu0.ecc_mode == "Enabled"
    assert gpu0.pcie_gen_current == 5 and gpu0.pcie_width_current == 16
    assert gpu0.numa_node is NA  # NOT_SUPPORTED: the machine's answer
    assert gpu0.compute_capability is None  # not in the record: not recorded
    assert fabric.nvlink_count(gpu0) == 18
    assert {link.speed_gbps for link in gpu0.nvlinks} == {26.562}
    assert {link.version for link in gpu0.nvlinks} == {6}
    assert fabric.numa_affinity == {"GPU0": "N/A", "GPU1": "N/A"}  # neither NVML nor sysfs said


def test_fabric_from_record_turns_errors_into_na_and_absence_into_none():
    record = {
        "format": nvml_format.FORMAT,
        "driver_version": {"error": "NO_PERMISSION"},
        "gpus": [{
            "index": 0,
            "serial": {"error": "NOT_SUPPORTED"},
            "compute_capability": [9, 0],
            "numa_node": 1,
            "nvlinks": [{"link": 0, "state": 0}],
        }],
    }
    fabric = nvml_record.fabric_from_record(record)
    gpu = fabric.gpu(0)
    assert gpu.serial is NA
    assert gpu.uuid is None
    assert gpu.compute_capability == "9.0"
    assert gpu.nvlinks[0].active is False and gpu.nvlinks[0].remote_type is None
    assert fabric.nvlink_count(gpu) == 0
    assert fabric.numa_affinity == {"GPU0": "1"}
    assert fabric.driver_version is NA
    assert fabric.matrix == {"GPU0": {"GPU0": "X"}}


def test_fabric_from_record_refuses_other_formats():
    with pytest.raises(ValueError, match="gpufabric-nvml/1"):
        nvml_record.fabric_from_record({"format": "something-else"})
    with pytest.raises(ValueError):
        nvml_record.fabric_from_record([])


RECORDED = sorted(DATA.rglob("nvml.json"))


@pytest.mark.parametrize("path", RECORDED, ids=[str(p.relative_to(DATA)) for p in RECORDED])
def test_recorded_nvml_json_builds_the_fabric_its_machine_printed(path):
    """Every real nvml.json under tests/data; where its folder holds topo -m, the GPU matrix must match."""
    record = json.loads(path.read_text())
    fabric = nvml_record.fabric_from_record(record)
    assert len(fabric.gpus) == record["gpu_count"]
    topo_file = path.parent / "nvidia-smi-topo-m.txt"
    if topo_file.is_file():
        topo, rest = parse_topo_matrix(topo_file.read_text())
        gpu_labels = [g.label for g in fabric.gpus]
        assert {r: {c: fabric.matrix[r][c] for c in gpu_labels} for r in gpu_labels} == {
            r: {c: topo[r][c] for c in gpu_labels} for r in gpu_labels
        }
        assert fabric.cpu_affinity == {label: rest[label][0] for label in gpu_labels}


# --------------------------------------------------------------------------------------------------------
# sysfs: a tree laid out as Linux does


def _device(root: Path, path: str, numa: int | None = None) -> str:
    """Create /sys/devices/... for one PCI function and its /sys/bus/pci/devices/<bdf> link."""
    directory = root / path.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    if numa is not None:
        (directory / "numa_node").write_text(f"{numa}\n")
    bdf = path.rsplit("/", 1)[1]
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True, exist_ok=True)
    (bus / bdf).symlink_to("../../.." + path[len("/sys"):])
    return path


def _rdma(root: Path, name: str, device_path: str | None) -> None:
    """/sys/class/infiniband/<name> -> <device>/infiniband/<name>, whose `device` links to the function."""
    klass = root / "sys/class/infiniband"
    klass.mkdir(parents=True, exist_ok=True)
    if device_path is None:  # a software device (rxe): no PCI function behind it
        target = root / "sys/devices/virtual/infiniband" / name
        target.mkdir(parents=True)
        (klass / name).symlink_to(f"../../devices/virtual/infiniband/{name}")
        return
    ib = root / device_path.lstrip("/") / "infiniband" / name
    ib.mkdir(parents=True)
    (ib / "device").symlink_to("../../../" + device_path.rsplit("/", 1)[1])
    (klass / name).symlink_to("../.." + device_path[len("/sys"):] + f"/infiniband/{name}")


SWITCH = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"  # root port, then the switch's upstream port
GPU0 = SWITCH + "/0000:02:00.0/0000:03:00.0"
NIC0 = SWITCH + "/0000:02:01.0/0000:04:00.0"
NIC0_PORT1 = SWITCH + "/0000:02:01.0/0000:04:00.1"
DEEP = SWITCH + "/0000:02:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"  # behind a second switch
OTHER_ROOT_PORT = "/sys/devices/pci0000:00/0000:00:02.0/0000:08:00.0"
OTHER_COMPLEX = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"


def test_parse_pci_path():
    assert sysfs_pci.parse_pci_path(GPU0) == (
        "pci0000:00", ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    )
    on_root_bus = "/sys/devices/pci0000:00/0000:00:06.0"  # the H200 VM's GPUs sit so
    assert sysfs_pci.parse_pci_path(on_root_bus) == ("pci0000:00", ["0000:00:06.0"])
    assert sysfs_pci.parse_pci_path(NIC0 + "/infiniband/mlx5_0")[1][-1] == "0000:04:00.0"
    with pytest.raises(ValueError):
        sysfs_pci.parse_pci_path("/sys/devices/virtual/infiniband/rxe0")


@pytest.mark.parametrize(
    "a, b, numa, label",
    [
        (GPU0, GPU0, (0, 0), "X"),
        (GPU0, NIC0, (0, 0), "PIX"),  # two downstream ports of one switch
        (NIC0, NIC0_PORT1, (0, 0), "PIX"),  # two functions of one device
        (GPU0, DEEP, (0, 0), "PXB"),
        (GPU0, OTHER_ROOT_PORT, (0, 0), "PHB"),
        ("/sys/devices/pci0000:00/0000:00:06.0", "/sys/devices/pci0000:00/0000:00:07.0", (0, 0), "PHB"),
        (GPU0, OTHER_COMPLEX, (0, 0), "NODE"),
        (GPU0, OTHER_COMPLEX, (0, 1), "SYS"),
        (GPU0, OTHER_COMPLEX, (-1, -1), "SYS"),
    ],
)
def test_pci_path_label(a, b, numa, label):
    assert sysfs_pci.pci_path_label(a, b, numa_a=numa[0], numa_b=numa[1]) == label
    assert sysfs_pci.pci_path_label(b, a, numa_a=numa[1], numa_b=numa[0]) == label


def test_unknown_numa_on_a_one_node_machine_is_node():
    label = sysfs_pci.pci_path_label(GPU0, OTHER_COMPLEX, numa_a=-1, numa_b=None, single_numa_node=True)
    assert label == "NODE"


def test_no_infiniband_class_means_no_nics(tmp_path):
    assert sysfs_pci.rdma_devices(str(tmp_path)) == []
    assert sysfs_pci.nic_records({0: "00000000:03:00.0"}, str(tmp_path)) == []


def test_sysfs_readers_on_a_tree(tmp_path):
    root = str(tmp_path)
    _device(tmp_path, GPU0, numa=0)
    _device(tmp_path, GPU0.rsplit("/", 1)[0], numa=0)
    assert sysfs_pci.pci_device_path("00000000:03:00.0", root) == GPU0
    assert sysfs_pci.pci_numa_node("00000000:03:00.0", root) == 0
    assert sysfs_pci.pci_device_path("00000000:09:00.0", root) is None
    assert sysfs_pci.pci_numa_node("00000000:09:00.0", root) is None
    assert sysfs_pci.online_numa_nodes(root) is None
    (tmp_path / "sys/devices/system/node").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/online").write_text("0-1\n")
    assert sysfs_pci.online_numa_nodes(root) == {0, 1}


def _machine(tmp_path: Path) -> None:
    for path, numa in ((GPU0, 0), (NIC0, 0), (NIC0_PORT1, 0), (OTHER_COMPLEX, 1)):
        _device(tmp_path, path, numa)
    _rdma(tmp_path, "mlx5_0", NIC0)
    _rdma(tmp_path, "mlx5_1", NIC0_PORT1)
    _rdma(tmp_path, "mlx5_10", OTHER_COMPLEX)
    _rdma(tmp_path, "rxe0", None)
    (tmp_path / "sys/devices/system/node").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/online").write_text("0-1\n")


def test_rdma_devices_and_their_paths(tmp_path):
    _machine(tmp_path)
    devices = sysfs_pci.rdma_devices(str(tmp_path))
    assert [d["name"] for d in devices] == ["mlx5_0", "mlx5_1", "mlx5_10", "rxe0"]
    assert devices[0] == {"name": "mlx5_0", "pci_bus_id": "0000:04:00.0", "sysfs_path": NIC0, "numa_node": 0}
    assert devices[2]["numa_node"] == 1
    assert devices[3] == {"name": "rxe0", "pci_bus_id": None, "sysfs_path": None, "numa_node": None}

    records = sysfs_pci.nic_records({0: "00000000:03:00.0"}, str(tmp_path))
    # rxe0 (software RoCE) has no PCI function and no place in the topology: left out
    assert [r["name"] for r in records] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    assert [r["path_to_gpu"] for r in records] == [{"0": "PIX"}, {"0": "PIX"}, {"0": "SYS"}]
    assert records[0]["path_to_nic"] == {"mlx5_1": "PIX", "mlx5_10": "SYS"}


def test_nics_in_the_matrix(tmp_path):
    _machine(tmp_path)
    record = {
        "format": nvml_format.FORMAT,
        "gpus": [{"index": 0, "pci_bus_id": "00000000:03:00.0", "nvlinks": []}],
        "nics": sysfs_pci.nic_records({0: "00000000:03:00.0"}, str(tmp_path)),
    }
    fabric = nvml_record.fabric_from_record(json.loads(json.dumps(record)))
    assert [(n.label, n.device, n.pci_bus_id) for n in fabric.nics] == [
        ("NIC0", "mlx5_0", "00000000:04:00.0"),
        ("NIC1", "mlx5_1", "00000000:04:00.1"),
        ("NIC2", "mlx5_10", "00000000:81:00.0"),
    ]
    assert fabric.matrix["GPU0"] == {"GPU0": "X", "NIC0": "PIX", "NIC1": "PIX", "NIC2": "SYS"}
    assert fabric.matrix["NIC0"] == {"NIC0": "X", "GPU0": "PIX", "NIC1": "PIX", "NIC2": "SYS"}
