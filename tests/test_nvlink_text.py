"""The NVLink counter/error text parsers and `gpufabric parse nvlink` against real captures.

Every input is a real tool output (tests/data/captures, see its README.md) or a variant derived from one by a
string transformation marked ``# DERIVED:`` where it happens; nothing is typed in as if a tool had printed it.
Expected numbers are copied from the capture files, in the KiB nvidia-smi printed, times 1024.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpufabric.cli import EXIT_BAD_INPUT, main
from pytest_gpufabric.formats.counters import LEGACY, RAW, THROUGHPUT, link_deltas, summed_deltas
from pytest_gpufabric.formats.nvlink import (
    EMPTY_OUTPUT,
    parse_nvlink_any,
    parse_nvlink_counters,
    parse_nvlink_errors,
    parse_training_log_counters,
)
from pytest_gpufabric.units import KIB

DATA = Path(__file__).parent / "data"
CAPTURES = DATA / "captures"
H200 = CAPTURES / "h200-nvswitch-x2"
TITAN = CAPTURES / "titan-rtx-nvlink"
TITAN_SAMPLES = [TITAN / f"nvidia-smi-nvlink-g0.sample{i}.txt" for i in range(6)]
TRAIN_LOG = TITAN / "train-log-with-nvlink-g0.txt"
H100_EMPTY_STATUS = DATA / "bundles" / "h100-x1" / "nvidia-smi-nvlink-s.txt"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def titan_samples():
    return [parse_nvlink_counters(read(path), t_s=float(i)) for i, path in enumerate(TITAN_SAMPLES)]


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -g 0 (TITAN RTX pair, 2-link bridge)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", TITAN_SAMPLES, ids=lambda p: p.name)
def test_every_titan_sample_is_two_gpus_with_two_links_in_bytes(path):
    sample = parse_nvlink_counters(read(path), t_s=3.5)
    assert sample.kind == LEGACY and sample.units == "bytes" and sample.t_s == 3.5
    assert {gpu: sorted(links) for gpu, links in sample.gpus.items()} == {0: [0, 1], 1: [0, 1]}
    for links in sample.gpus.values():
        for count in links.values():
            assert count.tx_bytes > 0 and count.rx_bytes > 0
            assert count.tx_bytes % KIB == 0 and count.rx_bytes % KIB == 0  # KBytes x 1024


def test_kbytes_are_kib():
    sample = parse_nvlink_counters(read(TITAN_SAMPLES[1]))
    # "Link 0: Rx0: 3122868 KBytes, Tx0: 5010998 KBytes" under GPU 0
    assert sample.gpus[0][0].rx_bytes == 3122868 * 1024
    assert sample.gpus[0][0].tx_bytes == 5010998 * 1024
    # "Link 1: Rx0: 5011011 KBytes, Tx0: 3122745 KBytes" under GPU 1
    assert sample.gpus[1][1].rx_bytes == 5011011 * 1024
    assert sample.gpus[1][1].tx_bytes == 3122745 * 1024


def test_titan_counters_only_grow_during_the_training_run():
    samples = titan_samples()
    for before, after in zip(samples, samples[1:], strict=False):
        for gpu, links in after.gpus.items():
            for link, count in links.items():
                assert count.tx_bytes >= before.gpus[gpu][link].tx_bytes, (gpu, link, after.t_s)
                assert count.rx_bytes >= before.gpus[gpu][link].rx_bytes, (gpu, link, after.t_s)
        assert not any(d.reset for links in link_deltas(before, after).values() for d in links.values())
    total = summed_deltas(samples)
    # sample0 -> sample5 on GPU 0 link 0: Tx0 872359 -> 8837173 KBytes
    assert total[0][0].tx_bytes == (8837173 - 872359) * KIB


@pytest.mark.parametrize("path", TITAN_SAMPLES, ids=lambda p: p.name)
def test_a_bridge_delivers_what_the_other_side_sent(path):
    """GPU 1 receives on link n exactly what GPU 0 sent on link n: a bridge has no one else to talk to."""
    sample = parse_nvlink_counters(read(path))
    for link in (0, 1):
        assert sample.gpus[1][link].rx_bytes == sample.gpus[0][link].tx_bytes
        # The other direction may run ahead by a little: nvidia-smi reads GPU 0 first, and GPU 1 can send
        # between the two reads. sample3 shows it (GPU 0 Rx0 4320857, GPU 1 Tx0 4320859 KBytes).
        ahead = sample.gpus[1][link].tx_bytes - sample.gpus[0][link].rx_bytes
        assert 0 <= ahead <= 2 * KIB


def test_counter_set_1_is_read_like_set_0():
    text = read(TITAN_SAMPLES[2])
    # DERIVED: what `nvidia-smi nvlink -g 1` prints for counter set 1, from a set-0 capture
    set1 = text.replace("Rx0:", "Rx1:").replace("Tx0:", "Tx1:")
    assert parse_nvlink_counters(set1).gpus == parse_nvlink_counters(text).gpus


def test_two_counter_sets_in_one_read_are_refused():
    text = read(TITAN_SAMPLES[2])
    # DERIVED: only the first link line switched to set 1 (line 2)
    mixed = text.replace("Rx0:", "Rx1:", 1).replace("Tx0:", "Tx1:", 1)
    with pytest.raises(ValueError, match=r"line 3 .*counter set 0 after set 1"):
        parse_nvlink_counters(mixed)
    # DERIVED: Rx of set 1 beside Tx of set 0 on line 2
    with pytest.raises(ValueError, match=r"line 2 .*Rx of counter set 1 beside Tx of set 0"):
        parse_nvlink_counters(text.replace("Rx0:", "Rx1:", 1))


def test_counts_not_in_bytes_are_refused():
    # DERIVED: the unit word changed on line 2; only the byte unit is known to mean KiB
    text = read(TITAN_SAMPLES[0]).replace("KBytes", "Cycles", 1)
    with pytest.raises(ValueError, match=r"line 2 .*only byte counters .*-sc <set>bz"):
        parse_nvlink_counters(text)


# ---------------------------------------------------------------------------------------------------------
# A training log with -g 0 blocks between its own lines
# ---------------------------------------------------------------------------------------------------------


def test_training_log_gives_one_sample_per_block():
    samples = parse_training_log_counters(read(TRAIN_LOG))
    assert [(s.t_s, s.kind) for s in samples] == [(0.0, LEGACY), (1.0, LEGACY)]
    first, second = samples
    # after epoch 1, GPU 0: "Link 0: Rx0: 49020 KBytes, Tx0: 202616 KBytes", "Link 1: Rx0: 49007 ..., Tx0: 202610"
    assert (first.gpus[0][0].rx_bytes, first.gpus[0][0].tx_bytes) == (49020 * KIB, 202616 * KIB)
    assert (first.gpus[0][1].rx_bytes, first.gpus[0][1].tx_bytes) == (49007 * KIB, 202610 * KIB)
    # after epoch 2, GPU 1: "Link 0: Rx0: 445752 KBytes, Tx0: 98143 KBytes"
    assert (second.gpus[1][0].rx_bytes, second.gpus[1][0].tx_bytes) == (445752 * KIB, 98143 * KIB)
    delta = link_deltas(first, second)[0][0]
    assert (delta.tx_bytes, delta.rx_bytes, delta.reset) == ((445752 - 202616) * KIB, (98143 - 49020) * KIB, False)


def test_one_block_of_the_log_parses_alone_with_its_deeper_indent():
    lines = read(TRAIN_LOG).splitlines()
    block = "\n".join(lines[8:14])  # "GPU 0: ..." and its 6-space-indented links, then GPU 1
    assert block.startswith("GPU 0: TITAN RTX") and lines[9].startswith("      Link 0:")
    assert parse_nvlink_counters(block).gpus == parse_training_log_counters(read(TRAIN_LOG))[0].gpus


def test_log_blocks_printed_back_to_back_stay_two_samples():
    lines = read(TRAIN_LOG).splitlines()
    # DERIVED: lines 15-25 (test result, epoch 2) removed, so the second "GPU 0:" follows GPU 1's links
    joined = "\n".join(lines[:14] + lines[25:])
    assert [s.gpus for s in parse_training_log_counters(joined)] == [
        s.gpus for s in parse_training_log_counters(read(TRAIN_LOG))
    ]


def test_log_link_line_without_its_gpu_is_refused_with_its_line_number():
    lines = read(TRAIN_LOG).splitlines()
    # DERIVED: the header "GPU 0: ..." of the second block (line 26) dropped; its Link 0 is now line 26
    del lines[25]
    with pytest.raises(ValueError, match=r"training log line 26: a 'Link n: ...' line without a 'GPU n: ...'"):
        parse_training_log_counters("\n".join(lines))


def test_log_without_counters_is_refused():
    text = "\n".join(line for line in read(TRAIN_LOG).splitlines() if line.startswith(("Train", "Test")))
    with pytest.raises(ValueError, match="no 'GPU n: ...' block"):
        parse_training_log_counters(text)


def test_bad_counter_line_in_a_log_names_the_log_line():
    # DERIVED: a count on line 27 (second block, GPU 0 link 0) replaced by "?"
    text = read(TRAIN_LOG).replace("Rx0: 98143 KBytes", "Rx0: ? KBytes")
    with pytest.raises(ValueError, match=r"training log line 27 \(GPU 0 link 0\)"):
        parse_training_log_counters(text)


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -gt d / -gt r (2x H200 behind NVSwitch, 18 links each)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("nvidia-smi-nvlink-gt-d.idle.txt", THROUGHPUT),
        ("nvidia-smi-nvlink-gt-d.after-traffic.txt", THROUGHPUT),
        ("nvidia-smi-nvlink-gt-r.idle.txt", RAW),
        ("nvidia-smi-nvlink-gt-r.after-traffic.txt", RAW),
    ],
)
def test_h200_throughput_outputs_have_18_links_per_gpu(name, kind):
    sample = parse_nvlink_counters(read(H200 / name))
    assert sample.kind == kind
    assert {gpu: sorted(links) for gpu, links in sample.gpus.items()} == {0: list(range(18)), 1: list(range(18))}


def test_h200_data_counters():
    idle = parse_nvlink_counters(read(H200 / "nvidia-smi-nvlink-gt-d.idle.txt"))
    after = parse_nvlink_counters(read(H200 / "nvidia-smi-nvlink-gt-d.after-traffic.txt"))
    assert all(c.tx_bytes == 0 and c.rx_bytes == 0 for links in idle.gpus.values() for c in links.values())
    # "Link 0: Data Tx: 12120504 KiB" / "Link 0: Data Rx: 8061511 KiB" under GPU 0
    assert (after.gpus[0][0].tx_bytes, after.gpus[0][0].rx_bytes) == (12120504 * KIB, 8061511 * KIB)
    assert link_deltas(idle, after)[0][0].tx_bytes == 12120504 * KIB


def test_h200_every_payload_byte_sent_is_received_through_the_switch():
    """Through NVSwitch, GPU 0's link n is not GPU 1's link n; but each link's payload arrives whole on one
    link of the peer (0 -> 10, 17 -> 0, ...), so the per-link counts are the same numbers, shuffled."""
    after = parse_nvlink_counters(read(H200 / "nvidia-smi-nvlink-gt-d.after-traffic.txt"))
    gpu0, gpu1 = after.gpus[0], after.gpus[1]
    assert sorted(c.tx_bytes for c in gpu0.values()) == sorted(c.rx_bytes for c in gpu1.values())
    assert sorted(c.rx_bytes for c in gpu0.values()) == sorted(c.tx_bytes for c in gpu1.values())
    assert gpu0[0].tx_bytes == gpu1[10].rx_bytes and gpu0[0].tx_bytes != gpu1[0].rx_bytes


def test_h200_raw_counters_include_overhead():
    idle = parse_nvlink_counters(read(H200 / "nvidia-smi-nvlink-gt-r.idle.txt"))
    # "Link 0: Raw Tx: 33 KiB" / "Raw Rx: 150 KiB": protocol traffic while the data counters read 0
    assert (idle.gpus[0][0].tx_bytes, idle.gpus[0][0].rx_bytes) == (33 * KIB, 150 * KIB)
    raw = parse_nvlink_counters(read(H200 / "nvidia-smi-nvlink-gt-r.after-traffic.txt"))
    data = parse_nvlink_counters(read(H200 / "nvidia-smi-nvlink-gt-d.after-traffic.txt"))
    assert (raw.gpus[0][0].tx_bytes, raw.gpus[1][17].rx_bytes) == (14048617 * KIB, 14121043 * KIB)
    for gpu, links in data.gpus.items():
        for link, count in links.items():
            assert raw.gpus[gpu][link].tx_bytes >= count.tx_bytes and raw.gpus[gpu][link].rx_bytes >= count.rx_bytes


def test_data_and_raw_lines_in_one_output_are_refused():
    # DERIVED: GPU 0 link 1's Tx line (line 4) relabelled Raw
    text = read(H200 / "nvidia-smi-nvlink-gt-d.after-traffic.txt").replace("Link 1: Data Tx", "Link 1: Raw Tx", 1)
    with pytest.raises(ValueError, match=r"line 4 \(GPU 0 link 1\): a raw counter after throughput counters"):
        parse_nvlink_counters(text)


def test_a_link_with_one_direction_is_refused():
    lines = read(H200 / "nvidia-smi-nvlink-gt-d.idle.txt").splitlines()
    del lines[2]  # DERIVED: GPU 0 link 0's "Data Rx" line dropped (a truncated copy)
    with pytest.raises(ValueError, match=r"line 2 \(GPU 0 link 0\): no RX count"):
        parse_nvlink_counters("\n".join(lines))


def test_a_direction_twice_is_refused():
    lines = read(H200 / "nvidia-smi-nvlink-gt-d.idle.txt").splitlines()
    lines.insert(3, lines[1])  # DERIVED: GPU 0 link 0's "Data Tx" line repeated after its Rx line
    with pytest.raises(ValueError, match=r"line 4 \(GPU 0 link 0\): second TX count \(first on line 2\)"):
        parse_nvlink_counters("\n".join(lines))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (H200 / "nvidia-smi-nvlink-s.txt", r"line 2 \(GPU 0 link 0\): expected 'Rx0: .*got '26.562 GB/s'"),
        (H200 / "nvidia-smi-nvlink-e.txt", r"line 2 \(GPU 0 link 0\): expected .*got 'Replay Errors: 0'"),
        (H200 / "nvidia-smi-topo-m.txt", r"line 1: expected 'GPU n: <name>"),
        (TRAIN_LOG, r"line 1: expected 'GPU n: <name>.*Train Epoch"),
        (H100_EMPTY_STATUS, "empty output"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else "",
)
def test_counters_refuse_other_outputs(path, message):
    with pytest.raises(ValueError, match=message):
        parse_nvlink_counters(read(path))


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -e
# ---------------------------------------------------------------------------------------------------------


def test_h200_error_counters_are_all_zero():
    errors = parse_nvlink_errors(read(H200 / "nvidia-smi-nvlink-e.txt"))
    assert sorted(errors) == [0, 1]
    for links in errors.values():
        assert sorted(links) == list(range(18))
        assert all(counts == {"replay": 0, "recovery": 0, "crc": 0} for counts in links.values())


def test_other_error_names_are_snake_cased():
    # DERIVED: GPU 0 link 0's CRC line renamed and given a count
    text = read(H200 / "nvidia-smi-nvlink-e.txt").replace("Link 0: CRC Errors: 0", "Link 0: Data CRC Errors: 7", 1)
    assert parse_nvlink_errors(text)[0][0] == {"replay": 0, "recovery": 0, "data_crc": 7}


def test_error_count_that_is_not_a_number_is_refused():
    # DERIVED: line 3's count replaced by N/A
    text = read(H200 / "nvidia-smi-nvlink-e.txt").replace("Recovery Errors: 0", "Recovery Errors: N/A", 1)
    with pytest.raises(ValueError, match=r"line 3 \(GPU 0 link 0\): Recovery Errors is 'N/A'"):
        parse_nvlink_errors(text)


def test_errors_refuse_counters():
    with pytest.raises(ValueError, match=r"nvidia-smi nvlink -e line 2 .*expected '<Name> Errors: <n>'"):
        parse_nvlink_errors(read(TITAN_SAMPLES[0]))


# ---------------------------------------------------------------------------------------------------------
# parse_nvlink_any: the public JSON
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "kind"),
    [(path, LEGACY) for path in TITAN_SAMPLES]
    + [
        (H200 / "nvidia-smi-nvlink-gt-d.idle.txt", THROUGHPUT),
        (H200 / "nvidia-smi-nvlink-gt-d.after-traffic.txt", THROUGHPUT),
        (H200 / "nvidia-smi-nvlink-gt-r.idle.txt", RAW),
        (H200 / "nvidia-smi-nvlink-gt-r.after-traffic.txt", RAW),
        (H200 / "nvidia-smi-nvlink-s.txt", "status"),
        (H200 / "nvidia-smi-nvlink-e.txt", "errors"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_any_tells_the_kind_from_the_link_lines(path, kind):
    doc = parse_nvlink_any(read(path))
    assert doc["kind"] == kind and list(doc) == ["kind", "gpus"]
    assert json.loads(json.dumps(doc)) == doc  # string keys, JSON types only
    assert list(doc["gpus"]) == ["0", "1"]
    for entry in doc["gpus"].values():
        assert entry["name"] in ("TITAN RTX", "NVIDIA H200") and entry["uuid"].startswith("GPU-")
        assert all(isinstance(link, str) for link in entry["links"])


def test_any_counter_json_is_in_bytes():
    doc = parse_nvlink_any(read(H200 / "nvidia-smi-nvlink-gt-d.after-traffic.txt"))
    assert doc["gpus"]["0"]["links"]["0"] == {"tx_bytes": 12120504 * 1024, "rx_bytes": 8061511 * 1024}
    assert doc["gpus"]["0"]["uuid"] == "GPU-f4a88e74-3b9a-8ed9-7c3c-f149f7753384"


def test_any_status_json():
    doc = parse_nvlink_any(read(H200 / "nvidia-smi-nvlink-s.txt"))
    assert doc["gpus"]["1"]["links"]["17"] == {"active": True, "speed_gbps": 26.562}
    assert len(doc["gpus"]["1"]["links"]) == 18
    # DERIVED: GPU 0 link 3 shown as down, the way nvidia-smi -s prints an inactive link
    text = read(H200 / "nvidia-smi-nvlink-s.txt").replace("Link 3: 26.562 GB/s", "Link 3: <inactive>", 1)
    assert parse_nvlink_any(text)["gpus"]["0"]["links"]["3"] == {"active": False, "speed_gbps": None}


def test_any_errors_json():
    doc = parse_nvlink_any(read(H200 / "nvidia-smi-nvlink-e.txt"))
    assert doc["gpus"]["0"]["links"]["5"] == {"replay": 0, "recovery": 0, "crc": 0}


def test_any_refuses_empty_text_instead_of_guessing():
    for text in (read(H100_EMPTY_STATUS), "\n"):
        with pytest.raises(ValueError) as info:
            parse_nvlink_any(text)
        assert str(info.value) == EMPTY_OUTPUT
    assert EMPTY_OUTPUT == (
        "empty output: nothing to parse; `nvidia-smi nvlink -s` prints nothing on GPUs without NVLink"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nvidia-smi-nvlink-R.txt", r"line 2: the first link line 'Remote Device .* is not one of"),
        ("nvidia-smi-nvlink-p.txt", r"line 2: the first link line 'FFFFFFFF:FF:FF.0' is not one of"),
        ("nvidia-smi-nvlink-c.txt", r"line 2: `nvidia-smi nvlink -c` \(capabilities\) output is not read here"),
        ("nvidia-smi-topo-m.txt", r"no 'Link n: ...' line"),
    ],
)
def test_any_refuses_other_nvidia_smi_outputs(name, message):
    with pytest.raises(ValueError, match=message):
        parse_nvlink_any(read(H200 / name))


def test_any_refuses_a_training_log():
    with pytest.raises(ValueError, match=r"line 1: expected 'GPU n: <name>"):
        parse_nvlink_any(read(TRAIN_LOG))


# ---------------------------------------------------------------------------------------------------------
# gpufabric parse nvlink FILE
# ---------------------------------------------------------------------------------------------------------


def test_cli_prints_the_documented_json(capsys):
    assert main(["parse", "nvlink", str(TITAN_SAMPLES[1])]) == 0
    out = capsys.readouterr().out
    assert out.startswith('{\n  "kind": "legacy",\n  "gpus": {\n    "0": {')  # indent=2
    doc = json.loads(out)
    assert doc["kind"] == "legacy"
    assert doc["gpus"]["0"] == {
        "name": "TITAN RTX",
        "uuid": "GPU-fcf64522-1b85-33ad-46f1-26fbalad7f0c",  # as printed, "l" and all (not hex)
        "links": {
            "0": {"tx_bytes": 5010998 * 1024, "rx_bytes": 3122868 * 1024},
            "1": {"tx_bytes": 5011011 * 1024, "rx_bytes": 3122745 * 1024},
        },
    }
    assert doc["gpus"]["1"]["links"]["0"] == {"tx_bytes": 3122868 * 1024, "rx_bytes": 5010998 * 1024}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (H200 / "nvidia-smi-topo-m.txt", "not `nvidia-smi nvlink -g 0|-gt d|-gt r|-s|-e` output: "),
        (H100_EMPTY_STATUS, EMPTY_OUTPUT),
    ],
    ids=["topo", "empty"],
)
def test_cli_bad_input_is_one_line_and_exit_2(path, message, capsys):
    assert main(["parse", "nvlink", str(path)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"gpufabric: {path}: ") and message in captured.err
    assert len(captured.err.splitlines()) == 1
