"""`gpufabric fleet report` and `gpufabric fleet fabric`: one verdict for many servers from their results, and the
fabric measured between them (fleet/)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import GpuFabricError
from ..fleet.fabric import FABRIC_FILE, judge_fabric
from ..fleet.rack import register_rack
from ..fleet.sbatch import SCRIPT as SBATCH_SCRIPT
from ..verdict import EXIT_CODES
from .common import (
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    finite_number,
    parse_sizes,
    printable,
    require_torch,
    whole_number,
)


def register(sub: argparse._SubParsersAction) -> None:
    fleet = sub.add_parser("fleet", help="one verdict for many servers from their results",
                           description="Many servers accepted through the scheduler you run (Slurm, Kubernetes "
                           "Jobs): `fleet report` judges every node's results again and gives one verdict, naming "
                           "the drifted or slow node; `fleet fabric` measures between the nodes (docs/fleet.md).")
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
    report.add_argument("--max-node-mb", type=finite_number(0, 10**6, above_low=True), default=64, metavar="MB",
                        help="a node's results file larger than this is unreadable, not read (default %(default)s)")
    report.add_argument("--require-signed", action="store_true", help="refuse the fleet (exit 4, nothing written) "
                        "when a node's results are unsigned, changed since the run or signed by another key than "
                        "--key; each such node is named")
    report.add_argument("--key", metavar="PUB.pem", help="with --require-signed: the Ed25519 public key every "
                        "node's results must be signed with (--gpu-sign-key's pair)")
    report.add_argument("--fleet-id", metavar="ID", help="the fleet run every node must be of (the pytest runs' "
                        "--gpu-fleet-id, or their Slurm job id); a node of no fleet run or of another is not "
                        "accepted (default: the fleet id a strict majority of the nodes name)")
    report.add_argument("--allow-replays", action="store_true", help="judge nodes whose results are replays of "
                        "recorded bundles as their evidence says (a rehearsal on recorded bundles; the verdict says "
                        "how many were replays); without it a replayed node is never accepted")
    report.add_argument("--sign-key", metavar="KEY.pem", help="sign fleet-results.json and fleet.html with this "
                        "Ed25519 private key (`openssl genpkey -algorithm ed25519 -out KEY.pem`); `gpufabric verify` "
                        "checks them")
    report.set_defaults(func=cmd_fleet_report)
    sbatch = fleet_sub.add_parser(
        "sbatch", help="print the sbatch line that asks Slurm for the GPUs and time a profile's acceptance needs",
        description="Prints `sbatch --nodes=N --gpus-per-node=G --time=T examples/fleet-acceptance.sbatch PROFILE "
                    "BURN_IN`: G the profile's GPU count, T the time limit derived from the profile and the burn-in "
                    "(docs/fleet.md gives the formula). Run it: `eval \"$(gpufabric fleet sbatch ...)\"`, or paste it.")
    sbatch.add_argument("--profile", required=True, help="the profile every node is accepted against")
    sbatch.add_argument("--burn-in", metavar="DURATION", help="each node's burn-in (90s, 10m, 2h) or `none` "
                        "(default: 10m where the profile promises a burn-in, else none)")
    sbatch.add_argument("--nodes", "-N", type=whole_number(1, 10**6), help="how many nodes (default: sbatch's, "
                        "or give -N to sbatch yourself)")
    sbatch.add_argument("--script", default=SBATCH_SCRIPT, help="the batch script "
                        "(default %(default)s)")
    sbatch.add_argument("--check", action="store_true", help="inside the job, print nothing and exit 0 when it "
                        "asked for the profile's GPUs per node (or Slurm granted none as GRES), 4 naming the "
                        "problem when not")
    sbatch.set_defaults(func=cmd_fleet_sbatch)
    fabric = fleet_sub.add_parser(
        "fabric", help="measure the fabric between the nodes: one rank per node, started by your launcher",
        description="srun --ntasks-per-node=1 gpufabric fleet fabric -o reports/fleet (or torchrun, mpirun): an "
                    "all_reduce across every node, then every node pair in rounds (the slow node, the slow pair); "
                    "rank 0 writes OUTDIR/fabric.json, which `gpufabric fleet report` judges with the rest.")
    fabric.add_argument("--backend", choices=["nccl", "gloo"], default="nccl", help="gloo runs on CPUs")
    fabric.add_argument("--sizes", default="64M,1G", help="all-node all_reduce sizes (1M = 1 MiB)")
    fabric.add_argument("--pair-size", default="256M", help="bytes each pair exchanges each way")
    fabric.add_argument("--iters", type=whole_number(1, 10**6),
                        default=5, help="timed operations per size and pair (default %(default)s)")
    fabric.add_argument("--warmup", type=whole_number(0, 10**6),
                        default=2, help="untimed operations first (default %(default)s)")
    fabric.add_argument("--max-rounds", type=whole_number(0, 10**6), default=0, help="0: every pair meets (N-1 rounds)")
    fabric.add_argument("--confirm-repeats", type=whole_number(0, 1000),
                        default=2, help="how many times a pair that looked slow in "
                        "its round is measured again alone before it is named (default %(default)s)")
    fabric.add_argument("--node-per-rank", action="store_true", help="each rank a node (one host's GPUs)")
    fabric.add_argument("--profile", help="judge the result with this profile's fabric: section (rank 0)")
    fabric.add_argument("-o", "--output", default="reports/fleet", metavar="OUTDIR",
                        help="where rank 0 writes fabric.json (default %(default)s)")
    fabric.set_defaults(func=cmd_fleet_fabric)
    register_rack(fleet_sub)


def cmd_fleet_report(args: argparse.Namespace) -> int:
    """One verdict for a fleet from its nodes' results folders; exit 0 accepted, 1 rejected, 6 incomplete, 7 not
    tested (no node could be examined), 4 a usage error."""
    import os

    from ..fleet.report import build_fleet_document, expected_nodes, write_fleet_report

    out = Path(args.output)
    sign_key = None
    if args.sign_key:
        from ..report.signing import SigningError, load_private_key

        try:
            sign_key = load_private_key(args.sign_key)  # a bad key is said before anything is read
        except SigningError as exc:
            print(f"gpufabric fleet report: --sign-key: {printable(exc)}", file=sys.stderr)
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
                                        max_bytes=int(args.max_node_mb * 1e6), signed=signed,
                                        fleet_id=args.fleet_id, allow_replays=args.allow_replays)
    except (ValueError, GpuFabricError) as exc:
        print(f"gpufabric fleet report: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if signatures is not None:
        document["signatures"] = signatures
    try:
        paths = write_fleet_report(document, out, sign_key)
    except OSError as exc:
        print(f"gpufabric fleet report: cannot write {exc.filename or args.output}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    counts = document["counts"]
    print(printable(f"fleet: {document['verdict']}: {document['reason']}"))
    print(f"  {counts['nodes']} node(s) reported, {counts['accepted']} accepted, {counts['missing']} missing, "
          f"{counts['unreadable']} unreadable, {counts['outlier_nodes']} with outliers, {counts['drifted_nodes']} "
          f"drifted (judged by {printable(document['settings_from'])})")
    findings = [f"  not accepted {node['name']}: {node['verdict'] or node.get('state') or 'no results'}: "
                f"{node['reason']}" for node in document["nodes"] if node["verdict"] != "ACCEPTED"]
    findings += [f"  outlier {node['name']}: {o['check']} {o['subject']} {o['metric']} {o['value']:.4g} {o['unit']} "
                 f"against the fleet's median {o['median']:.4g}: {o['rule']}"
                 for node in document["nodes"] for o in node["outliers"][:1]]
    findings += [f"  {group['id']}: {group['summary']}" for group in document.get("groups") or []]
    findings += [f"  drift {node['name']}: {d['field']} {d['value']} (fleet: {d['majority']})"
                 for node in document["nodes"] for d in node["drift"][:3]]
    findings += [f"  one hostname, several folders: {d['host']} in {', '.join(d['nodes'])}"
                 for d in document["duplicate_hosts"]]
    for line in findings[:20]:  # the page and the JSON hold them all
        print(printable(line)[:400])
    if len(findings) > 20:
        print(f"  ... {len(findings) - 20} more finding(s) in {paths['html']}")
    fabric = document.get("fabric")
    if fabric:
        print(f"  fabric: {fabric['verdict']} ({len(fabric['nodes'])} nodes, pairs in {fabric['rounds']} round(s))")
        for problem in fabric["problems"][:10]:
            print(printable(f"  fabric: {problem}"))
    print(printable("  " + ", ".join(str(path) for path in paths.values())))
    return EXIT_CODES[document["verdict"]]


def _refused_nodes(args: argparse.Namespace, out: Path) -> tuple[bool, dict | None, dict | None]:
    """--require-signed: every node's results signed by --key and untouched, else (True, None, None) with each
    refused node named on stderr (report/signing.py); the third value maps each node folder to the sha256 of the
    bytes verified, which the fleet's reading must find again."""
    from ..fleet.signatures import check_node_signatures

    if not args.key:
        print("gpufabric fleet report: --require-signed needs --key PUB.pem (the nodes' Ed25519 public key)",
              file=sys.stderr)
        return True, None, None
    try:
        signatures, refused, signed = check_node_signatures([Path(d) for d in args.dirs], args.key, exclude=[out],
                                                            max_bytes=int(args.max_node_mb * 1e6))
    except (ValueError, GpuFabricError) as exc:
        print(f"gpufabric fleet report: {printable(exc)}", file=sys.stderr)
        return True, None, None
    if refused:
        print(f"gpufabric fleet report: refused {len(refused)} node result(s) (--require-signed, key "
              f"{signatures['key_id']}); nothing written:", file=sys.stderr)
        for node, why in refused[:50]:
            print(printable(f"  {node}: {why}")[:600], file=sys.stderr)
        if len(refused) > 50:
            print(f"  ... and {len(refused) - 50} more", file=sys.stderr)
    return bool(refused), signatures, signed


def cmd_fleet_sbatch(args: argparse.Namespace) -> int:
    """The sbatch line for a profile's fleet acceptance on stdout; exit 0, or 4 for a bad profile or burn-in (with
    --check: for a job that asked for other GPUs per node than the profile promises)."""
    import os

    from ..fleet.sbatch import allocation_problem, sbatch_line
    from ..profile.loader import load_profile
    from ..workloads.burn_in import parse_duration

    profile = load_profile(args.profile, Path.cwd())
    if args.check:
        problem = allocation_problem(profile, dict(os.environ))
        if problem:
            print(f"gpufabric fleet sbatch: {printable(problem)}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    given = args.burn_in if args.burn_in is not None else ("10m" if profile.burn_in else "none")
    try:
        seconds = None if given.strip().lower() == "none" else parse_duration(given)
        print(sbatch_line(args.profile, profile, given.strip(), seconds, args.nodes, args.script))
    except ValueError as exc:
        print(f"gpufabric fleet sbatch: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_fleet_fabric(args: argparse.Namespace) -> int:
    """One rank of the fabric run, as the site's launcher starts one per node (srun, torchrun, mpirun); rank 0
    writes OUTDIR/fabric.json and, with --profile, judges it: exit 0 passed, 1 failed, 4 a usage error."""
    import os

    from ..profile.loader import load_profile
    from ..workloads import fabric_pairs

    profile = load_profile(args.profile) if args.profile else None  # a bad profile is said before anything runs
    require_torch("gpufabric fleet fabric")
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
    argv = ["--sizes", ",".join(map(str, parse_sizes(args.sizes))),
            "--pair-size", str(parse_sizes(args.pair_size)[0]),
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
        print(printable(f"  {problem}"))
    return EXIT_REJECTED if judged["verdict"] == "failed" else EXIT_OK
