"""The live read of one GPU's NVLink fabric registration (nvmlDeviceGetGpuFabricInfoV, v3 then v2, else the older
nvmlDeviceGetGpuFabricInfo), as the ``fabric`` entry of a GPU in nvml.json (docs/bundles.md): NVML's numbers, typed
and judged by formats/gpu_fabric.py. The one place NVML is asked for it: `gpufabric health`'s record can call
``read_gpu_fabric`` too.
"""

from __future__ import annotations

import ctypes

from .nvml_format import is_error, recorded_error

__all__ = ["read_gpu_fabric"]


def read_gpu_fabric(pynvml, handle, query) -> dict:
    """``{"state", "status", "clique_id", "cluster_uuid", "health_mask", "health_summary"}`` (the last two when
    the driver has them), or the recorded NVML error: NOT_SUPPORTED on a GPU without an NVSwitch fabric (PCIe
    boards, one GPU given alone), FUNCTION_NOT_FOUND on a driver without the call. ``query`` is fabric.nvml.query."""
    for struct, version in (("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
                            ("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2")):
        if not hasattr(pynvml, struct):
            continue
        info = getattr(pynvml, struct)()
        if hasattr(pynvml, version):
            info.version = getattr(pynvml, version)  # the struct's constructor sets it in nvidia-ml-py 12.535+
        # pynvml hands the structure to the C function as it is given: a pointer, as NVML wants
        try:
            answer = query("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if exc.value == getattr(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25):
                continue  # a driver that knows an older struct version
            raise
        if is_error(answer) and answer["error"] in ("FUNCTION_NOT_FOUND", "INVALID_ARGUMENT",
                                                    "ARGUMENT_VERSION_MISMATCH"):
            continue  # an older driver: no V call, or not this struct version (a query that records every error)
        return answer if is_error(answer) else _record(info)
    if not hasattr(pynvml, "c_nvmlGpuFabricInfo_t"):
        return recorded_error("FUNCTION_NOT_FOUND")
    info = pynvml.c_nvmlGpuFabricInfo_t()
    answer = query("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info))
    return answer if is_error(answer) else _record(info)


def _record(info) -> dict:
    raw = bytes(info.clusterUuid)
    uuid = raw.hex()
    record = {"state": int(info.state), "status": int(info.status), "clique_id": int(info.cliqueId),
              "cluster_uuid": f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"}
    if hasattr(info, "healthMask"):
        record["health_mask"] = int(info.healthMask)
    if hasattr(info, "healthSummary"):
        record["health_summary"] = int(info.healthSummary)
    return record
