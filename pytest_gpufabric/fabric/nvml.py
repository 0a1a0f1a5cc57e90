"""The live machine through NVML (nvidia-ml-py's ``pynvml``), recorded as plain JSON, then read into a Fabric.

``collect_record()`` asks NVML (and sysfs, for NICs and NUMA) for the ``nvml.json`` record a bundle stores;
``fabric_from_record()`` types it into the model without NVML, so a recording is judged as the live machine is;
``collect_fabric()`` does both. Every NVML call goes through ``query()``. The record's format and the NVML facts
it relies on: docs/bundles.md, "nvml.json". ``pynvml`` is imported inside the functions: importing this is free.
"""

from __future__ import annotations

import functools
import os
import socket
from datetime import datetime, timezone

from ..errors import HardwareUnavailable
from ..units import format_cpu_list
from . import sysfs_pci
from .gpu_fabric import read_gpu_fabric
from .model import Fabric
from .nvml_format import FORMAT, RECORDED_ERRORS, cuda_version_text, is_error, normalize_bus_id, recorded_error
from .nvml_record import fabric_from_record

_PCI_BUS_ID_FMT = "%08X:%02X:%02X.0"  # NVML_DEVICE_PCI_BUS_ID_FMT
_NVLINK_MAX_LINKS_DEFAULT = 18  # older nvml.h; the pynvml 13.x installed here says 36
_NODE_SET_WORDS = 4  # nvmlDeviceGetMemoryAffinity: room for 256 NUMA nodes


# ---------------------------------------------------------------------------------------------------------
# the funnel


@functools.cache
def error_name(code: int) -> str:
    """An nvmlReturn_t code by its nvml.h name, without the prefix: 3 -> 'NOT_SUPPORTED'."""
    import pynvml

    for attr in sorted(dir(pynvml)):
        if attr.startswith("NVML_ERROR_") and getattr(pynvml, attr) == code:
            return attr[len("NVML_ERROR_"):]
    return f"NVML_RETURN_{code}"


def query(fn, *args):
    """Call a pynvml function (or one named by a string): its value, or ``{"error": NAME}``.

    The answers in RECORDED_ERRORS are recorded; any other NVMLError propagates. A name that this pynvml
    does not define (an older nvidia-ml-py) records FUNCTION_NOT_FOUND, as NVML does for a driver that
    lacks the symbol.
    """
    import pynvml

    if isinstance(fn, str):
        resolved = getattr(pynvml, fn, None)
        if resolved is None:
            return recorded_error("FUNCTION_NOT_FOUND")
        fn = resolved
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        name = error_name(exc.value)
        if name in RECORDED_ERRORS:
            return recorded_error(name)
        raise


def field_value(handle, field_id: int, scope_id: int = 0):
    """One NVML field value (nvmlDeviceGetFieldValues with an explicit scopeId): a number or a recorded error."""
    answer = field_values(handle, [(field_id, scope_id)])
    return answer if is_error(answer) else answer[0]


def field_values(handle, pairs: list[tuple[int, int]]):
    """Several (field id, scopeId) values in one NVML call: a list of numbers or recorded errors, or one
    recorded error for the whole call. Each nvmlFieldValue_t carries its own nvmlReturn, classified like
    ``query``'s errors."""
    import pynvml

    values = query(pynvml.nvmlDeviceGetFieldValues, handle, list(pairs))
    if is_error(values):
        return values
    return [_field_answer(pynvml, value) for value in values]


def _field_answer(pynvml, value):
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        name = error_name(value.nvmlReturn)
        if name in RECORDED_ERRORS:
            return recorded_error(name)
        raise pynvml.NVMLError(value.nvmlReturn)
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        value.valueType
    )
    if member is None or not hasattr(value.value, member):
        return recorded_error(f"VALUE_TYPE_{value.valueType}")
    return getattr(value.value, member)


# ---------------------------------------------------------------------------------------------------------
# small helpers


def _text(value):
    """pynvml returns str (12.x and later, through convertStrBytes) or bytes (older): always str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _map(value, fn):
    return value if is_error(value) else fn(value)


def _enum(pynvml, name: str, default: int) -> int:
    """A pynvml enum constant as an int; pynvml 13.x defines NVML_P2P_CAPS_INDEX_READ as ``0,`` (a tuple)."""
    value = getattr(pynvml, name, default)
    if isinstance(value, tuple):
        value = value[0]
    return int(value)




def _bus_id_of(pci) -> str:
    """nvmlPciInfo_t -> '00000000:00:06.0': ``busId``, or built from domain/bus/device when it is empty."""
    bus_id = _text(pci.busId)
    if not bus_id:
        bus_id = _PCI_BUS_ID_FMT % (pci.domain, pci.bus, pci.device)
    return normalize_bus_id(bus_id)


def _bitmask_list(words) -> str:
    """An array of 64-bit masks (CPU or node sets, 64 per unsigned long) -> '0-31'."""
    ids = {w * 64 + bit for w, mask in enumerate(words) for bit in range(64) if (int(mask) >> bit) & 1}
    return format_cpu_list(ids)




# ---------------------------------------------------------------------------------------------------------
# collect


def collect_record(*, sysfs_root: str = "/") -> dict:
    """Ask NVML (and sysfs) about this machine; the JSON-ready record docs/bundles.md describes.

    Raises HardwareUnavailable when NVML cannot be used at all (no pynvml, no libnvidia-ml, no driver).
    """
    pynvml, why = _init_nvml()
    if pynvml is None:
        raise HardwareUnavailable(why, replay_hint=True)
    try:
        return _record(pynvml, sysfs_root)
    except pynvml.NVMLError as exc:
        raise HardwareUnavailable(
            f"NVML failed while reading the machine: {exc} (NVML_ERROR_{error_name(exc.value)}); a GPU that "
            "fell off the bus answers GPU_IS_LOST: see `dmesg` for Xid errors and `nvidia-smi -q`"
        ) from None
    finally:
        pynvml.nvmlShutdown()


def _init_nvml():
    """(the initialised pynvml module, "") or (None, one sentence saying why NVML cannot be used)."""
    try:
        import pynvml
    except ImportError as exc:
        return None, f"NVML not available: cannot import pynvml ({exc})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML not available: nvmlInit failed: {exc} (NVML_ERROR_{error_name(exc.value)})"
    except Exception as exc:  # a broken library file, a version mismatch: no NVML either
        return None, f"NVML not available: nvmlInit failed: {exc!r}"
    return pynvml, ""


def nvml_available() -> tuple[bool, str]:
    """Whether this machine can be read live; the reason when not."""
    pynvml, why = _init_nvml()
    if pynvml is None:
        return False, why
    pynvml.nvmlShutdown()
    return True, ""


def _pynvml_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return None


def _record(pynvml, sysfs_root: str) -> dict:
    cuda = query(pynvml.nvmlSystemGetCudaDriverVersion)
    count = query(pynvml.nvmlDeviceGetCount)
    indices = [] if is_error(count) else list(range(count))
    handles = {i: query(pynvml.nvmlDeviceGetHandleByIndex, i) for i in indices}
    gpus = []
    for index, handle in handles.items():
        if is_error(handle):
            gpus.append({"index": index, "handle": handle})
        else:
            gpus.append(_gpu_record(pynvml, index, handle, sysfs_root))
    pairs = []
    for i in indices:
        for j in indices[i + 1:]:
            if is_error(handles[i]) or is_error(handles[j]):
                continue
            pairs.append(_pair_record(pynvml, i, j, handles[i], handles[j]))
    gpu_bus_ids = {g["index"]: g["pci_bus_id"] for g in gpus if isinstance(g.get("pci_bus_id"), str)}
    return {
        "format": FORMAT,
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "pynvml_version": _pynvml_version(),
        "nvml_version": _map(query(pynvml.nvmlSystemGetNVMLVersion), _text),
        "driver_version": _map(query(pynvml.nvmlSystemGetDriverVersion), _text),
        "cuda_driver_version": cuda,
        "cuda_driver_version_text": _map(cuda, cuda_version_text),
        "gpu_count": count,
        "gpus": gpus,
        "pairs": pairs,
        "nics": sysfs_pci.nic_records(gpu_bus_ids, sysfs_root),
    }


def _gpu_record(pynvml, index: int, h, sysfs_root: str) -> dict:
    rec: dict = {"index": index}
    rec["name"] = _map(query(pynvml.nvmlDeviceGetName, h), _text)
    rec["uuid"] = _map(query(pynvml.nvmlDeviceGetUUID, h), _text)
    rec["serial"] = _map(query(pynvml.nvmlDeviceGetSerial, h), _text)
    pci = query(pynvml.nvmlDeviceGetPciInfo, h)
    rec["pci_bus_id"] = _map(pci, _bus_id_of)
    rec["pci_device_id"] = _map(pci, lambda p: f"0x{p.pciDeviceId:08X}")
    rec["memory_total_bytes"] = _map(query(pynvml.nvmlDeviceGetMemoryInfo, h), lambda m: int(m.total))
    rec["pcie_gen_max"] = query(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h)
    rec["pcie_gen_current"] = query(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h)
    rec["pcie_width_max"] = query(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h)
    rec["pcie_width_current"] = query(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h)
    rec["vbios_version"] = _map(query(pynvml.nvmlDeviceGetVbiosVersion, h), _text)
    rec["compute_capability"] = _map(query(pynvml.nvmlDeviceGetCudaComputeCapability, h), list)
    rec["ecc_mode"] = _map(
        query(pynvml.nvmlDeviceGetEccMode, h), lambda cp: {"current": int(cp[0]), "pending": int(cp[1])}
    )
    # 64 CPUs per word; one spare word for CPU ids above os.cpu_count() (offline CPUs keep their numbers)
    cpu_words = ((os.cpu_count() or 1) + 63) // 64 + 1
    rec["cpu_affinity"] = _map(query(pynvml.nvmlDeviceGetCpuAffinity, h, cpu_words), _bitmask_list)
    scope_node = _enum(pynvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    rec["memory_affinity"] = _map(
        query("nvmlDeviceGetMemoryAffinity", h, _NODE_SET_WORDS, scope_node), _bitmask_list
    )
    rec.update(_numa_record(pynvml, h, rec["pci_bus_id"], sysfs_root))
    links, end = _nvlink_records(pynvml, h)
    rec["nvlinks"] = links
    rec["nvlinks_end"] = end
    rec["fabric"] = read_gpu_fabric(pynvml, h, query)
    return rec


def _numa_record(pynvml, h, bus_id, sysfs_root: str) -> dict:
    nvml_answer = query("nvmlDeviceGetNumaNodeId", h)
    sysfs = None
    if isinstance(bus_id, str):
        sysfs = sysfs_pci.pci_numa_node(bus_id, sysfs_root)
    if not is_error(nvml_answer):
        chosen, source = nvml_answer, "nvmlDeviceGetNumaNodeId"
    elif sysfs is not None and sysfs >= 0:
        chosen, source = sysfs, sysfs_pci.numa_node_sysfs_file(bus_id)
    else:
        chosen, source = nvml_answer, "nvmlDeviceGetNumaNodeId"
    return {"numa_node_nvml": nvml_answer, "numa_node_sysfs": sysfs, "numa_node": chosen,
            "numa_node_source": source}


def _nvlink_records(pynvml, h) -> tuple[list[dict], dict | None]:
    """Links 0.. in order, until NVML refuses a link index (INVALID_ARGUMENT / NOT_SUPPORTED).

    A refusal at link 0 means the GPU has no NVLink: ``[]``. The refusal is returned as the walk's end.
    """
    links: list[dict] = []
    max_links = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS_DEFAULT))
    for link in range(max_links):
        state = query(pynvml.nvmlDeviceGetNvLinkState, h, link)
        if is_error(state) and state["error"] in ("INVALID_ARGUMENT", "NOT_SUPPORTED"):
            return links, {"link": link, "error": state["error"]}
        rec: dict = {"link": link, "state": state}
        if state == pynvml.NVML_FEATURE_ENABLED:
            rec["version"] = query(pynvml.nvmlDeviceGetNvLinkVersion, h, link)
            remote = query(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            rec["remote_pci_bus_id"] = _map(remote, _bus_id_of)
            rec["remote_device_type"] = query("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
            rec["speed_mbps"], rec["speed_field"] = _nvlink_speed(pynvml, h, link)
        links.append(rec)
    return links, None


def _nvlink_speed(pynvml, h, link: int):
    """MBps of one link: field GET_SPEED with scopeId = link, else the legacy per-link field (links 0-11)."""
    answer = recorded_error("FUNCTION_NOT_FOUND")
    fields = (("NVML_FI_DEV_NVLINK_GET_SPEED", link), (f"NVML_FI_DEV_NVLINK_SPEED_MBPS_L{link}", 0))
    for name, scope in fields:
        field_id = getattr(pynvml, name, None)
        if field_id is None:
            continue
        answer = field_value(h, field_id, scope)
        if not is_error(answer):
            return int(answer), name
    return answer, None


def _pair_record(pynvml, i: int, j: int, hi, hj) -> dict:
    read = _enum(pynvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    nvlink = _enum(pynvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    return {
        "gpus": [i, j],
        "common_ancestor": query(pynvml.nvmlDeviceGetTopologyCommonAncestor, hi, hj),
        "p2p_nvlink": query(pynvml.nvmlDeviceGetP2PStatus, hi, hj, nvlink),
        "p2p_read": query(pynvml.nvmlDeviceGetP2PStatus, hi, hj, read),
    }


def collect_fabric() -> Fabric:
    """The live machine as a Fabric (NVML + sysfs). Raises HardwareUnavailable without NVML."""
    return fabric_from_record(collect_record(), where="NVML")
