"""A training loop to compare under `dlscope diff` (bench/gpu_diff.py): no dlscope calls, random
weights, synthetic data made on the GPU once, no downloads.

    python diff_model.py --model resnet18 --batch 4 --steps 40
    python diff_model.py --model mlp --batch 256 --steps 60 [--compile]

resnet18: torchvision's ResNet-18 (random weights), channels-last, bf16 autocast, SGD.
mlp: a stack of Linear + LayerNorm + GELU blocks (many small elementwise kernels in eager mode,
fused into Triton kernels by torch.compile), AdamW.
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.fc1(self.norm(x)))
        return x + 0.5 * torch.tanh(self.fc2(h)) * torch.sigmoid(h[:, : x.shape[1]])


def build(name: str, batch: int, dev: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    if name == "resnet18":
        import torchvision

        model = torchvision.models.resnet18(weights=None).to(dev).to(memory_format=torch.channels_last)
        x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        return model, x, torch.randint(0, 1000, (batch,), device=dev)
    d = 512
    model = nn.Sequential(*[Block(d) for _ in range(8)], nn.Linear(d, 10)).to(dev)
    return model, torch.randn(batch, d, device=dev), torch.randint(0, 10, (batch,), device=dev)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("resnet18", "mlp"), default="resnet18")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only for a smoke test of bench/gpu_diff.py")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    model, x, y = build(args.model, args.batch, args.device)
    step_model = torch.compile(model) if args.compile else model
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if args.model == "resnet18"
        else torch.optim.AdamW(model.parameters(), lr=1e-3)
    )
    for _ in range(args.steps):
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.model == "resnet18"):
            loss = nn.functional.cross_entropy(step_model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    print("loss", float(loss))


if __name__ == "__main__":
    main()
