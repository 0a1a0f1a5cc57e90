"""pytest-html sections: the environment table, the machine's inventory, topology expected vs found.

Registered only when pytest-html is active (its hooks are unknown to pytest otherwise).
"""

from __future__ import annotations

from html import escape

from ..fabric.model import Fabric
from ..fabric.smi import normalize_label
from ..units import format_bytes

_STYLE = (
    "<style>"
    ".gpufabric table{border-collapse:collapse;margin:6px 0 14px}"
    ".gpufabric td,.gpufabric th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-family:monospace}"
    ".gpufabric .mismatch{background:#f8d7da;color:#842029;font-weight:bold}"
    ".gpufabric .match{background:#d1e7dd}"
    "</style>"
)


def add_environment(config, fabric_session) -> None:
    """Machine and profile facts for pytest-html's Environment table (via pytest-metadata)."""
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return
    if metadata_key not in config.stash:
        return
    metadata = config.stash[metadata_key]
    profile = fabric_session.profile
    if profile is not None:
        metadata["GPU profile"] = f"{profile.name} ({profile.path})"
        metadata["GPU profile sha256"] = profile.sha256
    fabric = fabric_session.fabric
    if fabric is not None:
        metadata["Machine source"] = fabric.source
        metadata["NVIDIA driver"] = str(fabric.driver_version or "not recorded")
        metadata["CUDA driver"] = str(fabric.cuda_driver_version or "not recorded")
        metadata["GPUs"] = ", ".join(f"{g.label} {g.name or '?'} (serial {g.serial or '?'})" for g in fabric.gpus)
    elif fabric_session.discovery_error is not None:
        metadata["Machine"] = str(fabric_session.discovery_error)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell if cell.startswith("<td") else f"<td>{escape(cell)}</td>" for cell in row)
                   + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def inventory_html(fabric: Fabric) -> str:
    rows = [
        [g.label, str(g.name), str(g.serial), str(g.uuid), str(g.pci_bus_id), format_bytes(g.memory_bytes)
         if g.memory_bytes is not None else "None",
         f"gen {g.pcie_gen_max} x{g.pcie_width_max}", str(g.vbios_version),
         str(len(g.active_nvlinks())) if g.nvlinks is not None else "None"]
        for g in fabric.gpus
    ]
    header = ["GPU", "name", "serial", "UUID", "PCI bus id", "memory", "PCIe max", "VBIOS", "NVLinks active"]
    return "<h3>Inventory</h3>" + _table(header, rows).replace(">None<", ">not recorded<")


def topology_html(expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]) -> str:
    """The matrix as `topo -m` lays it out, each cell 'found' or 'expected → found' where they differ."""
    devices = list(dict.fromkeys([*expected, *found]))
    rows = []
    for row in devices:
        cells = [row]
        for col in devices:
            want = expected.get(row, {}).get(col)
            have = found.get(row, {}).get(col)
            if want is None:
                cells.append(have or "")
            elif normalize_label(want) == normalize_label(have):
                cells.append(f'<td class="match">{escape(have)}</td>')
            else:
                cells.append(f'<td class="mismatch">expected {escape(want)}, found {escape(str(have))}</td>')
        rows.append(cells)
    return "<h3>Topology: expected vs found</h3>" + _table(["", *devices], rows)


class HtmlSections:
    """pytest-html hook implementations, bound to the run's FabricSession."""

    def __init__(self, fabric_session) -> None:
        self.fabric_session = fabric_session

    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        fabric = self.fabric_session.fabric
        parts = [_STYLE, '<div class="gpufabric">']
        verdict = getattr(self.fabric_session, "verdict", None)
        if verdict:
            parts.append(f"<h2>Verdict: {escape(verdict)}</h2>")
        if fabric is None:
            error = self.fabric_session.discovery_error
            parts.append(f"<p>No machine: {escape(str(error))}</p>")
        else:
            parts.append(inventory_html(fabric))
            expected = self.fabric_session.profile.matrix if self.fabric_session.profile else {}
            parts.append(topology_html(expected, fabric.matrix))
        parts.append("</div>")
        prefix.append("".join(parts))
