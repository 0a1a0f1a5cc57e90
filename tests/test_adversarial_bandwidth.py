"""The bandwidth, NVLink-traffic and RDMA suites on evidence edited to be wrong in one way each (issues 29 and 30):
evidence that does not cover the promise, numbers that are no measurement, a log holding two runs, counters that go
down, a perftest run of another kind or direction, saturated port counters. Each case is a copy of a shipped bundle
(tests/data/bundles) or a real capture (tests/data/captures, tests/data/sysfs), edited in tmp_path (``# DERIVED:``
says how), replayed end to end; the unedited copy is the control. Every case pins the run's verdict, its exit code
and the promise's outcome and reason from gpufabric-results.json.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from replays import copy_bundle, edit_json, replay

from pytest_gpufabric.cli import main
from pytest_gpufabric.fabric.rdma import discover_rdma
from pytest_gpufabric.formats.perftest import parse_perftest

DATA = Path(__file__).parent / "data"
BUNDLES = DATA / "bundles"
ACCEPTANCE = BUNDLES / "h200-nvswitch-x2-acceptance"
X4 = BUNDLES / "h200-nvswitch-x4"
NCCL_TESTS_LOG = BUNDLES / "h200-nvswitch-x2-nccl-tests" / "nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt"
ROCE = BUNDLES / "a100-pcie-roce"
NODE_EXPORTER_SYS = DATA / "sysfs" / "node-exporter-sys"
GIB = 1024**3
MIB = 1024**2


# --- helpers ------------------------------------------------------------------------------------------------------


def _edit_text(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= count, old
    path.write_text(text.replace(old, new, count), encoding="utf-8")


def _promises(document: dict) -> dict[str, tuple[str, str]]:
    return {p["id"]: (p["outcome"], p["reason"]) for p in document["promises"]}


def _not_passed(document: dict) -> dict[str, tuple[str, str]]:
    """Every promise that did not pass, but the kernel log's: waived by every replay (replays.NO_KERNEL_LOG)."""
    return {pid: value for pid, value in _promises(document).items()
            if value[0] != "passed" and (pid, value[0]) != ("xid-events", "waived")}


def _profile(pytester: pytest.Pytester, name: str, document: dict) -> Path:
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **document}, sort_keys=False), encoding="utf-8")
    return path


# --- 1. coverage ---------------------------------------------------------------------------------------------------


def test_control_the_four_gpu_bundle_is_accepted(pytester: pytest.Pytester):
    code, document = replay(pytester, "h200-nvswitch-x4", copy_bundle(pytester, X4))
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")
    promises = _promises(document)
    assert promises["copy-bandwidth[host_to_device]"] == ("passed", "")
    assert promises["copy-bandwidth[gpu_to_gpu]"] == ("passed", "")
    assert promises["collective-bandwidth[all_reduce-1GiB]"] == ("passed", "")


def test_host_copies_of_gpu0_only_do_not_show_four_gpus(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, X4)
    # DERIVED: the host<->device rows of GPU1-3 dropped, GPU0's kept as measured
    edit_json(bundle / "bandwidth.json", lambda d: d["copy"].update(host_device=d["copy"]["host_device"][:1]))
    code, document = replay(pytester, "h200-nvswitch-x4", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert set(_not_passed(document)) == {"copy-bandwidth[host_to_device]", "copy-bandwidth[device_to_host]"}
    for kind in ("host_to_device", "device_to_host"):
        outcome, reason = _promises(document)[f"copy-bandwidth[{kind}]"]
        assert outcome == "not checked"
        assert reason == (f"{kind}: no row for GPU1, GPU2, GPU3 (1 of the 4 the profile's 4 GPUs promise were "
                          f"measured) [{bundle / 'bandwidth.json'}]")


def test_one_copied_pair_of_twelve_does_not_show_the_matrix(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, X4)
    # DERIVED: of the 12 ordered GPU-to-GPU copies only GPU0->GPU1 kept
    edit_json(bundle / "bandwidth.json", lambda d: d["copy"].update(gpu_to_gpu=d["copy"]["gpu_to_gpu"][:1]))
    code, document = replay(pytester, "h200-nvswitch-x4", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert set(_not_passed(document)) == {"copy-bandwidth[gpu_to_gpu]"}
    outcome, reason = _promises(document)["copy-bandwidth[gpu_to_gpu]"]
    missing = ", ".join(f"GPU{a}->GPU{b}" for a in range(4) for b in range(4) if a != b and (a, b) != (0, 1))
    assert outcome == "not checked"
    assert reason == (f"gpu_to_gpu: no row for {missing} (1 of the 12 the profile's 4 GPUs promise were measured) "
                      f"[{bundle / 'bandwidth.json'}]")


def test_collectives_on_two_ranks_do_not_show_a_four_gpu_promise(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, X4)
    two_ranks = json.loads((ACCEPTANCE / "bandwidth.json").read_text(encoding="utf-8"))["collectives"]
    # DERIVED: the four-GPU recording given the 2x H200's torch.distributed collectives (world size 2)
    edit_json(bundle / "bandwidth.json", lambda d: d.update(collectives=two_ranks))
    code, document = replay(pytester, "h200-nvswitch-x4", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    unchecked = _not_passed(document)
    assert set(unchecked) == {f"collective-bandwidth[{p}]" for p in
                              ("all_reduce-1MiB", "all_reduce-256MiB", "all_reduce-1GiB", "all_reduce-4GiB",
                               "sendrecv-1GiB")}
    outcome, reason = unchecked["collective-bandwidth[all_reduce-1GiB]"]
    assert outcome == "not checked"
    # the nccl-tests test of the same promise finds no all_reduce_perf output: both reasons are given
    assert reason.startswith("all_reduce at 1.00 GiB: measured on 2 ranks; the profile promises 4 "
                             "[torch.distributed nccl]")


def test_nccl_tests_on_two_gpus_do_not_show_a_four_gpu_promise(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, X4)
    # DERIVED: the torch.distributed collectives taken out, the 2x H200's nccl-tests log put in
    edit_json(bundle / "bandwidth.json", lambda d: d.update(collectives=None))
    shutil.copy(NCCL_TESTS_LOG, bundle / NCCL_TESTS_LOG.name)
    code, document = replay(pytester, "h200-nvswitch-x4", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    outcome, reason = _promises(document)["collective-bandwidth[all_reduce-4GiB]"]
    assert outcome == "not checked"
    assert ("all_reduce at 4.00 GiB: run 1: measured on 2 ranks; the profile promises 4; run 2: measured on 2 ranks; "
            "the profile promises 4 [nccl-tests all_reduce_perf]") in reason
    outcome, reason = _promises(document)["collective-bandwidth[sendrecv-1GiB]"]
    assert outcome == "not checked" and "sendrecv at 1.00 GiB: measured on 2 ranks; the profile promises 4" in reason


# --- 2. nccl-tests: every run of the log -------------------------------------------------------------------------


def _acceptance_with_nccl_tests(pytester: pytest.Pytester) -> Path:
    """DERIVED: the accepted 2x H200 bundle with its torch.distributed collectives taken out and the same
    machine class's nccl-tests 2.19.6 log (two all_reduce_perf runs, one sendrecv_perf) put in: nccl-tests alone
    judges the collective promises."""
    bundle = copy_bundle(pytester, ACCEPTANCE)
    edit_json(bundle / "bandwidth.json", lambda d: d.update(collectives=None))
    shutil.copy(NCCL_TESTS_LOG, bundle / NCCL_TESTS_LOG.name)
    return bundle


def test_control_nccl_tests_log_of_two_runs_is_accepted(pytester: pytest.Pytester):
    code, document = replay(pytester, "h200-nvswitch-x2", _acceptance_with_nccl_tests(pytester))
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")
    check = next(c for c in document["checks"] if c["subject"] == "all_reduce 4GiB")
    # both runs judged (347.17 and 346.14 GB/s); the lower binds
    assert [r["busbw_gbps"] for r in check["found"]["runs"]] == [347.17, 346.14]
    assert check["found"]["busbw_gbps"] == 346.14
    # sendrecv_perf printed its 64 MiB row twice, alike: one measurement, not an ambiguity
    assert _promises(document)["collective-bandwidth[sendrecv-1GiB]"] == ("passed", "")


@pytest.mark.parametrize(("old", "new", "promise", "words"), [
    # DERIVED: 65,536 wrong elements out-of-place at 4 GiB in the FIRST run (the last run used to win)
    ("12371.3  347.17  347.17       0", "12371.3  347.17  347.17   65536", "all_reduce-4GiB",
     "run 1: 65536 wrong element(s) at 4.00 GiB (out-of-place): the collective computed wrong results"),
    # DERIVED: 12 wrong elements in-place at 1 GiB in the second run (only out-of-place was read)
    ("3226.33  332.81  332.81       0", "3226.33  332.81  332.81      12", "all_reduce-1GiB",
     "run 2: 12 wrong element(s) at 1.00 GiB (in-place): the collective computed wrong results"),
], ids=["first-run-out-of-place", "second-run-in-place"])
def test_wrong_elements_in_any_run_fail_the_promise(pytester: pytest.Pytester, old, new, promise, words):
    bundle = _acceptance_with_nccl_tests(pytester)
    _edit_text(bundle / NCCL_TESTS_LOG.name, old, new)
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (1, "REJECTED")
    assert set(_not_passed(document)) == {f"collective-bandwidth[{promise}]"}
    outcome, reason = _promises(document)[f"collective-bandwidth[{promise}]"]
    assert outcome == "failed" and words in reason


def test_a_nan_wrong_count_in_the_log_is_not_checked_not_rejected(pytester: pytest.Pytester):
    bundle = _acceptance_with_nccl_tests(pytester)
    # DERIVED: run 1's 256 MiB out-of-place #wrong printed as nan
    _edit_text(bundle / NCCL_TESTS_LOG.name, "892.74  300.69  300.69       0", "892.74  300.69  300.69     nan")
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    unchecked = _not_passed(document)
    assert len(unchecked) == 5 and all(outcome == "not checked" for outcome, _ in unchecked.values())
    _, reason = unchecked["collective-bandwidth[all_reduce-256MiB]"]
    # the torch.distributed test of the same promise says the bundle holds none; the nccl-tests test names the line
    assert reason.endswith(f"holds no torch.distributed collective measurements; nccl-tests output that cannot be "
                           f"read: {NCCL_TESTS_LOG.name}: line 16: #wrong 'nan' is not a finite number")


def test_disagreeing_runs_are_not_checked(pytester: pytest.Pytester):
    bundle = _acceptance_with_nccl_tests(pytester)
    # DERIVED: run 2's 1 GiB row at half its bandwidth (time doubled with it), run 1 as measured
    _edit_text(bundle / NCCL_TESTS_LOG.name,
               "  1073741824     268435456     float     sum      -1  3238.89  331.52  331.52",
               "  1073741824     268435456     float     sum      -1  6477.78  165.76  165.76")
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    outcome, reason = _promises(document)["collective-bandwidth[all_reduce-1GiB]"]
    assert outcome == "not checked"
    assert "the runs disagree (run 2 below the threshold, the others not): run 2: busbw 165.8 GB/s < 312 GB/s" in reason


# --- 3. rows that are no measurement ----------------------------------------------------------------------------


def _all_reduce_row(data: dict, size: int) -> dict:
    return next(r for r in data["collectives"]["ops"]["all_reduce"] if r["size"] == size)


def test_control_the_two_gpu_bundle_is_accepted(pytester: pytest.Pytester):
    code, document = replay(pytester, "h200-nvswitch-x2", copy_bundle(pytester, ACCEPTANCE))
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")
    assert _promises(document)["collective-bandwidth[all_reduce-1MiB]"] == ("passed", "")


def _negative_time(data):
    _all_reduce_row(data, MIB)["time_us"] *= -1  # DERIVED: the 1 MiB time made negative (it passed 68 us)


def _wrong_null(data):
    _all_reduce_row(data, 256 * MIB)["wrong"] = None  # DERIVED: the wrong count of 256 MiB null


def _wrong_nan(data):
    _all_reduce_row(data, GIB)["wrong"] = math.nan  # DERIVED: NaN wrong elements (this was REJECTED)


def _two_rows(data):
    rows = data["collectives"]["ops"]["all_reduce"]
    # DERIVED: a second 4 GiB row, the 1 GiB figures under the 4 GiB size (the first row used to win)
    rows.append({**_all_reduce_row(data, GIB), "size": 4 * GIB, "count": GIB})


def _above_peak(data):
    row = _all_reduce_row(data, 4 * GIB)
    # DERIVED: 4 GiB at 600 GB/s busbw, time and algbw made to agree with it: above the 478.1 GB/s of 18 NVLinks
    row.update(busbw=600.0, algbw=600.0, time_us=4 * GIB / 600e3, time_us_slowest_rank=4 * GIB / 600e3)


@pytest.mark.parametrize(("edit", "promise", "reason"), [
    (_negative_time, "all_reduce-1MiB", "all_reduce at 1.00 MiB: size 1048576: time -17.09040030837059 us is not a "
                                        "time above 0"),
    (_wrong_null, "all_reduce-256MiB", "all_reduce at 256.00 MiB: its data was not checked for correctness (#wrong is "
                                       "N/A or null, or the old releases' largest deviation, not a count)"),
    (_wrong_nan, "all_reduce-1GiB", "all_reduce at 1.00 GiB: size 1073741824: #wrong nan is not a count of elements"),
    (_two_rows, "all_reduce-4GiB", "all_reduce at 4.00 GiB: 2 rows for 4294967296 B that disagree: which one was "
                                   "measured is ambiguous"),
    (_above_peak, "all_reduce-4GiB", "all_reduce at 4.00 GiB on 2 ranks: busbw 600.0 GB/s, 7158.3 us (125% of the "
                                     "478.1 GB/s NVLink 18 x 26.562 GB/s peak)"),
], ids=["negative-time", "wrong-null", "wrong-nan", "two-rows-for-one-size", "above-the-link-peak"])
def test_a_row_that_is_no_measurement_is_not_checked(pytester: pytest.Pytester, edit, promise, reason):
    bundle = copy_bundle(pytester, ACCEPTANCE)
    edit_json(bundle / "bandwidth.json", edit)
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    outcome, why = _promises(document)[f"collective-bandwidth[{promise}]"]
    assert outcome == "not checked" and why.startswith(reason), why
    if edit is _above_peak:
        assert "is above the 478.1 GB/s NVLink 18 x 26.562 GB/s peak: more than the links can carry" in why


def test_rows_printed_twice_alike_are_one_measurement(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, ACCEPTANCE)
    # DERIVED: the 1 GiB row written twice, alike (as nccl-tests repeats a line)
    edit_json(bundle / "bandwidth.json", lambda d: d["collectives"]["ops"]["all_reduce"].append(
        dict(_all_reduce_row(d, GIB))))
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")


def test_a_copy_above_the_link_peak_is_not_checked(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, ACCEPTANCE)

    def faster_than_nvlink(data):
        row = data["copy"]["gpu_to_gpu"][0]
        # DERIVED: GPU0->GPU1 at 900 GB/s, its time made to agree: above the 478.1 GB/s one direction can carry
        row.update(gbps=900.0, time_us=row["bytes"] / 900e3)

    edit_json(bundle / "bandwidth.json", faster_than_nvlink)
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    outcome, reason = _promises(document)["copy-bandwidth[gpu_to_gpu]"]
    assert outcome == "not checked"
    assert reason == (f"gpu_to_gpu [{bundle / 'bandwidth.json'}]: not judged: GPU0->GPU1 (p2p): 900.0 GB/s is above "
                      "the 478.1 GB/s NVLink 18 x 26.562 GB/s peak: more than the links can carry, an impossible "
                      "reading")


# --- 4. NVLink counters -------------------------------------------------------------------------------------------


def _samples_edit(edit):
    def apply(data):
        edit(data["samples"])
    return apply


def _last_one_byte_lower(samples):
    # DERIVED: the last read of GPU0 link 0 TX one byte below the read before it (this read as 59x the volume)
    samples[-1]["gpus"]["0"]["links"]["0"]["tx_bytes"] = samples[-2]["gpus"]["0"]["links"]["0"]["tx_bytes"] - 1


def _reversed(samples):
    samples.reverse()  # DERIVED: the eight reads in reverse order, times and all (this read as 233x)


def _packets(samples):
    for sample in samples:
        sample["units"] = "packets"  # DERIVED: a legacy counter set that counts packets


@pytest.mark.parametrize(("edit", "gpus", "reason"), [
    (_last_one_byte_lower, ("GPU0",), "sample 7 (t = 865.548 s): GPU0 link 0 TX went down from 270634950656 to "
                                      "270634950655 bytes with no counter reset recorded [{source}]"),
    (_reversed, ("GPU0", "GPU1"), "sample 1 (t = 865.521 s) is not later than sample 0 (t = 865.548 s): the samples "
                                  "are not in time order [{source}]; "),
    (_packets, ("GPU0", "GPU1"), "sample 0 (t = 865.281 s): the counters count 'packets', not bytes: the traffic in "
                                 "bytes is unknown [{source}]; "),
], ids=["last-sample-one-byte-lower", "samples-in-reverse-order", "units-packets"])
def test_counters_that_are_no_traffic_are_not_checked(pytester: pytest.Pytester, edit, gpus, reason):
    bundle = copy_bundle(pytester, ACCEPTANCE)
    edit_json(bundle / "nvlink-traffic.json", _samples_edit(edit))
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    # the GPUs whose counters are at fault: both promises of each (links and volume), the other GPU's stand
    assert set(_not_passed(document)) == {f"nvlink-traffic{kind}[{gpu}]" for kind in ("", "-volume") for gpu in gpus}
    outcome, why = _promises(document)["nvlink-traffic[GPU0]"]
    expected = reason.format(source=bundle / "nvlink-traffic.json")
    assert outcome == "not checked"
    assert why == expected if not expected.endswith("; ") else why.startswith(expected), why


def test_a_recorded_reset_is_honoured(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, ACCEPTANCE)

    def reset_before_the_last(samples):
        # DERIVED: counters reset between the last two reads, as recorded: the last read holds only what moved since
        before, last = samples[-2], samples[-1]
        for gpu, entry in last["gpus"].items():
            for link, count in entry["links"].items():
                for key in ("tx_bytes", "rx_bytes"):
                    count[key] -= before["gpus"][gpu]["links"][link][key]
        last["reset"] = True

    edit_json(bundle / "nvlink-traffic.json", _samples_edit(reset_before_the_last))
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")
    volume = next(c for c in document["checks"] if c["name"] == "nvlink-traffic-volume" and c["subject"] == "GPU0")
    assert volume["found"]["tx_ratio"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("value", [-1, "26850099200", 1e400])
def test_a_volume_that_is_no_byte_count_is_not_checked(pytester: pytest.Pytester, value):
    bundle = copy_bundle(pytester, ACCEPTANCE)
    # DERIVED: the all-reduce volume per rank replaced (-1 gave a negative ratio)
    edit_json(bundle / "nvlink-traffic.json", lambda d: d["workload"].update(allreduce_bytes_per_rank=value))
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert set(_not_passed(document)) == {"nvlink-traffic-volume[GPU0]", "nvlink-traffic-volume[GPU1]"}
    outcome, why = _promises(document)["nvlink-traffic-volume[GPU0]"]
    shown = {-1: "-1", "26850099200": "'26850099200'", 1e400: "inf"}[value]
    assert outcome == "not checked"
    assert why == f"allreduce_bytes_per_rank = {shown} is not a byte count above 0 [{bundle / 'nvlink-traffic.json'}]"
    assert _promises(document)["nvlink-traffic[GPU0]"] == ("passed", "")


# --- 5. RDMA --------------------------------------------------------------------------------------------------------


def test_control_the_roce_bundle(pytester: pytest.Pytester):
    code, document = replay(pytester, "a100-pcie-roce", copy_bundle(pytester, ROCE))
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert _promises(document)["ib-write-bw"] == ("passed", "")


@pytest.mark.parametrize(("old", "new", "reason"), [
    # DERIVED: the title of a bidirectional run (-b); 46.28 Gb/s both ways is 23.14 each, not 93 % one way
    ("RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test",
     "not the promised run: the run was bidirectional (both directions added up); the profile promises a one-way "
     "run (add -b to ib_write_bw.extra_args to promise both ways)"),
    ("RDMA_Write BW Test", "RDMA_Read BW Test",
     "not the promised run: the output is perftest's 'RDMA_Read BW Test'; the profile promises ib_write_bw "
     "(RDMA_Write)"),
    ("Device         : irdma0", "Device         : mlx5_0",
     "not the promised run: it ran on mlx5_0; the profile promises ib_write_bw on irdma0"),
    ("23.14              0.044138", "230.14             0.044138",
     "ib_write_bw irdma0: 230.14 Gb/s average at 64.00 KiB messages, 1324156 iterations, MTU 1024 (921% of 25 Gb/s) "
     "[{bundle}]: above the 25 Gb/s the port's line rate can carry: an impossible reading, not judged"),
], ids=["bidirectional", "rdma-read", "another-device", "above-line-rate"])
def test_perftest_output_that_is_not_the_promise_is_not_checked(pytester: pytest.Pytester, old, new, reason):
    bundle = copy_bundle(pytester, ROCE)
    _edit_text(bundle / "ib_write_bw.txt", old, new)
    code, document = replay(pytester, "a100-pcie-roce", bundle)
    # ib_write_bw was the one promise the control could check: now nothing is
    assert (code, document["summary"]["verdict"]) == (7, "NOT TESTED")
    outcome, why = _promises(document)["ib-write-bw"]
    source = str(bundle / "ib_write_bw.txt")
    assert outcome == "not checked"
    assert why == (reason.format(bundle=source) if "{bundle}" in reason else f"{source}: {reason}")


def test_a_bidirectional_run_promised_as_such_is_judged_both_ways(pytester: pytest.Pytester):
    bundle = copy_bundle(pytester, ROCE)
    # DERIVED: the run titled bidirectional, its figure both directions added up (23.14 Gb/s each way)
    _edit_text(bundle / "ib_write_bw.txt", "RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test")
    _edit_text(bundle / "ib_write_bw.txt", "23.14              0.044138", "46.28              0.044138")
    profile = _profile(pytester, "a100-roce-bidirectional", {"extends": "a100-pcie-roce", "rdma": {
        "devices": [{"name": "irdma0", "port": 1, "link_layer": "Ethernet", "rate": "25 Gb/s", "mtu": 1024}],
        "ib_write_bw": {"device": "irdma0", "peer": "10.100.100.1", "gid_index": 1, "size": "64 KiB",
                        "duration_s": 10, "extra_args": ["-R", "-b"], "min_fraction_of_rate": 0.9}}})
    code, document = replay(pytester, profile, bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert _promises(document)["ib-write-bw"] == ("passed", "")
    check = next(c for c in document["checks"] if c["name"] == "ib-write-bw")
    assert "(93% of 25 Gb/s in both directions)" in check["message"]


def _rdma_bw_bundle(pytester: pytest.Pytester, keep_ext: bool) -> tuple[Path, Path]:
    """DERIVED: the RoCE bundle's ib_write_bw client output as the suite's rdma-bw.json, with port counters read
    around it: the node_exporter fixture's mlx4_0 port 1 (tests/data/sysfs), its 32-bit port_xmit_data and
    port_rcv_data set to their top (2^32 - 1) before and after, its 64-bit counters_ext kept (rising by the bytes
    sent) or dropped; the output's device and the profile renamed to mlx4_0."""
    bundle = pytester.path / "rdma-bw-bundle"
    bundle.mkdir()
    text = (ROCE / "ib_write_bw.txt").read_text(encoding="utf-8").replace("irdma0", "mlx4_0")
    client = parse_perftest(text)
    (port,) = [p for d in discover_rdma(str(NODE_EXPORTER_SYS)) if d.name == "mlx4_0" for p in d.ports if p.port == 1]
    before = asdict(port)
    for name in ("port_xmit_data", "port_rcv_data"):
        before["counters"][name] = 2**32 - 1
    after = json.loads(json.dumps(before))
    sent_words = 65536 * 1324156 // 4
    if keep_ext:
        after["counters_ext"]["port_xmit_data_64"] += sent_words + 1000
        after["counters_ext"]["port_rcv_data_64"] += 1000
    else:
        before["counters_ext"] = after["counters_ext"] = None
    (bundle / "rdma-bw.json").write_text(json.dumps({
        "client": client, "client_output": text, "source": "ib_write_bw on the node",
        "counters": {"device": "mlx4_0", "port": 1, "before": before, "after": after}}), encoding="utf-8")
    profile = _profile(pytester, "mlx4-ib", {"extends": "a100-pcie-roce", "rdma": {
        "devices": [{"name": "mlx4_0", "port": 1, "rate": "25 Gb/s"}],
        "ib_write_bw": {"device": "mlx4_0", "size": "64 KiB", "min_fraction_of_rate": 0.9}}})
    return bundle, profile


def test_saturated_32_bit_port_counters_show_nothing(pytester: pytest.Pytester):
    bundle, profile = _rdma_bw_bundle(pytester, keep_ext=False)
    code, document = replay(pytester, profile, bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    assert _promises(document)["ib-write-bw"] == ("passed", "")
    assert _promises(document)["rdma-counters"] == ("not checked", (
        "mlx4_0 port 1: counters/port_rcv_data, counters/port_xmit_data read 4294967295, the top of a 32-bit counter, "
        "and no 64-bit extended counter (counters_ext/*_64) was recorded: a saturated counter shows no traffic "
        "either way"))


def test_saturated_32_bit_port_counters_read_through_the_64_bit_ones(pytester: pytest.Pytester):
    bundle, profile = _rdma_bw_bundle(pytester, keep_ext=True)
    code, document = replay(pytester, profile, bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")  # the port itself was not recorded
    assert _promises(document)["rdma-counters"] == ("passed", "")
    check = next(c for c in document["checks"] if c["name"] == "rdma-counters")
    assert check["found"]["tx_bytes"] == 65536 * 1324156 + 4000


# --- 6. gpufabric parse ... --reference / --line-rate ------------------------------------------------------------


def _parse(capsys, *argv) -> tuple[int, dict, list[str]]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err.splitlines()


def test_parse_perftest_above_the_line_rate_is_impossible(tmp_path, capsys):
    path = tmp_path / "ib_write_bw.txt"
    # DERIVED: the captured client output at 230.14 Gb/s
    path.write_text((ROCE / "ib_write_bw.txt").read_text(encoding="utf-8").replace(
        "23.14              0.044138", "230.14             0.044138"), encoding="utf-8")
    code, out, err = _parse(capsys, "parse", "perftest", path, "--line-rate", "25Gb/s")
    assert code == 0
    assert out["reference"]["judgements"][0]["verdict"] == "above line rate"
    assert err == ["RDMA_Write BW Test at 64 KiB: 230.14 Gb/s average, 921 % of the 25 Gb/s line rate: above the line "
                   "rate: more than the port can carry, an impossible reading (check --line-rate, and whether the run "
                   "was bidirectional)"]


def test_parse_nccl_tests_reference_flags_wrong_and_inconsistent_rows(tmp_path, capsys):
    path = tmp_path / NCCL_TESTS_LOG.name
    text = NCCL_TESTS_LOG.read_text(encoding="utf-8")
    # DERIVED: run 1's 256 MiB row with 7 wrong elements, run 2's 4 GiB time ten times its real 12408.1 us
    text = text.replace("892.74  300.69  300.69       0", "892.74  300.69  300.69       7", 1)
    text = text.replace(" 12408.1  346.14", "  124081  346.14", 1)
    path.write_text(text, encoding="utf-8")
    code, out, err = _parse(capsys, "parse", "nccl-tests", path, "--reference")
    assert code == 0
    verdicts = [(j["run"], j["size_bytes"], j["verdict"]) for j in out["reference"]["judgements"]]
    assert verdicts == [(1, 256 * MIB, "wrong results"), (1, 4 * GIB, "normal"), (2, 4 * GIB, "inconsistent"),
                        (3, 4 * GIB, "normal")]
    assert err[0] == ("all_reduce (run 1) at 256 MiB: wrong results: 7 wrong element(s) out-of-place: the collective "
                      "computed wrong results, whatever its speed")
    assert err[2].startswith("all_reduce (run 2) at 4 GiB: 346.1 GB/s busbw, 77 % of the NVLink peak of NVIDIA H200 "
                             "SXM 141GB (450 GB/s per direction): not a measurement to judge: size 4294967296 "
                             "out-of-place: busbw 346.14 GB/s disagrees with its time")


# --- 7. nvbandwidth and the bus factors -------------------------------------------------------------------------

NVB_H100 = DATA / "captures" / "public" / "nvbandwidth" / (
    "nvbandwidth-v0.4-h100-8gpu-d2d-read-ce-na-diagonal-root-prompt.txt")
H100X8 = {"gpus": {"count": 8, "model": "H100"}, "bandwidth": {"copy": {"gpu_to_gpu": {"min": "350 GB/s"}}}}


@pytest.mark.parametrize(("edit", "outcome", "reason"), [
    (None, "passed", ""),
    # DERIVED: GPU2->GPU5 printed N/A (370.38 GB/s in the capture): one pair of 56 missing
    (lambda t: t.replace("2    372.05    370.90       N/A    370.90    372.96    370.38",
                         "2    372.05    370.90       N/A    370.90    372.96       N/A"),
     "not checked", "gpu_to_gpu: no row for GPU2->GPU5 (55 of the 56 the profile's 8 GPUs promise were measured) "
                    "[nvbandwidth v0.4 device_to_device_memcpy_read_ce ({name})]"),
    # DERIVED: the output cut before its SUM line: the matrix is not known to be whole
    (lambda t: t.split("SUM ")[0], "not checked", "{name}: nvbandwidth's device_to_device_memcpy_read_ce is "
                                                 "incomplete, not a whole result"),
], ids=["control", "one-cell-na", "cut-before-sum"])
def test_nvbandwidth_that_does_not_cover_the_matrix_is_not_checked(pytester: pytest.Pytester, edit, outcome, reason):
    bundle = pytester.path / "their-outputs"
    bundle.mkdir()
    text = NVB_H100.read_text(encoding="utf-8")
    (bundle / NVB_H100.name).write_text(edit(text) if edit else text, encoding="utf-8")
    code, document = replay(pytester, _profile(pytester, "h100x8", H100X8), bundle)
    # the bundle holds nothing else of the machine (its GPU count and models are not checked either way): with the
    # copies not checked, nothing is
    assert (code, document["summary"]["verdict"]) == ((6, "INCOMPLETE") if edit is None else (7, "NOT TESTED"))
    # the copy suite's own test of the promise finds no bandwidth.json: its reason comes first
    own = "the bundle holds no bandwidth measurements (bandwidth.json or nccl-tests*.txt); " if edit else ""
    assert _promises(document)["copy-bandwidth[gpu_to_gpu]"] == (outcome, own + reason.format(name=NVB_H100.name))


def test_bus_factors_are_the_harness_own():
    """formats/nccl_tests.bus_factor holds the rows of both harnesses to nccl-tests' factors; the torch.distributed
    harness (a standalone script) spells out the same ones."""
    from pytest_gpufabric.formats.nccl_tests import bus_factor
    from pytest_gpufabric.workloads.collectives import OPS
    from pytest_gpufabric.workloads.collectives import bus_factor as harness_factor

    for op in OPS:
        for n in (1, 2, 3, 4, 8):
            assert bus_factor(op, n) == pytest.approx(harness_factor(op, n)), (op, n)
    assert bus_factor("all_reduce", None) is None and bus_factor("hypercube", 4) is None


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d["workload"].pop("steps"), "its workload lacks steps"),  # DERIVED: describe() read it unguarded
    (lambda d: d.update(interval_s="ten ms"), "could not convert string to float: 'ten ms'"),
], ids=["workload-without-steps", "interval-not-a-number"])
def test_a_recording_without_its_shape_is_one_message(tmp_path, edit, words):
    from pytest_gpufabric.errors import BundleError
    from pytest_gpufabric.fabric.bundle import load_nvlink_recording

    shutil.copy(ACCEPTANCE / "nvlink-traffic.json", tmp_path / "nvlink-traffic.json")
    edit_json(tmp_path / "nvlink-traffic.json", edit)
    with pytest.raises(BundleError) as info:
        load_nvlink_recording(tmp_path)
    assert str(info.value) == f"{tmp_path / 'nvlink-traffic.json'}: not a gpufabric NVLink recording ({words})"


# --- nccl-tests ranks whose bus id does not read are bound by their GPU name --------------------------------------

_RANK_BOARDS = ("device  0 [0000:00:06] NVIDIA H200", "device  1 [0000:00:07] NVIDIA H200")


@pytest.mark.parametrize(("boards", "words"), [
    # DERIVED: every device line's bus id printed as `[?]`, the GPU named an H100: another machine's run
    (("device  0 [?] NVIDIA H100 80GB HBM3", "device  1 [?] NVIDIA H100 80GB HBM3"),
     "rank 0 ran on [?] NVIDIA H100 80GB HBM3; this machine has NVIDIA H200"),
    # DERIVED: neither a bus id nor a GPU name on the device lines
    (("device  0 [?]", "device  1 [?]"),
     "rank 0's device line names neither a bus id it can be found at ([?]) nor a GPU"),
], ids=["h100-name", "no-name"])
def test_nccl_tests_ranks_without_a_bus_id_are_bound_by_name(pytester: pytest.Pytester, boards, words):
    bundle = _acceptance_with_nccl_tests(pytester)
    for old, new in zip(_RANK_BOARDS, boards, strict=True):
        _edit_text(bundle / NCCL_TESTS_LOG.name, old, new, count=3)
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (6, "INCOMPLETE")
    unchecked = _not_passed(document)
    assert {pid for pid in unchecked if pid.startswith("collective-bandwidth")} == {
        "collective-bandwidth[all_reduce-1MiB]", "collective-bandwidth[all_reduce-256MiB]",
        "collective-bandwidth[all_reduce-1GiB]", "collective-bandwidth[all_reduce-4GiB]",
        "collective-bandwidth[sendrecv-1GiB]"}
    outcome, reason = unchecked["collective-bandwidth[all_reduce-4GiB]"]
    assert outcome == "not checked"
    assert f"all_reduce at 4.00 GiB: run 1: {words}; run 2: {words} [nccl-tests all_reduce_perf]" in reason, reason


def test_nccl_tests_ranks_without_a_bus_id_on_this_machines_gpus_are_judged(pytester: pytest.Pytester):
    bundle = _acceptance_with_nccl_tests(pytester)
    # DERIVED: the bus ids printed as `[?]`, the GPU names this machine's
    for old in _RANK_BOARDS:
        _edit_text(bundle / NCCL_TESTS_LOG.name, old, old.replace(old[old.index("["):old.index("]") + 1], "[?]"), 3)
    code, document = replay(pytester, "h200-nvswitch-x2", bundle)
    assert (code, document["summary"]["verdict"]) == (0, "ACCEPTED")
