"""perftest bandwidth reports: the real RoCE capture (client and server), variants of it, device errors, the CLI.

No public perftest output is stored (every corpus we could take one from forbids verbatim copies; see
tests/data/captures/public/perftest/README.md). The other layouts are therefore DERIVED from the real capture: its
own numbers (65536 B, 1324156 iterations, peak 0.00, average 23.14, 0.044138 Mpps) printed with perftest's own
format strings. Those strings are quoted from perftest's src/perftest_parameters.h and checked against the strings
of Debian's perftest 4.5+0.17-1 binary (`ib_write_bw --version`: 6.06). Python's % formatting ignores the `l`
length modifier, so the C formats are applied as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpufabric.cli import EXIT_BAD_INPUT, main
from pytest_gpufabric.formats.perftest import NO_DEVICE_MESSAGES, NoRdmaDevice, parse_perftest, to_gbps

CAPTURES = Path(__file__).parent / "data" / "captures"
CLIENT = CAPTURES / "a100-pcie-roce-2node" / "ib_write_bw-client.txt"
SERVER = CAPTURES / "a100-pcie-roce-2node" / "ib_write_bw-server.txt"
NO_DEVICE = CAPTURES / "ci-no-rdma" / "ib_write_bw-no-device.txt"

EXPECTED = {
    "test": "RDMA_Write BW Test",
    "device": "irdma0",
    "link_type": "Ethernet",
    "mtu": 1024,
    "results": [
        {"bytes": 65536, "iterations": 1324156, "bw_peak_gbps": None, "bw_avg_gbps": 23.14, "msg_rate_mpps": 0.044138}
    ],
}
MIB_TO_GBPS = 1048576 * 8 / 1e9

# perftest's format strings (src/perftest_parameters.h; the same bytes are in the 6.06 binary)
RESULT_LINE = "-" * 87
RESULT_FMT = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
RESULT_FMT_G_QOS = " #bytes    #sl      #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
REPORT_FMT = " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf"
REPORT_FMT_EXT = " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf"
REPORT_FMT_QOS = " %-7lu    %d           %lu           %-7.2lf            %-7.2lf                  %-7.6lf\n"
RESULT_FMT_LAT = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                  "   99% percentile[usec]   99.9% percentile[usec] ")
# get_clock.c's warning, printed to stderr; left with its %lf conversions unfilled rather than with made-up MHz
CPU_WARNING = "Conflicting CPU frequency values detected: %lf != %lf. CPU Frequency is not max."
# the capture's one measurement
ROW_VALUES = (65536, 1324156, 0.00, 23.14, 0.044138)
ROW_LINE = " 65536      1324156          0.00               23.14              0.044138"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _required(result: dict) -> dict:
    return {key: result[key] for key in EXPECTED}


@pytest.mark.parametrize("path", [CLIENT, SERVER], ids=["client", "server"])
def test_real_capture_gives_the_documented_json(path):
    result = parse_perftest(_read(path))
    assert _required(result) == EXPECTED
    assert [set(row) for row in result["results"]] == [set(EXPECTED["results"][0])]
    assert result["units_printed"] == "Gb/sec"
    assert result["bidirectional"] is False
    assert result["bw_peak_reported"] is False  # -D: perftest prints BW peak 0.00
    assert (result["qps"], result["connection_type"], result["gid_index"], result["rdma_cm"]) == (1, "RC", 1, True)
    assert result["report_both"] is None and result["repeated_tables"] == 0 and result["warnings"] == []


def test_server_side_is_told_by_its_banner():
    assert parse_perftest(_read(SERVER))["server_side"] is True
    assert parse_perftest(_read(CLIENT))["server_side"] is False
    assert parse_perftest(_read(CLIENT))["tx_depth"] == 128  # only the client (or -b) prints TX depth


def test_report_fmt_reproduces_the_captured_row():
    """The format strings used for the variants below are the ones that printed the real row."""
    assert (REPORT_FMT % ROW_VALUES).split() == ROW_LINE.split()


# DERIVED: the capture with RESULT_FMT's MB/sec header (perftest before PR #257) and, since PR #257, the same
# header spelled MiB/sec; the numbers under it are the capture's. Both units are 2^20 bytes/s.
@pytest.mark.parametrize("unit", ["MB/sec", "MiB/sec"])
def test_mb_and_mib_tables_are_converted_to_gbps(unit):
    text = _read(CLIENT).replace("[Gb/sec]", f"[{unit}]")
    result = parse_perftest(text)
    assert result["units_printed"] == unit
    (row,) = result["results"]
    assert row["bw_avg_gbps"] == 23.14 * 1048576 * 8 / 1e9
    assert row["bw_avg_gbps"] == pytest.approx(0.19411, abs=1e-5)
    assert row["bw_peak_gbps"] is None  # printed 0.00 under -D: not measured
    assert (row["bytes"], row["iterations"], row["msg_rate_mpps"]) == (65536, 1324156, 0.044138)


def test_unit_conversion_by_hand():
    assert to_gbps(11000.25, "MB/sec") == 11000.25 * 1048576 * 8 / 1e9
    assert to_gbps(11000.25, "MiB/sec") == pytest.approx(92.2768, abs=1e-4)
    assert to_gbps(23.14, "Gb/sec") == 23.14
    with pytest.raises(ValueError):
        to_gbps(1.0, "GB/sec")


# DERIVED: the capture's row printed with REPORT_FMT_EXT (six decimals, perftest's choice under --report_gbits when
# the average is below 0.1 Gb/s); only the layout is exercised, the numbers are the capture's.
def test_six_decimal_rows_are_read():
    text = _read(CLIENT).replace(ROW_LINE, REPORT_FMT_EXT % ROW_VALUES)
    assert _required(parse_perftest(text)) == EXPECTED


# DERIVED: get_clock.c's warning inserted between the header and the row (where real outputs show it), and spliced
# onto the end of the row (stderr written before the row's buffered newline when 2>&1 goes to a file).
@pytest.mark.parametrize("where", ["own line", "spliced"])
def test_cpu_frequency_warning_is_skipped_not_the_row(where):
    if where == "own line":
        text = _read(CLIENT).replace(RESULT_FMT_G + "\n", RESULT_FMT_G + "\n" + CPU_WARNING + "\n")
    else:
        text = _read(CLIENT).replace(ROW_LINE + "\n", ROW_LINE + CPU_WARNING + "\n")
    result = parse_perftest(text)
    assert _required(result) == EXPECTED
    assert len(result["warnings"]) == 1 and "Conflicting CPU frequency values detected" in result["warnings"][0]


# DERIVED: the header printed twice before the row (seen in real server outputs); the table printed again after a
# RESULT_LINE, row for row the same: a repeat, not a second measurement.
def test_repeated_header_and_repeated_table():
    text = _read(SERVER).replace(RESULT_FMT_G + "\n", RESULT_FMT_G + "\n" + RESULT_FMT_G + "\n")
    assert _required(parse_perftest(text)) == EXPECTED
    again = _read(SERVER) + RESULT_FMT_G + "\n" + ROW_LINE + "\n" + RESULT_LINE + "\n"
    result = parse_perftest(again)
    assert _required(result) == EXPECTED and result["repeated_tables"] == 1


# DERIVED: several rows in one table, as -a (one row per size) and --run_infinitely (one row per period) print them.
# No real multi-row output could be stored, so the rows are the capture's row, twice; what is tested is that every
# row is kept, in order.
def test_every_row_of_a_table_is_kept():
    text = _read(CLIENT).replace(ROW_LINE + "\n", ROW_LINE + "\n" + (REPORT_FMT % ROW_VALUES) + "\n")
    result = parse_perftest(text)
    assert result["results"] == EXPECTED["results"] * 2


# DERIVED: -b --report-both as write_bw.c prints it: the title with "Bidirectional " (ctx_print_test_info), the
# summed table, then RESULT_LINE, "\n Local results: \n", RESULT_LINE, RESULT_FMT_G, row, RESULT_LINE,
# "\n Remote results: \n", RESULT_LINE, RESULT_FMT_G, row, RESULT_LINE. Every row is the capture's row (so the sum
# relation does not hold here); the parser keeps numbers as printed and says the test was bidirectional.
def test_bidirectional_report_both():
    base = _read(CLIENT).replace("RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test").rstrip("\n")
    base = base.rsplit("\n", 1)[0]  # drop the final RESULT_LINE: report-both prints its own
    row = REPORT_FMT % ROW_VALUES
    text = "\n".join([base, RESULT_LINE, "", " Local results: ", RESULT_LINE, RESULT_FMT_G, row, RESULT_LINE, "",
                      " Remote results: ", RESULT_LINE, RESULT_FMT_G, row, RESULT_LINE]) + "\n"
    result = parse_perftest(text)
    assert result["test"] == "RDMA_Write Bidirectional BW Test"
    assert result["bidirectional"] is True
    assert result["results"] == EXPECTED["results"]
    assert result["report_both"] == {"local": EXPECTED["results"], "remote": EXPECTED["results"]}


# DERIVED: the QoS table (RESULT_FMT_G_QOS / REPORT_FMT_QOS) with the capture's numbers and SL 0 (perftest's default
# DEF_SL, a setting, not a measurement).
def test_qos_table_has_an_sl_column():
    text = _read(CLIENT).replace(RESULT_FMT_G, RESULT_FMT_G_QOS).replace(
        ROW_LINE + "\n", REPORT_FMT_QOS % (65536, 0, 1324156, 0.00, 23.14, 0.044138))
    (row,) = parse_perftest(text)["results"]
    assert row == {**EXPECTED["results"][0], "sl": 0}


def test_no_rdma_device_real_capture():
    if not NO_DEVICE.exists():
        pytest.skip("ci-no-rdma capture not present")
    with pytest.raises(NoRdmaDevice, match=r"line 1: perftest found no usable RDMA device"):
        parse_perftest(_read(NO_DEVICE))


# ib_read_bw on the same device-less machine (perftest 6.06) prints only the first two lines, exit 7.
@pytest.mark.parametrize("text", [
    " Did not detect devices \n If device exists, check if driver is up\n",
    *[f" {message}\n" for message in NO_DEVICE_MESSAGES],
    "IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n",
], ids=lambda text: text.strip().splitlines()[0][:40])
def test_perftest_device_errors_raise_no_rdma_device(text):
    with pytest.raises(NoRdmaDevice):
        parse_perftest(text)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("hello\nworld\n", "line 2: no perftest result table"),
    ("23.140000\n", "--output=bandwidth"),  # DERIVED: --output=bandwidth prints "%lf\n" of the average only
])
def test_garbage_is_a_plain_value_error(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_perftest(text)
    assert not isinstance(info.value, NoRdmaDevice)


def test_other_tools_output_is_not_perftest():
    text = _read(CAPTURES / "h200-nvswitch-x2" / "nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt")
    with pytest.raises(ValueError, match="no perftest result table") as info:
        parse_perftest(text)
    assert not isinstance(info.value, NoRdmaDevice)


def test_table_problems_name_their_line():
    lines = _read(CLIENT).splitlines()
    row_no = lines.index(ROW_LINE) + 1
    with pytest.raises(ValueError, match=rf"line {row_no}: not a result row"):
        parse_perftest(_read(CLIENT).replace(ROW_LINE, " 65536      1324156          0.00"))
    with pytest.raises(ValueError, match=rf"line {row_no - 1}: a perftest result header with no result row"):
        parse_perftest(_read(CLIENT).replace(ROW_LINE + "\n", ""))
    with pytest.raises(ValueError, match=rf"line {row_no - 1}: a latency test"):
        parse_perftest(_read(CLIENT).replace(RESULT_FMT_G, RESULT_FMT_LAT))
    with pytest.raises(ValueError, match="a second perftest run starts here"):
        parse_perftest(_read(CLIENT) + _read(SERVER))


def test_mixed_units_are_refused():
    text = _read(SERVER) + RESULT_FMT + "\n" + ROW_LINE + "\n"
    with pytest.raises(ValueError, match="different units"):
        parse_perftest(text)


def test_cli_prints_the_json(capsys):
    assert main(["parse", "perftest", str(CLIENT)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert _required(out) == EXPECTED
    assert out == parse_perftest(_read(CLIENT))


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("not perftest at all\n", encoding="utf-8")
    assert main(["parse", "perftest", str(garbage)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("gpufabric: ") and "garbage.txt" in err and len(err.splitlines()) == 1
    assert "not `perftest ib_*_bw` output" in err


def test_cli_no_device_is_bad_input_with_perftests_words(tmp_path, capsys):
    path = tmp_path / "no-device.txt"
    path.write_text(" Did not detect devices \n If device exists, check if driver is up\n", encoding="utf-8")
    assert main(["parse", "perftest", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "no usable RDMA device" in err and len(err.splitlines()) == 1
