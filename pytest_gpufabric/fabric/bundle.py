"""Replay bundles: recorded tool outputs of a real machine, judged later without the machine.

A bundle is a directory (or a .tar.gz of one) holding files with fixed names (docs/bundles.md lists them); any
subset that holds the topology works. When several files say the same thing, the tool's own text wins for the
matrix and affinity (it is what a customer sees printed), NVML wins for inventory and links (it holds more).
"""

from __future__ import annotations

import atexit
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import BundleError
from ..evidence import bundle_evidence_files
from ..formats.counters import CounterSample
from ..formats.nccl_tests import parse_nccl_tests
from ..formats.nvlink import parse_nvlink_counters
from ..formats.perftest import parse_perftest
from ..formats.recordings import BANDWIDTH_FORMAT, NVLINK_TRAFFIC_FORMAT, BandwidthMeasurement
from ..formats.records import BURN_IN_FILE, KINDS
from ..formats.strict import load_json_text
from ..formats.typed import load_json
from ..paths import BUNDLE_PATH_ENV, did_you_mean, name_search_dirs, shipped_bundles_dir
from .from_text import fabric_from_text
from .ibv_devinfo import devices_from_ibv_devinfo, merge_ibv_devinfo, parse_ibv_devinfo
from .model import GPU_LIST, Fabric
from .nvml_record import fabric_from_record
from .platform_record import PLATFORM_DIR, PLATFORM_FILE, TEXT_FILES
from .rdma import discover_rdma

TOPO_FILE = "nvidia-smi-topo-m.txt"
NVLINK_STATUS_FILE = "nvidia-smi-nvlink-s.txt"
QUERY_XML_FILE = "nvidia-smi-q.xml"
NVML_FILE = "nvml.json"
MANIFEST_FILE = "manifest.json"
KNOWN_FILES = (TOPO_FILE, NVLINK_STATUS_FILE, QUERY_XML_FILE, NVML_FILE)
NVLINK_TRAFFIC_FILE = "nvlink-traffic.json"
SYSFS_DIR = "sysfs"
IBV_DEVINFO_FILE = "ibv_devinfo-v.txt"
IB_WRITE_BW_FILES = ("ib_write_bw.txt", "ib_write_bw-client.txt")
RDMA_BW_FILE = "rdma-bw.json"
BANDWIDTH_FILE = "bandwidth.json"
HEALTH_FILE = "health.json"  # the health check's record (nodehealth/record.py), judged as the arrival state
#: every measurement's recording (measurements.py's record_file: tests/test_import_layers.py holds them equal),
#: named here so that finding a bundle needs nothing above fabric/
RECORDING_FILES = (NVLINK_TRAFFIC_FILE, BANDWIDTH_FILE, RDMA_BW_FILE, HEALTH_FILE, *KINDS)
_NCCL_TESTS_PATTERN = "nccl-tests*.txt"
#: what an NVLink recording's workload (workloads/ddp_step.py's result) must say for the suite to describe it
_WORKLOAD_KEYS = ("steps", "world_size", "gradient_bytes", "allreduce_bytes_per_rank", "model")
_COUNTER_SAMPLE_PATTERNS = ("nvidia-smi-nvlink-gt-d.sample*.txt", "nvidia-smi-nvlink-g0.sample*.txt")


def available_bundles(start_dir: Path | None = None) -> dict[str, Path]:
    """Every bundle name --replay takes, with the folder it resolves to: ./bundles of the folder the command was
    started in, GPUFABRIC_BUNDLE_PATH, the shipped ones (first match wins)."""
    found: dict[str, Path] = {}
    for directory in name_search_dirs("bundles", BUNDLE_PATH_ENV, shipped_bundles_dir(), start_dir):
        if directory.is_dir():
            for p in sorted(directory.iterdir()):
                if p.name not in found and p.is_dir() and _holds_bundle(p):
                    found[p.name] = p
    return found


def _holds_bundle(directory: Path) -> bool:
    """Whether the folder holds anything a replay judges: the machine's facts, the RDMA devices, a measurement's
    recording (every registered measurement's file), the platform's files, or another tool's output."""
    names = (*KNOWN_FILES, IBV_DEVINFO_FILE, *IB_WRITE_BW_FILES, BURN_IN_FILE, PLATFORM_FILE, *TEXT_FILES,
             *RECORDING_FILES)
    return (any((directory / name).is_file() for name in names)
            or (directory / SYSFS_DIR / "sys" / "class" / "infiniband").is_dir() or (directory / PLATFORM_DIR).is_dir()
            or any(directory.glob(_NCCL_TESTS_PATTERN)) or bool(bundle_evidence_files(directory)))


def find_bundle(spec: str | Path, start_dir: Path | None = None) -> Path:
    """A path to a directory or .tar.gz, or a bundle's name (available_bundles: where names are looked up)."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    known = available_bundles(start_dir)
    if str(spec) in known:
        return known[str(spec)]
    names = ", ".join(known) or "none"
    raise BundleError(f"replay bundle not found: {spec}{did_you_mean(str(spec), list(known))} (not a file or "
                      f"directory; bundles: {names}; `gpufabric bundle list` lists them)")


def _extract(archive: Path) -> Path:
    """Unpack a .tar.gz into a temporary directory, refusing members that would land outside it."""
    target = Path(tempfile.mkdtemp(prefix="gpufabric-bundle-"))
    atexit.register(shutil.rmtree, target, True)  # the unpacked copy lives as long as the process
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                    raise BundleError(f"{archive}: refusing unsafe archive member {member.name!r}")
            tar.extractall(target, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(target)
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise BundleError(f"{archive}: not a readable .tar.gz bundle ({exc})") from None
    except BundleError:
        shutil.rmtree(target, ignore_errors=True)
        raise
    # an archive of the directory itself holds one folder at the top
    entries = list(target.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not _holds_bundle(target):
        return entries[0]
    return target


def bundle_directory(spec: str | Path) -> Path:
    path = find_bundle(spec)
    if path.is_file():
        path = _extract(path)
    if not path.is_dir():
        raise BundleError(f"{path}: a bundle is a directory or a .tar.gz")
    if not _holds_bundle(path):
        present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
        raise BundleError(
            f"{path}: a bundle needs the topology ({TOPO_FILE} or {NVML_FILE}), the RDMA devices "
            f"({IBV_DEVINFO_FILE} or {SYSFS_DIR}/), a suite's recording or another tool's output (it holds {present})"
        )
    return path


def read_bundle_file(directory: Path, name: str) -> str | None:
    """The text of a bundle's file, None when it has none; BundleError naming it when it cannot be read."""
    path = directory / name
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BundleError(f"{path}: cannot read ({exc.strerror})") from None


def load_bundle(spec: str | Path) -> Fabric:
    """Rebuild the machine's Fabric from a bundle. Raises BundleError naming the file at fault."""
    directory = bundle_directory(spec)
    topo = read_bundle_file(directory, TOPO_FILE)
    status = read_bundle_file(directory, NVLINK_STATUS_FILE)
    query_xml = read_bundle_file(directory, QUERY_XML_FILE)
    nvml_text = read_bundle_file(directory, NVML_FILE)
    source = f"bundle {find_bundle(spec)}"

    if topo is None and query_xml is None and nvml_text is None:
        # an RDMA-only bundle (the two-node RoCE capture) or a suite's recording alone: no GPU evidence at all
        return Fabric(source=source, gpus_recorded=False)
    text_fabric = None
    if topo is not None or query_xml is not None:
        try:
            text_fabric = fabric_from_text(topo, status, query_xml, source=source)
        except ValueError as exc:
            raise BundleError(f"{directory}: {exc}") from None
    if nvml_text is None:
        assert text_fabric is not None
        return text_fabric

    try:
        # every value typed in one place (fabric/nvml_record.py): a bad value is named there, a bad shape raised
        nvml_fabric = fabric_from_record(load_json(nvml_text), source=source, where=NVML_FILE)
    except (ValueError, RecursionError) as exc:
        raise BundleError(f"{directory / NVML_FILE}: not a gpufabric NVML record ({exc})") from None
    except (KeyError, TypeError, AttributeError, IndexError) as exc:  # a shape the reader did not foresee
        raise BundleError(f"{directory / NVML_FILE}: not a gpufabric NVML record ({exc!r})") from None
    if text_fabric is not None:
        _fabric_registration_from_xml(nvml_fabric, text_fabric)
    if text_fabric is None or topo is None:
        return nvml_fabric
    # a GPU nvml.json announces and does not describe is still one of the machine's: the text may show it
    if len(text_fabric.gpus) != len(nvml_fabric.gpus) + len(nvml_fabric.undescribed):
        raise BundleError(
            f"{directory}: {TOPO_FILE} shows {len(text_fabric.gpus)} GPUs but {NVML_FILE} "
            f"records {len(nvml_fabric.gpus)}: the files come from different machines"
        )
    provenance = dict(nvml_fabric.provenance)
    provenance.update({k: v for k, v in text_fabric.provenance.items() if k == "matrix"})
    if text_fabric.cpu_affinity or text_fabric.numa_affinity:
        provenance.update(cpu_affinity="nvidia-smi topo -m", numa_affinity="nvidia-smi topo -m")
    return replace(
        nvml_fabric,
        matrix=text_fabric.matrix,
        cpu_affinity=text_fabric.cpu_affinity or nvml_fabric.cpu_affinity,
        numa_affinity=text_fabric.numa_affinity or nvml_fabric.numa_affinity,
        nics=text_fabric.nics or nvml_fabric.nics,
        provenance=provenance,
        damaged=_merged_damage(nvml_fabric, text_fabric),
    )


def _fabric_registration_from_xml(nvml_fabric: Fabric, text_fabric: Fabric) -> None:
    """A GPU whose nvml.json has no fabric entry (bundles recorded before it was) takes the registration its
    nvidia-smi-q.xml recorded, matched by bus id."""
    by_bus = {g.pci_bus_id: g.fabric for g in text_fabric.gpus if g.fabric is not None and g.pci_bus_id}
    for gpu in nvml_fabric.gpus:
        if gpu.fabric is None and gpu.pci_bus_id in by_bus:
            gpu.fabric = by_bus[gpu.pci_bus_id]
            nvml_fabric.provenance["fabric"] = "nvidia-smi -q -x"


def _merged_damage(nvml_fabric: Fabric, text_fabric: Fabric) -> dict[str, str]:
    """What could not be read, for the merged Fabric: the text's for the matrix (and for the affinity where the text
    holds it), NVML's for the rest; the GPU list is NVML's, so a cut matrix's header says nothing about it."""
    def affinity(key: str) -> bool:
        return key.endswith((" CPU Affinity", " NUMA Affinity"))

    text_affinity = bool(text_fabric.cpu_affinity or text_fabric.numa_affinity)
    kept = {k: v for k, v in nvml_fabric.damaged.items()
            if not ("-" in k.split(" ", 1)[0] or (affinity(k) and text_affinity))}
    kept.update({k: v for k, v in text_fabric.damaged.items()
                 if k != GPU_LIST and (text_affinity or not affinity(k))})
    return kept


@dataclass
class NvlinkRecording:
    """NVLink counter samples taken around a workload, as a bundle holds them."""

    samples: list
    workload: dict | None
    interval_s: float
    source: str
    sampler: dict | None = None  # the live sampler's failed background reads, when it had any


def _sample_number(path: Path) -> int:
    number = path.name.rsplit(".sample", 1)[1].split(".", 1)[0]
    if not number.isdigit():
        raise BundleError(f"{path}: counter samples are named <command>.sample<N>.txt, N = 0, 1, 2, ...")
    return int(number)


def load_nvlink_recording(directory: Path) -> NvlinkRecording | None:
    """The bundle's NVLink counter samples, or None when it holds none. Raises BundleError on a bad file."""
    path = directory / NVLINK_TRAFFIC_FILE
    data = load_json_recording(directory, NVLINK_TRAFFIC_FILE, what="NVLink", fmt=NVLINK_TRAFFIC_FORMAT)
    if data is not None:
        try:
            samples = [CounterSample.from_json(s) for s in data["samples"]]
            interval_s = float(data.get("interval_s", 0))
            workload = data.get("workload")
            if workload is not None:
                # what the suite says of the run; the figures themselves are judged typed (checks/nvlink_traffic.py)
                missing = [k for k in _WORKLOAD_KEYS if k not in workload] + [
                    f"model.{k}" for k in ("layers", "width") if k not in (workload.get("model") or {})]
                if missing:
                    raise ValueError(f"its workload lacks {', '.join(missing)}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"{path}: not a gpufabric NVLink recording ({exc})") from None
        return NvlinkRecording(samples, workload, interval_s, str(path), data.get("sampler"))
    for pattern in _COUNTER_SAMPLE_PATTERNS:
        files = sorted(directory.glob(pattern), key=_sample_number)
        if files:
            try:
                # text reads carry no clock: their order is their time (t = 0, 1, 2, ...)
                samples = [parse_nvlink_counters(f.read_text(encoding="utf-8"), t_s=float(n))
                           for n, f in enumerate(files)]
            except ValueError as exc:
                raise BundleError(f"{directory}: {exc}") from None
            return NvlinkRecording(samples, None, 0.0, f"{directory}/{pattern}")
    return None


def load_bandwidth_recording(directory: Path):
    """The bundle's bandwidth measurements (bandwidth.json and nccl-tests output), or None when it has none."""
    path = directory / BANDWIDTH_FILE
    measurement = None
    data = load_json_recording(directory, BANDWIDTH_FILE, what="bandwidth", fmt=BANDWIDTH_FORMAT)
    if data is not None:
        try:
            measurement = BandwidthMeasurement(collectives=data.get("collectives"), copy=data.get("copy"),
                                               nccl_tests=list(data.get("nccl_tests") or []), source=str(path),
                                               errors=dict(data.get("errors") or {}),
                                               nccl_tests_missing=dict(data.get("nccl_tests_missing") or {}),
                                               tools_missing=dict(data.get("tools_missing") or {}))
        except (ValueError, TypeError, AttributeError) as exc:
            raise BundleError(f"{path}: not a gpufabric bandwidth recording ({exc})") from None
    for text_file in sorted(directory.glob(_NCCL_TESTS_PATTERN)):
        if measurement is None:
            measurement = BandwidthMeasurement(source=str(text_file))
        try:
            # output that does not name its test is told it by the file name (nccl-tests-sendrecv_perf.txt)
            named = re.search(r"([a-z][a-z0-9_]*?)_perf", text_file.name)
            runs = parse_nccl_tests(text_file.read_text(encoding="utf-8", errors="replace"),
                                    named.group(0) if named else None)
        except (ValueError, OSError) as exc:
            # one unreadable log leaves the promises it would show not checked, naming it; the rest is judged
            measurement.unreadable[text_file.name] = str(exc)
            continue
        for index, run in enumerate(runs, start=1):
            run["source"], run["run"] = text_file.name, index  # "run 2 of nccl-tests.txt", as parse numbers them
        measurement.nccl_tests.extend(runs)
    return measurement


def load_rdma_devices(directory: Path) -> list | None:
    """The bundle's RDMA devices: its sysfs copy (ibv_devinfo filling the MTU), else ibv_devinfo alone;
    None when it recorded neither."""
    try:
        infos = parse_ibv_devinfo(read_bundle_file(directory, IBV_DEVINFO_FILE) or "")
    except ValueError as exc:
        raise BundleError(f"{directory / IBV_DEVINFO_FILE}: {exc}") from None
    if (directory / SYSFS_DIR / "sys" / "class" / "infiniband").is_dir():
        devices = discover_rdma(str(directory / SYSFS_DIR))
        merge_ibv_devinfo(devices, infos)
        return devices
    if (directory / IBV_DEVINFO_FILE).is_file():
        return devices_from_ibv_devinfo(infos)
    return None


def load_rdma_bandwidth(directory: Path) -> dict | None:
    """The bundle's ib_write_bw result: the suite's rdma-bw.json, else a client output; None without."""
    recorded = load_json_recording(directory, RDMA_BW_FILE, what="ib_write_bw")
    if recorded is not None:
        return recorded
    for name in IB_WRITE_BW_FILES:
        text = read_bundle_file(directory, name)
        if text is not None:
            try:
                return {"client": parse_perftest(text), "client_output": text, "source": str(directory / name)}
            except ValueError as exc:
                raise BundleError(f"{directory / name}: {exc}") from None
    return None


def load_json_recording(directory: Path, name: str, *, what: str = "", fmt: str | None = None) -> dict | None:
    """A suite's recording the bundle holds as JSON (memory.json ...), or None when it has none; ``fmt``: the
    ``format`` it must declare. Raises BundleError naming the file and the kind of recording."""
    path = directory / name
    if not path.is_file():
        return None
    try:
        data = load_json_text(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("a JSON object was expected")
        if fmt is not None and data.get("format") != fmt:
            raise ValueError(f"format is {data.get('format')!r}, expected {fmt!r}")
    except ValueError as exc:
        raise BundleError(f"{path}: not a gpufabric {what + ' ' if what else ''}recording ({exc})") from None
    return data
