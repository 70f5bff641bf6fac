"""The ground-truth suite's training programs: a baseline with known problems per model, and one
variant per single fix.

Three models, built from torch/torchvision only (random weights, synthetic data, no downloads):

* ``cnn``: ResNet-50 image classification, fed by a DataLoader whose Dataset decodes and normalises
  each image in NumPy on the training thread (``num_workers=0``);
* ``gpt``: a GPT-2-style decoder (6 layers, d=768) on text tokenised in pure Python per sample,
  trained with a per-parameter AdamW;
* ``mlp``: a small MLP whose step is a few hundred tiny kernels: launch-bound;
* ``gpt2``: a GPT-2-124M-class decoder (12 layers, d=768, 1024 tokens) whose fp32 forward and
  backward keep the GPU busy, with the same per-parameter AdamW and Python tokenizer as ``gpt``:
  the class on which one calibration factor advised bf16 as a slowdown (issue 21).

Every baseline also copies its batch from pageable memory, calls ``.item()`` on the loss every
step, computes in fp32, and uses the per-parameter ("for-loop") optimizer. A *variant* changes one
thing (:data:`FIXES`); the ``*_fix`` variants (:data:`TRY_FIXES`) are, instead, exactly what
``dlscope try``'s injected fix of that name makes of the baseline (issue 22), so that ``measure.py``
can time the same change ``dlscope try`` measures. :func:`build` returns a :class:`Trainer` whose ``step()`` runs one
training iteration. ``train.py`` runs one (model, variant) as a program, so that ``dlscope
profile`` sees an ordinary training script; ``measure.py`` times them all alternated in one
process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

# fix -> what it changes; the rule that should name the baseline's problem
FIXES: dict[str, str] = {
    "workers": "DataLoader(num_workers=4, persistent_workers=True)",
    "pin": "DataLoader(pin_memory=True) and .to(device, non_blocking=True)",
    "no_item": "no .item() on the loss in the step (logged every 50 steps instead)",
    "bf16": "torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss",
    "fused_opt": "the optimizer with fused=True",
    "channels_last": "model and input in torch.channels_last",
    "compile": "torch.compile(model, mode='reduce-overhead') (CUDA graphs)",
    "batch2x": "twice the batch size (4x for the MLP); compared per sample",
}
EXPECTED_RULES: dict[str, tuple[str, ...]] = {
    "workers": ("input_bound",),
    "pin": ("pageable_memcpy", "h2d_not_overlapped"),
    "no_item": ("sync_in_step",),
    "bf16": ("amp_not_enabled", "no_tensor_cores"),
    "fused_opt": ("unfused_optimizer",),
    "channels_last": ("layout_transposes",),
    "compile": ("launch_bound", "fusion_candidates"),
    "batch2x": ("memory_underused",),
}
# ``dlscope try``'s fixes (src/dlscope/capture/fixes) as they act on these programs, as variants: the
# same change made in the source, to measure with measure.py next to ``dlscope try --fixes NAME``.
# Not in MODEL_FIXES (the suite's own fixes, whose results are recorded); ask for them with
# ``measure.py --variants``. Each maps to the suite's variant that fixes the same problem.
TRY_FIXES: dict[str, str] = {
    "workers_fix": (
        "try's 'workers': DataLoader(num_workers=min(8, CPUs-1), pin_memory=True on CUDA, "
        "persistent_workers=True, prefetch_factor=2); the copy stays blocking"
    ),
    "compile_graphs_fix": (
        "try's 'compile_graphs': model.forward = torch.compile(model.forward, "
        "mode='reduce-overhead'); the loss stays outside"
    ),
    "compile_fix": "try's 'compile': model.forward = torch.compile(model.forward) (default mode)",
    "bf16_fix": (
        "try's 'bf16': bf16 autocast from the step's start (the batch's loading included) to "
        "the loss, closed before backward, and the program's own autocast switch turned on"
    ),
}
TRY_FIX_OF: dict[str, str] = {
    "workers_fix": "workers",
    "compile_graphs_fix": "compile_graphs",
    "compile_fix": "compile",
    "bf16_fix": "bf16",
}
SUITE_VARIANT_OF: dict[str, str] = {
    "workers_fix": "workers",
    "compile_graphs_fix": "compile",
    "compile_fix": "compile",
    "bf16_fix": "bf16",
}
# the try workers fix: at most this many workers, one CPU left to the training process
TRY_MAX_WORKERS = 8

MODEL_FIXES: dict[str, tuple[str, ...]] = {
    "cnn": ("workers", "pin", "no_item", "bf16", "fused_opt", "channels_last", "batch2x"),
    "gpt": ("workers", "pin", "no_item", "bf16", "fused_opt", "batch2x"),
    "mlp": ("pin", "no_item", "bf16", "fused_opt", "compile", "batch2x"),
    "gpt2": ("workers", "no_item", "bf16", "fused_opt"),
}


@dataclass(frozen=True)
class Config:
    model: str
    batch: int
    workers: int = 0
    pin: bool = False
    item: bool = True
    bf16: bool = False
    optimizer: str = "per_parameter"  # or 'fused'
    channels_last: bool = False
    compile: bool = False
    # fields the try-fix variants set (the defaults keep every older variant as it was)
    prefetch: int = 4  # prefetch_factor when workers > 0
    pin_memory: bool | None = None  # the DataLoader's pin_memory; None: as ``pin`` (which also sets non_blocking)
    compile_mode: str | None = "reduce-overhead"
    compile_forward: bool = False  # compile model.forward in place (try's fix), not torch.compile(model)
    bf16_from_step_start: bool = False  # an outer autocast region from the step's start to the loss (try's fix)


def try_workers() -> int:
    """The workers try's fix gives a loader: the CPUs this process may use less one, 1..8."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(TRY_MAX_WORKERS, cpus - 1))


BASE_BATCH = {"cnn": 64, "gpt": 8, "mlp": 64, "gpt2": 8}


def config(model: str, variant: str) -> Config:
    c = Config(model, BASE_BATCH[model])
    changes = {
        "baseline": {},
        "workers": {"workers": 4},
        "pin": {"pin": True},
        "no_item": {"item": False},
        "bf16": {"bf16": True},
        "fused_opt": {"optimizer": "fused"},
        "channels_last": {"channels_last": True},
        "compile": {"compile": True},
        "batch2x": {"batch": c.batch * (4 if model == "mlp" else 2)},
        "workers_fix": {"workers": try_workers(), "prefetch": 2, "pin_memory": torch.cuda.is_available()},
        "compile_graphs_fix": {"compile": True, "compile_forward": True, "compile_mode": "reduce-overhead"},
        "compile_fix": {"compile": True, "compile_forward": True, "compile_mode": None},
        "bf16_fix": {"bf16": True, "bf16_from_step_start": True},
    }
    if variant not in changes:
        raise KeyError(f"unknown variant {variant!r} (known: {', '.join(changes)})")
    return replace(c, **changes[variant])


# ---- data --------------------------------------------------------------------------------------
class Images(torch.utils.data.Dataset):
    """Synthetic 'decoded JPEGs': each sample is made and normalised in NumPy, as a naive
    torchvision-free pipeline would do on the CPU."""

    MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)

    def __len__(self) -> int:
        return 1 << 30

    SIZE = 176

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i % 1024)
        img = rng.integers(0, 256, (self.SIZE, self.SIZE, 3), dtype=np.uint8)
        x = img.transpose(2, 0, 1).astype(np.float32) / 255.0
        x = (x - self.MEAN) / self.STD
        if i % 2:
            x = x[:, :, ::-1]  # random flip
        return torch.from_numpy(np.ascontiguousarray(x)), int(i % 1000)


WORDS = [f"w{i:03d}{chr(97 + i % 26)}{chr(97 + (i * 7) % 26)}ing" for i in range(600)]


def tokenize(text: str, vocab: int) -> list[int]:
    """A pure-Python byte-pair-style tokenizer: a few merge passes over each word's characters."""
    out = []
    for word in text.split():
        ids = [ord(c) for c in word]
        for _ in range(3):  # merge passes
            merged, j = [], 0
            while j < len(ids):
                if j + 1 < len(ids):
                    merged.append((ids[j] * 257 + ids[j + 1]) % vocab)
                    j += 2
                else:
                    merged.append(ids[j])
                    j += 1
            ids = merged
        out.extend(ids)
    return out


class Text(torch.utils.data.Dataset):
    def __init__(self, seq: int, vocab: int) -> None:
        self.seq, self.vocab = seq, vocab

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i % 512)
        text = " ".join(WORDS[k] for k in rng.integers(0, len(WORDS), self.seq * 2))
        ids = tokenize(text, self.vocab)
        ids = (ids * (self.seq // max(1, len(ids)) + 2))[: self.seq + 1]
        t = torch.tensor(ids, dtype=torch.long)
        return t[:-1], t[1:]


class TensorBatches(torch.utils.data.Dataset):
    """Whole batches sliced from an in-memory pool (``DataLoader(batch_size=None)``): the
    cheapest input a program can have, so the MLP's step is its launches."""

    def __init__(self, batch: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(64 * batch, 512, generator=g), torch.randint(0, 10, (64 * batch,), generator=g)
        self.batch = batch

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int):
        j = (i % 64) * self.batch
        return self.x[j : j + self.batch], self.y[j : j + self.batch]


# ---- models ------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 50304, seq: int = 512, d: int = 768, layers: int = 6, heads: int = 12) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def mlp() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(512, 512), nn.LayerNorm(512), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(512, 10))


# ---- the trainer -------------------------------------------------------------------------------
class Trainer:
    """One (model, variant): ``step()`` runs one training iteration the way the variant's program
    would (load a batch, copy it, forward, backward, optimizer step, log)."""

    def __init__(self, c: Config, device: str = "cuda") -> None:
        self.c, self.device = c, device
        torch.manual_seed(0)
        if c.model == "cnn":
            import torchvision

            model, data = torchvision.models.resnet50(weights=None), Images()
        elif c.model == "gpt":
            model, data = GPT(), Text(512, 50304)
        elif c.model == "gpt2":
            model, data = GPT(seq=1024, layers=12), Text(1024, 50304)
        else:
            model, data = mlp(), TensorBatches(c.batch)
        model = model.to(device)
        if c.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if c.model in ("gpt", "gpt2"):
            opt = torch.optim.AdamW(
                model.parameters(), lr=3e-4, **({"fused": True} if c.optimizer == "fused" else {"foreach": False})
            )
        elif c.model == "cnn":
            opt = torch.optim.SGD(
                model.parameters(),
                lr=0.01,
                momentum=0.9,
                **({"fused": True} if c.optimizer == "fused" else {"foreach": False}),
            )
        else:
            opt = torch.optim.Adam(
                model.parameters(), lr=1e-3, **({"fused": True} if c.optimizer == "fused" else {"foreach": False})
            )
        self.model, self.opt = model, opt
        mode = {"mode": c.compile_mode} if c.compile_mode else {}
        if c.compile and c.compile_forward:
            # as try's fix leaves it: the outermost module's forward compiled in place, the module
            # called as before (its hooks, if any, outside the compiled code)
            model.forward = torch.compile(model.forward, **mode)
            self.forward = model
        else:
            self.forward = torch.compile(model, **mode) if c.compile else model
        loader = torch.utils.data.DataLoader(
            data,
            batch_size=None if c.model == "mlp" else c.batch,
            num_workers=c.workers,
            pin_memory=c.pin if c.pin_memory is None else c.pin_memory,
            persistent_workers=c.workers > 0,
            prefetch_factor=c.prefetch if c.workers else None,
        )
        self.batches = iter(loader)
        self.n = 0
        self.losses: list[torch.Tensor] = []

    def step(self) -> None:
        c = self.c
        outer = None
        if c.bf16_from_step_start:
            # try's bf16 fix opens its region at the step boundary (after the previous optimizer
            # step) and closes it right before backward; the program's own enabled=False region
            # inside it is turned on (below, as c.bf16), as the fix does with an AMP switch
            outer = torch.autocast("cuda", dtype=torch.bfloat16)
            outer.__enter__()
        x, y = next(self.batches)
        x = x.to(self.device, non_blocking=c.pin)
        y = y.to(self.device, non_blocking=c.pin)
        if c.channels_last:
            x = x.to(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=c.bf16):
            out = self.forward(x)
            if c.model in ("gpt", "gpt2"):
                loss = nn.functional.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))
            else:
                loss = nn.functional.cross_entropy(out, y)
        self.opt.zero_grad(set_to_none=True)
        if outer is not None:
            outer.__exit__(None, None, None)  # the fix closes its region before torch.autograd.backward
        loss.backward()
        self.opt.step()
        self.n += 1
        if c.item or self.n % 50 == 0:
            self.last = loss.item()
        if math.isnan(getattr(self, "last", 0.0)):
            raise FloatingPointError("loss is NaN")


def build(model: str, variant: str, device: str = "cuda") -> Trainer:
    return Trainer(config(model, variant), device)


def samples(model: str, variant: str) -> int:
    """Samples per step: a larger batch's saving is per sample."""
    return config(model, variant).batch
