"""What several command families share: the exit codes, the machine or bundle a command reads, sizes, and text from
files made safe for the terminal."""

from __future__ import annotations

from ..errors import GpuFabricError, HardwareUnavailable
from ..fabric.nvml import collect_fabric
from ..option_values import finite_number, whole_number  # noqa: F401 (the commands' argparse types)
from ..units import parse_bytes

EXIT_OK, EXIT_BAD_INPUT, EXIT_NO_HARDWARE = 0, 2, 3
#: the verdict commands' codes, as pytest's (`accept`, `fleet`)
EXIT_REJECTED, EXIT_USAGE, EXIT_NOT_TESTED = 1, 4, 7


def read_fabric(replay: str | None):
    """The bundle ``replay`` names, else this machine read through NVML."""
    if replay:
        from ..fabric.bundle import load_bundle

        return load_bundle(replay)

    try:
        return collect_fabric()
    except HardwareUnavailable as exc:
        raise exc.for_flag("--replay BUNDLE") from None


def printable(text: object) -> str:
    """Text from a node's files for the terminal, as one line: control characters (escape sequences that would move
    the cursor, recolour or retitle the operator's terminal) written out as formats/clean.py does (``\\x1b``)."""
    from ..formats.clean import clean_line

    return clean_line(str(text))


def parse_sizes(text: str) -> list[int]:
    """``--sizes`` (and ``--pair-size``): comma-separated byte counts, nccl-tests style (1M = 1 MiB)."""
    try:
        sizes = [parse_bytes(part) for part in text.split(",") if part]
    except ValueError as exc:
        raise GpuFabricError(f"--sizes: {exc}") from None
    if not sizes or min(sizes) < 4:
        raise GpuFabricError(f"--sizes {text!r}: give sizes of at least 4 bytes, e.g. 1M,256M,1G")
    return sizes


def require_torch(what: str) -> None:
    """Name the extra to install, not a ModuleNotFoundError under a child's command line."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise GpuFabricError(f"{what} runs its workloads with torch, which is not installed here: "
                             "pip install 'pytest-gpufabric[torch]'")
