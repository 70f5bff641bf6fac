"""The host's reads of one-number results (``.item()``, ``.tolist()``) deferred to where the number is used.

``loss.item()`` copies one number from the GPU and waits for every kernel queued before it: the host
stops preparing the next work, and the GPU's queue runs dry until it starts again (sync_in_step). Under
this fix, ``.item()`` on a one-element CUDA tensor, and ``.tolist()`` on a 0-d or one-element one, start
the copy into pinned host memory without waiting (``non_blocking=True``), record a CUDA event after it, and
return a :class:`~.lazy_scalar.LazyScalar`: the number, read (the event waited for) only where the program
needs its value. A loop that adds its losses up, keeps them in a list and prints every N steps waits
only when it prints; a program whose control flow depends on the number (``if loss.item() > x``) waits
there, exactly as before. The numbers are the same to the bit (the same copy, read later; arithmetic on them
is Python's own, done when read) and each step sees the same samples: the fix changes when the host
waits, not what it computes.

Left as they were, with the eager number: tensors on the CPU or another device, of more than one element,
of bool (a flag is read to decide something: deferring it saves nothing) or complex type, subclasses of
``Tensor``; calls made during CUDA graph capture or while torch.compile traces; and calls from library
code (the standard library, site-packages, torch, dlscope): a library may hand the number to C code that
accepts only a real ``float``. Only the program's own files get lazy numbers.

Where meaning could still change (the limits; a run of ``dlscope try`` that breaks says so and the fix is
reported as not applied):

- ``isinstance(x, float)`` / ``type(x) is int`` are False for a lazy number (it is a registered
  ``numbers.Real``): code that branches on the type takes the other branch.
- C code that wants a Python number raises ``TypeError``: ``torch.tensor(loss.item())``,
  ``torch.full(..., x)``, an optimizer's lr set to one. ``json.dumps`` is taught the lazy number (the
  encoder's ``default`` reads it), except with a ``default=`` of the program's own (``default=str`` quotes it).
- A program that times its steps with ``time.time()`` around an ``.item()`` it used as the step's
  sync now times only the launches: its own printed step times change (dlscope's measurement does not).
- A CUDA error raised asynchronously (a device-side assert) surfaces where the number is read, or at the
  next sync, not at the ``.item()`` line.
- The copy is ordered on the tensor's current stream: a later in-place change of the tensor on another
  stream, with no event between, could race it (the eager copy had finished by then).
- ``.cpu()`` of a scalar is left alone: it returns a tensor, whose readers (C++ kernels) cannot be
  made to wait for a copy that has not landed.

Nothing is read at the step's end on purpose: waiting there would drain the GPU's queue every step,
which is the cost the fix removes. A lazy number that is never used is never waited for; one whose copy
has landed is read at the next deferral, without waiting, so that its event and pinned buffer go.
"""

from __future__ import annotations

import functools
import json
import os
import site
import sys
import sysconfig
import weakref
from collections import Counter, deque
from pathlib import Path
from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, NotApplicable
from .lazy_scalar import LazyScalar, Number


class Reads:
    """What the lazy numbers of one run did: how many were read before their copy had landed."""

    def __init__(self) -> None:
        self.waited = 0  # read while the copy was still under way (the program needed the number at once)
        self.landed = 0  # read after the copy had landed: the wait the fix removed


class CudaCopy:
    """One number on its way to pinned host memory, with the event recorded after its copy."""

    def __init__(self, torch: ModuleType, t: Any, item: Any, reads: Reads) -> None:
        src = t.detach().reshape(())
        self._host = torch.empty((), dtype=src.dtype, pin_memory=True)  # pinned: the copy is a DMA, no wait
        self._host.copy_(src, non_blocking=True)  # on the current stream of the tensor's device
        self._event = torch.cuda.Event()
        self._event.record(torch.cuda.current_stream(src.device))
        self._item, self._reads = item, reads

    def ready(self) -> bool:
        return bool(self._event.query())

    def read(self) -> Number:
        if self._event.query():
            self._reads.landed += 1
        else:
            self._reads.waited += 1
            self._event.synchronize()
        value: Number = self._item(self._host)
        return value


class StandIn:
    """A copy that is never found landed (a snapshot of the tensor, read when asked): what a device type
    without events gets (tests, on the CPU), so that the lazy path runs as on a GPU whose copies lag."""

    def __init__(self, torch: ModuleType, t: Any, item: Any, reads: Reads) -> None:
        self._host = t.detach().reshape(()).clone()
        self._item, self._reads = item, reads

    def ready(self) -> bool:
        return False

    def read(self) -> Number:
        self._reads.waited += 1
        value: Number = self._item(self._host)
        return value


class OwnCode:
    """Whether a file is the program's own, not a library's (the standard library, site-packages, torch,
    dlscope itself): only the program's own ``.item()`` calls get lazy numbers."""

    def __init__(self, torch: ModuleType) -> None:
        paths = sysconfig.get_paths()
        roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
        roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
        roots |= {os.path.dirname(str(torch.__file__)), str(Path(__file__).resolve().parents[2])}
        self._roots = tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)
        self._seen: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        own = self._seen.get(filename)
        if own is None:
            # code made at run time ('<string>', '<eval_with_key>', dataclasses' '<string>') is a library's
            own = not filename.startswith("<") and not os.path.realpath(filename).startswith(self._roots)
            self._seen[filename] = own
        return own


class DeferSync(InjectedFix):
    name = FixName.DEFER_SYNC
    rules = (RuleId.SYNC_IN_STEP,)
    describe = ".item()/.tolist() on one-element CUDA tensors read where the number is used, not where it is asked"

    def __init__(self) -> None:
        super().__init__()
        self.deferred = 0
        self.left: Counter[str] = Counter()  # one-element device tensors read at once, by why
        self.reads = Reads()
        # the lazy numbers not read yet, oldest first: those whose copy has landed are read at the next
        # deferral (waiting for nothing), which frees their events and pinned buffers; a program that keeps
        # every loss of a long run in a list, unread, would otherwise hold one of each per step
        self._unread: deque[weakref.ref[LazyScalar]] = deque()

    def _settle(self) -> None:
        while self._unread:
            v = self._unread[0]()
            if v is not None and not v.landed():
                return  # copies land in the order they were queued: the younger ones are on their way too
            self._unread.popleft()
            if v is not None:
                v.value  # noqa: B018  # read now: it has landed

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        # the device whose numbers are deferred: 'cuda' (dlscope try); a test without a GPU names 'cpu' and
        # gets the stand-in copy through the same path
        device = str(ctx.options.get(self.name, {}).get("device_type", "cuda"))
        if device == "cuda" and not torch.cuda.is_available():
            raise NotApplicable("no CUDA device: the syncs this fix defers are the host's waits for a GPU")
        copy = CudaCopy if device == "cuda" else StandIn
        own = OwnCode(torch)
        fix = self

        def lazy(t: Any, caller: str) -> LazyScalar | None:
            """The lazy number for ``t``, or None where it is read at once (and why, counted)."""
            if type(t) is not torch.Tensor or t.device.type != device or t.numel() != 1:
                return None
            why = _left_as_is(torch, t, device) or ("" if own(caller) else "called from library code")
            if why:
                fix.left[why] += 1
                return None
            fix.deferred += 1
            fix._settle()
            v = LazyScalar(copy(torch, t, orig_item, fix.reads))
            fix._unread.append(weakref.ref(v))
            return v

        orig_item, orig_tolist = torch.Tensor.item, torch.Tensor.tolist

        @functools.wraps(orig_item)
        def item(t: Any) -> Any:
            got = lazy(t, sys._getframe(1).f_code.co_filename)
            return orig_item(t) if got is None else got

        @functools.wraps(orig_tolist)
        def tolist(t: Any) -> Any:
            got = lazy(t, sys._getframe(1).f_code.co_filename) if t.dim() <= 1 else None
            if got is None:
                return orig_tolist(t)
            return got if t.dim() == 0 else [got]

        torch.Tensor.item = item
        torch.Tensor.tolist = tolist
        _teach_json()

    def outcome(self) -> tuple[bool, str]:
        self.changed = self.deferred
        self.detail = {
            "deferred": self.deferred,
            "read_after_landing": self.reads.landed,
            "read_before_landing": self.reads.waited,
            "left_as_is": dict(self.left),
        }
        self.applied_as = f"{self.deferred} reads deferred"
        if self.deferred:
            if self.reads.waited > self.reads.landed:
                # the program used most numbers right after asking: the waits moved, few went away
                self.weaker = (
                    f"{self.reads.waited} of {self.reads.waited + self.reads.landed} deferred numbers were used "
                    "before their copy landed (the program needs them at once)"
                )
            return True, ""
        left = ", ".join(f"{n} {why}" for why, n in self.left.most_common())
        return False, (
            "the program made no .item() or .tolist() on a one-element CUDA tensor in its own code"
            + (f" (left as they were: {left})" if left else "")
            + "; its syncs are elsewhere (.cpu(), synchronize, data-dependent shapes): a source change"
        )


def _left_as_is(torch: ModuleType, t: Any, device: str) -> str:
    """Why a one-element tensor on the device is read at once ('' when it can be deferred)."""
    if t.dtype == torch.bool or t.dtype.is_complex:
        return f"{t.dtype} tensor"
    if getattr(torch.compiler, "is_compiling", _never)():  # (torch.compiler.is_compiling: torch 2.3 on)
        return "while torch.compile traces"
    if device == "cuda" and torch.cuda.is_current_stream_capturing():
        return "during CUDA graph capture"
    return ""


def _never() -> bool:
    return False


def _teach_json() -> None:
    """``json.dumps`` of a lazy number writes the number (the encoder asks ``default`` for types it does not
    know; a subclass's ``default`` that defers to its base gets the same)."""
    orig = json.JSONEncoder.default
    if getattr(orig, "_dlscope_lazy", False):
        return

    @functools.wraps(orig)
    def default(encoder: json.JSONEncoder, o: Any) -> Any:
        return o.value if isinstance(o, LazyScalar) else orig(encoder, o)

    default._dlscope_lazy = True  # type: ignore[attr-defined]  # a mark on the function: installed once
    json.JSONEncoder.default = default  # type: ignore[method-assign,assignment]  # patched on the class, as intended
