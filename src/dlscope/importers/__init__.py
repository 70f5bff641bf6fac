"""Importers for files other tools wrote. IMPORTERS is the one registry: a new format is a
module with an Importer subclass plus one line here (order matters: first match wins)."""

from __future__ import annotations

from .base import Importer, ImportOptions
from .execution_trace import ExecutionTraceImporter
from .kineto import KinetoImporter
from .memory_timeline import MemoryTimelineImporter

IMPORTERS: list[Importer] = [ExecutionTraceImporter(), MemoryTimelineImporter(), KinetoImporter()]

__all__ = ["IMPORTERS", "ImportOptions", "Importer"]
