"""`gpufabric parse`: a tool's saved text output as JSON, held against the GPU model's published peak with
--reference (reference_judge.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuFabricError
from ..formats.clean import clean_line
from ..report.results import json_text
from ..units import parse_gbit
from .common import EXIT_OK

#: kind -> (the tool output it reads, in words; the options that are for it)
_KINDS = {
    "topo": ("`nvidia-smi topo -m`: the GPU/NIC matrix, CPU and NUMA affinity", ()),
    "nvlink": ("`nvidia-smi nvlink -g 0`, `-gt d`, `-gt r`, `-s` or `-e` (told apart by their link lines)", ()),
    "nccl-tests": ("the result tables of all_reduce_perf, sendrecv_perf, ... (one run, or {\"runs\": [...]} for a "
                   "log of several)", ("op", "reference")),
    "perftest": ("one ib_write_bw/ib_read_bw/ib_send_bw run, client or server side, bandwidths in Gb/s",
                 ("reference", "line_rate")),
    "dcgm-diag": ("`dcgmi diag -r N` (its table of DCGM 1.x-4.x, or -j JSON): each test with its status and message "
                  "per GPU", ("reference",)),
    "nvbandwidth": ("its text (v0.4-v0.10) or -j JSON: each test case with its matrix in GB/s", ("reference",)),
    "smi-table": ("the plain `nvidia-smi` table (either header form, and driver 610's KMD/UMD words): versions, each "
                  "GPU's name, bus id, memory, power, and the process list; what the paste cuts is named unknown", ()),
    "smi-list": ("`nvidia-smi -L`: each GPU's index, name and UUID (and its MIG devices); a cut line or a gap in the "
                 "indices is named unknown", ()),
    "smi-q": ("`nvidia-smi -q` (or -a): per GPU the product name, serial, UUID, bus id, FB memory, VBIOS, ECC, PCIe "
              "link and the Fabric section (state, status, clique id, cluster UUID, health), judged per GPU and for "
              "one cluster UUID and clique", ()),
    "imex": ("`nvidia-imex-ctl -N`: each IMEX node's address and state, the connectivity table and the domain "
             "state (a GB200/GB300 NVL72 rack's IMEX domain); a cut table is named unknown", ()),
}


def register(sub: argparse._SubParsersAction) -> None:
    parse = sub.add_parser("parse", help="parse a tool's text output into JSON",
                           description="Read what a tool printed, as a person pastes it (prompts and banners "
                           "included), into JSON: `gpufabric parse KIND FILE`. KIND says which tool; FILE may be - "
                           "for standard input. `gpufabric parse KIND --help` says what each reads.")
    kinds = parse.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, (reads, options) in _KINDS.items():
        one = kinds.add_parser(kind, help=reads, description=f"{reads[0].upper()}{reads[1:]}, read into JSON as a "
                               f"person pastes it: `gpufabric parse {kind} FILE` (FILE may be - for standard input).")
        one.add_argument("file", help="the saved output, or - for standard input")
        _options(one, options)
        one.set_defaults(func=cmd_parse, misused=misused_option)


def _options(parser: argparse.ArgumentParser, options: tuple[str, ...]) -> None:
    """Every kind takes every option (one given to the wrong kind is refused by name, misused_option); its help
    shows only those that are for it."""
    def shown(name: str, text: str) -> str:
        return text if name in options else argparse.SUPPRESS

    parser.add_argument("--op", dest="nccl_op", help=shown("op", "the test (all_reduce or all_reduce_perf) of a run "
                        "whose output does not say (before nccl-tests 2.16 no `# Collective test starting:` line "
                        "names it); the output's own line, then a `*_perf` command line in the log, win over it"))
    parser.add_argument("--reference", nargs="?", const="", default=None, metavar="MODEL",
                        help=shown("reference", "nccl-tests, nvbandwidth, dcgm-diag: hold the figures against the "
                                   "GPU model's published peak (MODEL as NVML names it or an alias, e.g. h100; "
                                   "default: the model the output names) and what this project's runs reached; adds "
                                   "a `reference` block and fractions to the JSON and prints a judgement on stderr. "
                                   "perftest: against the port's line rate (--line-rate)"))
    parser.add_argument("--line-rate", metavar="RATE", help=shown("line_rate", "the port's line rate, e.g. 25Gb/s "
                        "or 400 (Gb/s); perftest does not print it"))


def misused_option(args: argparse.Namespace) -> str | None:
    """An option given to a kind it is not for: the usage error main() reports, else None."""
    if args.nccl_op is not None and args.kind != "nccl-tests":
        return "--op is for `gpufabric parse nccl-tests`"
    if args.reference is not None and args.kind in ("topo", "nvlink", "smi-table", "smi-list", "smi-q", "imex"):
        return "--reference is for `gpufabric parse` nccl-tests, perftest, nvbandwidth and dcgm-diag"
    if args.line_rate is not None and args.kind != "perftest":
        return "--line-rate is for `gpufabric parse perftest`"
    return None


def cmd_parse(args: argparse.Namespace) -> int:
    from ..formats.dcgm_diag import parse_dcgm_diag
    from ..formats.imex import parse_imex_status
    from ..formats.nccl_tests import parse_nccl_tests_json
    from ..formats.nvbandwidth import parse_nvbandwidth
    from ..formats.nvidia_smi_text import parse_smi_list, parse_smi_q, parse_smi_table
    from ..formats.nvlink import parse_nvlink_any
    from ..formats.perftest import parse_perftest
    from ..formats.topo import parse_topo_m

    # kind -> (the command whose output it reads, its parser)
    parsers = {
        "topo": ("nvidia-smi topo -m", lambda text: parse_topo_m(text).to_json()),
        "nvlink": ("nvidia-smi nvlink -g 0|-gt d|-gt r|-s|-e", parse_nvlink_any),
        "nccl-tests": ("nccl-tests *_perf", lambda text: parse_nccl_tests_json(text, args.nccl_op)),
        "perftest": ("perftest ib_*_bw", parse_perftest),
        "dcgm-diag": ("dcgmi diag", parse_dcgm_diag),
        "nvbandwidth": ("nvbandwidth", parse_nvbandwidth),
        "smi-table": ("nvidia-smi", lambda text: parse_smi_table(text).to_json()),
        "smi-list": ("nvidia-smi -L", lambda text: parse_smi_list(text).to_json()),
        "smi-q": ("nvidia-smi -q", lambda text: parse_smi_q(text).to_json()),
        "imex": ("nvidia-imex-ctl -N", parse_imex_status),
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
    from .. import reference_judge as judge
    from ..reference import load_references

    if args.kind == "perftest":
        if args.reference:
            raise GpuFabricError(f"--reference {args.reference}: perftest is judged against the port's line rate "
                                 "(--line-rate), not a GPU model")
        rate = None
        if args.line_rate is not None:
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
        print(clean_line(line), file=sys.stderr)  # a tool's output quoted: no terminal control bytes
    return judged


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
