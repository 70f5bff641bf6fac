"""The bf16 matrix-product probe of ``make_profiles.sh``: per step five 8192^3 bf16 products (the
roofline should put them near the 770-800 TFLOP/s an H100 or H200 reaches, ~80% of the dense
peak) and one fp32 multiply streaming 2 GiB (near the memory bandwidth), then an optimizer step."""

import torch

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
x = torch.randn(1 << 28, device="cuda")
w = torch.nn.Parameter(torch.randn(8, device="cuda"))
opt = torch.optim.SGD([w], lr=0.1)
for _step in range(8):
    for _ in range(5):
        c = a @ b
    y = x * 2.0
    (w * c[0, :8].float()).sum().backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
