"""A Hugging Face ``TrainerCallback`` that records a dlscope profile:

    from dlscope.integrations.huggingface import DlscopeCallback
    Trainer(model, args, callbacks=[DlscopeCallback("run.dlscope")], ...)

Each optimizer step of the Trainer is one dlscope step (the first flagged warm-up), spanned by a
``training_step`` phase from ``on_step_begin`` to ``on_step_end`` (gradient accumulation's
micro-batches inside it), ``optimizer_step`` from ``on_pre_optimizer_step`` to
``on_optimizer_step``, and ``evaluate`` around evaluation. dlscope's own hooks add the DataLoader
wait, ``forward``, ``backward`` and ``optimizer`` timing, traced detail in the first steps, GPU
counters and the advice, as under ``dlscope profile``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback


class DlscopeCallback(TrainerCallback):
    """Records into ``path`` (default ``OUTPUT_DIR/trainer.dlscope``); keywords are
    ``dlscope.profile``'s (``batch_size``, ``steps``, ``mode``...)."""

    def __init__(self, path: str | Path | None = None, **options: Any) -> None:
        self.path = Path(path) if path is not None else None
        self.options = options
        self._prof: Any = None
        self._in_step = False
        self._in_opt = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import dlscope

        if self._prof is None:  # every rank records (its rank goes with its rows)
            path = self.path or Path(args.output_dir) / "trainer.dlscope"
            self._prof = dlscope.profile(path, **self.options).start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._prof is not None and not self._in_step:
            self._prof.begin("training_step")
            self._in_step = True

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._prof is not None and not self._in_opt:
            self._prof.begin("optimizer_step")
            self._in_opt = True

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._prof is not None and self._in_opt:
            self._prof.end("optimizer_step")
            self._in_opt = False

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._prof is None:
            return
        if self._in_step:
            self._prof.end("training_step")
            self._in_step = False
        self._prof.step()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._prof is not None:
            self._prof.mark("evaluate")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.stop()
