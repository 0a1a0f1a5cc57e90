"""`gpufabric show` and `gpufabric snapshot`: look at a machine (or a bundle), and record one into a bundle."""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..errors import HardwareUnavailable
from ..nodehealth.record import snapshot_health
from ..report.results import json_text
from .common import EXIT_OK, printable, read_fabric

#: What `gpufabric snapshot` records with nvidia-smi, by bundle file name.
SNAPSHOT_COMMANDS = {
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "nvidia-smi-nvlink-s.txt": ["nvidia-smi", "nvlink", "-s"],
    "nvidia-smi-q.xml": ["nvidia-smi", "-q", "-x"],
}


def register(sub: argparse._SubParsersAction) -> None:
    show = sub.add_parser("show", help="print the machine's GPUs and topology (live, or a bundle)",
                          description="What this machine is, read through NVML (or a recorded bundle with "
                          "--replay): each GPU's model, serial, bus id, PCIe link and NVLinks, and the "
                          "`nvidia-smi topo -m` matrix.")
    show.add_argument("--replay", metavar="BUNDLE", help="a bundle directory, .tar.gz or shipped bundle name")
    show.add_argument("--json", action="store_true", help="the full model as JSON")
    show.set_defaults(func=cmd_show)

    snapshot = sub.add_parser("snapshot", help="record this machine (NVML + nvidia-smi) into a bundle directory",
                              description="Record this machine into a bundle (NVML, nvidia-smi topo -m, nvlink -s "
                              "and -q -x, the health counters and kernel log, the host's IP addresses): judge it "
                              "anywhere with --replay DIR (docs/bundles.md).")
    snapshot.add_argument("dir", help="the bundle directory to write (made if missing); judge it later with "
                          "--replay DIR or pytest --gpu-replay DIR")
    snapshot.set_defaults(func=cmd_snapshot)

    bundle = sub.add_parser("bundle", help="list the recorded bundles a name finds",
                            description="Bundles are recorded machines (docs/bundles.md). A name is looked up in "
                            "./bundles of the folder the command runs in, then GPUFABRIC_BUNDLE_PATH, then the "
                            "shipped bundles.")
    bundle_sub = bundle.add_subparsers(dest="bundle_command", required=True)
    listing = bundle_sub.add_parser("list", help="every bundle name --replay takes here, in search order",
                                    description="Every bundle name --replay takes here, with the files it holds.")
    listing.set_defaults(func=cmd_bundle_list)


def cmd_bundle_list(args: argparse.Namespace) -> int:
    """`gpufabric bundle list`: name, what it holds, where."""
    from ..fabric.bundle import available_bundles

    for name, path in available_bundles(Path.cwd()).items():
        files = sorted(p.name for p in path.iterdir() if p.name != "README.md")
        print(f"{name}  ({len(files)} files: {', '.join(files[:6])}{', ...' if len(files) > 6 else ''})  {path}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    fabric = read_fabric(args.replay)

    def say(text: str) -> None:  # names, serials and matrix cells from a bundle: control bytes written out
        print(printable(text))

    if args.json:
        print(json_text(fabric.to_dict()))
        return EXIT_OK
    say(f"source: {fabric.source}")
    say(f"driver: {fabric.driver_version or 'not recorded'}   "
        f"CUDA driver: {fabric.cuda_driver_version or 'not recorded'}")
    for gpu in fabric.gpus:
        links = fabric.nvlink_count(gpu)
        say(
            f"{gpu.label}: {gpu.name or '?'}  serial {gpu.serial or '?'}  bus {gpu.pci_bus_id or '?'}  "
            f"PCIe gen {gpu.pcie_gen_max or '?'} x{gpu.pcie_width_max or '?'}  "
            f"NVLinks {links if links is not None else '?'}"
        )
    devices = list(fabric.matrix)
    if devices:
        width = max(len(d) for d in devices) + 2
        say("".ljust(width) + "".join(d.ljust(width) for d in devices) + "CPU Affinity")
        for row in devices:
            cells = "".join(fabric.matrix[row].get(col, "").ljust(width) for col in devices)
            say(row.ljust(width) + cells + fabric.cpu_affinity.get(row, ""))
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Record this machine into a bundle: NVML (the richest), what nvidia-smi prints, the RDMA devices (a copy
    of /sys/class/infiniband and `ibv_devinfo -v`) and the platform settings (platform.json and a copy of the
    sysfs/procfs files they were read from; `lspci -vvv` where lspci is installed). A machine with neither GPUs
    nor RDMA devices gets no bundle."""
    from ..fabric import bundle
    from ..fabric.nvml import collect_record  # looked up when run: tests stand a recorded NVML in
    from ..fabric.platform import PLATFORM_FILE, read_persistence_nvml, read_platform, snapshot_platform
    from ..fabric.rdma import SYSFS_IB, snapshot_rdma

    target = Path(args.dir)
    try:
        record = collect_record()
        nvml_error = None
    except HardwareUnavailable as exc:
        record, nvml_error = None, exc
    if record is None and not Path(SYSFS_IB).is_dir():
        # nothing to record: say why, and write nothing (snapshot has no --replay: a bundle is what it makes)
        raise HardwareUnavailable(f"{nvml_error.why}; nothing to record here: run `gpufabric snapshot` on the GPU "
                                  "machine, then judge its bundle anywhere with --replay") from None
    target.mkdir(parents=True, exist_ok=True)
    removed = _clear_earlier_snapshot(target)
    left = {p.name for p in target.iterdir()}  # not this run's: never listed in its manifest
    if record is not None:
        (target / bundle.NVML_FILE).write_text(json_text(record) + "\n",
                                               encoding="utf-8")
    commands = {}
    if nvml_error is not None:
        commands[bundle.NVML_FILE] = {"error": str(nvml_error)}
    else:
        commands.update(snapshot_health(target))  # health.json: what `gpufabric health --replay` judges
    if Path(SYSFS_IB).is_dir():
        copied = snapshot_rdma("/", target / bundle.SYSFS_DIR)
        commands[bundle.SYSFS_DIR] = {"copied_files": len(copied)}
    gpu_bus_ids = {g["index"]: g["pci_bus_id"] for g in (record or {}).get("gpus", [])
                   if isinstance(g.get("pci_bus_id"), str)}
    host = read_platform("/", gpu_bus_ids or None)
    host.persistence_mode = read_persistence_nvml() if record is not None else {}
    commands[PLATFORM_FILE] = {"copied_files": len(snapshot_platform(host, target))}
    from ..report.provenance import snapshot_dmi

    commands["platform/sys/class/dmi/id"] = {"copied_files": len(snapshot_dmi(target))}  # the cover's serials
    from ..fabric.host_addresses import snapshot_addresses

    commands.update(snapshot_addresses(target))  # the host's IPs: a rack tray matched to its IMEX node
    snapshot_commands = dict(SNAPSHOT_COMMANDS) if record is not None else {}
    if Path(SYSFS_IB).is_dir():
        snapshot_commands[bundle.IBV_DEVINFO_FILE] = ["ibv_devinfo", "-v"]
    snapshot_commands["lspci-vvv.txt"] = ["lspci", "-vvv"]
    from ..fabric.recorded_command import record_command

    for name, cmd in snapshot_commands.items():
        commands[name] = record_command(target, name, cmd, timeout_s=120)
    written = sorted(p for p in target.iterdir() if p.name not in left and p.name != bundle.MANIFEST_FILE)
    manifest = {
        "format": "gpufabric-bundle/1",
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "gpufabric_version": __version__,
        "files": [p.name for p in written],
        "commands": commands,
        # each file this run wrote, with its digest: a file put into the folder later is not the bundle's
        "sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in written
                   if p.is_file() and not p.is_symlink()},
    }
    (target / bundle.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    if removed:
        print(f"removed the earlier {', '.join(removed)} from {target} first (names the snapshot writes: "
              "a file this run did not write is not left to pass as its own)")
    print(f"recorded {len(manifest['files'])} file(s) into {target}: {', '.join(manifest['files'])}")
    if left:
        print(f"left in {target} as they were, not this recording's (not in its manifest): "
              f"{', '.join(printable(name) for name in sorted(left))}")
    return EXIT_OK


def _snapshot_names() -> tuple[set[str], set[str]]:
    """The top-level files and folders `gpufabric snapshot` writes into a bundle."""
    from ..fabric import bundle
    from ..fabric.host_addresses import ADDRESS_FILES
    from ..fabric.platform_record import PLATFORM_DIR, PLATFORM_FILE

    files = {bundle.NVML_FILE, bundle.HEALTH_FILE, bundle.MANIFEST_FILE, *SNAPSHOT_COMMANDS,
             bundle.IBV_DEVINFO_FILE, "lspci-vvv.txt", PLATFORM_FILE, *ADDRESS_FILES}
    return files, {bundle.SYSFS_DIR, PLATFORM_DIR}


def _clear_earlier_snapshot(target: Path) -> list[str]:
    """Remove what an earlier snapshot wrote into ``target`` (the files of the names snapshot writes; its folders
    where the earlier manifest lists them), so that a file this run cannot write (``ip`` or NVML missing now) is not
    left to pass as this recording's. Returns the names removed."""
    from ..errors import GpuFabricError
    from ..fabric.bundle import MANIFEST_FILE

    files, folders = _snapshot_names()
    try:
        earlier = json.loads((target / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = None
    listed = earlier.get("files") if isinstance(earlier, dict) and isinstance(earlier.get("files"), list) else []
    removed = []
    for name in sorted(files | (folders & {name for name in listed if isinstance(name, str)})):
        path = target / name
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif name in folders and path.is_dir():
                shutil.rmtree(path)
            else:
                continue
        except OSError as exc:
            raise GpuFabricError(f"{path}: an earlier snapshot's file that cannot be removed ({exc.strerror or exc}):"
                                 " snapshot into an empty folder") from None
        removed.append(name)
    # a folder of the names snapshot copies into that no earlier manifest lists: its files and this run's would mix
    for name in sorted(folders - set(removed)):
        if (target / name).exists() or (target / name).is_symlink():
            raise GpuFabricError(f"{target / name}: a folder no earlier snapshot's manifest lists (the snapshot copies "
                                 "into it, and its files and this run's would mix): move it aside or snapshot into "
                                 "an empty folder")
    return [name for name in removed if name != MANIFEST_FILE]
