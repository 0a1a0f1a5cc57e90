"""Materialise a ttar excerpt (prometheus' text archive format) as a directory tree.

    python3 tests/data/sysfs/extract_ttar.py EXCERPT.ttar DEST [--under sys]

ttar records, as prometheus/procfs and node_exporter write them:
``Directory: P`` + ``Mode: M``; ``Path: P`` + ``Lines: N`` + N content lines + ``Mode: M``;
``Path: P`` + ``SymlinkTo: T``; lines starting with ``#`` separate records. A last content line ending in
``EOF`` means the file has no final newline; ``NULLBYTE`` stands for a NUL byte.

``--under sys`` puts the archive's paths below ``DEST/sys`` (procfs' class.ttar is rooted at ``class/``,
node_exporter's sys.ttar at ``sys/``). Kept next to the trees it made so they can be re-made and checked:
``tests/test_rdma_sysfs.py`` compares every materialised file with its excerpt.
"""

from __future__ import annotations

import argparse
import os


def parse_ttar(text: str) -> list[tuple[str, str, bytes | str | None]]:
    """The records of a ttar text: ``(kind, path, payload)`` with kind "dir" (payload None), "file" (bytes)
    or "symlink" (the target). Raises ValueError on a malformed record."""
    lines = text.split("\n")
    records: list[tuple[str, str, bytes | str | None]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line or line.startswith("#"):
            i += 1
            continue
        if line.startswith("Directory: "):
            records.append(("dir", line[len("Directory: "):], None))
            i += 2  # Mode:
            continue
        if not line.startswith("Path: "):
            raise ValueError(f"line {i + 1}: expected Path:/Directory:, got {line!r}")
        path = line[len("Path: "):]
        nxt = lines[i + 1]
        if nxt.startswith("SymlinkTo: "):
            records.append(("symlink", path, nxt[len("SymlinkTo: "):]))
            i += 2
            continue
        if not nxt.startswith("Lines: "):
            raise ValueError(f"line {i + 2}: expected Lines:/SymlinkTo:, got {nxt!r}")
        count = int(nxt[len("Lines: "):])
        body = lines[i + 2:i + 2 + count]
        content = "".join(part + "\n" for part in body)
        if content.endswith("EOF\n"):
            content = content[: -len("EOF\n")]
        records.append(("file", path, content.replace("NULLBYTE", "\0").encode("latin-1")))
        i += 2 + count
        if i < len(lines) and lines[i].startswith("Mode: "):
            i += 1
    return records


def materialise(text: str, dest: str, under: str = "") -> list[str]:
    """Write the records below ``dest/under``; returns the files and links written (paths relative to dest)."""
    written = []
    for kind, path, payload in parse_ttar(text):
        rel = os.path.join(under, path) if under else path
        target = os.path.join(dest, rel)
        if kind == "dir":
            os.makedirs(target, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if kind == "symlink":
            if os.path.lexists(target):
                os.remove(target)
            os.symlink(str(payload), target)
        else:
            with open(target, "wb") as fh:
                fh.write(payload)  # type: ignore[arg-type]
        written.append(rel)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("excerpt")
    parser.add_argument("dest")
    parser.add_argument("--under", default="")
    args = parser.parse_args()
    with open(args.excerpt, encoding="latin-1") as fh:
        files = materialise(fh.read(), args.dest, args.under)
    print(f"{len(files)} files under {args.dest}")


if __name__ == "__main__":
    main()
