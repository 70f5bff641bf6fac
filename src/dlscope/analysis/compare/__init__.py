"""Comparing two profiles: ``compare(a, b)`` (``dlscope diff``) and ``baseline.check``
(``dlscope check``). Pure functions over two opened profiles, built from the single-profile
reports; see docs/diff.md."""

from __future__ import annotations

from .diff import ProfileDiff, compare

__all__ = ["ProfileDiff", "compare"]
