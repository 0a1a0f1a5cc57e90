"""`gpufabric profile init` and `gpufabric profile validate`: write a profile that a machine, a bundle or a fleet
passes, and check profile files against the schema."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuFabricError
from .common import EXIT_OK, finite_number, read_fabric, whole_number


def register(sub: argparse._SubParsersAction) -> None:
    profile = sub.add_parser("profile", help="list, write or check machine profiles",
                             description="A profile says what a machine was sold as (docs/profiles.md). A name is "
                             "looked up in ./profiles of the folder the command runs in, then GPUFABRIC_PROFILE_PATH, "
                             "then the shipped profiles.")
    profile_sub = profile.add_subparsers(dest="profile_command", required=True)
    listing = profile_sub.add_parser("list", help="the profiles a name finds, in search order",
                                     description="Every profile name --profile takes here, with its GPUs, its "
                                     "description and the file it resolves to.")
    listing.set_defaults(func=cmd_profile_list)
    init = profile_sub.add_parser("init", help="write a profile that this machine (or bundle) passes",
                                  description="Write a profile from this machine (NVML), a bundle (--replay) or a "
                                  "fleet's results (--from-fleet). Run it on a machine known to be good: with "
                                  "--measure the floors sit --margin below what it measured.")
    init.add_argument("--replay", metavar="BUNDLE", help="write it from a recorded bundle (directory, .tar.gz or "
                      "shipped name) instead of this machine")
    init.add_argument("-o", "--output", required=True, metavar="FILE", help="the profile file to write")
    init.add_argument("--force", action="store_true", help="replace the output file if it exists (by default an "
                      "existing file, perhaps edited by hand, is left as it is and nothing is written)")
    init.add_argument("--name", help="profile name: lower-case letters, digits, '.', '_' and '-' (default: the output "
                      "file's name without .yaml)")
    init.add_argument("--from-fleet", metavar="DIR", help="floors from a fleet's results (the folder `gpufabric "
                      "fleet report` read): the profile extends the one the nodes ran")
    init.add_argument("--allow-replays", action="store_true", help="with --from-fleet: take floors from nodes whose "
                      "results are replays of recorded bundles too (as `fleet report --allow-replays`)")
    init.add_argument("--measure", action="store_true", help="also run every measurement this machine supports "
                      "(copies, collectives, HBM bandwidth, the GEMM rate, the power hold, the PCIe link under load, "
                      "memory behaviour; with --replay: the bundle's recordings) and write floors at --margin below "
                      "what it measured, each with its figures, spread and date beside it")
    init.add_argument("--repeats", type=whole_number(1, 1000),
                      default=3, help="with --measure: runs of each quick measurement, to "
                      "see its spread (default %(default)s)")
    init.add_argument("--percentile", type=finite_number(0, 50, above_low=True, below_high=True), default=5.0,
                      help="with --from-fleet: floors at this percentile of the accepted nodes (default %(default)s)")
    init.add_argument("--margin", type=finite_number(0, 1, above_low=True), default=None,
                      help="floors times this fraction of what was measured: with --from-fleet (default 0.95) or "
                           "--measure (default 0.9)")
    init.set_defaults(func=cmd_profile_init)
    validate = profile_sub.add_parser("validate", help="check profile files against the schema",
                                      description="Read each profile (resolving `extends`), check it against the "
                                      "schema and the GPU reference catalogue; exit 2 at the first bad one.")
    validate.add_argument("files", nargs="+", metavar="FILE", help="profile files (or names of shipped profiles)")
    validate.set_defaults(func=cmd_profile_validate)


def cmd_profile_init(args: argparse.Namespace) -> int:
    from ..profile.init import build_profile_document, profile_yaml_from_fabric
    from ..profile.loader import load_profile, validate_document

    if args.from_fleet:
        return _profile_from_fleet(args)
    output = Path(args.output)
    name = _profile_name(args, output)
    _refuse_to_overwrite(output, args.force)
    fabric = read_fabric(args.replay)
    if not fabric.gpus:
        raise GpuFabricError(f"{fabric.source} records no GPU (nvidia-smi-topo-m.txt, nvidia-smi-q.xml or "
                             "nvml.json): there is nothing to write a profile from")
    validate_document(build_profile_document(fabric, name), output)  # nothing is written for a bad name
    measured = None
    if args.measure:
        from ..fabric.bundle import bundle_directory
        from ..kinds import diagnostics
        from ..profile.measure import measure_machine

        margin = 0.9 if args.margin is None else args.margin
        if not 0 < margin <= 1:
            raise GpuFabricError(f"--margin {margin:g}: give a fraction in (0, 1], e.g. 0.9")
        if args.repeats < 1:
            raise GpuFabricError(f"--repeats {args.repeats}: give 1 or more")
        measured = measure_machine(fabric, name, repeats=args.repeats, margin=margin,
                                   bundle=bundle_directory(args.replay) if args.replay else None,
                                   say=lambda line: print(f"gpufabric: {line}", file=sys.stderr, flush=True),
                                   diagnostics=[kind.measurement for kind in diagnostics()])
    text = profile_yaml_from_fabric(fabric, name, measured)
    from ..formats.strict import load_yaml_text

    validate_document(load_yaml_text(text, str(output)), output)
    output.write_text(text, encoding="utf-8")
    profile = load_profile(str(output))
    print(f"wrote {output} (profile {profile.name}, sha256 {profile.sha256})")
    return EXIT_OK


def _profile_name(args: argparse.Namespace, output: Path) -> str:
    """--name, else the output file's stem; one that is not a profile's name says how to give one."""
    import re

    from ..profile.loader import name_pattern

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
    from ..fleet.golden import golden_profile_yaml
    from ..formats.strict import load_yaml_text
    from ..profile.loader import load_profile, validate_document

    if args.replay:
        raise GpuFabricError("--from-fleet and --replay: a profile comes from one of them")
    output = Path(args.output)
    name = _profile_name(args, output)
    _refuse_to_overwrite(output, args.force)
    try:
        margin = 0.95 if args.margin is None else args.margin
        text, document, used, left_out = golden_profile_yaml(Path(args.from_fleet), name, args.percentile, margin,
                                                            args.allow_replays)
    except ValueError as exc:
        raise GpuFabricError(str(exc)) from None
    validate_document(load_yaml_text(text, str(output)), output, partial=True)  # nothing is written for a bad document
    output.write_text(text, encoding="utf-8")
    profile = load_profile(str(output))
    print(f"wrote {output} (profile {profile.name}, extends {document['extends']}, sha256 {profile.sha256})")
    print(f"floors from {len(used)} accepted node(s): {', '.join(used)}")
    if left_out:
        print(f"left out, not accepted: {', '.join(left_out)}")
    return EXIT_OK


def cmd_profile_list(args: argparse.Namespace) -> int:
    """`gpufabric profile list`: name, GPUs, description, file; a profile that does not load says why."""
    from ..profile.loader import available_profiles, load_profile, search_dirs

    for name, path in available_profiles(Path.cwd()).items():
        try:
            profile = load_profile(str(path))
        except GpuFabricError as exc:
            print(f"{name}  (does not load: {exc})  {path}")
            continue
        gpus = f"{profile.gpu_count}x {profile.gpu_model or 'GPU'}"
        print(f"{name}  {gpus}  {profile.data.get('description', '')}  {path}")
    print(f"searched: {', '.join(str(d) for d in search_dirs(Path.cwd()))}")
    return EXIT_OK


def cmd_profile_validate(args: argparse.Namespace) -> int:
    from ..profile.loader import load_profile

    for spec in args.files:
        profile = load_profile(spec, Path.cwd())
        print(f"{profile.path}: valid profile {profile.name} (sha256 {profile.sha256})")
    return EXIT_OK
