"""NVML reads for the standalone workload scripts (power_hold.py, pcie_load.py): one funnel, Get functions only.

The scripts import it as a sibling (their folder is on sys.path), as they import handshake.py and identity.py; they
cannot import fabric/nvml.py, which needs the plugin. Its ``query`` funnel follows the same rule: an answer in
DATA_ERRORS describes the machine (the field is null and its name is kept under the GPU's ``unread``); any other
NVMLError (GPU_IS_LOST, ...) fails the workload. Nothing is ever set.
"""

from __future__ import annotations

__all__ = ["DATA_ERRORS", "Nvml"]

#: NVML answers that describe the machine rather than fail the read (fabric/nvml.py records the same set)
DATA_ERRORS = frozenset({"NOT_SUPPORTED", "NOT_FOUND", "NO_PERMISSION", "FUNCTION_NOT_FOUND", "INVALID_ARGUMENT"})


class Nvml:
    """nvidia-ml-py, initialised once for the script's life; ``get`` reads one value."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.p = pynvml

    def _error_name(self, code: int) -> str:
        for attr in dir(self.p):
            if attr.startswith("NVML_ERROR_") and getattr(self.p, attr) == code:
                return attr[len("NVML_ERROR_"):]
        return f"NVML_RETURN_{code}"

    def get(self, unread: dict, key: str, names: str | tuple[str, ...], *args):
        """The first of ``names`` (a function name, or several: an NVML function renamed across versions) this
        nvidia-ml-py defines, called with ``args``; None, with the answer's name under ``unread[key]``, when NVML
        answers data."""
        names = (names,) if isinstance(names, str) else names
        fn = next((getattr(self.p, name) for name in names if hasattr(self.p, name)), None)
        if fn is None:
            unread.setdefault(key, "FUNCTION_NOT_FOUND")
            return None
        try:
            return fn(*args)
        except self.p.NVMLError as exc:
            name = self._error_name(exc.value)
            if name not in DATA_ERRORS:
                raise
            unread.setdefault(key, name)
            return None

    def handle(self, uuid: str):
        return self.p.nvmlDeviceGetHandleByUUID(uuid)

    def close(self) -> None:
        self.p.nvmlShutdown()
