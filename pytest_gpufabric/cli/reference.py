"""`gpufabric reference`: the catalogue of published GPU figures, or one model's entry with its sources."""

from __future__ import annotations

import argparse

from ..errors import GpuFabricError
from ..report.results import json_text
from ..units import MIB
from .common import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    reference = sub.add_parser("reference", help="published GPU figures: the catalogue, or one model's entry",
                               description="Without MODEL: a table of the catalogue. MODEL as NVML names it "
                               "(\"NVIDIA H100 80GB HBM3\") or an alias (h100).")
    reference.add_argument("model", nargs="?", metavar="MODEL", help="one model's entry (default: the whole catalogue)")
    reference.add_argument("--json", action="store_true", help="every field, the sources and the recorded fractions")
    reference.add_argument("--list", action="store_true", help="only the model names and the names NVML prints")
    reference.set_defaults(func=cmd_reference)


def cmd_reference(args: argparse.Namespace) -> int:
    """`gpufabric reference [MODEL] [--json]`: the catalogue of published GPU figures, or one model's entry."""
    from ..reference import find_reference, load_references
    from ..reference_judge import unknown_model_message

    references = load_references()
    if args.list:
        for model, ref in sorted(references.items()):
            print(f"{model}  {', '.join(ref.nvml_names)}")
        return EXIT_OK
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
        *([f"  host link: {ref.host_link}, {_figure(ref.host_link_gbps_per_direction)} GB/s per direction "
           f"({_figure(ref.host_link_gbps_bidirectional)} GB/s both ways)"] if ref.host_link else []),
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
