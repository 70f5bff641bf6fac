"""The planted case of issue 42's below_roofline rule: a bf16 ``Linear`` whose K (in_features) is 1001,
not a multiple of 8, so cuBLAS cannot run the product fully on the tensor cores. No dlscope calls, random
weights, data made on the GPU once, no downloads:

    dlscope profile --mode full -- python bench/programs/odd_linear.py            # K = 1001
    dlscope profile --mode full -- python bench/programs/odd_linear.py --k 1008   # padded: the control

Each step: the Linear (8192 tokens x K -> 8192) forward and backward in bf16, SGD, and the loss read back
(``.item()``: the host waits for the GPU each step, as a training loop that logs its loss does). Expected:
``dlscope advise`` names below_roofline with "K=1001 not a multiple of 8" for K = 1001, and names no such
cause for K = 1008 (``dlscope stats --report roofline`` shows both products' share of the roofline).
"""

import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=1001, help="in_features of the Linear (K of its product)")
    ap.add_argument("--n", type=int, default=8192, help="out_features (N)")
    ap.add_argument("--tokens", type=int, default=8192, help="rows of the input (M)")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    dev = "cuda"
    layer = torch.nn.Linear(args.k, args.n, device=dev, dtype=torch.bfloat16)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-3)
    x = torch.randn(args.tokens, args.k, device=dev, dtype=torch.bfloat16)
    for _ in range(args.steps):
        out = layer(x)
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
