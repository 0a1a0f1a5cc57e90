"""`gpufabric`: look at a machine or a bundle, record bundles, write and check profiles, parse tool output.

Exit codes (docs/exit-codes.md): `accept` and `fleet` end in a verdict and speak pytest's codes (0 ACCEPTED,
1 REJECTED, 4 a usage error, 6 INCOMPLETE, 7 NOT TESTED, ...); the other commands: 0 done; 2 bad input (unknown
profile, corrupt bundle, unparsable file, bad arguments); 3 the machine cannot be asked (no NVIDIA driver / NVML,
no GPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from . import __version__
from .accept import DEFAULT_PROFILE, cmd_accept
from .errors import GpuFabricError, HardwareUnavailable
from .report.results import json_text

EXIT_OK, EXIT_BAD_INPUT, EXIT_NO_HARDWARE = 0, 2, 3
#: the commands that end in a verdict: their bad input is pytest's usage error, and a machine that cannot be asked
#: is NOT TESTED, as `pytest --gpu-profile` says them
VERDICT_COMMANDS = ("accept", "fleet")
EXIT_USAGE, EXIT_NOT_TESTED = 4, 7
#: Ctrl-C: pytest's "interrupted" for the commands that run pytest, the shell's 128 + SIGINT for the others
EXIT_INTERRUPTED, EXIT_SIGINT = 2, 130

#: What `gpufabric snapshot` records with nvidia-smi, by bundle file name.
SNAPSHOT_COMMANDS = {
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "nvidia-smi-nvlink-s.txt": ["nvidia-smi", "nvlink", "-s"],
    "nvidia-smi-q.xml": ["nvidia-smi", "-q", "-x"],
}


def _fabric(replay: str | None):
    if replay:
        from .fabric.bundle import load_bundle

        return load_bundle(replay)
    from .fabric.nvml import collect_fabric

    try:
        return collect_fabric()
    except HardwareUnavailable as exc:
        raise exc.for_flag("--replay BUNDLE") from None


def cmd_show(args: argparse.Namespace) -> int:
    fabric = _fabric(args.replay)
    if args.json:
        print(json_text(fabric.to_dict()))
        return EXIT_OK
    print(f"source: {fabric.source}")
    print(f"driver: {fabric.driver_version or 'not recorded'}   "
          f"CUDA driver: {fabric.cuda_driver_version or 'not recorded'}")
    for gpu in fabric.gpus:
        links = fabric.nvlink_count(gpu)
        print(
            f"{gpu.label}: {gpu.name or '?'}  serial {gpu.serial or '?'}  bus {gpu.pci_bus_id or '?'}  "
            f"PCIe gen {gpu.pcie_gen_max or '?'} x{gpu.pcie_width_max or '?'}  "
            f"NVLinks {links if links is not None else '?'}"
        )
    devices = list(fabric.matrix)
    if devices:
        width = max(len(d) for d in devices) + 2
        print("".ljust(width) + "".join(d.ljust(width) for d in devices) + "CPU Affinity")
        for row in devices:
            cells = "".join(fabric.matrix[row].get(col, "").ljust(width) for col in devices)
            print(row.ljust(width) + cells + fabric.cpu_affinity.get(row, ""))
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Record this machine into a bundle: NVML (the richest), what nvidia-smi prints, the RDMA devices (a copy
    of /sys/class/infiniband and `ibv_devinfo -v`) and the platform settings (platform.json and a copy of the
    sysfs/procfs files they were read from; `lspci -vvv` where lspci is installed). A machine with neither GPUs
    nor RDMA devices gets no bundle."""
    from .fabric import bundle
    from .fabric.nvml import collect_record
    from .fabric.platform import PLATFORM_FILE, read_persistence_nvml, read_platform, snapshot_platform
    from .fabric.rdma import SYSFS_IB, snapshot_rdma

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
    if record is not None:
        (target / bundle.NVML_FILE).write_text(json_text(record) + "\n",
                                               encoding="utf-8")
    commands = {}
    if nvml_error is not None:
        commands[bundle.NVML_FILE] = {"error": str(nvml_error)}
    else:
        from .nodehealth.record import snapshot_health

        commands.update(snapshot_health(target))  # health.json: what `gpufabric health --replay` judges
    if Path(SYSFS_IB).is_dir():
        copied = snapshot_rdma("/", target / bundle.SYSFS_DIR)
        commands[bundle.SYSFS_DIR] = {"copied_files": len(copied)}
    gpu_bus_ids = {g["index"]: g["pci_bus_id"] for g in (record or {}).get("gpus", [])
                   if isinstance(g.get("pci_bus_id"), str)}
    host = read_platform("/", gpu_bus_ids or None)
    host.persistence_mode = read_persistence_nvml() if record is not None else {}
    commands[PLATFORM_FILE] = {"copied_files": len(snapshot_platform(host, target))}
    from .report.provenance import snapshot_dmi

    commands["platform/sys/class/dmi/id"] = {"copied_files": len(snapshot_dmi(target))}  # the cover's serials
    snapshot_commands = dict(SNAPSHOT_COMMANDS) if record is not None else {}
    if Path(SYSFS_IB).is_dir():
        snapshot_commands[bundle.IBV_DEVINFO_FILE] = ["ibv_devinfo", "-v"]
    snapshot_commands["lspci-vvv.txt"] = ["lspci", "-vvv"]
    for name, cmd in snapshot_commands.items():
        if shutil.which(cmd[0]) is None:
            commands[name] = {"cmd": cmd, "error": f"{cmd[0]} not on PATH"}
            continue
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            commands[name] = {"cmd": cmd, "error": str(exc)}
            continue
        commands[name] = {"cmd": cmd, "returncode": done.returncode, "stderr": done.stderr[-2000:]}
        if done.returncode == 0:
            (target / name).write_text(done.stdout, encoding="utf-8")
    manifest = {
        "format": "gpufabric-bundle/1",
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "gpufabric_version": __version__,
        "files": sorted(p.name for p in target.iterdir() if p.name != bundle.MANIFEST_FILE),
        "commands": commands,
    }
    (target / bundle.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"recorded {len(manifest['files'])} file(s) into {target}: {', '.join(manifest['files'])}")
    return EXIT_OK


def cmd_health(args: argparse.Namespace) -> int:
    """`gpufabric health`: nodehealth/command.py (exit 0 healthy, 1 drain, 6 could not tell)."""
    from .nodehealth.command import run_health

    return run_health(args)


def cmd_profile_init(args: argparse.Namespace) -> int:
    from .profile.init import build_profile_document, profile_yaml_from_fabric
    from .profile.loader import load_profile, validate_document

    if args.from_fleet:
        return _profile_from_fleet(args)
    output = Path(args.output)
    name = _profile_name(args, output)
    _refuse_to_overwrite(output, args.force)
    fabric = _fabric(args.replay)
    if not fabric.gpus:
        raise GpuFabricError(f"{fabric.source} records no GPU (nvidia-smi-topo-m.txt, nvidia-smi-q.xml or "
                             "nvml.json): there is nothing to write a profile from")
    validate_document(build_profile_document(fabric, name), output)  # nothing is written for a bad name
    measured = None
    if args.measure:
        from .fabric.bundle import bundle_directory
        from .profile.measure import measure_machine

        margin = 0.9 if args.margin is None else args.margin
        if not 0 < margin <= 1:
            raise GpuFabricError(f"--margin {margin:g}: give a fraction in (0, 1], e.g. 0.9")
        if args.repeats < 1:
            raise GpuFabricError(f"--repeats {args.repeats}: give 1 or more")
        measured = measure_machine(fabric, name, repeats=args.repeats, margin=margin,
                                   bundle=bundle_directory(args.replay) if args.replay else None,
                                   say=lambda line: print(f"gpufabric: {line}", file=sys.stderr, flush=True))
    text = profile_yaml_from_fabric(fabric, name, measured)
    import yaml

    validate_document(yaml.safe_load(text), output)
    output.write_text(text, encoding="utf-8")
    profile = load_profile(str(output))
    print(f"wrote {output} (profile {profile.name}, sha256 {profile.sha256})")
    return EXIT_OK


def _profile_name(args: argparse.Namespace, output: Path) -> str:
    """--name, else the output file's stem; one that is not a profile's name says how to give one."""
    import re

    from .profile.loader import name_pattern

    name = args.name or output.stem
    if re.fullmatch(name_pattern(), name):
        return name
    rule = "lower-case letters, digits, '.', '_' and '-'"
    suggestion = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "my-machine"
    if args.name:
        raise GpuFabricError(f"--name {name!r}: a profile's name is {rule}, e.g. {suggestion}")
    raise GpuFabricError(f"-o {output}: the profile is named after the file, and {name!r} is not a profile name "
                         f"({rule}): give one with --name, e.g. --name {suggestion}")


def _refuse_to_overwrite(output: Path, force: bool) -> None:
    """A profile file already there may be hand-edited: it is replaced only when asked."""
    if output.is_dir():
        raise GpuFabricError(f"-o {output}: a directory; give the profile file to write, e.g. {output}/NAME.yaml")
    if output.exists() and not force:
        raise GpuFabricError(f"-o {output}: the file exists and was left as it is; give --force to replace it")


def _profile_from_fleet(args: argparse.Namespace) -> int:
    """`profile init --from-fleet DIR`: floors from the fleet's distribution (fleet/golden.py)."""
    import yaml

    from .fleet.golden import golden_profile_yaml
    from .profile.loader import load_profile, validate_document

    if args.replay:
        raise GpuFabricError("--from-fleet and --replay: a profile comes from one of them")
    output = Path(args.output)
    name = _profile_name(args, output)
    _refuse_to_overwrite(output, args.force)
    try:
        margin = 0.95 if args.margin is None else args.margin
        text, document, used, left_out = golden_profile_yaml(Path(args.from_fleet), name, args.percentile, margin)
    except ValueError as exc:
        raise GpuFabricError(str(exc)) from None
    validate_document(yaml.safe_load(text), output, partial=True)  # nothing is written for a bad document
    output.write_text(text, encoding="utf-8")
    profile = load_profile(str(output))
    print(f"wrote {output} (profile {profile.name}, extends {document['extends']}, sha256 {profile.sha256})")
    print(f"floors from {len(used)} accepted node(s): {', '.join(used)}")
    if left_out:
        print(f"left out, not accepted: {', '.join(left_out)}")
    return EXIT_OK


def cmd_profile_validate(args: argparse.Namespace) -> int:
    from .profile.loader import load_profile

    for spec in args.files:
        profile = load_profile(spec, Path.cwd())
        print(f"{profile.path}: valid profile {profile.name} (sha256 {profile.sha256})")
    return EXIT_OK


def cmd_parse(args: argparse.Namespace) -> int:
    from .formats.dcgm_diag import parse_dcgm_diag
    from .formats.nccl_tests import parse_nccl_tests_json
    from .formats.nvbandwidth import parse_nvbandwidth
    from .formats.nvlink import parse_nvlink_any
    from .formats.perftest import parse_perftest
    from .formats.topo import parse_topo_m

    # kind -> (the command whose output it reads, its parser)
    parsers = {
        "topo": ("nvidia-smi topo -m", lambda text: parse_topo_m(text).to_json()),
        "nvlink": ("nvidia-smi nvlink -g 0|-gt d|-gt r|-s|-e", parse_nvlink_any),
        "nccl-tests": ("nccl-tests *_perf", lambda text: parse_nccl_tests_json(text, args.nccl_op)),
        "perftest": ("perftest ib_*_bw", parse_perftest),
        "dcgm-diag": ("dcgmi diag", parse_dcgm_diag),
        "nvbandwidth": ("nvbandwidth", parse_nvbandwidth),
    }
    try:
        text = Path(args.file).read_text(encoding="utf-8", errors="replace") if args.file != "-" else sys.stdin.read()
    except OSError as exc:
        raise GpuFabricError(f"cannot read {args.file}: {exc.strerror}") from None
    tool, parser = parsers[args.kind]
    try:
        result = parser(text)
    except ValueError as exc:
        # an empty file may well be the tool's output (nvlink -s without NVLink): say why, not "not its output"
        what = "" if not text.strip() else f"not `{tool}` output: "
        raise GpuFabricError(f"{args.file}: {what}{exc}") from None
    if args.reference is not None or args.line_rate is not None:
        result = _judged(args, result)
    print(json_text(result))
    return EXIT_OK


def _judged(args: argparse.Namespace, result: dict) -> dict:
    """`parse ... --reference [MODEL]`: the result held against the model's published peak (reference_judge.py);
    the judgement, or why there is none, on stderr."""
    from . import reference_judge as judge
    from .reference import load_references

    if args.kind == "perftest":
        if args.reference:
            raise GpuFabricError(f"--reference {args.reference}: perftest is judged against the port's line rate "
                                 "(--line-rate), not a GPU model")
        rate = None
        if args.line_rate is not None:
            from .units import parse_gbit

            try:
                rate = float(args.line_rate) if _is_number(args.line_rate) else parse_gbit(args.line_rate)
            except ValueError as exc:
                raise GpuFabricError(f"--line-rate: {exc}") from None
        try:
            judged, lines = judge.judge_perftest(result, rate, "--line-rate")
        except ValueError as exc:
            raise GpuFabricError(str(exc)) from None
    else:
        names = {"nccl-tests": judge.nccl_tests_device_names, "nvbandwidth": judge.nvbandwidth_device_names,
                 "dcgm-diag": lambda _: []}[args.kind](result)
        references = load_references()
        try:
            ref, model_from, reason = judge.resolve_model(args.reference, names, references, args.kind)
        except ValueError as exc:
            raise GpuFabricError(str(exc)) from None
        if ref is None:
            if args.kind == "dcgm-diag" and not args.reference:
                reason = ("dcgmi diag does not print the GPU model (at most PCI device ids); name it: "
                          f"--reference MODEL ({judge.known_models_line(references)})")
            judged, lines = judge.no_reference(result, reason), []
        else:
            judge_fn = {"nccl-tests": judge.judge_nccl_tests, "nvbandwidth": judge.judge_nvbandwidth,
                        "dcgm-diag": judge.judge_dcgm_diag}[args.kind]
            judged, lines = judge_fn(result, ref, references, model_from)
    if judged.get("reference") is None:
        lines = [f"gpufabric: no reference: {judged['reference_reason']}"]
    for line in lines:
        print(line, file=sys.stderr)
    return judged


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cmd_reference(args: argparse.Namespace) -> int:
    """`gpufabric reference [MODEL] [--json]`: the catalogue of published GPU figures, or one model's entry."""
    from .reference import find_reference, load_references
    from .reference_judge import unknown_model_message

    references = load_references()
    if args.model:
        ref = find_reference(args.model, references)
        if ref is None:
            raise GpuFabricError(unknown_model_message(args.model, references))
        if args.json:
            print(json_text(ref.to_json()))
        else:
            print(_reference_text(ref))
        return EXIT_OK
    if args.json:
        print(json_text({model: ref.to_json() for model, ref in sorted(references.items())}))
        return EXIT_OK
    rows = [("model", "name", "memory", "mem GB/s", "NVLink GB/s/dir", "PCIe gen", "power W")]
    for model, ref in sorted(references.items()):
        rows.append((model, ref.name, _memory_words(ref), _figure(ref.memory_bandwidth_gbps),
                     _figure(ref.nvlink_gbps_per_direction) if ref.nvlink_supported else "none",
                     _figure(ref.pcie_generation), _figure(ref.power_limit_w)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print("'-' = not sourced (the entry's notes say why); `gpufabric reference MODEL` for one model with its sources")
    return EXIT_OK


def _figure(value: float | int | None) -> str:
    return "-" if value is None else f"{value:g}"


def _memory_words(ref) -> str:
    sold = f"{ref.memory_gb_sold:g} GB" if ref.memory_gb_sold is not None else "-"
    return f"{sold} {ref.memory_type}" if ref.memory_type else sold


def _reference_text(ref) -> str:
    from .units import MIB

    nvml = (f"{ref.memory_bytes_nvml} bytes as NVML reports ({ref.memory_bytes_nvml // MIB} MiB)"
            if ref.memory_bytes_nvml is not None else "NVML's total varies (notes)")
    nvlink = "none"
    if ref.nvlink_supported:
        nvlink = (f"gen {_figure(ref.nvlink_generation)}, {_figure(ref.nvlink_links)} links x "
                  f"{_figure(ref.nvlink_gbps_per_link_per_direction)} GB/s = {_figure(ref.nvlink_gbps_per_direction)} "
                  "GB/s per direction")
    lines = [
        f"{ref.model}: {ref.name}",
        f"  NVML names: {', '.join(ref.nvml_names)}; aliases: {', '.join(ref.aliases)}",
        f"  memory: {_memory_words(ref)} sold, {nvml}",
        f"  memory bandwidth: {_figure(ref.memory_bandwidth_gbps)} GB/s",
        f"  NVLink: {nvlink}",
        f"  PCIe: gen {_figure(ref.pcie_generation)} x{_figure(ref.pcie_width)}, "
        f"{_figure(ref.pcie_gbps_per_direction)} GB/s per direction",
        f"  power limit: {_figure(ref.power_limit_w)} W",
        f"  bf16 dense: {_figure(ref.bf16_tflops_dense)} TFLOP/s",
    ]
    if ref.recorded:
        lines.append(f"  recorded: {len(ref.recorded.get('fractions', []))} fractions of these peaks from this "
                     "project's runs (--json shows them)")
    lines.append("  sources:")
    lines += [f"    {s['url']}: {', '.join(s['what'])}" for s in ref.sources]
    lines += [f"  note: {note}" for note in ref.notes]
    return "\n".join(lines)


EXIT_REJECTED = 1  # `gpufabric fleet`, as pytest's


def _printable(text: object) -> str:
    """Text from a node's files for the terminal: control characters (escape sequences that would move the cursor,
    recolour or retitle the operator's terminal) shown as '?'."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def cmd_fleet_report(args: argparse.Namespace) -> int:
    """One verdict for a fleet from its nodes' results folders; exit 0 accepted, 1 rejected, 6 incomplete, 7 not
    tested (no node could be examined), 4 a usage error."""
    import os

    from .fleet.report import build_fleet_document, expected_nodes, write_fleet_report
    from .verdict import EXIT_CODES

    out = Path(args.output)
    sign_key = None
    if args.sign_key:
        from .report.signing import SigningError, load_private_key

        try:
            sign_key = load_private_key(args.sign_key)  # a bad key is said before anything is read
        except SigningError as exc:
            print(f"gpufabric fleet report: --sign-key: {_printable(exc)}", file=sys.stderr)
            return EXIT_USAGE
    signatures = signed = None
    if args.require_signed:
        refused, signatures, signed = _refused_nodes(args, out)
        if refused:
            return EXIT_USAGE
    try:
        expected = expected_nodes(args.expect, dict(os.environ))
        document = build_fleet_document([Path(d) for d in args.dirs], expected, args.profile,
                                        Path(args.fabric) if args.fabric else None, out=out,
                                        max_bytes=int(args.max_node_mb * 1e6), signed=signed)
    except (ValueError, GpuFabricError) as exc:
        print(f"gpufabric fleet report: {_printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if signatures is not None:
        document["signatures"] = signatures
    try:
        paths = write_fleet_report(document, out, sign_key)
    except OSError as exc:
        print(f"gpufabric fleet report: cannot write {exc.filename or args.output}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    counts = document["counts"]
    print(_printable(f"fleet: {document['verdict']}: {document['reason']}"))
    print(f"  {counts['nodes']} node(s) reported, {counts['accepted']} accepted, {counts['missing']} missing, "
          f"{counts['unreadable']} unreadable, {counts['outlier_nodes']} with outliers, {counts['drifted_nodes']} "
          f"drifted (judged by {_printable(document['settings_from'])})")
    findings = [f"  not accepted {node['name']}: {node['verdict'] or node.get('state') or 'no results'}: "
                f"{node['reason']}" for node in document["nodes"] if node["verdict"] != "ACCEPTED"]
    findings += [f"  outlier {node['name']}: {o['check']} {o['subject']} {o['metric']} {o['value']:.4g} {o['unit']} "
                 f"against the fleet's median {o['median']:.4g}"
                 for node in document["nodes"] for o in node["outliers"][:1]]
    findings += [f"  {group['id']}: {group['summary']}" for group in document.get("groups") or []]
    findings += [f"  drift {node['name']}: {d['field']} {d['value']} (fleet: {d['majority']})"
                 for node in document["nodes"] for d in node["drift"][:3]]
    findings += [f"  one hostname, several folders: {d['host']} in {', '.join(d['nodes'])}"
                 for d in document["duplicate_hosts"]]
    for line in findings[:20]:  # the page and the JSON hold them all
        print(_printable(line)[:400])
    if len(findings) > 20:
        print(f"  ... {len(findings) - 20} more finding(s) in {paths['html']}")
    fabric = document.get("fabric")
    if fabric:
        print(f"  fabric: {fabric['verdict']} ({len(fabric['nodes'])} nodes, pairs in {fabric['rounds']} round(s))")
        for problem in fabric["problems"][:10]:
            print(_printable(f"  fabric: {problem}"))
    print("  " + ", ".join(str(path) for path in paths.values()))
    return EXIT_CODES[document["verdict"]]


def _refused_nodes(args: argparse.Namespace, out: Path) -> tuple[bool, dict | None, dict | None]:
    """--require-signed: every node's results signed by --key and untouched, else (True, None, None) with each
    refused node named on stderr (report/signing.py); the third value maps each node folder to the sha256 of the
    bytes verified, which the fleet's reading must find again."""
    from .report.signing import check_node_signatures

    if not args.key:
        print("gpufabric fleet report: --require-signed needs --key PUB.pem (the nodes' Ed25519 public key)",
              file=sys.stderr)
        return True, None, None
    try:
        signatures, refused, signed = check_node_signatures([Path(d) for d in args.dirs], args.key, exclude=[out],
                                                            max_bytes=int(args.max_node_mb * 1e6))
    except (ValueError, GpuFabricError) as exc:
        print(f"gpufabric fleet report: {_printable(exc)}", file=sys.stderr)
        return True, None, None
    if refused:
        print(f"gpufabric fleet report: refused {len(refused)} node result(s) (--require-signed, key "
              f"{signatures['key_id']}); nothing written:", file=sys.stderr)
        for node, why in refused[:50]:
            print(_printable(f"  {node}: {why}")[:600], file=sys.stderr)
        if len(refused) > 50:
            print(f"  ... and {len(refused) - 50} more", file=sys.stderr)
    return bool(refused), signatures, signed


def cmd_fleet_fabric(args: argparse.Namespace) -> int:
    """One rank of the fabric run, as the site's launcher starts one per node (srun, torchrun, mpirun); rank 0
    writes OUTDIR/fabric.json and, with --profile, judges it: exit 0 passed, 1 failed, 4 a usage error."""
    import os

    from .fleet.fabric import FABRIC_FILE, judge_fabric
    from .profile.loader import load_profile
    from .workloads import fabric_pairs

    profile = load_profile(args.profile) if args.profile else None  # a bad profile is said before anything runs
    _require_torch("gpufabric fleet fabric")
    launchers = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK")
    if not any(name in os.environ for name in launchers):
        raise GpuFabricError(
            "gpufabric fleet fabric is one rank of a run across nodes: start it with the site's launcher, one rank "
            "per GPU or per node, e.g. `srun -N 4 --ntasks-per-node=8 gpufabric fleet fabric -o OUT`, `torchrun "
            "--nnodes 4 --nproc-per-node 8 --rdzv-endpoint HOST:29500 $(which gpufabric) fleet fabric -o OUT` or "
            "`mpirun -np 32 -H ... gpufabric fleet fabric -o OUT` (MASTER_ADDR and MASTER_PORT set)")
    # the suspects measured again alone are the pairs the judgement would name: one fraction for both
    fraction = ((profile.data.get("fabric") or {}).get("pairs") or {}).get("min_fraction_of_median", 0.7) \
        if profile else 0.7
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    argv = ["--sizes", ",".join(map(str, _sizes(args.sizes))), "--pair-size", str(_sizes(args.pair_size)[0]),
            "--iters", str(args.iters), "--warmup", str(args.warmup), "--max-rounds", str(args.max_rounds),
            "--min-fraction-of-median", str(fraction), "--confirm-repeats", str(args.confirm_repeats),
            "--backend", args.backend, "--result", str(out / FABRIC_FILE)]
    if args.node_per_rank:
        argv.append("--node-per-rank")
    saved = sys.argv
    sys.argv = ["gpufabric fleet fabric", *argv]
    try:
        fabric_pairs.main()
    finally:
        sys.argv = saved
    if os.environ.get("RANK", "0") != "0":
        return EXIT_OK
    result = json.loads((out / FABRIC_FILE).read_text(encoding="utf-8"))
    print(f"fabric: {result['world_size']} ranks on {len(result['nodes'])} node(s), {len(result['pairs'])} pair "
          f"measurement(s) in {result['rounds']} round(s) ({result['backend']}); wrote {out / FABRIC_FILE}")
    if profile is None:
        return EXIT_OK
    judged = judge_fabric(result, profile.data)
    print(f"fabric: {judged['verdict']}")
    for problem in judged["problems"]:
        print(f"  {problem}")
    return EXIT_REJECTED if judged["verdict"] == "failed" else EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Digests and signature of results JSON or HTML reports (report/signing.py)."""
    from .report.signing import verify_command

    code, lines = verify_command(args.files, args.key, args.allow_unsigned)
    for line in lines:
        print(_printable(line))
    return code


BENCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "copy")


def _sizes(text: str) -> list[int]:
    from .units import parse_bytes

    try:
        sizes = [parse_bytes(part) for part in text.split(",") if part]
    except ValueError as exc:
        raise GpuFabricError(f"--sizes: {exc}") from None
    if not sizes or min(sizes) < 4:
        raise GpuFabricError(f"--sizes {text!r}: give sizes of at least 4 bytes, e.g. 1M,256M,1G")
    return sizes


def cmd_bench(args: argparse.Namespace) -> int:
    """Numbers without a profile: the suite's harnesses on this machine (gloo: its CPUs)."""
    from .workloads.bandwidth import run_collectives, run_copy

    ops = args.op.split(",")
    unknown = sorted(set(ops) - set(BENCH_OPS))
    if unknown:
        raise GpuFabricError(f"unknown operation(s) {unknown}; known: {', '.join(BENCH_OPS)}")
    _require_torch("gpufabric bench")
    sizes = _sizes(args.sizes)
    results = {}
    collectives = [op for op in ops if op != "copy"]
    if collectives:
        nprocs = args.nprocs or (_gpu_count("use --backend gloo to run on CPUs") if args.backend == "nccl" else 2)
        results["collectives"] = run_collectives(nprocs, collectives, sizes, backend=args.backend, warmup=args.warmup,
                                                 iters=args.iters, timeout_s=args.timeout)
    if "copy" in ops:
        _gpu_count("copies are between host and GPU memory")  # a machine without one is said here, not by a child
        results["copy"] = run_copy(max(sizes), iters=args.iters, timeout_s=args.timeout)
    if args.json:
        print(json_text({k: {key: v for key, v in r.items() if key != "stdout_tail"} for k, r in results.items()}))
    else:
        for result in results.values():
            print(result["stdout_tail"].rstrip())
    return EXIT_OK


def _gpu_count(hint: str) -> int:
    """This machine's GPUs; none (or no driver) is HardwareUnavailable, ending with ``hint``."""
    from .fabric.nvml import collect_fabric

    try:
        count = len(collect_fabric().gpus)
    except HardwareUnavailable as exc:
        raise HardwareUnavailable(f"{exc.why}; {hint}") from None
    if count == 0:
        raise HardwareUnavailable(f"no GPU found; {hint}")
    return count


def _require_torch(what: str) -> None:
    """Name the extra to install, not a ModuleNotFoundError under a child's command line."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise GpuFabricError(f"{what} runs its workloads with torch, which is not installed here: "
                             "pip install 'pytest-gpufabric[torch]'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufabric", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pytest-gpufabric {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    accept = sub.add_parser(
        "accept", help="run the acceptance suites against a profile, writing the HTML report and JSON results",
        description="Extra arguments go to pytest: any of its options (-k topology, --junitxml=reports/junit.xml) "
                    "and any of this plugin's --gpu-* options (--gpu-waive ID=REASON, --gpu-evidence FILE, "
                    "--gpu-plant-memory-fault GPU, ...; `pytest --help` lists them).",
    )
    accept.add_argument("--profile", default=DEFAULT_PROFILE, help=f"profile name or path (default {DEFAULT_PROFILE})")
    accept.add_argument("--replay", metavar="BUNDLE", help="judge a bundle; default: this machine, or the "
                        "profile's shipped bundle when this machine has no NVIDIA driver")
    accept.add_argument("--html", metavar="FILE", help="the HTML report (default: acceptance.html in the report "
                        "folder, --report-dir or reports/)")
    accept.add_argument("--sign-key", metavar="KEY.pem", help="sign the results and the report with this Ed25519 "
                        "private key (`openssl genpkey -algorithm ed25519 -out KEY.pem`)")
    accept.add_argument("--customer", metavar="NAME", help="the customer named on the report's cover")
    accept.add_argument("--operator", metavar="NAME", help="who ran the acceptance, named on the cover (default: the "
                        "user it runs as)")
    accept.add_argument("--burn-in", metavar="DURATION", help="also run the burn-in for DURATION (90s, 10m, 2h)")
    accept.add_argument("--report-dir", metavar="DIR", help="where gpufabric-results.json and the HTML report go "
                        "(default: reports/); {host}, {task} and {fleet} are filled in as --gpu-report-dir's are")
    accept.set_defaults(func=cmd_accept, takes_pytest_args=True)

    verify = sub.add_parser(
        "verify", help="check that a results JSON or HTML report is as the run wrote it, and who signed it",
        description="Exit 0: untouched and signed (with --key: by that key), its verdict the one its own promises "
                    "give, and results and reports given together of one run; 1: changed since the run (the parts "
                    "that changed are named), unsigned (digests anyone can recompute show nothing of who wrote a "
                    "file: --allow-unsigned accepts that), signed by another key, or of another run; 2: a file or key "
                    "that cannot be read.")
    verify.add_argument("files", nargs="+", metavar="RESULTS.json|REPORT.html",
                        help="results files or HTML reports a run wrote")
    verify.add_argument("--key", metavar="PUB.pem", help="the Ed25519 public key the files must be signed with "
                        "(`openssl pkey -in KEY.pem -pubout -out PUB.pem`); without it a signature is checked against "
                        "the key it names, which shows it whole, not whose it is")
    verify.add_argument("--allow-unsigned", action="store_true",
                        help="accept an unsigned file whose digests match (they show it whole, not who wrote it)")
    verify.set_defaults(func=cmd_verify)

    bench = sub.add_parser("bench", help="measure collectives or copies without a profile",
                           description="The bandwidth suite's harnesses, printing nccl-tests' columns.")
    bench.add_argument("op", help=f"comma-separated: {', '.join(BENCH_OPS)}")
    bench.add_argument("--backend", choices=["nccl", "gloo"], default="nccl", help="gloo runs on CPUs")
    bench.add_argument("--nprocs", type=int, help="ranks (default: every GPU; 2 with gloo)")
    bench.add_argument("--sizes", default="1M,256M,1G", help="comma-separated, nccl-tests style (1M = 1 MiB)")
    bench.add_argument("--iters", type=int, default=20, help="timed operations per size (default %(default)s)")
    bench.add_argument("--warmup", type=int, default=5, help="untimed operations first (default %(default)s)")
    bench.add_argument("--timeout", type=float, default=600, help="seconds before the run is killed")
    bench.add_argument("--json", action="store_true", help="the full results as JSON")
    bench.set_defaults(func=cmd_bench)

    show = sub.add_parser("show", help="print the machine's GPUs and topology (live, or a bundle)")
    show.add_argument("--replay", metavar="BUNDLE", help="a bundle directory, .tar.gz or shipped bundle name")
    show.add_argument("--json", action="store_true", help="the full model as JSON")
    show.set_defaults(func=cmd_show)

    snapshot = sub.add_parser("snapshot", help="record this machine (NVML + nvidia-smi) into a bundle directory")
    snapshot.add_argument("dir", help="the bundle directory to write (made if missing); judge it later with "
                          "--replay DIR or pytest --gpu-replay DIR")
    snapshot.set_defaults(func=cmd_snapshot)

    from .nodehealth.command import add_health_parser

    add_health_parser(sub, cmd_health)

    profile = sub.add_parser("profile", help="write or check machine profiles")
    profile_sub = profile.add_subparsers(dest="profile_command", required=True)
    init = profile_sub.add_parser("init", help="write a profile that this machine (or bundle) passes")
    init.add_argument("--replay", metavar="BUNDLE", help="write it from a recorded bundle (directory, .tar.gz or "
                      "shipped name) instead of this machine")
    init.add_argument("-o", "--output", required=True, metavar="FILE", help="the profile file to write")
    init.add_argument("--force", action="store_true", help="replace the output file if it exists (by default an "
                      "existing file, perhaps edited by hand, is left as it is and nothing is written)")
    init.add_argument("--name", help="profile name: lower-case letters, digits, '.', '_' and '-' (default: the output "
                      "file's name without .yaml)")
    init.add_argument("--from-fleet", metavar="DIR", help="floors from a fleet's results (the folder `gpufabric "
                      "fleet report` read): the profile extends the one the nodes ran")
    init.add_argument("--measure", action="store_true", help="also run every measurement this machine supports "
                      "(copies, collectives, HBM bandwidth, the GEMM rate, the power hold, the PCIe link under load, "
                      "memory behaviour; with --replay: the bundle's recordings) and write floors at --margin below "
                      "what it measured, each with its figures, spread and date beside it")
    init.add_argument("--repeats", type=int, default=3, help="with --measure: runs of each quick measurement, to "
                      "see its spread (default %(default)s)")
    init.add_argument("--percentile", type=float, default=5.0,
                      help="with --from-fleet: floors at this percentile of the accepted nodes (default %(default)s)")
    init.add_argument("--margin", type=float, default=None,
                      help="floors times this fraction of what was measured: with --from-fleet (default 0.95) or "
                           "--measure (default 0.9)")
    init.set_defaults(func=cmd_profile_init)
    validate = profile_sub.add_parser("validate", help="check profile files against the schema")
    validate.add_argument("files", nargs="+", metavar="FILE", help="profile files (or names of shipped profiles)")
    validate.set_defaults(func=cmd_profile_validate)

    fleet = sub.add_parser("fleet", help="one verdict for many servers from their results")
    fleet_sub = fleet.add_subparsers(dest="fleet_command", required=True)
    report = fleet_sub.add_parser(
        "report", help="judge a fleet from its nodes' results folders",
        description="Each DIR is a node's results folder (gpufabric-results.json; the node's name is the folder's), "
                    "or a folder of them (reports/fleet/ of --gpu-report-dir reports/fleet/{host}).")
    report.add_argument("dirs", nargs="+", metavar="DIR", help="node results folders, or folders of them")
    report.add_argument("--expect", metavar="HOSTLIST", help="the nodes that must report, in Slurm's hostlist "
                        "syntax (node[01-64]); default: SLURM_JOB_NODELIST when set")
    report.add_argument("--profile", help="the one profile the fleet is judged by: a node that ran another (by "
                        "name or content) is not accepted, and its fleet: section sets the rules (default: the "
                        "profile a majority of the nodes ran, its rules from the shipped profile of that name when "
                        "it is the same content)")
    report.add_argument("-o", "--output", default="reports/fleet-report", metavar="OUTDIR",
                        help="where fleet.html, fleet-results.json and fleet-junit.xml go (default %(default)s)")
    report.add_argument("--fabric", metavar="FILE", help="the fabric run's fabric.json (`gpufabric fleet fabric`; "
                        "default: a fabric.json beside the node folders)")
    report.add_argument("--max-node-mb", type=float, default=64, metavar="MB",
                        help="a node's results file larger than this is unreadable, not read (default %(default)s)")
    report.add_argument("--require-signed", action="store_true", help="refuse the fleet (exit 4, nothing written) "
                        "when a node's results are unsigned, changed since the run or signed by another key than "
                        "--key; each such node is named")
    report.add_argument("--key", metavar="PUB.pem", help="with --require-signed: the Ed25519 public key every "
                        "node's results must be signed with (--gpu-sign-key's pair)")
    report.add_argument("--sign-key", metavar="KEY.pem", help="sign fleet-results.json and fleet.html with this "
                        "Ed25519 private key (`openssl genpkey -algorithm ed25519 -out KEY.pem`); `gpufabric verify` "
                        "checks them")
    report.set_defaults(func=cmd_fleet_report)
    fabric = fleet_sub.add_parser(
        "fabric", help="measure the fabric between the nodes: one rank per node, started by your launcher",
        description="srun --ntasks-per-node=1 gpufabric fleet fabric -o reports/fleet (or torchrun, mpirun): an "
                    "all_reduce across every node, then every node pair in rounds (the slow node, the slow pair); "
                    "rank 0 writes OUTDIR/fabric.json, which `gpufabric fleet report` judges with the rest.")
    fabric.add_argument("--backend", choices=["nccl", "gloo"], default="nccl", help="gloo runs on CPUs")
    fabric.add_argument("--sizes", default="64M,1G", help="all-node all_reduce sizes (1M = 1 MiB)")
    fabric.add_argument("--pair-size", default="256M", help="bytes each pair exchanges each way")
    fabric.add_argument("--iters", type=int, default=5, help="timed operations per size and pair (default %(default)s)")
    fabric.add_argument("--warmup", type=int, default=2, help="untimed operations first (default %(default)s)")
    fabric.add_argument("--max-rounds", type=int, default=0, help="0: every pair meets (N-1 rounds)")
    fabric.add_argument("--confirm-repeats", type=int, default=2, help="how many times a pair that looked slow in "
                        "its round is measured again alone before it is named (default %(default)s)")
    fabric.add_argument("--node-per-rank", action="store_true", help="each rank a node (one host's GPUs)")
    fabric.add_argument("--profile", help="judge the result with this profile's fabric: section (rank 0)")
    fabric.add_argument("-o", "--output", default="reports/fleet", metavar="OUTDIR",
                        help="where rank 0 writes fabric.json (default %(default)s)")
    fabric.set_defaults(func=cmd_fleet_fabric)

    parse = sub.add_parser("parse", help="parse a tool's text output into JSON")
    parse.add_argument("kind", choices=["topo", "nvlink", "nccl-tests", "perftest", "dcgm-diag", "nvbandwidth"],
                       help="topo: `nvidia-smi topo -m`; nvlink: `nvidia-smi nvlink -g 0`, `-gt d`, `-gt r`, `-s` or "
                       "`-e` (told apart by their link lines); nccl-tests: the result tables of all_reduce_perf, "
                       "sendrecv_perf, ... (one run, or {\"runs\": [...]} for a log of several); perftest: one "
                       "ib_write_bw/ib_read_bw/ib_send_bw run, client or server side, bandwidths in Gb/s; dcgm-diag: "
                       "`dcgmi diag -r N` (its table of DCGM 1.x-4.x, or -j JSON): each test with its status and "
                       "message per GPU; nvbandwidth: its text (v0.4-v0.10) or -j JSON: each test case with its "
                       "matrix in GB/s")
    parse.add_argument("file", help="the saved output, or - for standard input")
    parse.add_argument("--op", dest="nccl_op", help="nccl-tests: the test (all_reduce or all_reduce_perf) of a "
                       "run whose output does not say (before nccl-tests 2.16 no `# Collective test starting:` "
                       "line names it); the output's own line, then a `*_perf` command line in the log, win over it")
    parse.add_argument("--reference", nargs="?", const="", default=None, metavar="MODEL",
                       help="nccl-tests, nvbandwidth, dcgm-diag: hold the figures against the GPU model's published "
                       "peak (MODEL as NVML names it or an alias, e.g. h100; default: the model the output names) "
                       "and what this project's runs reached; adds a `reference` block and fractions to the JSON and "
                       "prints a judgement on stderr. perftest: against the port's line rate (--line-rate)")
    parse.add_argument("--line-rate", metavar="RATE", help="perftest: the port's line rate, e.g. 25Gb/s or 400 "
                       "(Gb/s); perftest does not print it")
    parse.set_defaults(func=cmd_parse)

    reference = sub.add_parser("reference", help="published GPU figures: the catalogue, or one model's entry",
                               description="Without MODEL: a table of the catalogue. MODEL as NVML names it "
                               "(\"NVIDIA H100 80GB HBM3\") or an alias (h100).")
    reference.add_argument("model", nargs="?", metavar="MODEL", help="one model's entry (default: the whole catalogue)")
    reference.add_argument("--json", action="store_true", help="every field, the sources and the recorded fractions")
    reference.set_defaults(func=cmd_reference)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, extra = build_parser().parse_known_args(argv)
    except SystemExit as exc:
        if exc.code == 2 and argv[:1] and argv[0] in VERDICT_COMMANDS:
            return EXIT_USAGE  # argparse's usage error, in pytest's code
        raise
    if getattr(args, "nccl_op", None) is not None and args.kind != "nccl-tests":
        build_parser().error("--op is for `gpufabric parse nccl-tests`")
    if getattr(args, "reference", None) is not None and args.kind in ("topo", "nvlink"):
        build_parser().error("--reference is for `gpufabric parse` nccl-tests, perftest, nvbandwidth and dcgm-diag")
    if getattr(args, "line_rate", None) is not None and args.kind != "perftest":
        build_parser().error("--line-rate is for `gpufabric parse perftest`")
    if extra and not getattr(args, "takes_pytest_args", False):
        build_parser().error(f"unrecognized arguments: {' '.join(extra)}")
    verdict = args.command in VERDICT_COMMANDS
    try:
        if getattr(args, "takes_pytest_args", False):
            return args.func(args, extra)
        return args.func(args)
    except HardwareUnavailable as exc:
        print(f"gpufabric: {'NOT TESTED: ' if verdict else ''}{exc}", file=sys.stderr)
        return EXIT_NOT_TESTED if verdict else EXIT_NO_HARDWARE
    except GpuFabricError as exc:
        print(f"gpufabric: {exc}", file=sys.stderr)
        return EXIT_USAGE if verdict else EXIT_BAD_INPUT
    except OSError as exc:  # an output path that cannot be written, a directory that cannot be made
        print(f"gpufabric: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE if verdict else EXIT_BAD_INPUT
    except KeyboardInterrupt:
        # Ctrl-C outside pytest's own handling (while the report is written): one line, what is on disk kept
        print("gpufabric: interrupted; what was written before stays (the results file is whole, or the last "
              "one): rerun to finish", file=sys.stderr)
        return EXIT_INTERRUPTED if verdict else EXIT_SIGINT


if __name__ == "__main__":
    sys.exit(main())
