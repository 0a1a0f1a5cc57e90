"""The nvidia-smi text parsers against real captures (tests/data/captures, see its README.md).

Every input here is a real tool output or a variant derived from one by a string transformation that is
named where it happens; nothing is typed in by hand as if a tool had printed it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_gpufabric.fabric.from_text import fabric_from_text
from pytest_gpufabric.fabric.model import Fabric
from pytest_gpufabric.formats.nvidia_smi_q import parse_nvidia_smi_q_xml
from pytest_gpufabric.formats.nvlink import parse_nvlink_remote, parse_nvlink_status
from pytest_gpufabric.formats.topo import TopoMatrix, normalize_label, parse_topo_m
from pytest_gpufabric.units import MIB, NA

CAPTURES = Path(__file__).parent / "data" / "captures"
H200 = CAPTURES / "h200-nvswitch-x2"
TITAN = CAPTURES / "titan-rtx-nvlink"
RTX2080TI = CAPTURES / "rtx-2080ti-pcie"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

H200_UUIDS = {0: "GPU-f4a88e74-3b9a-8ed9-7c3c-f149f7753384", 1: "GPU-d6119a45-95e9-324e-05ea-ce4ef99eff03"}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


H200_TOPO_JSON = {
    "devices": ["GPU0", "GPU1"],
    "matrix": {"GPU0": {"GPU0": "X", "GPU1": "NV18"}, "GPU1": {"GPU0": "NV18", "GPU1": "X"}},
    "cpu_affinity": {"GPU0": "0-31", "GPU1": "0-31"},
    "numa_affinity": {"GPU0": "0", "GPU1": "0"},
    "gpu_numa_id": {"GPU0": "N/A", "GPU1": "N/A"},
}


# --- topo -m: the real captures --------------------------------------------------------------------------


def test_topo_titan_nvlink_bridge() -> None:
    topo = parse_topo_m(read(TITAN / "nvidia-smi-topo-m.txt"))
    assert topo.to_json() == {
        "devices": ["GPU0", "GPU1"],
        "matrix": {"GPU0": {"GPU0": "X", "GPU1": "NV2"}, "GPU1": {"GPU0": "NV2", "GPU1": "X"}},
        "cpu_affinity": {"GPU0": "0-17,36-53", "GPU1": "18-35,54-71"},
    }
    # this driver prints no NUMA columns and no NIC legend: the keys are absent, not empty
    assert topo.columns_present == {"cpu_affinity"}
    assert topo.gpus == ["GPU0", "GPU1"] and topo.nics == []


def test_topo_2080ti_pcie() -> None:
    topo = parse_topo_m(read(RTX2080TI / "nvidia-smi-topo-m.txt"))
    assert topo.to_json() == {
        "devices": ["GPU0", "GPU1"],
        "matrix": {"GPU0": {"GPU0": "X", "GPU1": "PHB"}, "GPU1": {"GPU0": "PHB", "GPU1": "X"}},
        "cpu_affinity": {"GPU0": "0-35", "GPU1": "0-35"},
    }


def test_topo_h200_ansi_header_tabs_and_empty_cell() -> None:
    text = read(H200 / "nvidia-smi-topo-m.txt")
    # the capture really carries the underline escapes and the empty cell after NUMA Affinity
    assert "\x1b[4m" in text and "\x1b[0m" in text
    assert "\t0\t\tN/A" in text
    topo = parse_topo_m(text)
    assert topo.to_json() == H200_TOPO_JSON
    assert topo.columns_present == {"cpu_affinity", "numa_affinity", "gpu_numa_id"}
    assert "nic_names" not in topo.to_json()


def test_topo_h200_tabs_expanded_to_spaces_gives_same_result() -> None:
    raw = read(H200 / "nvidia-smi-topo-m.txt")
    # DERIVED: what a terminal shows (tabs expanded to 8-column stops), with and without the escapes
    plain = ANSI.sub("", raw)
    for variant in (raw.expandtabs(8), plain.expandtabs(8), plain.replace("\t", "  ")):
        assert "\t" not in variant
        assert parse_topo_m(variant).to_json() == H200_TOPO_JSON


def test_topo_soc_label_kept_as_printed_and_normalized() -> None:
    # DERIVED: the 2080 Ti capture with PHB replaced by SOC, the pre-2017 name of SYS
    text = read(RTX2080TI / "nvidia-smi-topo-m.txt")
    matrix_part, legend = text.split("Legend:", 1)
    topo = parse_topo_m(matrix_part.replace("PHB", "SOC") + "Legend:" + legend)
    assert topo.matrix["GPU0"]["GPU1"] == "SOC"
    assert normalize_label(topo.matrix["GPU0"]["GPU1"]) == "SYS"
    assert normalize_label(" X ") == "X"
    assert normalize_label("NV18") == "NV18"
    assert normalize_label("SYS") == "SYS"


def _with_nics(real: str, names: list[str], gpu_cells: dict[str, list[str]], nic_rows: dict[str, list[str]],
               legend: dict[str, str] | None) -> str:
    """DERIVED text: insert NIC columns into a real tab-separated topo -m capture.

    No capture in tests/data/captures has NICs, so NIC parsing can only be tested on such a derivation. The
    shape follows what nvidia-smi prints with NICs: NIC columns right after the GPU columns, NIC rows with
    the matrix cells only and then empty cells ("\\t\\t\\t\\t" for the three affinity columns plus the empty
    column after NUMA Affinity), and a "NIC Legend:" section after the legend. Labels come from the legend's
    own vocabulary (PIX, SYS, X).
    """
    lines = real.splitlines()
    out = []
    for line in lines:
        plain = ANSI.sub("", line)
        if plain.startswith("\tGPU0"):
            n_gpu = len(re.findall(r"GPU\d+\t", plain))
            parts = line.split("\t")
            out.append("\t".join(parts[: 1 + n_gpu] + names + parts[1 + n_gpu :]))
        elif plain.split("\t")[0] in gpu_cells:
            parts = line.split("\t")
            n_gpu = len(gpu_cells)
            out.append("\t".join(parts[: 1 + n_gpu] + gpu_cells[parts[0]] + parts[1 + n_gpu :]))
        elif plain.strip() == "" and nic_rows:
            out.extend("\t".join([nic, *cells]) + "\t\t\t\t" for nic, cells in nic_rows.items())
            nic_rows = {}
            out.append(line)
        else:
            out.append(line)
    text = "\n".join(out) + "\n"
    if legend:
        text += "\nNIC Legend:\n\n" + "".join(f"  {k}: {v}\n" for k, v in legend.items()) + "\n"
    return text


def test_topo_nic_columns_derived_from_h200() -> None:
    text = _with_nics(
        read(H200 / "nvidia-smi-topo-m.txt"),
        ["NIC0", "NIC1"],
        gpu_cells={"GPU0": ["PIX", "SYS"], "GPU1": ["SYS", "PIX"]},
        nic_rows={"NIC0": ["PIX", "SYS", " X ", "SYS"], "NIC1": ["SYS", "PIX", "SYS", " X "]},
        legend={"NIC0": "mlx5_0", "NIC1": "mlx5_1"},
    )
    topo = parse_topo_m(text)
    assert topo.devices == ["GPU0", "GPU1", "NIC0", "NIC1"]
    assert topo.matrix["GPU0"] == {"GPU0": "X", "GPU1": "NV18", "NIC0": "PIX", "NIC1": "SYS"}
    assert topo.matrix["NIC1"] == {"GPU0": "SYS", "GPU1": "PIX", "NIC0": "SYS", "NIC1": "X"}
    # the affinities still land in the right columns; NIC rows have none
    assert topo.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"}
    assert topo.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}
    assert topo.to_json()["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert topo.nics == ["NIC0", "NIC1"]
    # the terminal rendering of the same derived text parses the same
    assert parse_topo_m(ANSI.sub("", text).expandtabs(8)).to_json() == topo.to_json()

    fabric = fabric_from_text(text)
    assert [(nic.label, nic.device) for nic in fabric.nics] == [("NIC0", "mlx5_0"), ("NIC1", "mlx5_1")]
    assert fabric.label("GPU1", "NIC1") == "PIX"


def test_topo_device_named_columns_derived_from_titan() -> None:
    # DERIVED: the titan capture (space-separated, 418-era driver) with a third column and row named
    # mlx5_0, as drivers of that era print RDMA devices (no NIC Legend; the column header is the device name)
    text = read(TITAN / "nvidia-smi-topo-m.txt")
    text = text.replace("GPU1      CPU Affinity", "GPU1      mlx5_0    CPU Affinity")
    text = text.replace("NV2     0-17,36-53", "NV2       PHB     0-17,36-53")
    text = text.replace("X      18-35,54-71", "X        PHB     18-35,54-71\nmlx5_0   PHB       PHB       X")
    topo = parse_topo_m(text)
    assert topo.devices == ["GPU0", "GPU1", "mlx5_0"]
    assert topo.matrix["mlx5_0"] == {"GPU0": "PHB", "GPU1": "PHB", "mlx5_0": "X"}
    assert topo.cpu_affinity == {"GPU0": "0-17,36-53", "GPU1": "18-35,54-71"}
    assert "nic_names" not in topo.to_json()
    fabric = fabric_from_text(text)
    assert [(nic.label, nic.device) for nic in fabric.nics] == [("mlx5_0", "mlx5_0")]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "hello world\nthis is not nvidia-smi\n",
        read(H200 / "nvidia-smi-nvlink-s.txt"),
        read(H200 / "nvidia-smi-q-x.xml"),
        read(TITAN / "nvidia-smi-topo-m.txt").split("\n", 1)[0] + "\n",  # the header alone
    ],
    ids=["empty", "blank", "prose", "nvlink-s", "q-x", "header-only"],
)
def test_topo_garbage_raises(text: str) -> None:
    with pytest.raises(ValueError, match="topo -m"):
        parse_topo_m(text)


def test_topo_misaligned_row_raises_with_line_number() -> None:
    # DERIVED: one matrix cell removed from GPU1's row of the 2080 Ti capture
    text = read(RTX2080TI / "nvidia-smi-topo-m.txt").replace("GPU1     PHB       X ", "GPU1     PHB ")
    with pytest.raises(ValueError, match=r"line 3 \(GPU1\)"):
        parse_topo_m(text)


def test_topo_to_json_is_a_copy() -> None:
    topo = parse_topo_m(read(H200 / "nvidia-smi-topo-m.txt"))
    assert isinstance(topo, TopoMatrix)
    topo.to_json()["matrix"]["GPU0"]["GPU1"] = "SYS"
    assert topo.matrix["GPU0"]["GPU1"] == "NV18"


# --- nvlink -s / -R --------------------------------------------------------------------------------------


def test_nvlink_status_h200() -> None:
    status = parse_nvlink_status(read(H200 / "nvidia-smi-nvlink-s.txt"))
    assert sorted(status) == [0, 1]
    for index, entry in status.items():
        assert entry["name"] == "NVIDIA H200"
        assert entry["uuid"] == H200_UUIDS[index]
        assert [link.link for link in entry["links"]] == list(range(18))
        assert all(link.active is True for link in entry["links"])
        assert {link.speed_gbps for link in entry["links"]} == {26.562}


def test_nvlink_status_inactive_link_derived() -> None:
    # DERIVED: GPU1's link 3 of the h200 capture rewritten to the "<inactive>" form nvidia-smi prints for a
    # link that is down (the capture's machine has all 18 links up)
    text = read(H200 / "nvidia-smi-nvlink-s.txt")
    head, gpu1 = text.split("GPU 1:", 1)
    text = head + "GPU 1:" + gpu1.replace("Link 3: 26.562 GB/s", "Link 3: <inactive>")
    links = parse_nvlink_status(text)[1]["links"]
    assert links[3].active is False and links[3].speed_gbps is None
    assert sum(link.active is True for link in links) == 17


@pytest.mark.parametrize(
    "text",
    [read(H200 / "nvidia-smi-topo-m.txt"), "\t Link 0: 26.562 GB/s\n"],
    ids=["topo-m", "link-before-gpu"],
)
def test_nvlink_status_garbage_raises(text: str) -> None:
    with pytest.raises(ValueError, match="nvlink -s"):
        parse_nvlink_status(text)


def test_nvlink_remote_h200() -> None:
    remote = parse_nvlink_remote(read(H200 / "nvidia-smi-nvlink-R.txt"))
    assert sorted(remote) == [0, 1]
    for links in remote.values():
        assert links == {link: "FFFFFFFF:FF:FF.0" for link in range(18)}
    with pytest.raises(ValueError, match="nvlink -R"):
        parse_nvlink_remote(read(H200 / "nvidia-smi-nvlink-s.txt"))


# --- -q -x -----------------------------------------------------------------------------------------------


def test_q_xml_h200() -> None:
    inventory = parse_nvidia_smi_q_xml(read(H200 / "nvidia-smi-q-x.xml"))
    assert inventory.driver_version == "580.159.04"
    assert inventory.cuda_version == "13.0"
    assert [gpu.index for gpu in inventory.gpus] == [0, 1]
    assert [gpu.name for gpu in inventory.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert [gpu.serial for gpu in inventory.gpus] == ["1653924042173", "1654024077470"]
    assert [gpu.uuid for gpu in inventory.gpus] == [H200_UUIDS[0], H200_UUIDS[1]]
    assert [gpu.pci_bus_id for gpu in inventory.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    for gpu in inventory.gpus:
        assert gpu.memory_bytes == 143771 * MIB
        assert (gpu.pcie_gen_max, gpu.pcie_gen_current) == (5, 5)
        assert (gpu.pcie_width_max, gpu.pcie_width_current) == (16, 16)
        assert gpu.vbios_version == "96.00.A5.00.1A"
        assert gpu.ecc_mode == "Enabled"
        # not in -q output: not recorded
        assert gpu.compute_capability is None and gpu.cpu_affinity is None and gpu.numa_node is None
        assert gpu.nvlinks is None


def test_q_xml_na_field_derived() -> None:
    # DERIVED: GPU0's current link width replaced by N/A (what -q -x prints for an unsupported field)
    text = read(H200 / "nvidia-smi-q-x.xml").replace(
        "<current_link_width>16x</current_link_width>", "<current_link_width>N/A</current_link_width>", 1
    )
    gpus = parse_nvidia_smi_q_xml(text).gpus
    assert gpus[0].pcie_width_current is NA
    assert gpus[1].pcie_width_current == 16


def test_q_xml_malformed_raises() -> None:
    text = read(H200 / "nvidia-smi-q-x.xml")
    with pytest.raises(ValueError, match="malformed XML"):
        parse_nvidia_smi_q_xml(text[: len(text) // 2])  # DERIVED: the real file cut in half
    with pytest.raises(ValueError, match="-q -x"):
        parse_nvidia_smi_q_xml(read(H200 / "nvidia-smi-topo-m.txt"))
    with pytest.raises(ValueError, match="-q -x"):
        parse_nvidia_smi_q_xml("")


# --- fabric_from_text ------------------------------------------------------------------------------------


def test_fabric_from_all_three_h200_files() -> None:
    fabric = fabric_from_text(
        read(H200 / "nvidia-smi-topo-m.txt"),
        read(H200 / "nvidia-smi-nvlink-s.txt"),
        read(H200 / "nvidia-smi-q-x.xml"),
        source="text tests/data/captures/h200-nvswitch-x2",
    )
    assert isinstance(fabric, Fabric)
    assert [gpu.index for gpu in fabric.gpus] == [0, 1]
    for gpu in fabric.gpus:
        assert gpu.nvlinks is not None and len(gpu.nvlinks) == 18
        assert fabric.nvlink_count(gpu) == 18
        assert gpu.uuid == H200_UUIDS[gpu.index]
        assert gpu.serial is not None
        assert gpu.cpu_affinity == "0-31"
    assert fabric.label("GPU0", "GPU1") == "NV18"
    assert fabric.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"}
    assert fabric.numa_affinity == {"GPU0": "0", "GPU1": "0"}
    assert fabric.driver_version == "580.159.04"
    assert fabric.cuda_driver_version == "13.0"
    assert fabric.nics == []
    assert fabric.source == "text tests/data/captures/h200-nvswitch-x2"
    assert fabric.provenance == {
        "matrix": "nvidia-smi topo -m",
        "inventory": "nvidia-smi -q -x",
        "nvlinks": "nvidia-smi nvlink -s",
    }


def test_fabric_from_titan_topo_alone() -> None:
    fabric = fabric_from_text(read(TITAN / "nvidia-smi-topo-m.txt"))
    assert [gpu.index for gpu in fabric.gpus] == [0, 1]
    assert all(gpu.nvlinks is None and gpu.serial is None for gpu in fabric.gpus)
    assert [fabric.nvlink_count(gpu) for gpu in fabric.gpus] == [2, 2]
    assert fabric.provenance == {"matrix": "nvidia-smi topo -m"}
    assert fabric.driver_version is None


def test_fabric_2080ti_has_no_nvlinks() -> None:
    fabric = fabric_from_text(read(RTX2080TI / "nvidia-smi-topo-m.txt"))
    assert [fabric.nvlink_count(gpu) for gpu in fabric.gpus] == [0, 0]


def test_fabric_nvlink_status_fills_missing_uuid() -> None:
    fabric = fabric_from_text(read(H200 / "nvidia-smi-topo-m.txt"), read(H200 / "nvidia-smi-nvlink-s.txt"))
    assert [gpu.uuid for gpu in fabric.gpus] == [H200_UUIDS[0], H200_UUIDS[1]]
    assert [gpu.name for gpu in fabric.gpus] == ["NVIDIA H200", "NVIDIA H200"]


def test_fabric_gpu_count_disagreement_raises() -> None:
    # two real files of different machines: the 2-GPU H200 topology and the 1-GPU H100 inventory
    h100 = Path(__file__).parent / "data" / "bundles" / "h100-x1"
    with pytest.raises(ValueError, match=r"-q -x has 1 GPU\(s\), nvidia-smi topo -m has 2"):
        fabric_from_text(read(H200 / "nvidia-smi-topo-m.txt"), None, read(h100 / "nvidia-smi-q.xml"))


def test_fabric_gpu_missing_from_nvlink_status_has_no_nvlinks() -> None:
    # DERIVED: the h200 nvlink -s capture cut before "GPU 1:", as nvidia-smi prints a GPU without NVLink
    one_gpu = read(H200 / "nvidia-smi-nvlink-s.txt").split("GPU 1:", 1)[0]
    fabric = fabric_from_text(None, one_gpu, read(H200 / "nvidia-smi-q-x.xml"))
    assert [len(gpu.nvlinks) for gpu in fabric.gpus] == [18, 0]


def test_nvlink_status_of_a_gpu_without_nvlink_is_empty() -> None:
    """The real H100 PCIe (no NVLink) prints nothing for `nvidia-smi nvlink -s`, exit code 0."""
    h100 = Path(__file__).parent / "data" / "bundles" / "h100-x1"
    assert parse_nvlink_status(read(h100 / "nvidia-smi-nvlink-s.txt")) == {}
    fabric = fabric_from_text(read(h100 / "nvidia-smi-topo-m.txt"), read(h100 / "nvidia-smi-nvlink-s.txt"),
                              read(h100 / "nvidia-smi-q.xml"))
    assert fabric.gpus[0].nvlinks == [] and fabric.nvlink_count(fabric.gpus[0]) == 0
    assert fabric.gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_fabric_uuid_disagreement_raises() -> None:
    # DERIVED: the two GPUs' UUIDs swapped in the nvlink -s capture (as if from another machine)
    text = read(H200 / "nvidia-smi-nvlink-s.txt")
    swapped = text.replace(H200_UUIDS[0], "@").replace(H200_UUIDS[1], H200_UUIDS[0])
    swapped = swapped.replace("@", H200_UUIDS[1])
    with pytest.raises(ValueError, match="UUID"):
        fabric_from_text(None, swapped, read(H200 / "nvidia-smi-q-x.xml"))


def test_fabric_without_any_text_raises() -> None:
    with pytest.raises(ValueError):
        fabric_from_text(None)
