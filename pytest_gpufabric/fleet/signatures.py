"""`gpufabric fleet report --require-signed`: every node folder's results and report checked as `gpufabric verify`
checks a file, read as the fleet reads them."""

from __future__ import annotations

from pathlib import Path

from ..errors import GpuFabricError
from ..report.integrity import key_id, sha256_hex
from ..report.signing import load_public_key, verify_bytes, verify_path
from .loader import MAX_BYTES, Unreadable, read_results_bytes
from .nodes import RESULTS_FILE, find_node_dirs, node_report


def check_node_signatures(paths: list[Path], key: str, exclude: list[Path] | None = None,
                          max_bytes: int | None = None) -> tuple[dict, list[tuple[str, str]], dict[str, str]]:
    """`gpufabric fleet report --require-signed --key PUB.pem`: every node folder's results checked as `verify`
    checks them. Returns ({key_id, verified}, [(node, why refused)]); a folder without results is not refused here
    (the fleet report names it as never reported); one larger than ``max_bytes`` is refused unread. The third value:
    each verified file's folder -> the sha256 of the bytes that were verified, which the fleet's own reading must
    find again (fleet/report.py): a node that rewrites its file between the two reads is refused, not judged on
    bytes no signature covered."""
    public_key = load_public_key(key)
    directories, _ = find_node_dirs(paths, exclude=exclude)
    verified, refused, digests = 0, [], {}
    for directory in directories:
        results = directory / RESULTS_FILE
        if not results.exists() and not results.is_symlink():
            continue
        try:  # read as the fleet reads it: a regular file, bounded
            data = read_results_bytes(results, MAX_BYTES if max_bytes is None else max_bytes)
            result = verify_bytes(data, public_key, results)
        except FileNotFoundError as exc:  # a link to nothing
            refused.append((directory.name, f"unreadable: {exc.strerror or exc}"))
            continue
        except (Unreadable, GpuFabricError) as exc:
            refused.append((directory.name, f"unreadable: {exc}"))
            continue
        if not result.valid:
            refused.append((directory.name, "; ".join(result.problems)))
            continue
        report_problem = _node_report_problem(directory, public_key, result.run_id)
        if report_problem:
            refused.append((directory.name, report_problem))
            continue
        verified += 1
        digests[str(directory)] = sha256_hex(data)
    return {"key_id": key_id(public_key), "verified": verified}, refused, digests


def _node_report_problem(directory: Path, public_key, run_id: str | None) -> str | None:
    """Why the node's HTML report (which the fleet page links) cannot stand beside its verified results: not
    signed by the key, changed, or of another run. None when it can, or when there is none."""
    name = node_report(directory)
    if name is None:
        return None
    try:
        report = verify_path(directory / name, public_key)
    except GpuFabricError as exc:
        return f"its report {name}: {exc}"
    if not report.valid:
        return f"its report {name}: " + "; ".join(report.problems)
    if report.run_id is None or run_id is None:
        return f"its report {name} and its results: cannot show they are one run: no run id"
    if report.run_id != run_id:
        return (f"its report {name} is of another run ({report.run_id or 'no run id'}) than its results "
                f"({run_id or 'no run id'})")
    return None
