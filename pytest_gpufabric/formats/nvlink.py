"""``nvidia-smi nvlink``: link status (``-s``), remotes (``-R``), counters (``-g``, ``-gt``) and errors (``-e``).

Why text: on Pascal to Ampere machines the only counters many users ever saw are the ones a delivery check or
a training script printed with ``nvidia-smi nvlink -g 0``, and on Hopper ``nvidia-smi nvlink -gt d`` is what a
support ticket carries. Parsing them into :class:`.counters.CounterSample` lets a recorded run be judged with
the same deltas (:func:`.counters.link_deltas`) as a live one.

Units: every count leaves this module in bytes. nvidia-smi prints KiB (``-gt``: "KiB"; ``-g``: "KBytes", which
is also 1024 bytes), and a value taken over unconverted would be off by 1024 in every report built on it.

Like every parser in :mod:`pytest_gpufabric.formats`, these functions read no files, run no tools, and raise
``ValueError`` naming the line and what was expected on anything that is not what the tool prints: a wrong file
must be a clear error, never an empty or shifted sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..units import KIB, NA, is_na, parse_gbps
from .counters import LEGACY, RAW, THROUGHPUT, CounterSample, LinkCount
from .gpu import NvLink
from .paste import ANSI, paste_noise

__all__ = [
    "EMPTY_OUTPUT",
    "parse_nvlink_any",
    "parse_nvlink_counters",
    "parse_nvlink_errors",
    "parse_nvlink_remote",
    "parse_nvlink_status",
    "parse_training_log_counters",
]

#: The message for empty text. Guessing a kind for it would be wrong: `nvidia-smi nvlink -s` on a GPU without
#: NVLink prints nothing (tests/data/bundles/h100-x1), and so does a failed capture.
EMPTY_OUTPUT = "empty output: nothing to parse; `nvidia-smi nvlink -s` prints nothing on GPUs without NVLink"

_COUNTERS_TOOL = "nvidia-smi nvlink -g/-gt"
_ERRORS_TOOL = "nvidia-smi nvlink -e"

#: ``-g 0`` (and ``-g 1``): one line per link with both directions of one counter set.
_LEGACY_LINE = re.compile(r"^Rx(\d+): (\d+) (\S+), Tx(\d+): (\d+) (\S+)$")
#: ``-gt d`` / ``-gt r``: one line per link and direction.
_THROUGHPUT_LINE = re.compile(r"^(Data|Raw) (Tx|Rx): (\d+) KiB$")
#: ``-e``: one line per link and error counter ("Replay Errors: 0", "CRC Errors: 0").
_ERROR_LINE = re.compile(r"^(.+?) Errors: (\S+)$")
#: ``-s``: a speed, or a link that is down or unknown.
_STATUS_VALUE = re.compile(r"^(?:\d+(?:\.\d+)?\s*[A-Za-z]+/s|<inactive>|N/A|<N/A>)$", re.IGNORECASE)

_KINDS_BY_WORD = {"Data": THROUGHPUT, "Raw": RAW}


_GPU_HEADER = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: (\S+)\))?\s*$")
_LINK_LINE = re.compile(r"^\s*Link (\d+): (.*?)\s*$")
_REMOTE = re.compile(r"^Remote Device ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+): Link (\d+)$")
#: ``-c``: "Link 0, P2P is supported: true"
_CAPABILITY_LINE = re.compile(r"^\s*Link \d+, ")
_ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)


def _gpu_blocks(text: str, tool: str) -> list[tuple[int, str, str | None, list[tuple[int, int, str]]]]:
    """Split per-GPU nvidia-smi nvlink output into (index, name, uuid, [(line number, link, value)]).

    What a person pastes around the output (the prompt and command line, a loop's banners between GPUs, ``...``
    where GPUs were left out: :func:`.paste.paste_noise`) is stepped over; any other line is an error."""
    blocks: list[tuple[int, str, str | None, list[tuple[int, int, str]]]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = ANSI.sub("", raw)
        if not line.strip() or paste_noise(line):
            continue
        m = _GPU_HEADER.match(line.strip())
        if m:
            blocks.append((int(m.group(1)), m.group(2), m.group(3), []))
            continue
        m = _LINK_LINE.match(line)
        if m and blocks:
            blocks[-1][3].append((lineno, int(m.group(1)), m.group(2)))
            continue
        if blocks and _ALL_INACTIVE.search(line):
            continue  # "NVML: Unable to retrieve NVLink information as all links are inActive"
        expected = "'GPU n: <name> (UUID: ...)'" if not blocks else "'Link n: ...' or 'GPU n: ...'"
        raise ValueError(f"{tool} line {lineno}: expected {expected}, got {line.strip()[:80]!r}")
    if not blocks:
        raise ValueError(f"{tool}: no 'GPU n: <name> (UUID: ...)' line; this does not look like its output")
    seen: set[int] = set()
    for index, *_ in blocks:
        if index in seen:
            raise ValueError(f"{tool}: GPU {index} appears twice")
        seen.add(index)
    return blocks


def parse_nvlink_status(text: str) -> dict[int, dict]:
    """Parse ``nvidia-smi nvlink -s``: per GPU index, {"name", "uuid", "links": [NvLink, ...]}.

    ``Link 3: <inactive>`` gives ``active=False`` (speed not recorded); ``26.562 GB/s`` gives ``active=True``
    with the speed; ``N/A`` gives ``NA`` for both. A GPU without link lines gets ``links == []``.
    """
    out: dict[int, dict] = {}
    if not text.strip():
        # What a GPU without NVLink prints: nothing at all (seen on the H100 PCIe, driver 580.159.04,
        # tests/data/bundles/h100-x1), exit code 0.
        return out
    for index, name, uuid, links in _gpu_blocks(text, "nvidia-smi nvlink -s"):
        records: list[NvLink] = []
        for lineno, link, value in links:
            if value.lower() == "<inactive>":
                records.append(NvLink(link=link, active=False))
            elif value in ("N/A", "<N/A>"):
                records.append(NvLink(link=link, active=NA, speed_gbps=NA))
            else:
                try:
                    speed = parse_gbps(value)
                except ValueError:
                    raise ValueError(
                        f"nvidia-smi nvlink -s line {lineno} (GPU {index} link {link}): expected a speed "
                        f"such as '26.562 GB/s' or '<inactive>', got {value!r}"
                    ) from None
                records.append(NvLink(link=link, active=speed > 0, speed_gbps=speed))
        out[index] = {"name": name, "uuid": uuid, "links": records}
    return out


def parse_nvlink_remote(text: str) -> dict[int, dict[int, str]]:
    """Parse ``nvidia-smi nvlink -R``: GPU index -> link -> remote PCI bus id.

    ``FFFFFFFF:FF:FF.0`` is what NVSwitch systems report (the peer is a switch, not a GPU); it is kept as
    printed. Inactive links print no remote and are left out.
    """
    out: dict[int, dict[int, str]] = {}
    for index, _name, _uuid, links in _gpu_blocks(text, "nvidia-smi nvlink -R"):
        remotes: dict[int, str] = {}
        for lineno, link, value in links:
            if value.lower() == "<inactive>":
                continue
            m = _REMOTE.match(value)
            if not m:
                raise ValueError(
                    f"nvidia-smi nvlink -R line {lineno} (GPU {index} link {link}): expected "
                    f"'Remote Device <pci bus id>: Link n', got {value!r}"
                )
            remotes[link] = m.group(1)
        out[index] = remotes
    return out


@dataclass
class _Counters:
    """What one counter output says, before it becomes a CounterSample: the kind, the counts, who the GPUs are."""

    kind: str
    gpus: dict[int, dict[int, LinkCount]] = field(default_factory=dict)
    names: dict[int, tuple[str, str | None]] = field(default_factory=dict)  # GPU -> (name, uuid)
    counter_set: int | None = None  # legacy only: the set number printed (Rx0/Tx0 or Rx1/Tx1)


def _parse_counters(text: str, tool: str) -> _Counters:
    """Read ``-g <set>`` or ``-gt d|r`` text; line numbers in errors are those of ``text``."""
    if not text.strip():
        raise ValueError(f"{tool}: {EMPTY_OUTPUT}")
    kind: str | None = None
    kind_line = 0
    counter_set: int | None = None
    gpus: dict[int, dict[int, LinkCount]] = {}
    names: dict[int, tuple[str, str | None]] = {}
    for index, name, uuid, links in _gpu_blocks(text, tool):
        names[index] = (name, uuid)
        seen: dict[int, dict[str, tuple[int, int]]] = {}  # link -> direction -> (bytes, line number)
        for lineno, link, value in links:
            where = f"{tool} line {lineno} (GPU {index} link {link})"
            legacy = _LEGACY_LINE.match(value)
            throughput = _THROUGHPUT_LINE.match(value)
            if legacy:
                rx_set, rx, rx_unit, tx_set, tx, tx_unit = legacy.groups()
                if rx_unit != "KBytes" or tx_unit != "KBytes":
                    raise ValueError(
                        f"{where}: counts in {rx_unit!r}/{tx_unit!r}; only byte counters (printed as KBytes, set "
                        f"with `nvidia-smi nvlink -sc <set>bz`) can be turned into bytes, got {value!r}"
                    )
                if rx_set != tx_set:
                    raise ValueError(f"{where}: Rx of counter set {rx_set} beside Tx of set {tx_set}: {value!r}")
                if counter_set is None:
                    counter_set = int(rx_set)
                elif int(rx_set) != counter_set:
                    raise ValueError(
                        f"{where}: counter set {rx_set} after set {counter_set}; one `-g` read prints one set"
                    )
                line_kind = LEGACY
                directions = {"rx": int(rx) * KIB, "tx": int(tx) * KIB}
            elif throughput:
                word, direction, kib = throughput.groups()
                line_kind = _KINDS_BY_WORD[word]
                directions = {direction.lower(): int(kib) * KIB}
            else:
                raise ValueError(
                    f"{where}: expected 'Rx0: <n> KBytes, Tx0: <n> KBytes' (-g) or 'Data|Raw Tx|Rx: <n> KiB' "
                    f"(-gt d|r), got {value!r}"
                )
            if kind is None:
                kind, kind_line = line_kind, lineno
            elif line_kind != kind:
                raise ValueError(
                    f"{where}: a {line_kind} counter after {kind} counters (line {kind_line}); "
                    "one output holds one kind"
                )
            for direction, count in directions.items():
                previous = seen.setdefault(link, {}).get(direction)
                if previous is not None:
                    raise ValueError(f"{where}: second {direction.upper()} count (first on line {previous[1]})")
                seen[link][direction] = (count, lineno)
        counts: dict[int, LinkCount] = {}
        for link, directions_seen in seen.items():
            missing = {"tx", "rx"} - set(directions_seen)
            if missing:
                lineno = min(line for _, line in directions_seen.values())
                raise ValueError(
                    f"{tool} line {lineno} (GPU {index} link {link}): no {'/'.join(sorted(missing)).upper()} "
                    "count for this link (truncated output?)"
                )
            counts[link] = LinkCount(tx_bytes=directions_seen["tx"][0], rx_bytes=directions_seen["rx"][0])
        gpus[index] = counts
    if kind is None:
        raise ValueError(f"{tool}: no 'Link n: ...' counter line (all links inactive?); nothing to count")
    return _Counters(kind=kind, gpus=gpus, names=names, counter_set=counter_set)


def parse_nvlink_counters(text: str, *, t_s: float = 0.0) -> CounterSample:
    """Parse one read of ``nvidia-smi nvlink -g 0`` (kind LEGACY) or ``-gt d`` / ``-gt r`` (THROUGHPUT / RAW).

    ``-g`` prints "Link 0: Rx0: 49020 KBytes, Tx0: 202616 KBytes". "KBytes" is the unit nvidia-smi prints
    when the counter set's control was set to bytes with ``nvidia-smi nvlink -sc 0bz``, and it means KiB
    (x1024), as the ``-gt`` output's "KiB" does. Counter set 1 (``-g 1``) prints Rx1/Tx1: either set is
    accepted, whichever appears, but one output must use one set. Counters in other units (cycles, packets)
    are refused: they are not bytes and nothing here may pretend they are.

    ``-gt d`` prints "Link 0: Data Tx: 12120504 KiB" and "... Data Rx: ..." (payload); ``-gt r`` "Raw Tx/Rx"
    (with protocol overhead). Every link needs both directions. ``t_s`` is the caller's clock at the read,
    since the text carries none. ValueError with the line number on anything else.
    """
    parsed = _parse_counters(text, _COUNTERS_TOOL)
    return CounterSample(t_s=t_s, kind=parsed.kind, gpus=parsed.gpus)


def _counter_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line index ranges of the runs of GPU header and link lines in a log.

    A run ends at any other line, or at a header naming a GPU the run already has (two reads printed back to
    back). A link line outside a run is an error: its GPU is unknown, and guessing one would misfile traffic.
    """
    blocks: list[tuple[int, int]] = []
    start: int | None = None
    seen: set[int] = set()
    for i, line in enumerate(lines):
        header = _GPU_HEADER.match(line.strip())
        if header:
            gpu = int(header.group(1))
            if start is not None and gpu in seen:
                blocks.append((start, i))
                start = None
            if start is None:
                start, seen = i, set()
            seen.add(gpu)
        elif _LINK_LINE.match(line):
            if start is None:
                raise ValueError(
                    f"training log line {i + 1}: a 'Link n: ...' line without a 'GPU n: ...' line before it "
                    f"(interleaved or truncated output?): {line.strip()[:80]!r}"
                )
        elif start is not None and _ALL_INACTIVE.search(line):
            continue
        elif start is not None:
            blocks.append((start, i))
            start = None
    if start is not None:
        blocks.append((start, len(lines)))
    return blocks


def parse_training_log_counters(text: str) -> list[CounterSample]:
    """The ``nvidia-smi nvlink -g 0`` (or ``-gt``) reads a training log printed between its own lines.

    One CounterSample per block of consecutive "GPU n:" / "Link n:" lines, in order; other lines ("Train
    Epoch ...", "Test set ...") are skipped. A block of GPU header lines without any link line is not a counter
    read (scripts print device lists too) and is skipped. The log has no clock, so ``t_s`` is the block's
    position (0.0, 1.0, ...): deltas between samples are right, rates per second are not. All blocks must be
    of one kind. ValueError, with the log's line number, on a counter block that does not parse.
    """
    lines = text.splitlines()
    samples: list[CounterSample] = []
    first_kind: tuple[str, int] | None = None
    for start, end in _counter_blocks(lines):
        if not any(_LINK_LINE.match(line) for line in lines[start:end]):
            continue
        # blank lines in front keep the line numbers in errors those of the log (_gpu_blocks skips them)
        parsed = _parse_counters("\n" * start + "\n".join(lines[start:end]), "training log")
        if first_kind is None:
            first_kind = (parsed.kind, start + 1)
        elif parsed.kind != first_kind[0]:
            raise ValueError(
                f"training log line {start + 1}: {parsed.kind} counters after {first_kind[0]} counters "
                f"(block at line {first_kind[1]}); samples of different kinds cannot be subtracted"
            )
        samples.append(CounterSample(t_s=float(len(samples)), kind=parsed.kind, gpus=parsed.gpus))
    if not samples:
        raise ValueError("training log: no 'GPU n: ...' block with 'Link n: ...' counter lines")
    return samples


def _error_key(name: str) -> str:
    """'Replay' -> 'replay', 'CRC' -> 'crc', 'Data CRC' -> 'data_crc'."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def _parse_errors(text: str) -> tuple[dict[int, dict[int, dict[str, int]]], dict[int, tuple[str, str | None]]]:
    if not text.strip():
        raise ValueError(f"{_ERRORS_TOOL}: {EMPTY_OUTPUT}")
    out: dict[int, dict[int, dict[str, int]]] = {}
    names: dict[int, tuple[str, str | None]] = {}
    for index, name, uuid, links in _gpu_blocks(text, _ERRORS_TOOL):
        names[index] = (name, uuid)
        per_link: dict[int, dict[str, int]] = {}
        for lineno, link, value in links:
            where = f"{_ERRORS_TOOL} line {lineno} (GPU {index} link {link})"
            m = _ERROR_LINE.match(value)
            if not m:
                raise ValueError(f"{where}: expected '<Name> Errors: <n>', got {value!r}")
            key = _error_key(m.group(1))
            if not m.group(2).isdigit():
                raise ValueError(f"{where}: {m.group(1)} Errors is {m.group(2)!r}, expected a count")
            counts = per_link.setdefault(link, {})
            if key in counts:
                raise ValueError(f"{where}: second '{m.group(1)} Errors' line for this link")
            counts[key] = int(m.group(2))
        out[index] = per_link
    return out, names


def parse_nvlink_errors(text: str) -> dict[int, dict[int, dict[str, int]]]:
    """Parse ``nvidia-smi nvlink -e``: GPU index -> link -> {"replay": n, "recovery": n, "crc": n}.

    Other "<Name> Errors: n" lines (other drivers, other generations) are kept under the snake-cased name
    ("Data CRC Errors" -> "data_crc") rather than refused: an error counter nobody knew about is still worth
    reporting. The counts are cumulative since boot or the last ``-re``, so judge their change over a test,
    not their value (FACTS.md of h200-nvswitch-x2: NVML's CRC_DATA read 9 at idle while ``-e`` said 0).
    """
    return _parse_errors(text)[0]


def _gpu_json(name: str | None, uuid: str | None, links: dict[str, dict]) -> dict:
    entry: dict = {}
    if name:
        entry["name"] = name
    if uuid:
        entry["uuid"] = uuid
    entry["links"] = links
    return entry


def _detect(text: str) -> str:
    """The kind of ``nvidia-smi nvlink`` output, from the shape of its first link line."""
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _LINK_LINE.match(line)
        if not m:
            continue
        value = m.group(2)
        legacy = _LEGACY_LINE.match(value)
        if legacy:
            return LEGACY
        throughput = _THROUGHPUT_LINE.match(value)
        if throughput:
            return _KINDS_BY_WORD[throughput.group(1)]
        if _ERROR_LINE.match(value):
            return "errors"
        if _STATUS_VALUE.match(value):
            return "status"
        raise ValueError(
            f"nvidia-smi nvlink line {lineno}: the first link line {value!r} is not one of `-g`, `-gt d|r`, "
            "`-s` or `-e` (-R, -p and -c are not parsed here)"
        )
    lines = list(enumerate(text.splitlines(), 1))
    capability = next((n for n, line in lines if _CAPABILITY_LINE.match(line)), None)
    if capability is not None:
        raise ValueError(
            f"nvidia-smi nvlink line {capability}: `nvidia-smi nvlink -c` (capabilities) output is not read here; "
            "expected the output of `nvidia-smi nvlink -g 0`, `-gt d`, `-gt r`, `-s` or `-e`"
        )
    first = next((line.strip() for _, line in lines if line.strip() and not paste_noise(line)), "")
    raise ValueError(
        f"nvidia-smi nvlink: no 'Link n: ...' line (first line is {first[:80]!r}); expected the output of "
        "`nvidia-smi nvlink -g 0`, `-gt d`, `-gt r`, `-s` or `-e`"
    )


def parse_nvlink_any(text: str) -> dict:
    """The public JSON of ``gpufabric parse nvlink FILE``, for whichever nvlink output ``text`` is.

    ``{"kind": "throughput"|"raw"|"legacy"|"status"|"errors", "gpus": {"0": {"name", "uuid", "links": {"0":
    ...}}}}`` with string keys. A link is ``{"tx_bytes", "rx_bytes"}`` (bytes, not KiB) for counters,
    ``{"active", "speed_gbps"}`` for ``-s`` (null where nvidia-smi says N/A, and ``speed_gbps`` null for an
    inactive link), and the error counts for ``-e``. "name"/"uuid" appear where the header line has them.

    The kind is told by the first link line's shape, so a file of one command cannot pass as another. Empty
    text raises ValueError (EMPTY_OUTPUT) instead of guessing "status": on a GPU without NVLink `-s` prints
    nothing, but so does a capture that failed, and an empty result would look like a checked machine.
    """
    if not text.strip():
        raise ValueError(EMPTY_OUTPUT)
    kind = _detect(text)
    gpus: dict[str, dict] = {}
    if kind == "status":
        for index, entry in parse_nvlink_status(text).items():
            links = {
                str(link.link): {
                    "active": None if is_na(link.active) else link.active,
                    "speed_gbps": None if link.speed_gbps is None or is_na(link.speed_gbps) else link.speed_gbps,
                }
                for link in entry["links"]
            }
            gpus[str(index)] = _gpu_json(entry["name"], entry["uuid"], links)
    elif kind == "errors":
        errors, names = _parse_errors(text)
        for index, per_link in errors.items():
            links = {str(link): dict(counts) for link, counts in per_link.items()}
            gpus[str(index)] = _gpu_json(*names[index], links)
    else:
        parsed = _parse_counters(text, _COUNTERS_TOOL)
        for index, per_link in parsed.gpus.items():
            links = {str(link): {"tx_bytes": c.tx_bytes, "rx_bytes": c.rx_bytes} for link, c in per_link.items()}
            gpus[str(index)] = _gpu_json(*parsed.names[index], links)
        kind = parsed.kind
    return {"kind": kind, "gpus": gpus}
