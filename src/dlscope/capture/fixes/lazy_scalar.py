"""A number read from the device later: what ``.item()`` returns under the ``defer_sync`` fix.

A :class:`LazyScalar` stands for the Python number a one-element tensor holds once its copy to the host has
landed. It behaves as that number wherever Python asks for one (``float()``, ``int()``, ``bool()``, an
``if``, comparisons, ``hash``, ``round``, formatting, ``str``/``repr``, the ``math`` functions, numpy through
``__array__``, pickling as the plain number) and waits for the copy only then. Arithmetic with plain numbers
(``running += loss.item()``, ``sum(losses) / n``) waits for nothing: it gives another lazy number, computed
with the same Python operators over the same values when it is read, so the result is the one the eager
program gets, to the bit. What could raise is done at once, so that the error comes from the line that
wrote it: a division reads its divisor (and divides by zero at once), a power is computed at once.
Arithmetic with anything else (a tensor, a numpy value) reads the number first and leaves the operation to
the other operand's type, as with the eager number.

What it is not: an instance of ``float`` or ``int`` (``isinstance(x, float)`` is False; it is registered as a
``numbers.Real``), nor something C code that wants a Python number accepts (``torch.tensor(x)``,
``torch.full(..., x)``, ``struct.pack``): those raise ``TypeError``, loudly, where the eager program ran.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable
from typing import Any, Protocol

Number = int | float

# The lazy operations a chain may hold before its oldest part is read: a loop that adds up its losses and
# never reads the sum would otherwise build a chain as long as the run (and reading it would recurse as deep)
MAX_DEPTH = 64
# Operands an operation may stay lazy with: anything else decides the result's type itself
_PLAIN = (int, float)


class Pending(Protocol):
    """A copy of one number to the host that was started and not waited for."""

    def ready(self) -> bool:
        """Whether the copy has landed (reading would not wait); never waits."""
        ...

    def read(self) -> Number:
        """The number: waits for the copy when it has not landed."""
        ...


class LazyScalar:
    """The number a pending copy brings, or an operation over such numbers, read at first need."""

    __slots__ = ("_pending", "_op", "_args", "_depth", "_known", "_value", "__weakref__")

    def __init__(
        self, pending: Pending | None = None, op: Callable[..., Any] | None = None, args: tuple[Any, ...] = ()
    ) -> None:
        self._pending = pending
        self._op = op
        self._args = args
        self._depth: int = 1 + max((a._depth for a in args if isinstance(a, LazyScalar)), default=0)
        self._known = False
        self._value: Number = 0

    @property
    def value(self) -> Number:
        """The number, waiting for the copies it is made of if they have not landed."""
        if not self._known:
            if self._pending is not None:
                self._value = self._pending.read()
            else:
                assert self._op is not None
                self._value = self._op(*(_read(a) for a in self._args))
            self._known = True
            self._pending, self._op, self._args = None, None, ()  # the copies and the chain are not needed again
        return self._value

    def landed(self) -> bool:
        """Known, or a copy that has landed (reading it now waits for nothing)."""
        return self._known or (self._pending is not None and self._pending.ready())

    # ---- arithmetic: lazy with plain numbers, eager (the other operand's rules) with anything else
    def _apply(self, op: Callable[..., Any], *other: Any, reflected: bool = False, divides: bool = False) -> Any:
        """``op`` over this number and ``other`` (``reflected``: ``other`` is the left operand, as in
        ``1.0 + lazy``): a lazy number, or the result at once where nothing is left to wait for."""
        if other and not isinstance(other[0], (LazyScalar, *_PLAIN)):
            return op(other[0], self.value) if reflected else op(self.value, other[0])
        args = tuple(_fold(a) for a in ((*other, self) if reflected else (self, *other)))
        if divides:
            # a division by zero raises where the program divides (inside its own try, if any), not where the
            # quotient is read: the divisor is read now (a wait only when it is itself still on its way)
            args = (args[0], _read(args[1]))
            if args[1] == 0:
                return op(_read(args[0]), args[1])
        if not any(isinstance(a, LazyScalar) for a in args):
            return op(*args)  # everything has landed: the plain number, as the eager program has it
        return LazyScalar(op=op, args=args)

    def __add__(self, o: Any) -> Any:
        return self._apply(operator.add, o)

    def __radd__(self, o: Any) -> Any:
        return self._apply(operator.add, o, reflected=True)

    def __sub__(self, o: Any) -> Any:
        return self._apply(operator.sub, o)

    def __rsub__(self, o: Any) -> Any:
        return self._apply(operator.sub, o, reflected=True)

    def __mul__(self, o: Any) -> Any:
        return self._apply(operator.mul, o)

    def __rmul__(self, o: Any) -> Any:
        return self._apply(operator.mul, o, reflected=True)

    def __truediv__(self, o: Any) -> Any:
        return self._apply(operator.truediv, o, divides=True)

    def __rtruediv__(self, o: Any) -> Any:
        return self._apply(operator.truediv, o, reflected=True, divides=True)

    def __floordiv__(self, o: Any) -> Any:
        return self._apply(operator.floordiv, o, divides=True)

    def __rfloordiv__(self, o: Any) -> Any:
        return self._apply(operator.floordiv, o, reflected=True, divides=True)

    def __mod__(self, o: Any) -> Any:
        return self._apply(operator.mod, o, divides=True)

    def __rmod__(self, o: Any) -> Any:
        return self._apply(operator.mod, o, reflected=True, divides=True)

    # powers are computed at once: one can overflow (OverflowError), which must raise where it is written
    def __pow__(self, o: Any, mod: Any = None) -> Any:
        return pow(self.value, _read(o)) if mod is None else pow(self.value, _read(o), _read(mod))

    def __rpow__(self, o: Any) -> Any:
        return pow(_read(o), self.value)

    def __divmod__(self, o: Any) -> Any:
        return divmod(self.value, _read(o))

    def __rdivmod__(self, o: Any) -> Any:
        return divmod(_read(o), self.value)

    def __neg__(self) -> Any:
        return self._apply(operator.neg)

    def __pos__(self) -> Any:
        return self._apply(operator.pos)

    def __abs__(self) -> Any:
        return self._apply(abs)

    # ---- where the number itself is needed: read it (with a tensor or an array the other side decides the result)
    def __eq__(self, o: object) -> Any:
        return self.value == _read(o)

    def __ne__(self, o: object) -> Any:
        return self.value != _read(o)

    def __lt__(self, o: Any) -> Any:
        return self.value < _read(o)

    def __le__(self, o: Any) -> Any:
        return self.value <= _read(o)

    def __gt__(self, o: Any) -> Any:
        return self.value > _read(o)

    def __ge__(self, o: Any) -> Any:
        return self.value >= _read(o)

    def __hash__(self) -> int:
        return hash(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __complex__(self) -> complex:
        return complex(self.value)

    def __index__(self) -> int:
        return operator.index(self.value)  # type: ignore[arg-type]  # a TypeError for a float, as the eager float raises

    def __round__(self, ndigits: int | None = None) -> Number:
        return round(self.value) if ndigits is None else round(self.value, ndigits)

    def __trunc__(self) -> int:
        return math.trunc(self.value)

    def __floor__(self) -> int:
        return math.floor(self.value)

    def __ceil__(self) -> int:
        return math.ceil(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)  # a printed list of losses reads as the eager program's

    def __reduce__(self) -> tuple[type, tuple[Number]]:
        return type(self.value), (self.value,)  # pickled, copied, saved: the plain number

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        return np.asarray(self.value, dtype=dtype)

    def __getattr__(self, name: str) -> Any:
        # the number's own methods and attributes (.real, .is_integer(), .hex(), .bit_length()); private
        # names are the slots' own, looked up before they are set
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.value, name)


numbers.Real.register(LazyScalar)


def _read(x: Any) -> Any:
    return x.value if isinstance(x, LazyScalar) else x


def _fold(x: Any) -> Any:
    """``x`` as an operand of a new lazy operation: its number where reading it waits for nothing, or where
    its chain has grown to :data:`MAX_DEPTH` (its copies are the oldest ones: they have landed or soon will)."""
    if isinstance(x, LazyScalar) and (x.landed() or x._depth >= MAX_DEPTH):
        return x.value
    return x
