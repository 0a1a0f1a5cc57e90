"""The memory pattern test: what it measures and records (kinds/memory_pattern/ binds its launcher, --measure
step and check)."""

from __future__ import annotations

from ..formats.typed import ANY, BOARD, NOTE, TEXT, Field, Opt, reading, value
from . import Diagnostic, frozen

POSITION = 62

SHAPE = {
    "format": TEXT, "fraction": value("fraction", False), "seconds": value("seconds", False),
    "patterns": Opt([TEXT]), "chunk_bytes": value("bytes", False, True),
    "gpus": [{**BOARD, "free_bytes": value("bytes"), "total_bytes": value("bytes"), "tested_bytes": value("bytes"),
              "coverage": reading("fraction"), "chunks": reading("count"), "allocation_stopped": NOTE,
              "passes": [{"pattern": TEXT, "bytes": value("bytes"), "seconds": value("seconds"),
                          "mismatches": value("count")}],
              "mismatches": value("count"), "seconds": value("seconds"), "planted": Field("flag", False),
              "error": NOTE,
              "first_mismatches": Opt([{"offset_bytes": value("bytes"), "pattern": TEXT, "expected": ANY,
                                        "found": ANY, "xor_bits": Opt([value("count")])}])}],
}

DIAGNOSTIC = MEMORY_PATTERN = Diagnostic(
    name="memory-pattern", key="memory_pattern", what="memory pattern test", one="memory pattern test",
    recording="memory pattern test", fixture="memory_pattern",
    doc="The memory pattern test on every GPU at once (walking ones and zeros, address in address, random) over a "
        "stated fraction of free memory (live), or the bundle's memory-pattern.json.",
    measurement="memory_pattern", record_file="memory-pattern.json", format="gpufabric-mem-pattern/1",
    shape=SHAPE, script="mem_pattern.py", check="checks/hbm.py", per_gpu=False,
    # no floor to measure: the golden machine must pass it
    measure_as="pattern", measure_section=frozen({"seconds": 5}))
