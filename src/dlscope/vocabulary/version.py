"""dlscope's version: written into every profile's meta and shown by ``dlscope --version``."""

from __future__ import annotations

__version__ = "0.1.0"
