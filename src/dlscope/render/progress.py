"""Progress bars on stderr for work that can take more than a second (import, finalize, export,
report), silent when stderr is not a terminal (pipes, CI logs, tests).

The work itself never imports this module: capture and importers take a plain callback
``(what, fraction_done) -> None`` (``ImportOptions.progress``), which :func:`progress` yields, so
data keeps flowing one way (capture -> store -> analysis -> render).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is loaded only when a bar is shown
    from rich.console import Console
    from rich.progress import Progress, TaskID

ProgressCallback = Callable[[str, float], None]


class Bar:
    """One task's handle. Calling it as ``bar(what, fraction)`` makes it a ProgressCallback."""

    def __init__(self, progress: Progress | None, task: TaskID | None, total: float | None) -> None:
        self._progress = progress
        self._task = task
        self.total = total

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def advance(self, amount: float = 1.0) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)

    def update(
        self, description: str | None = None, completed: float | None = None, total: float | None = None
    ) -> None:
        if self._progress is None or self._task is None:
            return
        if total is not None:
            self.total = total
        self._progress.update(self._task, description=description, completed=completed, total=total)

    def __call__(self, what: str, fraction: float) -> None:
        """A ProgressCallback: ``fraction`` of the work (0..1) is done, now doing ``what``."""
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, description=what, total=1.0, completed=max(0.0, min(1.0, fraction)))


def enabled(console: Console) -> bool:
    return console.is_terminal and not console.is_dumb_terminal


def _not_a_terminal() -> bool:
    """Whether stderr is surely no terminal, as rich would decide, without loading rich (30 ms of
    every command run in a pipe or a script)."""
    if os.environ.get("TTY_COMPATIBLE", "") == "1" or os.environ.get("FORCE_COLOR") is not None:
        return False
    try:
        return not sys.stderr.isatty()
    except (AttributeError, ValueError):
        return True


@contextmanager
def progress(description: str, total: float | None = None, console: Console | None = None) -> Iterator[Bar]:
    """A progress bar for the ``with`` block (``total`` None: a spinner-like bar without an end).
    The bar disappears when the block ends; nothing is written when stderr is not a terminal."""
    if console is None and _not_a_terminal():
        yield Bar(None, None, total)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = console or Console(stderr=True)
    if not enabled(console):
        yield Bar(None, None, total)
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield Bar(bar, task, total)
