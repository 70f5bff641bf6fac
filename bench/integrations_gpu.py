"""The Lightning profiler and the Hugging Face callback on a GPU, and a held-out truth for the
advice: an unmodified Lightning MLP (``Trainer.fit``, ``Adam``) whose ``fused=True`` saving issue
21 measured at 15% while the advice then said 61%.

    python3 bench/integrations_gpu.py            (writes integrations_gpu.json under $OUT)

1. Lightning: ``Trainer(profiler=DlscopeProfiler(path), accelerator="gpu")`` on the MLP; the
   profile's steps, phases, kernels, GPU phase marks and ``unfused_optimizer``'s estimate.
2. Truth: the same ``Trainer.fit`` without any profiler, ``fused=False`` and ``fused=True``
   alternated (``--runs`` each), median step from a callback's timestamps after the first 20.
3. Hugging Face: ``Trainer(callbacks=[DlscopeCallback(path)])`` on a tiny BERT on the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
SKIP = 20


def lightning_fit(steps: int, fused: bool, profiler=None) -> list[float]:
    import lightning as L

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            for _ in range(6):
                layers += [nn.Linear(512, 512), nn.ReLU()]
            self.net = nn.Sequential(*layers, nn.Linear(512, 10))

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3, fused=fused)

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.t: list[float] = []

        def on_train_batch_end(self, *args) -> None:
            self.t.append(time.perf_counter())

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64 * 512, 512, generator=g), torch.randint(0, 10, (64 * 512,), generator=g)
    )
    clock = Clock()
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="gpu",
        devices=1,
        profiler=profiler,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    trainer.fit(MLP(), torch.utils.data.DataLoader(data, batch_size=64, shuffle=True))
    return [(b - a) * 1e3 for a, b in zip(clock.t, clock.t[1:])]


def profile_facts(path: Path) -> dict:
    from dlscope import advice
    from dlscope.analysis.core.context import ProfileData

    d = ProfileData.open(path)

    def one(sql: str):
        return d.con.execute(sql).fetchall()[0][0]

    findings = advice.evaluate(d)
    return {
        "steps": one("SELECT count(*) FROM steps"),
        "kernels": one("SELECT count(*) FROM kernels"),
        "phase_gpu_marks": one("SELECT count(*) FROM phase_gpu"),
        "phases": dict(d.con.execute("SELECT name, count(*) FROM phases GROUP BY name").fetchall()),
        "findings": [(f.id, f.severity, round(f.saving_pct or 0, 1)) for f in findings],
    }


def huggingface(path: Path) -> None:
    import transformers

    from dlscope.integrations.huggingface import DlscopeCallback

    config = transformers.BertConfig(
        vocab_size=1024,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 1024, (48,), generator=g), "labels": torch.tensor(i % 2)}

    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        max_steps=40,
        per_device_train_batch_size=32,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=[DlscopeCallback(path)]).train()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    from dlscope.integrations.lightning import DlscopeProfiler

    tmp = Path(tempfile.mkdtemp())
    res: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    lp = tmp / "lightning.dlscope"
    lightning_fit(60, fused=False, profiler=DlscopeProfiler(lp))
    res["lightning_profile"] = profile_facts(lp)
    print("lightning:", json.dumps(res["lightning_profile"]), flush=True)
    truth: dict[str, list[float]] = {"unfused": [], "fused": []}
    for r in range(a.runs):
        for fused in (False, True) if r % 2 == 0 else (True, False):
            steps = lightning_fit(a.steps, fused)
            truth["fused" if fused else "unfused"].append(statistics.median(steps[SKIP:]))
    saving = [100 * (u - f) / u for u, f in zip(truth["unfused"], truth["fused"])]
    res["lightning_truth"] = {"median_step_ms": truth, "fused_saving_pct": saving}
    print("lightning truth:", json.dumps(res["lightning_truth"]), flush=True)
    hp = tmp / "hf.dlscope"
    huggingface(hp)
    res["huggingface_profile"] = profile_facts(hp)
    print("huggingface:", json.dumps(res["huggingface_profile"]), flush=True)
    (OUT / "integrations_gpu.json").write_text(json.dumps(res, indent=1))
    import tarfile

    with tarfile.open(OUT / "integrations_profiles.tar.gz", "w:gz") as tf:
        tf.add(lp, arcname="lightning.dlscope")
        tf.add(hp, arcname="hf.dlscope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
