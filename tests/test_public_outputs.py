"""The parsers on outputs that people outside this project printed and published (tests/data/captures/public/).

Every expected value below was read off the file by eye (the README beside each folder lists them with the file's
source) and not off the parser: a parser that shifted a column, dropped a row or misread a unit fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpufabric.cli import EXIT_BAD_INPUT, EXIT_OK, main
from pytest_gpufabric.fabric.from_text import fabric_from_text
from pytest_gpufabric.formats.nccl_tests import parse_nccl_tests
from pytest_gpufabric.formats.nvlink import parse_nvlink_any, parse_nvlink_errors, parse_nvlink_remote
from pytest_gpufabric.formats.paste import ANSI
from pytest_gpufabric.formats.topo import parse_topo_m

PUBLIC = Path(__file__).parent / "data" / "captures" / "public"
NCCL = PUBLIC / "nccl-tests"
SMI = PUBLIC / "nvidia-smi"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- nccl-tests, 2015 to 2026 ------------------------------------------------------------------------------------

# file -> per run: (op, op_from, rows, first row, last row, avg busbw); a row is
# (size, count, type, redop, root, out-of-place time us, algbw, busbw, wrong or ("error", deviation))
NCCL_RUNS = {
    "2015-titan-x-4gpu-nccl1-all_reduce_test-bytes-N-res-ms.txt": [
        # NCCL 1's test prints milliseconds: 1.628 ms is 1628 us
        ("all_reduce", "command line", 20,
         (10000000, 10000000, "char", "sum", None, 1628.0, 6.14, 9.21, ("error", 0.0)),
         (10000000, 1250000, "double", "min", None, 1622.0, 6.16, 9.25, ("error", 0.0)), None),
    ],
    "2020-dgx2-v100-sxm3-12gpu-5ops-error-column-running-cmd.txt": [
        ("all_gather", "command line", 31, (0, 0, "float", None, None, 57.30, 0.0, 0.0, ("error", 0.0)),
         (8589934560, 178956970, "float", None, None, 106773, 73.75, 73.75, ("error", 1.0)), 30.2993),
        ("all_reduce", "command line", 31, (8, 2, "float", "sum", None, 61.03, 0.0, 0.0, ("error", 2e-07)),
         (8589934592, 2147483648, "float", "sum", None, 127453, 67.40, 123.56, ("error", 2e-07)), 42.5578),
        ("broadcast", "command line", 31, (8, 2, "float", None, 0, 59.75, 0.0, 0.0, ("error", 0.0)),
         (8589934592, 2147483648, "float", None, 0, 70321, 122.15, 122.15, ("error", 0.0)), 41.2456),
        ("reduce", "command line", 31, (8, 2, "float", "sum", 0, 58.15, 0.0, 0.0, ("error", 2e-07)),
         (8589934592, 2147483648, "float", "sum", 0, 69989, 122.73, 122.73, ("error", 2e-07)), 41.3386),
        ("reduce_scatter", "command line", 31, (0, 0, "float", "sum", None, 58.16, 0.0, 0.0, ("error", 0.0)),
         (8589934560, 178956970, "float", "sum", None, 122722, 64.16, 64.16, ("error", 2e-07)), 20.3609),
    ],
    "2021-a100-sxm4-40gb-8gpu-all_reduce-error-na-launch-mode-line.txt": [
        (None, None, 34, (0, 0, "float", "sum", None, 35.20, 0.0, 0.0, ("error", None)),
         (8589934592, 2147483648, "float", "sum", None, 63896, 134.44, 235.26, ("error", None)), 68.4048),
    ],
    "2021-a100-sxm4-40gb-8gpu-broadcast-root-no-redop.txt": [
        (None, None, 34, (0, 0, "float", None, 0, 34.61, 0.0, 0.0, ("error", None)),
         (8589934592, 2147483648, "float", None, 0, 36896, 232.81, 232.81, ("error", None)), 64.8653),
    ],
    "2021-a100-sxm4-40gb-8gpu-reduce-redop-and-root.txt": [
        (None, None, 34, (0, 0, "float", "sum", 0, 36.90, 0.0, 0.0, ("error", None)),
         (8589934592, 2147483648, "float", "sum", 0, 37613, 228.38, 228.38, ("error", None)), 65.018),
    ],
    "2021-a100-sxm4-40gb-8gpu-all_gather-no-redop-no-root.txt": [
        (None, None, 34, (0, 0, "float", None, None, 34.27, 0.0, 0.0, ("error", None)),
         (8589934592, 268435456, "float", None, None, 33646, 255.31, 223.39, ("error", None)), 58.2651),
    ],
    # the header names redop, every row leaves it blank
    "2021-a100-sxm4-40gb-8gpu-alltoall-blank-redop.txt": [
        (None, None, 34, (0, 0, "float", None, None, 1.63, 0.0, 0.0, ("error", None)),
         (8589934592, 268435456, "float", None, None, 33508, 256.36, 224.31, ("error", None)), 58.6481),
    ],
    # Open MPI --tag-output on every line, about 520 NCCL INFO lines of 16 ranks before the table
    "2021-a100-p4d-2node-16gpu-efa-all_reduce-mpi-tag-output-nccl-info.txt": [
        (None, None, 28, (8, 2, "float", "sum", None, 167.5, 0.0, 0.0, ("error", 2e-07)),
         (1073741824, 268435456, "float", "sum", None, 61556, 17.44, 32.71, ("error", 5e-07)), 7.80081),
    ],
    # srun --label on every line, the header cut above the column line, no trailer
    "2024-h100-p5-2node-all_reduce-srun-label-prefix-cut-header.txt": [
        (None, None, 32, (8, 2, "float", "sum", -1, 69.12, 0.0, 0.0, 0),
         (17179869184, 4294967296, "float", "sum", -1, 66132, 259.78, 487.09, 0), None),
    ],
    "2025-h100-2node-1gpu-each-alltoall-sendrecv-collective-test-starting.txt": [
        ("alltoall", "output", 10, (33554432, 2097152, "double", "none", -1, 951.2, 35.28, 17.64, 0),
         (17179869184, 1073741824, "double", "none", -1, 361003, 47.59, 23.79, 0), 22.4385),
        ("sendrecv", "output", 10, (33554432, 4194304, "double", "sum", -1, 1687.3, 19.89, 19.89, 0),
         (17179869184, 2147483648, "double", "sum", -1, 719275, 23.88, 23.88, 0), 22.9403),
    ],
    "2026-h100-4gpu-5ops-nccl-tests-2.17.8-version-line-wide-wrong.txt": [
        ("all_reduce", "output", 10, (33554432, 4194304, "double", "sum", -1, 171.88, 195.22, 292.83, 0),
         (17179869184, 2147483648, "double", "sum", -1, 70128.7, 244.98, 367.46, 0), 343.554),
        ("all_gather", "output", 10, (33554432, 1048576, "double", "none", -1, 109.62, 306.10, 229.58, 0),
         (17179869184, 536870912, "double", "none", -1, 37051.9, 463.67, 347.75, 0), 313.292),
        ("reduce_scatter", "output", 10, (33554432, 1048576, "double", "sum", -1, 104.79, 320.20, 240.15, 0),
         (17179869184, 536870912, "double", "sum", -1, 36407.4, 471.88, 353.91, 0), 309.526),
        ("alltoall", "output", 10, (33554432, 1048576, "double", "none", -1, 109.93, 305.24, 228.93, 0),
         (17179869184, 536870912, "double", "none", -1, 36103.7, 475.85, 356.89, 0), 319.526),
        ("sendrecv", "output", 10, (33554432, 4194304, "double", "sum", -1, 225.03, 149.11, 149.11, 0),
         (17179869184, 2147483648, "double", "sum", -1, 46755.7, 367.44, 367.44, 0), 294.601),
    ],
}


def _row_tuple(row: dict) -> tuple:
    oop = row["oop"]
    check = ("error", oop["error"]) if "error" in oop else oop["wrong"]
    return (row["size"], row["count"], row["type"], row["redop"], row["root"], pytest.approx(oop["time_us"]),
            oop["algbw"], oop["busbw"], check)


@pytest.mark.parametrize("name", sorted(NCCL_RUNS))
def test_nccl_tests_of_every_era(name):
    runs = parse_nccl_tests(_read(NCCL / name))
    expected = NCCL_RUNS[name]
    assert len(runs) == len(expected)
    for run, (op, op_from, count, first, last, avg) in zip(runs, expected, strict=True):
        assert (run["op"], run["op_from"], len(run["rows"]), run["avg_busbw"]) == (op, op_from, count, avg)
        assert _row_tuple(run["rows"][0]) == first
        assert _row_tuple(run["rows"][-1]) == last


def test_a_deviation_is_not_a_count_of_wrong_elements():
    # nccl-tests before 2.13 print `error`, the largest deviation: 1e+00 on the DGX-2's last all_gather row is
    # a deviation of 1.0, not one wrong element; the file's own trailer says "Out of bounds values : 4 FAILED"
    all_gather = parse_nccl_tests(_read(NCCL / "2020-dgx2-v100-sxm3-12gpu-5ops-error-column-running-cmd.txt"))[0]
    last = all_gather["rows"][-1]
    assert last["oop"]["wrong"] is None and last["oop"]["error"] == 1.0
    assert last["ip"] == {"time_us": 70089.0, "algbw": 112.34, "busbw": 112.34, "wrong": None, "error": 1.0}


def test_the_op_comes_from_the_caller_only_where_the_output_does_not_say(tmp_path, capsys):
    log = NCCL / "2021-a100-p4d-2node-16gpu-efa-all_reduce-mpi-tag-output-nccl-info.txt"
    assert main(["parse", "nccl-tests", str(log), "--op", "all_reduce"]) == EXIT_OK
    out = capsys.readouterr().out
    assert '"op": "all_reduce"' in out and '"op_from": "given"' in out
    # a 2.17 log names its tests: --op does not rename them
    newest = NCCL / "2026-h100-4gpu-5ops-nccl-tests-2.17.8-version-line-wide-wrong.txt"
    runs = parse_nccl_tests(_read(newest), op="broadcast")
    assert [r["op"] for r in runs] == ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]


def test_op_is_for_nccl_tests_only(capsys):
    with pytest.raises(SystemExit) as info:
        main(["parse", "topo", str(SMI / "topo-m-k40m-4gpu-soc-mlx4-old-driver-prompt-tabs.txt"), "--op", "x"])
    assert info.value.code == 2 and "--op is for `gpufabric parse nccl-tests`" in capsys.readouterr().err


def test_each_kind_has_help_of_its_own(capsys):
    """`gpufabric parse KIND --help` says what that kind reads and shows only the options that are for it."""
    for kind, reads, shown, hidden in (("topo", "nvidia-smi topo -m", (), ("--op", "--reference", "--line-rate")),
                                       ("nccl-tests", "all_reduce_perf", ("--op", "--reference"), ("--line-rate",)),
                                       ("perftest", "ib_write_bw", ("--reference", "--line-rate"), ("--op",))):
        with pytest.raises(SystemExit) as info:
            main(["parse", kind, "--help"])
        text = capsys.readouterr().out
        assert info.value.code == 0 and f"gpufabric parse {kind}" in text and reads in text, text
        listed = {line.split()[0] for line in text.splitlines() if line.strip().startswith("--")}
        assert set(shown) <= listed and not set(hidden) & listed, text


# --- nvidia-smi topo -m --------------------------------------------------------------------------------------------

# file -> (devices, {cell: label}, {GPU: (CPU affinity, NUMA affinity)}, NIC legend, damaged keys)
TOPO = {
    "topo-m-v100-sxm2-8gpu-hybrid-cube-mesh-spaces-blank-lines.txt": (
        [f"GPU{i}" for i in range(8)],
        {("GPU0", "GPU1"): "NV1", ("GPU0", "GPU2"): "NV2", ("GPU0", "GPU4"): "SYS", ("GPU0", "GPU7"): "NV2",
         ("GPU3", "GPU4"): "NV1", ("GPU7", "GPU6"): "NV1"}, {}, {}, set()),
    "topo-m-ac922-power9-4gpu-nv3-mlx5-prompt-tabs.txt": (
        ["GPU0", "GPU1", "GPU2", "GPU3", *(f"mlx5_{i}" for i in range(6))],
        {("GPU0", "GPU1"): "NV3", ("GPU0", "GPU2"): "SYS", ("GPU0", "mlx5_0"): "NODE", ("GPU2", "mlx5_4"): "NODE",
         ("mlx5_0", "mlx5_1"): "PIX"},
        {"GPU0": ("0-63", "0"), "GPU3": ("64-127", "8")}, {}, set()),
    "topo-m-traverse-power9-4gpu-nv3-mlx5-blank-cells-tabs.txt": (
        ["GPU0", "GPU1", "GPU2", "GPU3", *(f"mlx5_{i}" for i in range(4))],
        {("GPU0", "GPU1"): "NV3", ("GPU0", "GPU2"): "SYS", ("GPU0", "mlx5_0"): "NODE", ("GPU2", "mlx5_2"): "NODE",
         ("mlx5_0", "mlx5_1"): "PIX"},
        {"GPU0": ("0-63", "0"), "GPU3": ("64-127", "8")}, {}, set()),
    "topo-m-v100-sxm2-pair-plus-rtx3090-nv6-tabs.txt": (
        ["GPU0", "GPU1", "GPU2"],
        {("GPU0", "GPU1"): "NODE", ("GPU0", "GPU2"): "NODE", ("GPU1", "GPU2"): "NV6"},
        {"GPU0": ("0-63", "0"), "GPU2": ("0-63", "0")}, {}, set()),
    "topo-m-h100-pcie-pair-nvlink-bridge-root-prompt-spaces-indented.txt": (
        ["GPU0", "GPU1"], {("GPU0", "GPU1"): "NV12", ("GPU1", "GPU0"): "NV12", ("GPU0", "GPU0"): "X"},
        {"GPU0": ("32-63,96-127", "1"), "GPU1": ("32-63,96-127", "1")}, {}, set()),
    "topo-matrix-h800-8gpu-nv8-prompt-spaces-terminal-truncated.txt": (
        [f"GPU{i}" for i in range(8)],
        {("GPU0", "GPU1"): "NV8", ("GPU7", "GPU6"): "NV8"},
        # GPU7's CPU list lost its leading "3" too, but "2-63,96-127" is still a CPU list: nothing can tell
        {"GPU4": ("32-63,96-127", "1"), "GPU7": ("2-63,96-127", "1")},
        {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"},
        {"NIC0", "NIC1", "NIC2", "NIC3", "GPU0 CPU Affinity", "GPU1 CPU Affinity", "GPU2 CPU Affinity",
         "GPU3 CPU Affinity"}),
    "topo-m-hgx-h200-8gpu-nv18-12nic-emoji-prompt-tabs.txt": (
        [*(f"GPU{i}" for i in range(8)), *(f"NIC{i}" for i in range(12))],
        {("GPU0", "GPU1"): "NV18", ("GPU0", "NIC0"): "PXB", ("GPU0", "NIC6"): "SYS", ("GPU7", "NIC11"): "PXB",
         ("NIC1", "NIC2"): "PIX"},
        {"GPU0": ("0-55,112-167", "0"), "GPU7": ("56-111,168-223", "1")},
        {f"NIC{i}": f"mlx5_{i}" for i in range(12)}, set()),
    "topo-m-k40m-4gpu-soc-mlx4-old-driver-prompt-tabs.txt": (
        ["GPU0", "GPU1", "GPU2", "GPU3", "mlx4_0"],
        {("GPU0", "GPU1"): "PHB", ("GPU0", "GPU2"): "SOC", ("GPU0", "mlx4_0"): "SOC", ("GPU2", "mlx4_0"): "PHB"},
        {"GPU0": ("0-5", None), "GPU3": ("6-11", None)}, {}, set()),
    # nvidia-smi itself ran the NIC7 cell into CPU Affinity on every GPU row: PHB's "B" and the tab are lost
    "topo-m-a100-sxm4-8gpu-8nic-glued-PH0-115-tabs.txt": (
        [*(f"GPU{i}" for i in range(8)), *(f"NIC{i}" for i in range(8))],
        {("GPU0", "GPU1"): "NV12", ("GPU0", "NIC0"): "PHB", ("NIC0", "NIC1"): "PHB", ("NIC7", "GPU0"): "PHB"},
        {}, {f"NIC{i}": f"mlx5_{i}" for i in range(8)},
        {*(f"GPU{i}-NIC7" for i in range(8)),
         *(f"GPU{i} {column}" for i in range(8) for column in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"))}),
}


@pytest.mark.parametrize("name", sorted(TOPO))
def test_topo_m_as_published(name):
    devices, cells, affinity, legend, damaged = TOPO[name]
    topo = parse_topo_m(_read(SMI / name))
    assert topo.devices == devices
    for (row, col), label in cells.items():
        assert topo.matrix[row][col] == label
    for gpu, (cpu, numa) in affinity.items():
        assert topo.cpu_affinity.get(gpu) == cpu and topo.numa_affinity.get(gpu) == numa
    assert topo.nic_names == legend
    assert set(topo.damaged) == damaged


def test_a_damaged_cell_is_named_and_the_gpu_matrix_kept():
    topo = parse_topo_m(_read(SMI / "topo-m-a100-sxm4-8gpu-8nic-glued-PH0-115-tabs.txt"))
    assert all(topo.matrix[f"GPU{i}"][f"GPU{j}"] == ("X" if i == j else "NV12") for i in range(8) for j in range(8))
    assert "NIC7" not in topo.matrix["GPU3"]
    assert topo.damaged["GPU3-NIC7"].startswith("line 6: 'PH0-115' is a path label run into the next cell")
    assert topo.cpu_affinity == {}  # shifted by the lost tab: not read rather than read into the wrong column
    assert topo.to_json()["damaged"]["GPU0 CPU Affinity"] == "line 3: after the damaged cell GPU0-NIC7"


def test_a_cut_paste_names_the_rows_it_could_not_place():
    topo = parse_topo_m(_read(SMI / "topo-matrix-h800-8gpu-nv8-prompt-spaces-terminal-truncated.txt"))
    assert "has no column in the header" in topo.damaged["NIC0"]
    assert "'-31,64-95' is not a CPU or NUMA list" in topo.damaged["GPU0 CPU Affinity"]


def test_spaces_with_a_blank_cell_are_placed_by_the_header_columns(captures):
    # DERIVED: the real H200 capture as a terminal shows it (tabs expanded to 8 columns, the form a copy from a
    # terminal has), with GPU1's CPU Affinity blank as a Slurm node can print it
    real = (captures / "h200-nvswitch-x2" / "nvidia-smi-topo-m.txt").read_text(encoding="utf-8")
    lines = [ANSI.sub("", line).expandtabs(8) for line in real.splitlines()]  # a terminal shows no escapes
    gpu1 = next(i for i, line in enumerate(lines) if line.startswith("GPU1"))
    lines[gpu1] = lines[gpu1].replace("0-31", "    ")
    topo = parse_topo_m("\n".join(lines))
    assert topo.cpu_affinity == {"GPU0": "0-31"}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0"} and topo.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}
    assert topo.matrix["GPU1"]["GPU0"] == "NV18" and not topo.damaged


def test_the_topology_check_names_a_damaged_cell_instead_of_judging_it():
    from pytest_gpufabric.checks.topology import check_matrix
    from pytest_gpufabric.profile.model import Profile

    fabric = fabric_from_text(_read(SMI / "topo-m-a100-sxm4-8gpu-8nic-glued-PH0-115-tabs.txt"), source="ticket")
    devices = fabric.matrix["NIC7"]
    # DERIVED: a profile promising the matrix the text shows, NIC7's column as its NIC7 row prints it (PHB)
    matrix = {row: dict(cells) for row, cells in fabric.matrix.items()}
    for gpu in (f"GPU{i}" for i in range(8)):
        matrix[gpu]["NIC7"] = devices[gpu]
    profile = Profile(name="a100-8nic", path=Path("a100.yaml"), data={"topology": {"gpus": 8, "matrix": matrix}},
                      sha256="")
    result = check_matrix(profile, fabric)
    assert result.verdict == "not checked"
    assert "8 cell(s) of ticket are damaged" in result.message
    assert "GPU0-NIC7: expected PHB, not readable (line 3: 'PH0-115'" in result.message
    matrix["GPU0"]["GPU1"] = "NV8"  # DERIVED: a promise the machine breaks
    result = check_matrix(profile, fabric)
    assert result.verdict == "failed" and "GPU0-GPU1: expected NV8, found NV12" in result.message
    assert "Not readable in the recorded text" in result.message


# --- nvidia-smi nvlink ---------------------------------------------------------------------------------------------

# file -> (kind, {GPU: (name, uuid, links)}, (GPU, link, value) read by hand)
NVLINK = {
    "nvlink-s-v100-sxm2-i0-backtick-command-blank-lines.txt": (
        "status", {"0": ("Tesla V100-SXM2-32GB", "GPU-4b6ebbfe-8eac-8fed-1939-b4c545eafa7f", 6)},
        [("0", "0", {"active": True, "speed_gbps": 25.781}), ("0", "5", {"active": True, "speed_gbps": 25.781})]),
    "nvlink-status-v100-sxm2-ppc64le-i0123-command-tabs.txt": (
        "status", {"0": ("Tesla V100-SXM2-16GB", "GPU-09101d09-2345-0823-9f93-c9f49b9aebac", 6),
                   "1": ("Tesla V100-SXM2-16GB", "GPU-2f472f47-2093-5eb6-6eb1-a2cce2e0c5ee", 6),
                   "2": ("Tesla V100-SXM2-16GB", "GPU-c7816ea6-809b-d606-8689-ab279b29d6f1", 6),
                   "3": ("Tesla V100-SXM2-16GB", "GPU-5686108a-c647-af17-0a65-3d1b5fbb69c6", 6)},
        [("0", "0", {"active": True, "speed_gbps": 25.781}), ("0", "5", {"active": True, "speed_gbps": 25.781})]),
    "nvlink-s-h100-pcie-pair-root-prompt-inactive-indented.txt": (
        "status", {"0": ("NVIDIA H100 PCIe", "GPU-6968dfc2-d444-d92c-c36b-6abe53445cb9", 18),
                   "1": ("NVIDIA H100 PCIe", "GPU-9b1446e2-8a89-4cf6-b68c-a98d99e958d3", 18)},
        [("0", "0", {"active": True, "speed_gbps": 26.562}), ("0", "17", {"active": False, "speed_gbps": None})]),
    # the author's "..." stands for GPUs 2 to 6: the text holds GPUs 0, 1 and 7
    "nvlink-status-h800-8gpu-prompt-elided.txt": (
        "status", {"0": ("NVIDIA H800", "GPU-34bf77d1-c686-6821-79a8-32d326c5039c", 8),
                   "1": ("NVIDIA H800", "GPU-f5046fa5-3db4-45e8-870a-dc1376becaa5", 8),
                   "7": ("NVIDIA H800", "GPU-474d838c-171f-d249-4f45-bbc01a8eb74a", 8)},
        [("0", "0", {"active": True, "speed_gbps": 26.562}), ("0", "7", {"active": True, "speed_gbps": 26.562})]),
    "nvlink-s-a100-sxm4-i0-prompt-tabs.txt": (
        "status", {"0": ("NVIDIA A100-SXM4-40GB", "GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178", 12)},
        [("0", "0", {"active": True, "speed_gbps": 25.0}), ("0", "11", {"active": True, "speed_gbps": 25.0})]),
    # the shell loop that printed it and its "=== GPU n NVLink Errors ===" banners come first
    "nvlink-e-a100-sxm4-loop-banners-excerpt.txt": (
        "errors", {"0": ("NVIDIA A100-SXM4-40GB", "GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178", 12),
                   "1": ("NVIDIA A100-SXM4-40GB", "GPU-264fc0d9-c23f-c1eb-4fc3-40237af3cebc", 12)},
        [("0", "0", {"replay": 0, "recovery": 0, "crc": 0}), ("0", "11", {"replay": 0, "recovery": 0, "crc": 0})]),
}


@pytest.mark.parametrize("name", sorted(NVLINK))
def test_nvlink_as_published(name):
    kind, gpus, values = NVLINK[name]
    parsed = parse_nvlink_any(_read(SMI / name))
    assert parsed["kind"] == kind
    assert {gpu: (e["name"], e["uuid"], len(e["links"])) for gpu, e in parsed["gpus"].items()} == gpus
    for gpu, link, value in values:
        assert parsed["gpus"][gpu]["links"][link] == value


def test_nvlink_remote_with_a_prompt_and_an_indent():
    remotes = parse_nvlink_remote(_read(SMI / "nvlink-R-h100-pcie-pair-root-prompt-indented.txt"))
    assert sorted(remotes) == [0, 1] and len(remotes[0]) == 12
    assert remotes[0][0] == "00000000:D5:00.0" and remotes[0][11] == "00000000:D5:00.0"


def test_nvlink_errors_of_the_loop_keep_each_gpu_apart():
    errors = parse_nvlink_errors(_read(SMI / "nvlink-e-a100-sxm4-loop-banners-excerpt.txt"))
    assert sorted(errors) == [0, 1] and errors[1][11] == {"replay": 0, "recovery": 0, "crc": 0}


def test_nvlink_capabilities_are_refused_naming_what_is_read(capsys):
    path = SMI / "nvlink-c-h800-8gpu-prompt-elided.txt"
    assert main(["parse", "nvlink", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "line 3: `nvidia-smi nvlink -c` (capabilities) output is not read here" in err
