"""Importers for files other tools wrote. IMPORTERS is the one registry: a new format is a
module with an Importer subclass plus one line here (order matters: first match wins)."""

from __future__ import annotations

from .base import Importer, ImportOptions
from .execution_trace import ExecutionTraceImporter
from .kineto import KinetoImporter
from .memory_timeline import MemoryTimelineImporter
from .ncu import NcuImporter
from .nsys import NsysImporter
from .xprof import XprofImporter

# nsys first: it recognizes SQLite by its magic bytes, cheaper than the JSON sniffs
IMPORTERS: list[Importer] = [
    NsysImporter(),
    NcuImporter(),
    XprofImporter(),
    ExecutionTraceImporter(),
    MemoryTimelineImporter(),
    KinetoImporter(),
]

__all__ = ["IMPORTERS", "ImportOptions", "Importer"]
