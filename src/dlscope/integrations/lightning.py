"""A PyTorch Lightning profiler that records a dlscope profile:

    from dlscope.integrations.lightning import DlscopeProfiler
    trainer = Trainer(profiler=DlscopeProfiler("run.dlscope"), ...)

Lightning times its hooks through ``profiler.start(action)`` / ``stop(action)``; the ones that make
a training step become dlscope phases, named as Lightning's hooks: ``data_fetch`` (the loader's
``next``), ``training_step``, ``backward``, ``optimizer_step``, ``zero_grad``, ``validation_step``.
Each training batch is one dlscope step (the first is flagged warm-up), and dlscope's own hooks add
``forward``, ``backward`` and ``optimizer`` timing, traced detail in the first steps, GPU counters,
and the advice, as under ``dlscope profile``. Under ``dlscope profile -- python train.py`` the
recording already running is joined instead of starting a second one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import Profiler

# Lightning's action names (e.g. "[LightningModule]Model.training_step",
# "[_TrainingEpochLoop].train_dataloader_next", "[Strategy]SingleDeviceStrategy.backward") -> phase
PHASES: tuple[tuple[str, str], ...] = (
    (r"train_dataloader_next$", "data_fetch"),
    (r"^\[Strategy\].*\.training_step$", "training_step"),
    (r"^\[Strategy\].*\.backward$", "backward"),
    (r"^\[LightningModule\].*\.optimizer_step$", "optimizer_step"),
    (r"^\[LightningModule\].*\.optimizer_zero_grad$", "zero_grad"),
    (r"^\[Strategy\].*\.validation_step$", "validation_step"),
)
STEP_ACTION = "run_training_batch"  # one training batch: its end is a step boundary


def phase_of(action: str) -> str | None:
    return next((name for pattern, name in PHASES if re.search(pattern, action)), None)


class DlscopeProfiler(Profiler):
    """Lightning ``Profiler`` recording into ``path`` (default ``lightning.dlscope`` in the trainer's
    log directory); keywords are ``dlscope.profile``'s (``batch_size``, ``steps``, ``mode``...)."""

    def __init__(self, path: str | Path | None = None, **options: Any) -> None:
        super().__init__(dirpath=None, filename=None)
        self.path = Path(path) if path is not None else None
        self.options = options
        self._prof: Any = None
        self._open: dict[str, int] = {}

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        if self._prof is None and stage == "fit":
            import dlscope

            path = self.path or Path(log_dir or ".") / "lightning.dlscope"
            self._prof = dlscope.profile(path, **self.options).start()

    def start(self, action_name: str) -> None:
        name = phase_of(action_name)
        if name is not None and self._prof is not None:
            self._prof.begin(name)
            self._open[name] = self._open.get(name, 0) + 1

    def stop(self, action_name: str) -> None:
        if self._prof is None:
            return
        name = phase_of(action_name)
        if name is not None and self._open.get(name):
            self._prof.end(name)
            self._open[name] -= 1
        if action_name == STEP_ACTION:
            self._prof.step()

    def summary(self) -> str:
        return f"dlscope profile: {self._prof.path}" if self._prof is not None else ""

    def teardown(self, stage: str | None) -> None:
        if self._prof is not None and stage in ("fit", None):
            prof, self._prof = self._prof, None
            prof.stop()
        super().teardown(stage)
