"""The Lightning profiler and the Hugging Face callback, with the real libraries on the CPU and
tiny models built from code or a config (no downloads): phases per step, warm-up flagged, advice."""

from __future__ import annotations

import pytest

from dlscope import advice
from dlscope.analysis.core.context import ProfileData

from .conftest import q, require


def test_lightning_trainer_records_its_hooks_as_phases_per_step(tmp_path):
    L = require("lightning", "the Lightning test needs lightning (the test extra)")
    import torch
    from torch import nn

    from dlscope.integrations.lightning import DlscopeProfiler

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 2, (256,)))
    path = tmp_path / "lightning.dlscope"
    trainer = L.Trainer(
        max_steps=12,
        profiler=DlscopeProfiler(path),
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
    d = ProfileData.open(path)
    steps = q(d.con, "SELECT count(*), sum(warmup::INT), min(source) FROM steps")[0]
    assert steps[0] >= 11 and steps[1] == 1 and steps[2] == "dlscope"  # a step per batch, the first warm-up
    per_step = dict(
        q(
            d.con,
            """SELECT name, count(DISTINCT step) FROM phases
                               WHERE source = 'dlscope' AND step IS NOT NULL GROUP BY name""",
        )
    )
    for name in ("data_fetch", "training_step", "backward", "optimizer_step"):
        assert per_step.get(name, 0) >= 10, (name, per_step)
    # Lightning runs the training step inside optimizer.step(closure): the hooks' forward nests in
    # the optimizer's step, and the model's class takes it (analysis.host_classes)
    nested = q(
        d.con,
        """SELECT count(*) FROM phases f JOIN phases o ON o.name = 'optimizer' AND o.source = 'hook'
                         AND f.start_ns >= o.start_ns AND f.end_ns <= o.end_ns
                         WHERE f.name = 'forward' AND f.source = 'hook'""",
    )[0][0]
    assert nested >= 10
    advice.run(d)  # the rules run on it


def test_huggingface_trainer_callback_records_steps_and_phases(tmp_path):
    transformers = require("transformers", "the Hugging Face test needs transformers (the test extra)")
    import torch

    from dlscope.integrations.huggingface import DlscopeCallback

    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": torch.tensor(i % 2)}

    path = tmp_path / "hf.dlscope"
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=10,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=[DlscopeCallback(path)]).train()
    d = ProfileData.open(path)
    n, warm = q(d.con, "SELECT count(*), sum(warmup::INT) FROM steps")[0]
    assert n == 10 and warm == 1
    per_step = dict(q(d.con, """SELECT name, count(DISTINCT step) FROM phases WHERE step IS NOT NULL GROUP BY name"""))
    assert per_step.get("training_step", 0) == 10 and per_step.get("optimizer_step", 0) >= 9
    assert per_step.get("forward", 0) >= 9 and per_step.get("backward", 0) >= 9  # dlscope's own hooks
    advice.run(d)


@pytest.mark.parametrize(
    "action,phase",
    [
        ("[_TrainingEpochLoop].train_dataloader_next", "data_fetch"),
        ("[Strategy]DDPStrategy.training_step", "training_step"),
        ("[LightningModule]M.optimizer_step", "optimizer_step"),
        ("[LightningModule]M.on_train_batch_end", None),
    ],
)
def test_lightning_action_names(action, phase):
    require("lightning", "needs lightning")
    from dlscope.integrations.lightning import phase_of

    assert phase_of(action) == phase
