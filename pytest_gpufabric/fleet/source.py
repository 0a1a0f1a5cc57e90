"""Where a node's results say their evidence came from: live (this host and boot) or a replay of a bundle.

Read from the document alone, below both the node reader (nodes.py) and the fleet's rules on sources
(provenance.py), which needs the nodes it holds to them."""

from __future__ import annotations


def source_of(document: dict) -> tuple[dict, str | None]:
    """(where a results document says its evidence came from, why that does not show a live run of one boot, or
    None where it does). The source: ``kind`` live or replay, the bundle and its sha256 (a replay), the host, boot
    and machine ids (a live run)."""
    run = document.get("run") if isinstance(document.get("run"), dict) else {}
    evidence = document.get("evidence") if isinstance(document.get("evidence"), dict) else {}
    kinds = {kind for kind in (run.get("mode"), evidence.get("kind")) if kind is not None}
    if run.get("replay") or "replay" in kinds:
        return ({"kind": "replay", "bundle": evidence.get("bundle") or run.get("replay"),
                 "bundle_sha256": evidence.get("bundle_sha256")}, None)
    source = {"kind": "live", "host": evidence.get("host"), "boot_id": evidence.get("boot_id"),
              "machine_id": evidence.get("machine_id")}
    if kinds != {"live"}:
        return {"kind": None}, "its results do not say where their evidence came from (live or a replay)"
    if not source["boot_id"] or not source["host"]:
        return source, (f"its results (format {document.get('schema_version')}) do not name the host and boot they "
                        "measured: they cannot show a live run of this node (run the acceptance again)")
    if run.get("host") != source["host"]:
        return source, (f"its results say they ran on {run.get('host')} but measured {source['host']}: they "
                        "contradict themselves")
    return source, None
