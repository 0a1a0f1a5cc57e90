"""Property-based fuzzing of every text parser and of the profile loader (hypothesis).

The contract under test: each parser, given ANY text, returns its documented result or raises its documented error
type (``ValueError`` for the nvidia-smi, nccl-tests, perftest and ibv_devinfo parsers, ``ProfileError`` for the
profile loader, nothing at all for the paste helpers). Any other exception (IndexError, KeyError,
TypeError, AttributeError, RecursionError, UnicodeError, ...) is a bug in the parser and fails the property; hypothesis
then shrinks it to a minimal input. Each minimal input found so far is pinned with ``@example`` so it stays a
regression test.

The texts are not only ``st.text()``: each parser is fed mutations of the real captures under
``tests/data/captures/`` (lines deleted, duplicated, swapped, cut; tokens replaced by other tokens of the captures,
by odd numbers such as ``1e309`` or by random text; pasted noise inserted: prompts, banners, NCCL INFO lines; tabs
and spaces exchanged; NUL, ``\\r``, unicode digits and very long lines inserted), "line soups" built from the
captures' lines, and random text. The profile loader gets mutated shipped profiles, as text (YAML syntax, anchors,
tags, huge numbers), as bytes (invalid UTF-8, UTF-16), and as documents (a value at a random path replaced with a
random JSON-ish value, keys deleted and added, ``extends`` set to random text or to a sibling file), each in its own
temporary directory.

Strings never hold lone surrogates: text read from a file (strictly decoded) cannot contain them.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_gpufabric.errors import ProfileError
from pytest_gpufabric.fabric.from_text import fabric_from_text
from pytest_gpufabric.fabric.ibv_devinfo import devices_from_ibv_devinfo, parse_ibv_devinfo
from pytest_gpufabric.fabric.model import Fabric
from pytest_gpufabric.formats.counters import CounterSample
from pytest_gpufabric.formats.nccl_tests import parse_nccl_tests, parse_nccl_tests_json
from pytest_gpufabric.formats.nvidia_smi_q import XmlInventory, parse_nvidia_smi_q_xml
from pytest_gpufabric.formats.nvlink import (
    parse_nvlink_any,
    parse_nvlink_counters,
    parse_nvlink_errors,
    parse_nvlink_remote,
    parse_nvlink_status,
    parse_training_log_counters,
)
from pytest_gpufabric.formats.paste import command_program, paste_noise
from pytest_gpufabric.formats.perftest import parse_perftest
from pytest_gpufabric.formats.topo import TopoMatrix, parse_topo_m
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.profile.model import Profile

# The whole file runs in well under a minute on 2 cores; derandomized (and without the example database) so that CI
# runs the same examples every time.
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                           HealthCheck.filter_too_much],
)
FEW = settings(FUZZ, max_examples=200)  # the slow ones: big captures, a file and a schema validation per example

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "data" / "captures"
PROFILES = ROOT / "profiles"


def _only(errors, fn, *args, **kwargs):
    """fn(*args) or None when it raised one of ``errors``; any other exception propagates (and is the bug).

    A RecursionError is raised again from here: where the recursion limit strikes depends on how deep the caller's
    stack already was, so hypothesis would otherwise see a different failure on every replay and call it flaky."""
    try:
        return fn(*args, **kwargs)
    except errors:
        return None
    except RecursionError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if "pytest_gpufabric" in f.filename] or frames
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} ({ours[-1].name})"
    # raised outside the handler, so that the RecursionError is not its context (hypothesis compares contexts too)
    raise AssertionError(f"{fn.__name__}: RecursionError, last frame of pytest_gpufabric: {where}")


def _read(*names: str) -> tuple[str, ...]:
    return tuple((CAPTURES / name).read_text(encoding="utf-8") for name in names)


def _public(folder: str, prefix: str = "") -> tuple[str, ...]:
    return tuple(p.read_text(encoding="utf-8") for p in sorted((CAPTURES / "public" / folder).glob(f"{prefix}*.txt")))


# --- the real outputs the mutations start from ---------------------------------------------------------------------

H200 = "h200-nvswitch-x2/"
TOPO = _read(H200 + "nvidia-smi-topo-m.txt", "titan-rtx-nvlink/nvidia-smi-topo-m.txt",
             "rtx-2080ti-pcie/nvidia-smi-topo-m.txt") + _public("nvidia-smi", "topo-")
NVLINK_STATUS = _read(H200 + "nvidia-smi-nvlink-s.txt") + _public("nvidia-smi", "nvlink-s") + _public(
    "nvidia-smi", "nvlink-status")
NVLINK_REMOTE = _read(H200 + "nvidia-smi-nvlink-R.txt") + _public("nvidia-smi", "nvlink-R")
NVLINK_COUNTERS = _read(
    H200 + "nvidia-smi-nvlink-gt-d.after-traffic.txt", H200 + "nvidia-smi-nvlink-gt-d.idle.txt",
    H200 + "nvidia-smi-nvlink-gt-r.after-traffic.txt", "titan-rtx-nvlink/nvidia-smi-nvlink-g0.sample0.txt",
    "titan-rtx-nvlink/nvidia-smi-nvlink-g0.sample1.txt")
NVLINK_ERRORS = _read(H200 + "nvidia-smi-nvlink-e.txt") + _public("nvidia-smi", "nvlink-e")
NVLINK_CAPABILITIES = _read(H200 + "nvidia-smi-nvlink-c.txt")
TRAINING_LOG = _read("titan-rtx-nvlink/train-log-with-nvlink-g0.txt")
NVLINK_ALL = NVLINK_STATUS + NVLINK_REMOTE + NVLINK_COUNTERS + NVLINK_ERRORS + NVLINK_CAPABILITIES + TRAINING_LOG
Q_XML_FULL = _read(H200 + "nvidia-smi-q-x.xml")[0]
NCCL = _read(H200 + "nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt") + _public("nccl-tests")
PERFTEST = _read("a100-pcie-roce-2node/ib_write_bw-client.txt", "a100-pcie-roce-2node/ib_write_bw-server.txt",
                 "ci-no-rdma/ib_write_bw-no-device.txt")
IBV_DEVINFO = _read("a100-pcie-roce-2node/ibv_devinfo-v.txt", "ci-no-rdma/ibv_devinfo-no-device.txt")
SHIPPED_TEXT = {p.stem: p.read_text(encoding="utf-8") for p in sorted(PROFILES.glob("*.yaml"))}
SHIPPED = {name: yaml.safe_load(text) for name, text in SHIPPED_TEXT.items()}


def _compact_q_xml(text: str) -> str:
    """The real -q -x document cut down to what the parser reads (same values, same nesting): small enough that
    a few mutations reach the values instead of drowning in the 50 KB of other elements."""
    root = ET.fromstring(text)
    kept = {"driver_version", "cuda_version", "gpu", "product_name", "uuid", "serial", "pci", "pci_bus_id",
            "pci_gpu_link_info", "pcie_gen", "max_link_gen", "current_link_gen", "link_widths", "max_link_width",
            "current_link_width", "fb_memory_usage", "total", "vbios_version", "ecc_mode", "current_ecc"}

    def prune(elem: ET.Element) -> None:
        for child in list(elem):
            if child.tag in kept:
                prune(child)
            else:
                elem.remove(child)

    prune(root)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


Q_XML = (Q_XML_FULL, _compact_q_xml(Q_XML_FULL))
ALL_CAPTURES = TOPO + NVLINK_ALL + (Q_XML[1],) + NCCL + PERFTEST + IBV_DEVINFO

# --- what gets spliced in ------------------------------------------------------------------------------------------

NUMBERS = ("1e309", "-1e309", "1e-400", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-0", "0", "-1", "00",
           "99999999999999999999999", "9" * 400, "9" * 4400, "0x1F", "1_000", "1.", ".5", "1e3", "+1", "²", "٣",
           "１２", "⅕", "N/A", "[N/A]", "<N/A>")
ODD = ("\x00", "\r", "\t", "\v", "\f", "\x1c", "\x1e", "\x85", "\u2028", "\u2029", "\ufeff", "\x1b[4m", "\x1b[0m",
       "\x1b[", "é", "😀", "\u0301", "ǅ", "İ", " ", "  ", ":", "::", "[", "]", "(", ")", "<", ">", "&", "&amp;",
       "&#0;", "&#xD800;", "#", "-", "/", "\\", "'", '"', "`", "X")
WORDS = ("GPU0", "GPU1", "GPU99", "GPU", "NIC0", "NIC", "mlx5_0", "X", "NV18", "NV", "SOC", "SYS", "PIX", "PXB",
         "PHB", "NODE", "PH0-115", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "Legend:", "NIC Legend:",
         "Link", "Link 0:", "GPU 0:", "(UUID:", "KiB", "KBytes", "Rx0:", "Tx1:", "Data", "Raw", "Tx", "Rx",
         "Errors:", "<inactive>", "GB/s", "Gb/sec", "MB/sec", "MiB/sec", "#bytes", "#iterations", "BW peak[Gb/sec]",
         "BW average[Gb/sec]", "MsgRate[Mpps]", "#wrong", "error", "time", "algbw", "busbw", "size", "count", "type",
         "redop", "root", "bytes", "N", "op", "res", "timestamp", "float", "sum", "hca_id:", "port:", "ports:",
         "gids:", "GID[", "active_mtu:", "active_width:", "active_speed:", "state:", "(4)", "<gpu>", "</gpu>",
         "<nvidia_smi_log>", "</nvidia_smi_log>", "<!DOCTYPE x>", "<![CDATA[", "]]>", "<?xml", "?>")
NOISE = ("$ nvidia-smi topo -m", "root@node17:~# sudo nvidia-smi nvlink -s -i 0", "> nvidia-smi topo --matrix",
         "(venv) user@host:~/x$ mpirun -np 8 ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 1",
         "$ ib_write_bw -d mlx5_0 --report_gbits", "for i in 0 1 2 3; do nvidia-smi nvlink -e -i $i; done",
         "=== GPU 0 ===", "-----", "#### node17", "...", "…", "[...]", "<snip>", "```", "```text", "~~~",
         "Legend:", "NIC Legend:", "  NIC0: mlx5_0", "  X    = Self",
         "GPU 0: NVIDIA H200 (UUID: GPU-4a1b9b4c-0000-0000-0000-000000000000)", "GPU 7: TITAN RTX", "GPU 0:",
         "\t Link 0: 26.562 GB/s", "\t Link 17: <inactive>", "Link 0: Rx0: 1 KBytes, Tx0: 2 KBytes",
         "         Link 0: Data Tx: 12120504 KiB", "    Link 1: Replay Errors: 0", "    Link 1: Data CRC Errors: N/A",
         "\t Link 0, P2P is supported: true", "NVML: Unable to retrieve NVLink information as all links are inActive",
         "\t Link 0: Remote Device 00000008:00:00.0: Link 1", "\t Link 0: Remote Device FFFFFFFF:FF:FF.0: Link 0",
         "node17:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
         "10-4-3-3:97095:97095 [1] enqueue.cc:215 NCCL WARN Cuda failure 'out of memory'",
         "[1,0]<stdout>:# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803",
         "Mon Jan 15 10:00:00 2024[1,3]<stderr>:warning", "0: #  Rank  0 Group  0 Pid   1308 on         vm device  0 "
         "[0000:00:06] NVIDIA H200", "# nThread 1 nGpus 2 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5",
         "# Collective test starting: all_reduce_perf", "# Collective test concluded: sendrecv_perf",
         "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
         "busbw  #wrong", "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
         "   bytes     N    type      op     time  algbw  busbw    res", "# Avg bus bandwidth    : -nan",
         "# Avg bus bandwidth    : 232.869", "# Out of bounds values : 0 OK",
         "   268435456      67108864     float     sum      -1   892.74  300.69  300.69       0   892.99  300.60  "
         "300.60       0", "        1048576        262144     float     sum      -1    21.95   47.77   47.77  "
         "N/A", "-" * 87, "                    RDMA_Write BW Test",
         "                    RDMA_Write Bidirectional BW Test",
         " Dual-port       : OFF\t\tDevice         : irdma0", " Mtu             : 1024[B]",
         " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
         " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
         " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]",
         " 65536      1324156          0.00               23.14              0.044138",
         " Local results:", " Remote results:", "Waiting for client to connect... *",
         "Conflicting CPU frequency values detected: 800.000000 != 3300.000000. CPU Frequency is not max.",
         " Did not detect devices", " If device exists, check if driver is up", "IB device mlx5_9 not found",
         "hca_id:\tirdma0", "\tport:\t1", "\t\tstate:\t\t\tPORT_ACTIVE (4)", "\t\tactive_mtu:\t\t1024 (3)",
         "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:b696:91ff:feec:a458, RoCE v2",
         "Failed to get IB devices list: Unknown error -38", "<gpu id=\"00000000:00:06.0\">", "</gpu>",
         "<fb_memory_usage><total>143771 MiB</total></fb_memory_usage>", "<max_link_width>16x</max_link_width>")
LONG = ("x" * 5000, "9" * 5000, " " * 5000, "\t" * 500, "GPU0\t" * 500, "Link 0: " * 300, "#" * 5000, "<a>" * 500,
        "-" * 5000)


def _tokens(texts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({m.group() for text in texts for m in re.finditer(r"\S+", text)}))


def _lines(texts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({line for text in texts for line in text.splitlines()}))


ALL_LINES = _lines(ALL_CAPTURES) + NOISE
_TAGS = tuple(sorted({m.group().lstrip("/") for m in re.finditer(r"(?<=<)/?[A-Za-z_][\w.-]*", Q_XML[0])})) + (
    "nvidia_smi_log", "gpu", "x", "/gpu", "/nvidia_smi_log", "!DOCTYPE", "?xml")
SPLICE = NUMBERS + ODD + WORDS


# --- mutations of real outputs -------------------------------------------------------------------------------------


def _index(draw, seq) -> int:
    return draw(st.integers(0, len(seq) - 1))


def _replacement(draw, tokens: tuple[str, ...]) -> str:
    return draw(st.one_of(st.sampled_from(tokens), st.sampled_from(SPLICE), st.text(max_size=12)))


def _random_line(draw, tokens: tuple[str, ...]) -> str:
    return draw(st.one_of(
        st.sampled_from(NOISE), st.sampled_from(ALL_LINES), st.sampled_from(LONG), st.text(max_size=60),
        st.lists(st.one_of(st.sampled_from(tokens), st.sampled_from(SPLICE)), max_size=12).map(
            lambda words: " ".join(words)),
    ))


def _mutate_line(draw, lines: list[str], fn) -> list[str]:
    if lines:
        i = _index(draw, lines)
        lines[i] = fn(lines[i])
    return lines


def _op_delete(draw, lines, tokens):
    if lines:
        del lines[_index(draw, lines)]
    return lines


def _op_duplicate(draw, lines, tokens):
    if lines:
        i = _index(draw, lines)
        lines.insert(i, lines[i])
    return lines


def _op_swap(draw, lines, tokens):
    if lines:
        i, j = _index(draw, lines), _index(draw, lines)
        lines[i], lines[j] = lines[j], lines[i]
    return lines


def _op_block(draw, lines, tokens):
    """Delete, repeat or move a run of lines (a cut header, two reads printed back to back, a row out of place)."""
    if not lines:
        return lines
    i, j = sorted((_index(draw, lines), _index(draw, lines) + 1))
    block = lines[i:j]
    how = draw(st.sampled_from(["delete", "repeat", "move", "head", "tail"]))
    if how == "delete":
        return lines[:i] + lines[j:]
    if how == "repeat":
        return lines[:j] + block + lines[j:]
    if how == "head":
        return lines[:j]
    if how == "tail":
        return lines[i:]
    rest = lines[:i] + lines[j:]
    k = draw(st.integers(0, len(rest)))
    return rest[:k] + block + rest[k:]


def _op_token(draw, lines, tokens):
    """Replace one whitespace-separated token of a line with another token, an odd number or random text."""
    if not lines:
        return lines
    i = _index(draw, lines)
    found = list(re.finditer(r"\S+", lines[i]))
    if found:
        m = found[_index(draw, found)]
        lines[i] = lines[i][: m.start()] + _replacement(draw, tokens) + lines[i][m.end():]
    return lines


def _op_number(draw, lines, tokens):
    """Replace one number of a line with an odd one (1e309, nan, -0, unicode digits, 4400 digits...)."""
    if not lines:
        return lines
    i = _index(draw, lines)
    found = list(re.finditer(r"\d+(?:\.\d+)?", lines[i]))
    if found:
        m = found[_index(draw, found)]
        lines[i] = lines[i][: m.start()] + draw(st.sampled_from(NUMBERS)) + lines[i][m.end():]
    return lines


def _op_insert_line(draw, lines, tokens):
    lines.insert(draw(st.integers(0, len(lines))), _random_line(draw, tokens))
    return lines


def _op_insert_char(draw, lines, tokens):
    """Splice odd characters into a line: NUL, CR, ANSI, unicode, a token."""
    if not lines:
        return [draw(st.sampled_from(ODD))]
    i = _index(draw, lines)
    at = draw(st.integers(0, len(lines[i])))
    piece = draw(st.one_of(st.sampled_from(ODD), st.sampled_from(SPLICE), st.characters()))
    lines[i] = lines[i][:at] + piece + lines[i][at:]
    return lines


def _op_cut_line(draw, lines, tokens):
    """A line cut at the left or at the right (a terminal that was too narrow, a paste that missed a bit)."""
    if not lines:
        return lines
    i = _index(draw, lines)
    at = draw(st.integers(0, len(lines[i])))
    lines[i] = lines[i][:at] if draw(st.booleans()) else lines[i][at:]
    return lines


def _op_whitespace(draw, lines, tokens):
    """Tabs to spaces or spaces to tabs, indent, strip, on one line or all."""
    how = draw(st.sampled_from(["expandtabs", "tab1", "tabs", "indent", "strip", "double"]))
    fn = {
        "expandtabs": lambda s: s.expandtabs(draw(st.sampled_from([1, 2, 4, 8]))),
        "tab1": lambda s: s.replace("\t", " "),
        "tabs": lambda s: re.sub(r" {2,}", "\t", s),
        "indent": lambda s: draw(st.sampled_from(["  ", "\t", "    ", " "])) + s,
        "strip": str.strip,
        "double": lambda s: s.replace(" ", "  "),
    }[how]
    if draw(st.booleans()):
        return [fn(line) for line in lines]
    return _mutate_line(draw, lines, fn)


def _op_numbers_all(draw, lines, tokens):
    """Replace every k-th number of the text with one odd number: reaches the few values a parser converts."""
    odd, step = draw(st.sampled_from(NUMBERS)), draw(st.integers(1, 4))
    count = 0

    def swap(m: re.Match) -> str:
        nonlocal count
        count += 1
        return odd if count % step == 0 else m.group()

    return [re.sub(r"\d+(?:\.\d+)?", swap, line) for line in lines]


def _op_token_all(draw, lines, tokens):
    """Replace every occurrence of one token of the text with another token, an odd value or random text."""
    found = sorted({m.group() for line in lines for m in re.finditer(r"\S+", line)})
    if not found:
        return lines
    old, new = draw(st.sampled_from(found)), _replacement(draw, tokens)
    return [re.sub(rf"(?<!\S){re.escape(old)}(?!\S)", lambda _: new, line) for line in lines]


def _op_case(draw, lines, tokens):
    fn = draw(st.sampled_from([str.upper, str.lower, str.swapcase]))
    return _mutate_line(draw, lines, fn)


def _op_long(draw, lines, tokens):
    return _mutate_line(draw, lines, lambda s: s + draw(st.sampled_from(LONG)))


_KEY = re.compile(r"(?<![^\s])[A-Za-z_#][\w .#\[\]-]*?:(?=\s|$)")
_TAG = re.compile(r"(?<=<)/?[A-Za-z_][\w.-]*")


def _op_key(draw, lines, tokens):
    """Give a ``key:`` of a line (ibv_devinfo, perftest's header, nvidia-smi's "GPU 0:" and "Link 0:") another key
    of the captures, or an XML tag another tag: the structure changes while the values stay real."""
    if not lines:
        return lines
    i = _index(draw, lines)
    found = list(_KEY.finditer(lines[i])) + list(_TAG.finditer(lines[i]))
    if found:
        m = found[_index(draw, found)]
        pool = [t for t in tokens + WORDS if t.endswith(":")] if m.group().endswith(":") else _TAGS
        lines[i] = lines[i][: m.start()] + draw(st.sampled_from(pool)) + lines[i][m.end():]
    return lines


def _op_value(draw, lines, tokens):
    """Replace what follows a line's ``key:`` (or an XML element's text) with a token, an odd value or random text."""
    if not lines:
        return lines
    i = _index(draw, lines)
    m = _KEY.search(lines[i]) or re.search(r">(?=[^<]*<)", lines[i])
    if m:
        end = lines[i].find("<", m.end()) if m.group().startswith(">") else len(lines[i])
        value = draw(st.one_of(st.sampled_from(tokens), st.sampled_from(SPLICE), st.text(max_size=12)))
        lines[i] = lines[i][: m.end()] + draw(st.sampled_from(["", " ", "\t"])) + value + lines[i][end:]
    return lines


OPS = (_op_key, _op_key, _op_value, _op_value, _op_delete, _op_duplicate, _op_swap, _op_block, _op_token, _op_token,
       _op_number, _op_numbers_all, _op_token_all, _op_insert_line, _op_insert_line, _op_insert_char, _op_cut_line,
       _op_whitespace, _op_case, _op_long)


@st.composite
def mutated(draw, seeds: tuple[str, ...], tokens: tuple[str, ...]) -> str:
    """A real output (or a window of it) with 0 to 8 mutations (mostly few), joined with \\n, \\r\\n or \\r,
    possibly cut at any character."""
    lines = draw(st.sampled_from(seeds)).splitlines()
    if lines and draw(st.booleans()):  # its first lines and a window of the rest: mutations then hit what is left
        head, start = draw(st.integers(0, 3)), _index(draw, lines)
        lines = lines[:head] + lines[max(start, head) : max(start, head) + draw(st.integers(1, 20))]
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3, 4, 6, 8]))):
        lines = draw(st.sampled_from(OPS))(draw, lines, tokens)
    sep = draw(st.sampled_from(["\n", "\n", "\n", "\r\n", "\r"]))
    text = sep.join(lines) + draw(st.sampled_from(["", sep, sep * 3]))
    if draw(st.integers(0, 4)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


def texts(*seeds: str) -> st.SearchStrategy[str]:
    """Mostly mutations of ``seeds``, also line soups of the seeds' and the other captures' lines, and random text."""
    tokens = _tokens(seeds)
    own = _lines(seeds)
    line = st.one_of(st.sampled_from(own), st.sampled_from(ALL_LINES), st.sampled_from(NOISE), st.text(max_size=40))
    soup = st.lists(line, max_size=25).map("\n".join)
    return st.one_of(
        mutated(seeds, tokens), mutated(seeds, tokens), mutated(seeds, tokens), mutated(seeds, tokens),
        soup, mutated(ALL_CAPTURES, tokens), st.text(), st.text(alphabet="GPU0123 \t\n:XNV-SYSLinkTxRx#.K"),
    )


def _json_ok(value) -> None:
    """What the parsers call "the public JSON" must go through json.dumps."""
    json.dumps(value)


# --- nvidia-smi topo -m --------------------------------------------------------------------------------------------


@FUZZ
@given(texts(*TOPO))
def test_fuzz_parse_topo_m(text):
    topo = _only(ValueError, parse_topo_m, text)
    if topo is not None:
        assert isinstance(topo, TopoMatrix)
        assert "GPU0" in topo.devices
        topo.gpus, topo.nics  # noqa: B018
        _json_ok(topo.to_json())


# --- nvidia-smi nvlink ---------------------------------------------------------------------------------------------


@FUZZ
@given(texts(*NVLINK_STATUS))
def test_fuzz_parse_nvlink_status(text):
    out = _only(ValueError, parse_nvlink_status, text)
    if out is not None:
        assert isinstance(out, dict)


@FUZZ
@given(texts(*NVLINK_REMOTE))
def test_fuzz_parse_nvlink_remote(text):
    out = _only(ValueError, parse_nvlink_remote, text)
    if out is not None:
        assert isinstance(out, dict)


@FUZZ
@given(texts(*NVLINK_COUNTERS))
def test_fuzz_parse_nvlink_counters(text):
    out = _only(ValueError, parse_nvlink_counters, text)
    if out is not None:
        assert isinstance(out, CounterSample)


@FUZZ
@given(texts(*NVLINK_ERRORS))
def test_fuzz_parse_nvlink_errors(text):
    out = _only(ValueError, parse_nvlink_errors, text)
    if out is not None:
        assert isinstance(out, dict)


@FUZZ
@given(texts(*TRAINING_LOG, *NVLINK_COUNTERS))
def test_fuzz_parse_training_log_counters(text):
    out = _only(ValueError, parse_training_log_counters, text)
    if out is not None:
        assert out and all(isinstance(sample, CounterSample) for sample in out)


@FUZZ
@given(texts(*NVLINK_ALL))
def test_fuzz_parse_nvlink_any(text):
    out = _only(ValueError, parse_nvlink_any, text)
    if out is not None:
        assert set(out) == {"kind", "gpus"}
        _json_ok(out)


# --- nvidia-smi -q -x ----------------------------------------------------------------------------------------------


@st.composite
def mutated_xml(draw) -> str:
    """The real -q -x document, still well-formed, with elements deleted, repeated, renamed or moved and their text
    replaced (by odd numbers, other values of the document, random text): reaches the value parsing, which most
    line-level mutations of XML never do."""
    root = ET.fromstring(draw(st.sampled_from(Q_XML[1:] * 3 + Q_XML[:1])))
    values = sorted({e.text.strip() for e in root.iter() if e.text and e.text.strip()})
    for _ in range(draw(st.integers(1, 6))):
        parents = [(p, c) for p in root.iter() for c in p]
        parent, elem = draw(st.sampled_from(parents))
        op = draw(st.sampled_from(["text", "text", "numbers", "numbers", "delete", "repeat", "rename", "hoist", "attr",
                                   "empty"]))
        if op == "numbers":  # one odd number in place of every k-th number of every element's text
            odd, step = draw(st.sampled_from(NUMBERS)), draw(st.integers(1, 3))
            for i, e in enumerate(e for e in root.iter() if e.text and re.search(r"\d", e.text)):
                if i % step == 0:
                    e.text = re.sub(r"\d+(?:\.\d+)?", lambda _, odd=odd: odd, e.text)
        elif op == "text":
            elem.text = draw(st.one_of(st.sampled_from(NUMBERS), st.sampled_from(values), st.sampled_from(SPLICE),
                                       st.text(max_size=12), st.sampled_from(NUMBERS).map(lambda n: n + " MiB"),
                                       st.sampled_from(NUMBERS).map(lambda n: n + "x")))
        elif op == "delete":
            parent.remove(elem)
        elif op == "repeat":
            parent.append(copy.deepcopy(elem))
        elif op == "rename":
            elem.tag = draw(st.sampled_from(_TAGS[:-2]))
        elif op == "hoist":
            parent.remove(elem)
            root.append(elem)
        elif op == "attr":
            elem.set("id", draw(st.text(max_size=8)))
        else:
            elem.clear()
    return ET.tostring(root, encoding="unicode")


Q_XML_OVERFLOW = ("<nvidia_smi_log><gpu><fb_memory_usage><total>" + "9" * 309
                  + "</total></fb_memory_usage></gpu></nvidia_smi_log>")


@FEW
@example(Q_XML_OVERFLOW)  # OverflowError: units.parse_bytes rounds float("99...9") == inf to an int
@given(st.one_of(texts(*Q_XML), mutated_xml(), mutated_xml()))
def test_fuzz_parse_nvidia_smi_q_xml(text):
    out = _only(ValueError, parse_nvidia_smi_q_xml, text)
    if out is not None:
        assert isinstance(out, XmlInventory) and out.gpus


# --- fabric_from_text ----------------------------------------------------------------------------------------------


@FEW
@example(None, None, Q_XML_OVERFLOW)  # OverflowError, as in test_fuzz_parse_nvidia_smi_q_xml
@given(
    st.one_of(st.none(), texts(*TOPO)),
    st.one_of(st.none(), texts(*NVLINK_STATUS)),
    st.one_of(st.none(), st.sampled_from(Q_XML), texts(Q_XML[1]), mutated_xml()),
)
def test_fuzz_fabric_from_text(topo, nvlink_status, q_xml):
    out = _only(ValueError, fabric_from_text, topo, nvlink_status, q_xml)
    if out is not None:
        assert isinstance(out, Fabric)


# --- nccl-tests ----------------------------------------------------------------------------------------------------

OPS_GIVEN = st.one_of(st.none(), st.sampled_from(["all_reduce", "all_reduce_perf", "sendrecv_perf", "_perf", "",
                                                  "./build/x_test", "\\", "/"]), st.text(max_size=10))


@FEW
@given(texts(*NCCL), OPS_GIVEN)
def test_fuzz_parse_nccl_tests(text, op):
    runs = _only(ValueError, parse_nccl_tests, text, op)
    if runs is not None:
        assert runs and all(run["rows"] for run in runs)
        _json_ok(runs)


@FEW
@given(texts(*NCCL), OPS_GIVEN)
def test_fuzz_parse_nccl_tests_json(text, op):
    out = _only(ValueError, parse_nccl_tests_json, text, op)
    if out is not None:
        assert "runs" in out or "rows" in out
        _json_ok(out)


# --- perftest ------------------------------------------------------------------------------------------------------


@FUZZ
@given(texts(*PERFTEST))
def test_fuzz_parse_perftest(text):
    out = _only(ValueError, parse_perftest, text)  # NoRdmaDevice is a ValueError
    if out is not None:
        assert out["results"]
        _json_ok(out)


# --- ibv_devinfo ---------------------------------------------------------------------------------------------------


@FUZZ
@example("hca_id: a\nport: a")  # was: ValueError from int(), before ValueError was documented for `port:` lines
@example("hca_id: a\nport: 1\nactive_mtu: \u00b2 (1)")  # was: ValueError, "²".isdigit() but int("²") fails
@example("hca_id: a\nports: a\nport: 1")  # AttributeError: a `ports:` line replaced the device's port list
@example("hca_id: a\nport: 1\ngids: a\nGID[0]: 0")  # AttributeError: a `gids:` line replaced the port's GID list
@given(texts(*IBV_DEVINFO))
def test_fuzz_parse_ibv_devinfo(text):
    """Text without ``hca_id`` gives []; a ``port:`` line without a port number raises ValueError (documented)."""
    out = _only(ValueError, parse_ibv_devinfo, text)
    if out is not None:
        assert isinstance(out, list)
        _json_ok(out)


@FUZZ
@example("hca_id: a\nports: a")  # TypeError: devices_from_ibv_devinfo indexes the string as a port dict
@example("hca_id: a\nport: 1\ngids: a")  # TypeError in merge_ibv_devinfo: the string as a list of GID dicts
@example("hca_id: a\nport: 1\nactive_speed: 1 Gbps\nactive_width: \u00b2X")  # ValueError: int("²")
@given(texts(*IBV_DEVINFO))
def test_fuzz_devices_from_ibv_devinfo(text):
    """What a bundle with ibv_devinfo and no sysfs copy does with the text: parse (ValueError, documented), then build
    RdmaDevices from whatever parsed (documented to raise nothing)."""
    infos = _only(ValueError, parse_ibv_devinfo, text)
    if infos is not None:
        assert isinstance(devices_from_ibv_devinfo(infos), list)


# --- paste helpers -------------------------------------------------------------------------------------------------


@FUZZ
@given(st.one_of(st.sampled_from(ALL_LINES), st.sampled_from(NOISE), st.text(), texts(*NOISE)), st.booleans())
def test_fuzz_paste_helpers(line, banners):
    assert paste_noise(line, banners=banners) is None or isinstance(paste_noise(line, banners=banners), str)
    assert command_program(line) is None or isinstance(command_program(line), str)


# --- the profile loader --------------------------------------------------------------------------------------------

YAML_BITS = ("&a", "*a", "<<: *a", "!!binary", "!!str", "!!int", "!!python/object/apply:os.system", "!!set",
             "!!omap", "? ", "- ", "{", "}", "[", "]", "|", ">", "'", '"', "%YAML 1.1", "---", "...", ".nan", ".inf",
             "-.inf", "0x1F", "0o17", "0b101", "1:20:30", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "~", "null",
             "yes", "no", "on", "off", "=", "\t", "\\x00", '"\\0"', '"\\ud800"', '"\\x85"', "1e309", "1.0e+400",
             "9" * 4400, "99999999999999999999999", "GPU0", "GPU99", "NV18", "26.5 GB/s", "140 GiB", "25 Gb/s")


def _load(text_or_bytes, parent=None, parent_name: str = "base"):
    """load_profile on a file in a fresh temporary directory (plus a sibling ``parent_name``.yaml when given)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzzed.yaml"
        for target, content in ((path, text_or_bytes), (Path(tmp) / f"{parent_name}.yaml", parent)):
            if isinstance(content, bytes):
                target.write_bytes(content)
            elif content is not None:
                target.write_text(content, encoding="utf-8")
        profile = _only(ProfileError, load_profile, path)
        if profile is not None:
            _use(profile)
        return profile


def _use(profile: Profile) -> None:
    """A profile that loaded is one the plugin will use: reading it must not fail either."""
    assert isinstance(profile, Profile)
    profile.gpu_count, profile.gpu_model, profile.gpu_memory_bytes, profile.pcie, profile.ecc  # noqa: B018
    profile.matrix, profile.nics, profile.nvlink_min_speed_gbps, profile.rdma_devices  # noqa: B018
    if profile.gpu_count <= 64:  # without `pairs`, every pair of GPUs is visited: count 100000 never returns
        profile.pairs  # noqa: B018
    profile.collective_thresholds(), profile.copy_thresholds()  # noqa: B018


def yaml_texts() -> st.SearchStrategy[str]:
    seeds = tuple(SHIPPED_TEXT.values())
    tokens = _tokens(seeds) + YAML_BITS
    fragment = st.one_of(st.sampled_from(YAML_BITS), st.sampled_from(_lines(seeds)), st.text(max_size=15))
    # depths that either parse or are far past Python's recursion limit (a depth near the limit fails or not
    # depending on the caller's stack depth, which makes hypothesis call the failure flaky)
    nesting = st.tuples(st.sampled_from(["[", "{a: ", "- ", "[{a: "]), st.sampled_from([1, 10, 100, 600])).map(
        lambda t: "name: x\ngpus: " + t[0] * t[1])
    return st.one_of(
        mutated(seeds, tokens), mutated(seeds, tokens), mutated(seeds, tokens),
        st.lists(fragment, max_size=20).map(lambda parts: "\n".join(parts)),
        st.lists(fragment, max_size=20).map(lambda parts: " ".join(parts)),
        nesting, st.text(),
    )


@FEW
# Crashes found so far (see the module docstring of this file for the contract), minimal inputs:
@example("a: &a [*a]")  # RecursionError: loader._reject_non_string_keys recurses into the self-referencing list
@example("a: " + "1" * 4301)  # ValueError (int() digit limit) from yaml's constructor, not a ProfileError
@example("!!int")  # IndexError inside yaml's int constructor (an empty tagged scalar): found by CI's run of this test
@example("a: !!float")  # ValueError from yaml's float constructor
@example("[" * 600)  # RecursionError from yaml.safe_load (loader._read_yaml), not a ProfileError
@example("name: a\nextends: ~nosuchuser/")  # RuntimeError from Path.expanduser in loader.find_profile
@example("name: a\ngpus: {count: 1, memory: " + "9" * 309 + " B}")  # OverflowError: units.parse_bytes(inf)
@example("name: a\nextends: a\nmemory: {lms: [{}]}")  # KeyError 'threshold': loader._check_semantics, partial doc
@given(yaml_texts())
def test_fuzz_load_profile_text(text):
    _load(text)


@FEW
@example(b"\x80")  # UnicodeDecodeError from Path.read_text in loader._read_yaml, not a ProfileError
@given(st.one_of(
    st.tuples(yaml_texts(), st.binary(max_size=8), st.integers(0, 10_000)).map(
        lambda t: t[0].encode("utf-8")[: t[2]] + t[1] + t[0].encode("utf-8")[t[2]:]),
    st.tuples(st.sampled_from(tuple(SHIPPED_TEXT.values())), st.sampled_from(["utf-16", "utf-32", "latin-1",
                                                                               "utf-8-sig", "cp1252"])).map(
        lambda t: t[0].replace("#", "# é").encode(t[1], errors="replace")),
    st.binary(),
))
def test_fuzz_load_profile_bytes(data):
    _load(data)


# structured mutations of the shipped profiles

DOMAIN_VALUES = ("24 GiB", "0 GiB", "1e309 GiB", "9" * 400 + " GiB", "9" * 400 + " GB/s", "140 GiB", "26.5 GB/s",
                 "0 GB/s", "25 Gb/s", "40 us", "NV18", "X", "SYS", "GPU0", "0-63", "N/A", "", " ", "mlx5_0",
                 "InfiniBand", "all_reduce", "xid", "bfloat16", "titan-rtx-nvlink", "base", "fuzzed")
DOMAIN_KEYS = ("name", "extends", "gpus", "count", "memory", "topology", "matrix", "GPU0", "GPU1", "GPU99", "NIC0",
               "mlx5_0", "cpu_affinity", "nvlink", "min_speed", "pairs", "bandwidth", "collectives", "all_reduce",
               "sendrecv", "copy", "sweep", "rdma", "devices", "rate", "ib_write_bw", "min", "size", "lms",
               "threshold", "budget", "input", "health", "burn_in", "min_busbw", "max_time", "min_fraction_of_peak")
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(10**20, 10**60), st.floats(),
    st.text(max_size=20), st.sampled_from(DOMAIN_VALUES),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(DOMAIN_KEYS), st.text(max_size=8), st.integers(-3, 3),
                                  st.booleans(), st.none()), children, max_size=4),
    ),
    max_leaves=8,
)
EXTENDS = st.one_of(st.sampled_from(sorted(SHIPPED) + ["base", "base.yaml", "./base.yaml", "fuzzed", "fuzzed.yaml",
                                                       "../base.yaml", "~nosuchuser/x.yaml", "/", ".", "", "sub/",
                                                       "nosuch"]), st.text(max_size=20))


def _pick(draw, doc):
    """A container in ``doc`` and one of its keys or indices (None for an empty container)."""
    node, key = doc, None
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return node, None
        key = draw(st.sampled_from(keys))
        child = node[key]
        if not isinstance(child, (dict, list)) or draw(st.integers(0, 2)) == 0:
            return node, key
        node = child


@st.composite
def mutated_profile(draw, extends: bool = False) -> dict:
    """A shipped profile with 1 to 4 mutations; with ``extends``, one that extends a shipped profile (and is therefore
    validated without ``required`` before the merge)."""
    doc = copy.deepcopy(SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))])
    if extends:
        doc["extends"] = draw(st.sampled_from(sorted(SHIPPED)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["replace", "replace", "delete", "delete_everywhere", "empty", "add", "extends",
                                   "name"]))
        node, key = _pick(draw, doc)
        if op == "delete_everywhere":
            _delete_everywhere(doc, draw(st.sampled_from(sorted(_keys(doc), key=repr))))
        elif op == "empty" and key is not None and isinstance(node[key], (dict, list)):
            node[key] = type(node[key])()
        elif op == "extends" and not extends:
            doc["extends"] = draw(EXTENDS)
        elif op == "name":
            doc["name"] = draw(st.one_of(st.sampled_from(DOMAIN_VALUES), st.text(max_size=10)))
        elif op == "add" or key is None:
            if isinstance(node, dict):
                node[draw(st.one_of(st.sampled_from(DOMAIN_KEYS), st.text(max_size=8)))] = draw(VALUES)
            else:
                node.insert(draw(st.integers(0, len(node))), draw(VALUES))
        elif op == "delete":
            del node[key]
        else:
            node[key] = draw(VALUES)
    return doc


def _keys(node) -> set[str]:
    if isinstance(node, dict):
        return set(node).union(*(_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_keys(v) for v in node))
    return set()


def _delete_everywhere(node, key: str) -> None:
    """Delete ``key`` from every mapping in the document (a required key left out in every list item)."""
    if isinstance(node, dict):
        node.pop(key, None)
    for child in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        _delete_everywhere(child, key)


def _dump(doc) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@FEW
@example({"name": "a", "gpus": {"count": 1, "memory": "9" * 309 + " B"}}, None, "base")  # OverflowError, as above
@given(mutated_profile(), st.one_of(st.none(), mutated_profile()), st.sampled_from(["base", "other", "nosuch"]))
def test_fuzz_load_profile_document(doc, parent, parent_name):
    """A mutated shipped profile, next to an optional mutated sibling it may ``extends`` (or that extends it back)."""
    _load(_dump(doc), None if parent is None else _dump(parent), parent_name)


@FEW
@example({"name": "a", "extends": "titan-rtx-nvlink", "memory": {"lms": [{}]}})  # KeyError 'threshold', as above
@given(mutated_profile(extends=True))
def test_fuzz_load_profile_extends(doc):
    """A mutated profile that extends a shipped one: its own file is validated without ``required``."""
    _load(_dump(doc))


@FEW
@given(st.sampled_from(sorted(SHIPPED)), VALUES, st.sampled_from(["memory", "bandwidth", "rdma", "topology", "gpus",
                                                                  "nvlink", "pairs", "health", "burn_in"]))
def test_fuzz_load_profile_extends_section(base, value, section):
    """A profile that extends a shipped one is validated without ``required``: every section replaced by junk."""
    _load(_dump({"name": "fuzzed", "extends": base, section: value}))


@FUZZ
@example("~nosuchuser/p.yaml")  # RuntimeError from Path.expanduser in loader.find_profile
@given(st.one_of(EXTENDS, st.sampled_from([str(p) for p in sorted(PROFILES.glob("*.yaml"))]), st.text()))
def test_fuzz_load_profile_spec(spec):
    """What --gpu-profile passes on: a name or a path, as typed (paths are only read, never written)."""
    profile = _only(ProfileError, load_profile, spec)
    if profile is not None:
        _use(profile)
