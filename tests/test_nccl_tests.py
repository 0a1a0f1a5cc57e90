"""nccl-tests result tables: the real H200 capture, the same capture interleaved with real log noise, the CLI."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from pytest_gpufabric.cli import EXIT_BAD_INPUT, main
from pytest_gpufabric.formats.nccl_tests import _wrong, parse_nccl_tests, parse_nccl_tests_json
from pytest_gpufabric.workloads.nccl_tests import find_all_reduce_perf, find_perf_binary, nccl_tests_command

CAPTURE = "h200-nvswitch-x2/nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt"

# DERIVED: the variants below are the real capture above with real log lines inserted; no number in a data row
# is changed or added. Where each inserted line was printed (copied as it appears there, one line each):
# NCCL's own log, host starting with a digit: https://github.com/NVIDIA/nccl/issues/1773
NCCL_INFO_CHANNEL = "10-4-3-3:97095:97196 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer"
NCCL_INFO_RINGS = "10-4-3-3:97095:97193 [3] NCCL INFO Connected all rings, use ring PXN 0 GDR 1"
# https://github.com/NVIDIA/nccl-tests/issues/29
NCCL_INFO_INIT = ("server2:23920:24013 [7] NCCL INFO comm 0x7f5780001ca0 rank 15 nranks 32 cudaDev 7 nvmlDev 7 "
                  "- Init COMPLETE")
# NCCL WARN (printed after an empty line) and NCCL's version banner: https://github.com/NVIDIA/nccl-tests/issues/82
NCCL_WARN = ["", "v100-gpu-1:14926:14926 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]"]
NCCL_VERSION = "NCCL version 2.9.6+cuda11.2"
# UCX's log: https://github.com/openucx/ucx/issues/2654 and https://github.com/NVIDIA/nccl-tests/issues/180
UCX_WARN = ("[1527413073.646167] [hpc-arm-hwi02:6875 :0]    ucp_context.c:586  UCX  WARN  device 'mlx5_3:1' "
            "is not available")
UCX_ERROR = ("[1700554343.440877] [10-192-80-132:7356 :0]            sock.c:323  UCX  ERROR   connect(fd=48, "
             "dest_addr=172.17.0.1:42887) failed: Connection refused")
# Launcher chatter: ssh via mpirun (https://github.com/NVIDIA/nccl-tests/issues/249) and Open MPI
# (https://github.com/openucx/ucx/issues/9690)
SSH_WARNING = "Warning: Permanently added '[192.168.173.233]:2022' (RSA) to the list of known hosts."
MPI_WARNING = ('[vla2-1174-gpu-node-hahn.vla.yp-c.yandex.net:01840] Warning: could not find environment variable '
               '"HPC_WORKSPACE"')


@pytest.fixture
def capture_text(captures) -> str:
    return (captures / CAPTURE).read_text(encoding="utf-8")


def insert(text: str, anchor: str, lines: list[str], *, after: bool = True, nth: int = 0) -> str:
    """`lines` put after (or before) the `nth` line of `text` that contains `anchor`."""
    out = text.splitlines()
    hits = [i for i, line in enumerate(out) if anchor in line]
    at = hits[nth] + (1 if after else 0)
    return "\n".join(out[:at] + lines + out[at:]) + "\n"


def splice(text: str, row_start: str, cut_after_fields: int, noise: list[str], *, nth: int = 0) -> str:
    """What NCCL's logger does to a half-printed row: its line is glued on after `cut_after_fields` fields, more
    log lines follow, then the rest of the row arrives on a line of its own."""
    out = text.splitlines()
    i = [k for k, line in enumerate(out) if line.lstrip().startswith(row_start)][nth]
    row = out[i]
    ends = [m.end() for m in re.finditer(r"\S+", row)]
    cut = ends[cut_after_fields - 1]
    out[i:i + 1] = [row[:cut] + noise[0], *noise[1:], row[cut:]]
    return "\n".join(out) + "\n"


# --- the real capture ------------------------------------------------------------------------------------------


def test_capture_holds_three_runs_with_the_printed_numbers(capture_text):
    runs = parse_nccl_tests(capture_text)
    assert [r["op"] for r in runs] == ["all_reduce", "all_reduce", "sendrecv"]
    assert [r["avg_busbw"] for r in runs] == [232.869, 234.53, 324.93]
    assert [len(r["rows"]) for r in runs] == [7, 7, 4]
    row = next(r for r in runs[0]["rows"] if r["size"] == 268435456)
    assert row == {
        "size": 268435456, "count": 67108864, "type": "float", "redop": "sum", "root": -1,
        "oop": {"time_us": 892.74, "algbw": 300.69, "busbw": 300.69, "wrong": 0},
        "ip": {"time_us": 892.99, "algbw": 300.60, "busbw": 300.60, "wrong": 0},
    }
    last = runs[0]["rows"][-1]  # time printed with %7.0f-style precision above 10 ms
    assert (last["size"], last["oop"]["time_us"], last["ip"]["time_us"]) == (4294967296, 12371.3, 12378.0)
    assert runs[1]["rows"][0]["ip"] == {"time_us": 14.65, "algbw": 71.60, "busbw": 71.60, "wrong": 0}


def test_sendrecv_in_place_wrong_is_none(capture_text):
    sendrecv = parse_nccl_tests(capture_text)[2]
    assert sendrecv["rows"][-1] == {
        "size": 4294967296, "count": 1073741824, "type": "float", "redop": "sum", "root": -1,
        "oop": {"time_us": 11767.1, "algbw": 365.00, "busbw": 365.00, "wrong": 0},
        "ip": {"time_us": 11760.5, "algbw": 365.20, "busbw": 365.20, "wrong": None},
    }
    assert all(r["oop"]["wrong"] == 0 and r["ip"]["wrong"] is None for r in sendrecv["rows"])


def test_header_gives_version_and_devices(capture_text):
    run = parse_nccl_tests(capture_text)[0]
    assert set(run) == {"op", "op_from", "version", "nranks", "devices", "rows", "avg_busbw"}
    assert run["op_from"] == "output"
    assert run["version"] == "2.19.6" and run["nranks"] == 2
    assert run["devices"][1] == {"rank": 1, "group": 0, "pid": 1308, "host": "vm", "device": 1,
                                 "pci_bus_id": "0000:00:07", "name": "NVIDIA H200"}
    for row in run["rows"]:
        assert set(row) == {"size", "count", "type", "redop", "root", "oop", "ip"}
        assert set(row["oop"]) == set(row["ip"]) == {"time_us", "algbw", "busbw", "wrong"}


def test_json_of_one_run_is_that_run_and_of_several_a_runs_list(capture_text):
    first = capture_text.split("\n\n")[0]
    assert parse_nccl_tests_json(first) == parse_nccl_tests(capture_text)[0]
    assert parse_nccl_tests_json(capture_text) == {"runs": parse_nccl_tests(capture_text)}


# --- real-world noise ------------------------------------------------------------------------------------------


def test_interleaved_log_lines_are_skipped(capture_text):
    text = insert(capture_text, "# Collective test starting: all_reduce_perf", [SSH_WARNING, MPI_WARNING], after=False)
    text = insert(text, "#  Rank  1 Group  0 Pid   1308", [NCCL_VERSION, NCCL_INFO_INIT, *NCCL_WARN])
    text = insert(text, "(B)    (elements)", [NCCL_INFO_CHANNEL, UCX_WARN])  # between the header and the first row
    text = insert(text, "     4194304       1048576", [NCCL_INFO_RINGS, UCX_ERROR, *NCCL_WARN])
    text = insert(text, "# Avg bus bandwidth    : 234.53", [NCCL_INFO_INIT, MPI_WARNING], after=False)
    text = insert(text, "    67108864      16777216", [UCX_WARN, NCCL_INFO_CHANNEL], nth=2)  # sendrecv's rows
    assert text.count("\n") > capture_text.count("\n") + 15
    assert parse_nccl_tests(text) == parse_nccl_tests(capture_text)


def test_nccl_log_spliced_into_a_row_is_cut_out(capture_text):
    # after the preamble (root `-1` glued to a host name that starts with a digit), and after out-of-place
    text = splice(capture_text, "67108864      16777216", 5, [NCCL_INFO_CHANNEL, NCCL_INFO_RINGS, UCX_WARN], nth=2)
    text = splice(text, "268435456      67108864", 9, [NCCL_INFO_INIT], nth=2)
    text = splice(text, "16777216       4194304", 5, [NCCL_INFO_CHANNEL])
    assert "-110-4-3-3:97095:97196 [0] NCCL INFO" in text
    assert parse_nccl_tests(text) == parse_nccl_tests(capture_text)
    # with the column-header lines gone, nccl-tests' printf widths still say where `-1` ends
    headless = "\n".join(line for line in text.splitlines() if not line.startswith(("#       size", "#        (B)")))
    assert [r["rows"] for r in parse_nccl_tests(headless)] == [r["rows"] for r in parse_nccl_tests(capture_text)]


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "Sun May 27 12:24:33 2018[1,0]<stdout>:", "0: "],
                         ids=["mpirun-tag-output", "mpirun-timestamp-output", "srun-label"])
def test_launcher_line_prefixes_are_stripped(capture_text, prefix):
    text = "\n".join(prefix + line for line in capture_text.splitlines()) + "\n"
    text = insert(text, "(B)    (elements)", [f"[1,1]<stdout>:{NCCL_INFO_CHANNEL}"])
    assert parse_nccl_tests(text) == parse_nccl_tests(capture_text)


# --- rows with one group, header-less output, bad input --------------------------------------------------------


def test_row_with_only_in_place_results_has_oop_none(capture_text):
    # nccl-tests prints blanks where out-of-place would be in trace-replay mode (writeBenchMarkLineNullBody)
    lines = capture_text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("   268435456"))
    row = lines[i]
    oop_start = row.index("   892.74")
    oop_end = row.index("892.99") - 3
    lines[i] = row[:oop_start] + " " * (oop_end - oop_start) + row[oop_end:]
    run = parse_nccl_tests("\n".join(lines))[0]
    got = next(r for r in run["rows"] if r["size"] == 268435456)
    assert got["oop"] is None
    assert got["ip"] == {"time_us": 892.99, "algbw": 300.60, "busbw": 300.60, "wrong": 0}


def test_row_cut_after_out_of_place_has_ip_none(capture_text):
    lines = capture_text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("   268435456"))
    lines[i] = lines[i][: lines[i].index("892.99") - 3]
    got = next(r for r in parse_nccl_tests("\n".join(lines))[0]["rows"] if r["size"] == 268435456)
    assert got["ip"] is None and got["oop"]["busbw"] == 300.69


def test_op_comes_from_the_hint_when_the_header_is_cut_off(capture_text):
    table = capture_text.split("\n\n")[0]
    headless = "\n".join(line for line in table.splitlines() if "Collective test" not in line)
    # the table does not need the op to be read: it says null, and where it came from
    unnamed = parse_nccl_tests(headless)
    assert [(r["op"], r["op_from"]) for r in unnamed] == [(None, None)]
    runs = parse_nccl_tests(headless, op="all_reduce_perf")
    assert [(r["op"], r["op_from"]) for r in runs] == [("all_reduce", "given")]
    assert unnamed[0]["rows"] == runs[0]["rows"]
    assert runs[0]["rows"] == parse_nccl_tests(capture_text)[0]["rows"]
    assert parse_nccl_tests(table, op="sendrecv")[0]["op"] == "all_reduce"  # the header wins over the hint
    rows_only = "\n".join(line for line in table.splitlines() if not line.startswith("#")) + "\n"
    assert parse_nccl_tests(rows_only, op="all_reduce")[0]["rows"] == runs[0]["rows"]


def test_a_paste_cut_inside_its_last_row_leaves_that_row_unread(capture_text):
    """A paste that stops without its line end may have stopped inside its last row: at every cut point of the
    real table, no row is read that the whole table does not hold, and the cut row is named."""
    whole = {json.dumps(row, sort_keys=True) for run in parse_nccl_tests(capture_text) for row in run["rows"]}
    rows = [line for line in capture_text.splitlines() if line.startswith("  1073741824")]
    end = capture_text.index(rows[0]) + len(rows[0])
    cut = capture_text[:end - 2]  # "328.68  328.68 ..." loses its last two characters
    (run, *_) = parse_nccl_tests(cut)
    assert run["unreadable"] == [f"line {cut.count(chr(10)) + 1}: the text ends inside this row, which may be cut: "
                                 f"{' '.join(rows[0][:-2].split())!r}"]
    assert all(row["size"] != 1073741824 for row in run["rows"])
    for end in range(len(capture_text) // 2, len(capture_text), 5):
        try:
            runs = parse_nccl_tests(capture_text[:end])
        except ValueError:
            continue
        assert {json.dumps(row, sort_keys=True) for run in runs for row in run["rows"]} <= whole, end


def test_malformed_row_names_its_line(capture_text):
    lines = capture_text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("  1073741824"))
    lines[i] = lines[i].replace("328.68  328.68", "328.68  fast", 1)
    with pytest.raises(ValueError, match=rf"^line {i + 1}: busbw 'fast' is not a number"):
        parse_nccl_tests("\n".join(lines))
    lines[i] = lines[i][:40]  # size, count, type and part of redop
    with pytest.raises(ValueError, match=rf"^line {i + 1}: "):
        parse_nccl_tests("\n".join(lines))


@pytest.mark.parametrize("text", ["", "\n\n", "hello\nworld\n", "# just a comment\n"])
def test_no_rows_is_an_error(text):
    with pytest.raises(ValueError, match="no nccl-tests result rows"):
        parse_nccl_tests(text)


def test_run_without_rows_among_good_ones_is_an_error(capture_text):
    # a second test whose header printed but no row (it failed before its first size)
    crashed = capture_text.split("\n\n")[0].splitlines()[:2]
    crashed[1] = crashed[1].replace("all_reduce_perf", "alltoall_perf")
    text = capture_text + "\n".join(crashed) + "\n"
    with pytest.raises(ValueError, match=r"line \d+: the alltoall run starting here has no result rows"):
        parse_nccl_tests(text)


def test_legacy_error_column_is_read_as_a_deviation_not_a_count():
    # nccl-tests before 2.13: root without redop, `error` (a max deviation) where #wrong is now. Header and row
    # as printed by broadcast_perf in https://github.com/NVIDIA/nccl-tests/issues/82
    legacy = (
        "#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "           8             2   float       0    45.82    0.00    0.00    N/A    38.17    0.00    0.00    N/A\n"
    )
    (run,) = parse_nccl_tests(legacy)
    assert run["op"] is None
    assert run["rows"] == [{"size": 8, "count": 2, "type": "float", "redop": None, "root": 0,
                            "oop": {"time_us": 45.82, "algbw": 0.0, "busbw": 0.0, "wrong": None, "error": None},
                            "ip": {"time_us": 38.17, "algbw": 0.0, "busbw": 0.0, "wrong": None, "error": None}}]


def test_unknown_column_layout_names_the_line():
    with pytest.raises(ValueError, match=r"^line 2: column layout 'size count type bogus time"):
        parse_nccl_tests("#\n#  size  count  type  bogus  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
                         "  8  2  float  x  1.0  0.0  0.0  0  1.0  0.0  0.0  0\n")


def test_wrong_counts_printed_with_g_format():
    assert _wrong("0", 1) == 0 and _wrong("N/A", 1) is None and _wrong("1e+06", 1) == 1_000_000
    with pytest.raises(ValueError):
        _wrong("0.5", 1)


# --- CLI -------------------------------------------------------------------------------------------------------


def test_cli_prints_the_runs_as_json(captures, capture_text, capsys):
    assert main(["parse", "nccl-tests", str(captures / CAPTURE)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"runs": parse_nccl_tests(capture_text)}
    assert out["runs"][0]["rows"][4]["oop"] == {"time_us": 892.74, "algbw": 300.69, "busbw": 300.69, "wrong": 0}
    assert out["runs"][2]["rows"][0]["ip"]["wrong"] is None


def test_cli_one_run_prints_that_run(tmp_path, capture_text, capsys):
    one = tmp_path / "one.txt"
    one.write_text(capture_text.split("\n\n")[2])
    assert main(["parse", "nccl-tests", str(one)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["op"] == "sendrecv" and out["avg_busbw"] == 324.93 and "runs" not in out


@pytest.mark.parametrize("content", ["", "this is not nccl-tests output\n"], ids=["empty", "garbage"])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content):
    bad = tmp_path / "bad.txt"
    bad.write_text(content)
    assert main(["parse", "nccl-tests", str(bad)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("gpufabric: ") and "bad.txt" in captured.err
    assert len(captured.err.splitlines()) == 1 and "no nccl-tests result rows" in captured.err


def test_cli_malformed_row_names_the_line(tmp_path, capture_text, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text(capture_text.replace("  892.74  300.69", "  892.74  oops", 1))
    assert main(["parse", "nccl-tests", str(bad)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "line 16: algbw 'oops' is not a number" in err


# --- finding and running the binary ----------------------------------------------------------------------------


def test_nccl_tests_command_flags():
    assert nccl_tests_command("/opt/nccl-tests/build/all_reduce_perf", 2, 1048576, 4294967296, factor=4) == [
        "/opt/nccl-tests/build/all_reduce_perf", "-b", "1048576", "-e", "4294967296", "-f", "4", "-g", "2",
        "-n", "20", "-w", "5",
    ]
    assert nccl_tests_command("all_reduce_perf", 8, 8, 128, iters=50, warmup=0)[-4:] == ["-n", "50", "-w", "0"]
    for bad in ({"ngpus": 0}, {"min_bytes": 0}, {"max_bytes": 4}, {"factor": 1}, {"iters": 0}, {"warmup": -1}):
        kwargs = {"binary": "x", "ngpus": 1, "min_bytes": 8, "max_bytes": 64, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            nccl_tests_command(**kwargs)


def _executable(path):
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_all_reduce_perf_configured(tmp_path):
    binary = _executable(tmp_path / "all_reduce_perf")
    assert find_all_reduce_perf(str(binary)) == str(binary)
    with pytest.raises(ValueError, match="does not exist") as missing:
        find_all_reduce_perf(str(tmp_path / "nope" / "all_reduce_perf"))
    assert str(tmp_path / "nope") in str(missing.value)
    plain = tmp_path / "plain"
    plain.write_text("")
    plain.chmod(0o644)
    if not os.access(plain, os.X_OK):  # root may execute anything
        with pytest.raises(ValueError, match="plain.*not executable"):
            find_all_reduce_perf(str(plain))


def test_find_all_reduce_perf_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_all_reduce_perf(None) is None
    binary = _executable(tmp_path / "all_reduce_perf")
    assert find_all_reduce_perf(None) == str(binary)
    assert find_all_reduce_perf("all_reduce_perf") == str(binary)
    with pytest.raises(ValueError, match="'sendrecv_perf' is not on PATH"):
        find_all_reduce_perf("sendrecv_perf")


def test_each_ops_binary_beside_all_reduce_perf_or_on_path(tmp_path, monkeypatch):
    """nccl-tests builds every <op>_perf into one folder: the one beside the configured all_reduce_perf wins, else
    PATH's; a missing one says where it was looked for."""
    build, elsewhere = tmp_path / "build", tmp_path / "bin"
    build.mkdir(), elsewhere.mkdir()
    all_reduce = _executable(build / "all_reduce_perf")
    sendrecv = _executable(build / "sendrecv_perf")
    on_path = _executable(elsewhere / "all_gather_perf")
    monkeypatch.setenv("PATH", str(elsewhere))
    assert find_perf_binary("all_reduce", str(all_reduce)) == (str(all_reduce), f"configured as {all_reduce}")
    assert find_perf_binary("sendrecv", str(all_reduce)) == (str(sendrecv), f"beside {all_reduce}")
    assert find_perf_binary("all_gather", str(all_reduce))[0] == str(on_path)
    assert find_perf_binary("broadcast", str(all_reduce)) == (None, f"beside {all_reduce} or on PATH")
    assert find_perf_binary("sendrecv", None) == (None, "on PATH")  # nothing configured, none on PATH
    with pytest.raises(ValueError, match="does not exist"):
        find_perf_binary("sendrecv", str(tmp_path / "nope" / "all_reduce_perf"))
