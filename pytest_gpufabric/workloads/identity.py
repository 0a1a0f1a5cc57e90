"""Which board each CUDA device is: CUDA's index, NVML's index, the UUID and serial (standard library; NVML through
nvidia-ml-py where a workload asks).

The workloads address GPUs by CUDA index and the verdicts name them by NVML index and serial, and the two differ:
``CUDA_VISIBLE_DEVICES=1,0`` makes CUDA's device 0 NVML's GPU1, and CUDA's default order (FASTEST_FIRST) is not
NVML's PCI order on a machine with mixed GPUs. So every workload runs with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, maps
each of its CUDA devices to its NVML device by UUID before it measures, and refuses to measure when the mapping
does not hold; every number it returns carries the board that made it.

``CUDA_VISIBLE_DEVICES`` is read as CUDA reads it: a comma-separated list of indexes (in PCI order, as
nvidia-smi numbers the GPUs, since the order is PCI_BUS_ID) or UUIDs (``GPU-...``, a unique prefix is enough),
and CUDA stops at the first entry that names no device. Shared by the plugin (which GPUs a run can reach) and
the workload scripts (which board each of their devices is); imports nothing from the plugin.
"""

from __future__ import annotations

import os
import re

__all__ = ["ORDER", "IdentityError", "board_label", "cuda_boards", "map_devices", "resolve_visible",
           "workload_devices"]

#: the device order every workload runs with: NVML's (and nvidia-smi's)
ORDER = "PCI_BUS_ID"


class IdentityError(RuntimeError):
    """The CUDA devices of a workload cannot be matched to the machine's boards: nothing is measured."""


def _uuid(text: str) -> str:
    """NVML prints ``GPU-5112...``; torch gives the bare UUID: compare them in NVML's spelling."""
    text = str(text).strip()
    return text if text.upper().startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def resolve_visible(visible: str | None, boards: list[dict]) -> list[dict]:
    """The boards CUDA shows, in CUDA's order, for a ``CUDA_VISIBLE_DEVICES`` value (None: unset, every board in
    PCI order). ``boards``: the machine's GPUs as NVML lists them, dicts with at least ``index`` and ``uuid``.

    Raises IdentityError for what this plugin cannot measure on: MIG instances (their UUIDs are ``MIG-...``)."""
    by_index = sorted(boards, key=lambda b: b["index"])
    if visible is None:
        return by_index
    chosen: list[dict] = []
    for entry in (part.strip() for part in visible.split(",")):
        if entry.upper().startswith("MIG-"):
            raise IdentityError(f"CUDA_VISIBLE_DEVICES={visible} names a MIG instance ({entry}); the acceptance "
                                "suites measure whole GPUs")
        if re.fullmatch(r"\d+", entry):
            found = [b for b in by_index if b["index"] == int(entry)]
        elif entry.upper().startswith("GPU-") and len(entry) > 4:
            found = [b for b in by_index if str(b.get("uuid") or "").upper().startswith(entry.upper())]
        else:
            found = []
        if len(found) != 1 or found[0] in chosen:
            break  # as CUDA does: the list ends at the first entry that names no (new) device
        chosen.append(found[0])
    return chosen


def board_label(board: dict) -> str:
    """``GPU1 (serial 1654024032670)``: NVML's index and the serial, as verdicts name a board."""
    serial = board.get("serial")
    return f"GPU{board['index']}" + (f" (serial {serial})" if serial else f" ({board.get('uuid')})")


def map_devices(cuda_uuids: list[str], boards: list[dict], visible: str | None, order: str | None) -> list[dict]:
    """Each CUDA device's board: ``[{"cuda_index", "nvml_index", "uuid", "serial", "pci_bus_id", "name"}]``.

    ``cuda_uuids``: the UUID CUDA reports for its devices 0, 1, ...; ``boards``: NVML's GPUs; ``visible`` and
    ``order``: the process's CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER. Raises IdentityError naming the device
    when the order is not PCI_BUS_ID, when a CUDA device is no board NVML knows, or when CUDA's devices are not
    the ones, in the order, that CUDA_VISIBLE_DEVICES names: a measurement would then be filed under the wrong
    board."""
    if order != ORDER:
        raise IdentityError(f"CUDA_DEVICE_ORDER is {order or 'unset (FASTEST_FIRST)'}, not {ORDER}: CUDA's device "
                            "numbers would not follow NVML's, so no result could name its board")
    by_uuid = {_uuid(b["uuid"]).upper(): b for b in boards if b.get("uuid")}
    expected = resolve_visible(visible, boards)
    mapped = []
    for cuda_index, uuid in enumerate(cuda_uuids):
        board = by_uuid.get(_uuid(uuid).upper())
        if board is None:
            raise IdentityError(f"CUDA device {cuda_index} ({_uuid(uuid)}) is none of the {len(boards)} GPU(s) NVML "
                                "lists: a container or VM showing CUDA other GPUs than NVML")
        if cuda_index >= len(expected) or expected[cuda_index]["index"] != board["index"]:
            said = ", ".join(f"GPU{b['index']}" for b in expected) or "none"
            raise IdentityError(
                f"CUDA device {cuda_index} is {board_label(board)}, but CUDA_VISIBLE_DEVICES="
                f"{'(unset)' if visible is None else visible} in PCI order makes CUDA's devices {said}: "
                "the mapping does not hold, nothing is measured")
        mapped.append({"cuda_index": cuda_index, "nvml_index": board["index"], "uuid": board["uuid"],
                       "serial": board.get("serial"), "pci_bus_id": board.get("pci_bus_id"),
                       "name": board.get("name")})
    if len(mapped) != len(expected):
        raise IdentityError(f"CUDA shows {len(mapped)} device(s) where CUDA_VISIBLE_DEVICES={visible} names "
                            f"{len(expected)}")
    return mapped


def _nvml_boards() -> list[dict]:
    """The machine's GPUs as NVML lists them (index, UUID, serial, PCI bus id, name)."""
    try:
        import pynvml
    except ImportError as exc:
        raise IdentityError(f"nvidia-ml-py is not installed ({exc}): the boards cannot be named") from None

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise IdentityError(f"NVML not available ({exc}): the boards cannot be named") from None
    try:
        boards = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                serial = text(pynvml.nvmlDeviceGetSerial(handle))
            except pynvml.NVMLError:
                serial = None  # consumer boards answer NOT_SUPPORTED
            boards.append({"index": index, "uuid": text(pynvml.nvmlDeviceGetUUID(handle)), "serial": serial,
                           "pci_bus_id": text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                           "name": text(pynvml.nvmlDeviceGetName(handle))})
        return boards
    finally:
        pynvml.nvmlShutdown()


def cuda_boards(torch) -> list[dict]:
    """This process's CUDA devices mapped to their boards (see map_devices), before anything is measured.

    Sets CUDA_DEVICE_ORDER=PCI_BUS_ID when CUDA has not started yet and the variable is unset (a workload run by
    hand); the plugin always sets it for its workloads."""
    if not torch.cuda.is_initialized():
        os.environ.setdefault("CUDA_DEVICE_ORDER", ORDER)
    return _boards_of([str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())])


def driver_boards(driver) -> list[dict]:
    """cuda_boards for a script that talks to the CUDA driver itself (cuda_driver.CudaDriver, initialised after
    CUDA_DEVICE_ORDER was set)."""
    return _boards_of([driver.uuid(driver.device(i)) for i in range(driver.device_count())])


def _boards_of(cuda_uuids: list[str]) -> list[dict]:
    """This process's CUDA devices (their UUIDs, in CUDA's order) mapped to NVML's boards (map_devices)."""
    return map_devices(cuda_uuids, _nvml_boards(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                       os.environ.get("CUDA_DEVICE_ORDER"))


def workload_devices(torch, device: str, workers: int) -> tuple[list, list[str], list[dict]]:
    """(torch devices, their names, their boards) a workload script runs on: with ``device`` "cuda" every CUDA
    device mapped to its board (cuda_boards, before anything is measured; none where CUDA has no device), with "cpu"
    ``workers`` CPU stand-ins that are no board (for tests)."""
    if device == "cpu":
        return ([torch.device("cpu")] * workers, ["cpu"] * workers,
                [{"cuda_index": None, "nvml_index": i, "uuid": None, "serial": None} for i in range(workers)])
    boards = cuda_boards(torch)
    devices = [torch.device("cuda", b["cuda_index"]) for b in boards]
    return devices, [torch.cuda.get_device_name(d) for d in devices], boards
