"""Measurements: the typed figures that advice rules and renderers read, each computed once.

A measurement is a function ``measure(data: ProfileData, ...) -> SomeDataclass`` decorated with
:func:`measured`: its result is kept on the opened profile, so two rules (or a rule and the HTML
report) asking for the same figure get one computation and the same numbers. Measurements are
where the SQL lives; ``advice/`` only judges what they return and holds no SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Concatenate, ParamSpec, TypeVar

from ..core.context import ProfileData

P = ParamSpec("P")
R = TypeVar("R")


def measured(fn: Callable[Concatenate[ProfileData, P], R]) -> Callable[Concatenate[ProfileData, P], R]:
    """Keep ``fn(data, *args)``'s result on ``data`` (keyed by the function and its arguments,
    which must be hashable): computed at most once per opened profile."""
    key = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(data: ProfileData, /, *args: P.args, **kwargs: P.kwargs) -> R:
        args_key: Hashable = (args, tuple(sorted(kwargs.items())))
        result: R = data.computed(f"{key}{args_key!r}", lambda: fn(data, *args, **kwargs))
        return result

    return wrapper
