"""Capture: collectors that record a running program into a profile's spool.

COLLECTORS is the one registry: a new collector is a module with a Collector subclass plus one
line here. The application layer is not a collector; it is the session itself.
"""

from __future__ import annotations

from .base import Collector
from .torch import TorchCollector

COLLECTORS: list[type[Collector]] = [TorchCollector]

__all__ = ["COLLECTORS", "Collector"]
