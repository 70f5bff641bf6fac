"""Two small models trained a few steps, for the module view: a 2-block GPT-style transformer and a
small CNN. ``python module_models.py gpt|cnn STEPS [NAMES.json]`` (NAMES: the model's named_modules
and classes, for the test to check the recorded tree against).

For the GPU check (bench/programs/module_view_gpu.py): ``MODULE_MODELS_SIZE=large`` makes them
GPT-2-124M-class (12 blocks of 768, context 512, batch 8) and a ResNet-like CNN on 224x224 images,
``MODULE_MODELS_DEVICE=cuda`` runs them on the GPU, and ``MODULE_MODELS_TIMES=PATH`` writes each
step's time (ns, the GPU synchronized at each step's end) as JSON. ``MODULE_MODELS_CHECKPOINT=
reentrant|nonreentrant`` checkpoints the GPT's blocks (their forward runs again in backward)."""

import json
import os
import sys
import time

import torch
from torch import nn

torch.manual_seed(0)
CHECKPOINT = os.environ.get("MODULE_MODELS_CHECKPOINT", "")  # 'reentrant' or 'nonreentrant': checkpointed blocks


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, d: int = 128, heads: int = 4, layers: int = 2, ctx: int = 64) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocab, d),
                "wpe": nn.Embedding(ctx, d),
                "h": nn.ModuleList(Block(d, heads) for _ in range(layers)),
                "ln_f": nn.LayerNorm(d),
            }
        )
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        tr = self.transformer
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = tr.wte(idx) + tr.wpe(pos)
        for block in tr.h:
            if CHECKPOINT == "reentrant" or CHECKPOINT == "nonreentrant":
                # activation checkpointing: the block's forward runs again during backward
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=CHECKPOINT == "reentrant")
            else:
                x = block(x)
        logits = self.lm_head(tr.ln_f(x))
        return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def cnn(large: bool = False) -> nn.Module:
    if not large:
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.BatchNorm2d(64), nn.ReLU()]
    width = 64
    for out in (64, 128, 256, 512):
        for i in range(2):
            stride = 2 if i == 0 and out != 64 else 1
            layers += [nn.Conv2d(width, out, 3, stride=stride, padding=1), nn.BatchNorm2d(out), nn.ReLU()]
            width = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 1000))


def main() -> None:
    kind, steps = sys.argv[1], int(sys.argv[2])
    large = os.environ.get("MODULE_MODELS_SIZE") == "large"
    device = os.environ.get("MODULE_MODELS_DEVICE", "cpu")
    times_path = os.environ.get("MODULE_MODELS_TIMES")
    if kind == "gpt":
        vocab, b, t = (50257, 8, 512) if large else (512, 4, 64)
        model: nn.Module = (GPT(vocab, 768, 12, 12, t) if large else GPT()).to(device)
        batch = (torch.randint(0, vocab, (b, t), device=device), torch.randint(0, vocab, (b, t), device=device))
        loss_of = model
    else:
        model = cnn(large).to(device)
        criterion = nn.CrossEntropyLoss()
        side, b, classes = (224, 32, 1000) if large else (32, 8, 10)
        batch = (torch.randn(b, 3, side, side, device=device), torch.randint(0, classes, (b,), device=device))

        def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return criterion(model(x), y)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        x, y = batch
        loss = loss_of(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if times_path:
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter_ns() - t0)
    if times_path:
        with open(times_path, "w") as f:
            json.dump(times, f)
    if len(sys.argv) > 3:
        from torch.nn.modules import module as nn_module

        names = {name: type(m).__name__ for name, m in model.named_modules()}
        # the module hooks' global hooks are gone once the traced window closed
        hooks = len(nn_module._global_forward_pre_hooks) + len(nn_module._global_forward_hooks)
        with open(sys.argv[3], "w") as f:
            json.dump({"names": names, "global_hooks_after": hooks}, f)
    print(f"done {loss.item():.4f}")


if __name__ == "__main__":
    main()
