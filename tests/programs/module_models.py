"""Two small models trained a few steps, for the module view: a 2-block GPT-style transformer and a
small CNN. ``python module_models.py gpt|cnn STEPS [NAMES.json]`` (NAMES: the model's named_modules
and classes, for the test to check the recorded tree against)."""

import json
import sys

import torch
from torch import nn

torch.manual_seed(0)


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
            x = block(x)
        logits = self.lm_head(tr.ln_f(x))
        return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def cnn() -> nn.Module:
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


def main() -> None:
    kind, steps = sys.argv[1], int(sys.argv[2])
    if kind == "gpt":
        model: nn.Module = GPT()
        batches = [(torch.randint(0, 512, (4, 64)), torch.randint(0, 512, (4, 64))) for _ in range(steps)]
        loss_of = model
    else:
        model = cnn()
        criterion = nn.CrossEntropyLoss()
        batches = [(torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))) for _ in range(steps)]

        def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return criterion(model(x), y)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in batches:
        loss = loss_of(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
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
