"""Phases of every step, traced or not: DataLoader ``next()``, forward, backward, the optimizer
step and the host's waits for the GPU, from hooks PyTorch itself offers.

Why: the analysis judges from time measured *without* the tracer (the tracer slows the host
unevenly: a per-parameter optimizer's thousands of tiny ops far more than forward and backward),
so it needs each step's phases in the untraced steps too. The phases derived from a Kineto trace
(:mod:`dlscope.importers.torch_phases`) exist only in the traced window; these exist in every step
and, in a recording, replace the derived ones in the traced steps as well, so traced and untraced
steps are split by the same boundaries.

What is hooked, and what each costs per step (a Range enter+exit is a few hundred ns):

* ``dataloader``: ``_BaseDataLoaderIter.__next__`` (every DataLoader iterator), wrapped; until the
  first batch, ``__init__`` too, and the first batch is read once for the batch size
  (:func:`.batch_size.detect_batch_size`; then both go back to the plain wrapper and original);
* ``forward``: the outermost module call. Global module hooks find the outermost modules in the
  first step; then they are removed and only those modules keep a pre- and a post-hook, because a
  global hook sends every submodule call through ``Module._call_impl``'s slow path (about 150
  submodule calls per step on a GPT-2). Finalize merges the calls of one pass (the model's and
  a loss module's) into one ``forward`` (:mod:`.forward_passes`);
* ``backward``: ``torch.autograd.backward`` (``Tensor.backward`` calls it), wrapped;
* ``optimizer``: the global optimizer step pre- and post-hooks;
* ``sync``: where the host blocks until the GPU is done: ``Tensor.item``, ``.tolist``, ``.cpu``
  of a CUDA tensor and ``torch.cuda.synchronize`` (only when CUDA is available). Its time is the
  host's wait, which the straggler analysis reads as waiting for other ranks.

With CUDA, forward, backward and the optimizer step are also marked with CUDA events on the GPU
(:mod:`.phase_events`): the GPU time of what each phase launched, in every step, without
synchronizing (the ``phase_gpu`` table).

Every hook returns at once while ``torch.compile`` traces (dynamo inlines Python hooks: a hook
that did work there would break the compiled graph). Phase names are recorded with
:data:`HOOK_PREFIX`; finalize strips it and marks the rows ``source = 'hook'``.
"""

from __future__ import annotations

import functools
import threading
import weakref
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import CollectorUnavailable
from . import phase_events
from .base import Collector, DecodeContext, Settings
from .batch_size import detect_batch_size
from .import_hooks import cancel, when_imported
from .phase_events import PhaseGpuClock, TorchEvents
from .schedule import Action

if TYPE_CHECKING:
    import pyarrow as pa

    from .app import Range
    from .session import Session

HOOK_PREFIX = "dlscope.hook/"
HOOK_SOURCE = "hook"
DATALOADER, FORWARD, BACKWARD, OPTIMIZER, SYNC = "dataloader", "forward", "backward", "optimizer", "sync"
HOOK_PHASES = (DATALOADER, FORWARD, BACKWARD, OPTIMIZER, SYNC)
# the phases that launch GPU work: marked with CUDA events (the others only wait or load)
GPU_PHASES = (FORWARD, BACKWARD, OPTIMIZER)
# Tensor methods that copy a CUDA tensor to the host and so wait for the GPU
_SYNC_METHODS = ("item", "tolist", "cpu")


def _compiling_check(torch: ModuleType) -> Any:
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:
        fn = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return fn or (lambda: False)


class TorchPhaseHooks(Collector):
    name = "torch_hooks"
    layers = ("application",)
    setting = "torch"
    scope = "process"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.session: Session | None = None
        self._torch: ModuleType | None = None
        self._local = threading.local()
        self._handles: list[Any] = []  # hook handles to remove at stop
        self._global_fwd: list[Any] = []  # the global module hooks (removed after discovery)
        self._tops: weakref.WeakSet[Any] = weakref.WeakSet()
        self._restore: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
        self._compiling: Any = lambda: False
        self._gpu: PhaseGpuClock | None = None
        self.hooked: list[str] = []
        # the batch size read from the first batch: {"size", "source"} (finalize records it in meta.json)
        self.batch: dict[str, Any] | None = None
        self._loader_batch: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, session: Session) -> None:
        if not self.settings.phase_hooks:
            raise CollectorUnavailable("phase hooks turned off")
        self.session = session
        when_imported("torch", self._on_torch)

    def _on_torch(self, torch: ModuleType) -> None:
        if self.session is None or self.session.stopped or self._torch is not None:
            return
        self._torch = torch
        self._compiling = _compiling_check(torch)
        if self.settings.phase_gpu:
            try:
                if torch.cuda.is_available():
                    self._gpu = PhaseGpuClock(TorchEvents(torch), GPU_PHASES)
            except Exception:
                self._gpu = None
        for install in (
            self._hook_dataloader,
            self._hook_forward,
            self._hook_backward,
            self._hook_optimizer,
            self._hook_sync,
        ):
            try:
                install(torch)
            except Exception:  # an older or newer torch without that hook point: the others still run
                continue

    def on_step(self, step: int, action: Action) -> None:
        if self._global_fwd and len(self._tops):
            self._narrow_forward_hooks()
        if self._gpu is not None:
            self._gpu.poll()

    def flush(self) -> None:
        if self._gpu is not None and self.session is not None:
            phase_events.append(phase_events.spool_path(self.session.spool_dir, self.session.pid), self._gpu.take())

    def stop(self) -> None:
        cancel("torch", self._on_torch)
        for h in self._handles + self._global_fwd:
            try:
                h.remove()
            except Exception:
                pass
        self._handles, self._global_fwd = [], []
        for owner, attr, orig in reversed(self._restore):
            setattr(owner, attr, orig)
        self._restore = []
        if self._gpu is not None:
            self._gpu.poll()  # what the GPU has finished; never wait (a hung collective would hang here)
            self.flush()
        if self._torch is None:
            raise CollectorUnavailable("the program never imported torch")

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"hooked": list(self.hooked)}
        if self.batch:
            d["batch"] = dict(self.batch)
        if self._gpu is not None:
            d["phase_gpu"] = {"marks": self._gpu.marks, "resyncs": self._gpu.resyncs, "failed": self._gpu.failed}
        return d

    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        path = phase_events.spool_path(spool_dir, pid)
        if not path.exists():
            return {}
        import pyarrow as pa

        rows, torn = phase_events.read(path)
        if torn:
            context.notes.append(f"process {pid}: the phase_gpu spool ended inside a write; the last mark was dropped")
        if not rows:
            return {}
        off = context.offset_ns
        hs, he, gs, ge, tid, idx, dev = (list(c) for c in zip(*rows))
        names = [GPU_PHASES[i] if 0 <= i < len(GPU_PHASES) else "<unknown>" for i in idx]
        return {
            "phase_gpu": pa.table(
                {
                    "rank": pa.array([context.rank] * len(rows), pa.int32()),
                    "pid": pa.array([pid] * len(rows), pa.int64()),
                    "tid": pa.array(tid, pa.int64()),
                    "start_ns": pa.array([v + off for v in hs], pa.int64()),
                    "end_ns": pa.array([v + off for v in he], pa.int64()),
                    "name": pa.array(names, pa.string()),
                    "device": pa.array(dev, pa.int32()),
                    "gpu_start_ns": pa.array([v + off for v in gs], pa.int64()),
                    "gpu_end_ns": pa.array([v + off for v in ge], pa.int64()),
                }
            )
        }

    # ---- the ranges --------------------------------------------------------------------------
    def _range(self, name: str) -> Range:
        ranges: dict[str, Range] | None = getattr(self._local, "ranges", None)
        if ranges is None:
            assert self.session is not None
            ranges = self._local.ranges = self.session.recorder.thread_ranges()
        return ranges[HOOK_PREFIX + name]

    def _enter(self, name: str) -> None:
        self._range(name).__enter__()
        gpu = self._gpu
        if gpu is not None and name in GPU_PHASES:
            stacks = getattr(self._local, "gpu_tokens", None)
            if stacks is None:
                stacks = self._local.gpu_tokens = {n: [] for n in GPU_PHASES}
            stack = stacks[name]
            # only the outermost instance of a phase is marked (a checkpointed backward nests one)
            stack.append(gpu.begin(name) if not stack else None)

    def _exit(self, name: str) -> None:
        gpu = self._gpu
        if gpu is not None and name in GPU_PHASES:
            stack = getattr(self._local, "gpu_tokens", {}).get(name)
            if stack:
                gpu.end(stack.pop())
        self._range(name).__exit__(None, None, None)

    def _patch(self, owner: Any, attr: str, make: Any) -> None:
        orig = getattr(owner, attr)
        setattr(owner, attr, functools.wraps(orig)(make(orig)))
        self._restore.append((owner, attr, orig))

    def _wrapped(self, name: str) -> Any:
        """A wrapper maker: the call runs inside phase ``name`` (not while torch.compile traces)."""
        compiling = self._compiling

        def make(orig: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if compiling():
                    return orig(*args, **kwargs)
                self._enter(name)
                try:
                    return orig(*args, **kwargs)
                finally:
                    self._exit(name)

            return wrapper

        return make

    # ---- hook points -------------------------------------------------------------------------
    def _hook_dataloader(self, torch: ModuleType) -> None:
        from torch.utils.data import dataloader

        it_cls = dataloader._BaseDataLoaderIter
        timed = self._wrapped(DATALOADER)
        orig_init, orig_next = it_cls.__init__, it_cls.__next__
        plain_next = functools.wraps(orig_next)(timed(orig_next))
        loader_batch = self._loader_batch

        def make_init(orig: Any) -> Any:
            def init(it: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
                orig(it, loader, *args, **kwargs)
                loader_batch[it] = getattr(loader, "batch_size", None)  # the iterator keeps no loader

            return init

        def make_next(orig: Any) -> Any:
            first = timed(orig)

            def next_(it: Any, *args: Any, **kwargs: Any) -> Any:
                batch = first(it, *args, **kwargs)
                if self.batch is None:  # the first batch of the run: read once, then unhook
                    try:
                        found = detect_batch_size(loader_batch.get(it), batch)
                    except Exception:  # never break the program over a batch we cannot read
                        found = None
                    self.batch = {"size": found[0], "source": found[1]} if found else {}
                    it_cls.__next__, it_cls.__init__ = plain_next, orig_init  # type: ignore[method-assign]  # the hooks put back
                    loader_batch.clear()
                return batch

            return next_

        self._patch(it_cls, "__init__", make_init)
        self._patch(it_cls, "__next__", make_next)
        self.hooked.append(DATALOADER)

    def _hook_backward(self, torch: ModuleType) -> None:
        self._patch(torch.autograd, "backward", self._wrapped(BACKWARD))
        self.hooked.append(BACKWARD)

    def _hook_optimizer(self, torch: ModuleType) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        compiling = self._compiling

        def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not compiling():
                self._enter(OPTIMIZER)

        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not compiling():
                self._exit(OPTIMIZER)

        self._handles += [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
        self.hooked.append(OPTIMIZER)

    def _hook_sync(self, torch: ModuleType) -> None:
        if not torch.cuda.is_available():
            return
        compiling = self._compiling

        def on_cuda(orig: Any) -> Any:
            def wrapper(t: Any, *args: Any, **kwargs: Any) -> Any:
                if not t.is_cuda or compiling():
                    return orig(t, *args, **kwargs)
                rng = self._range(SYNC)
                rng.__enter__()
                try:
                    return orig(t, *args, **kwargs)
                finally:
                    rng.__exit__(None, None, None)

            return wrapper

        for m in _SYNC_METHODS:
            self._patch(torch.Tensor, m, on_cuda)
        self._patch(torch.cuda, "synchronize", self._wrapped(SYNC))
        self.hooked.append(SYNC)

    def _hook_forward(self, torch: ModuleType) -> None:
        from torch.nn.modules import module as nn_module

        pre, post = self._forward_hooks(discover=True)
        self._global_fwd = [
            nn_module.register_module_forward_pre_hook(pre),
            _with_always_call(nn_module.register_module_forward_hook, post),
        ]
        self.hooked.append(FORWARD)

    def _forward_hooks(self, discover: bool) -> tuple[Any, Any]:
        """A pre- and post-hook pair opening ``forward`` at the outermost module call of a thread
        (nesting counted per thread); with ``discover``, the outermost modules are remembered."""
        compiling, local, tops = self._compiling, self._local, self._tops

        def pre(module: Any, args: Any) -> None:
            if compiling():
                return
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            if depth == 0:
                if discover:
                    tops.add(module)
                self._enter(FORWARD)

        def post(module: Any, args: Any, output: Any) -> None:
            if compiling():
                return
            depth = getattr(local, "depth", 0) - 1
            local.depth = max(depth, 0)
            if depth == 0:
                self._exit(FORWARD)

        return pre, post

    def _narrow_forward_hooks(self) -> None:
        """Replace the global module hooks by hooks on the outermost modules seen so far."""
        if getattr(self._local, "depth", 0):
            return  # a step boundary inside a forward call: wait for the next one
        for h in self._global_fwd:
            h.remove()
        self._global_fwd = []
        pre, post = self._forward_hooks(discover=False)
        for m in list(self._tops):
            self._handles += [m.register_forward_pre_hook(pre), _with_always_call(m.register_forward_hook, post)]


def _with_always_call(register: Any, hook: Any) -> Any:
    """``register(hook, always_call=True)`` (the post-hook runs when forward raises, so the phase
    closes), or without it on a torch that lacks the keyword."""
    try:
        return register(hook, always_call=True)
    except TypeError:
        return register(hook)
