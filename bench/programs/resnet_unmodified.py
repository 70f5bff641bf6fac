"""An unmodified ResNet-50 training script (no dlscope calls): DataLoader with CPU decoding and
normalization, forward, backward, SGD. Used by bench/gpu_torch_layer.py under `dlscope profile`."""

import sys

import numpy as np
import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __len__(self):
        return 64 * 16

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.integers(0, 255, size=(224, 224, 3), dtype=np.uint8).astype(np.float32) / 255.0
        return torch.from_numpy(img).permute(2, 0, 1), int(rng.integers(0, 1000))


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
model = torchvision.models.resnet50(weights=None).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(Synthetic(), batch_size=64, num_workers=2)
for i, (x, y) in enumerate(loader):
    if i == steps:
        break
    x, y = x.cuda(), y.cuda()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("loss", float(loss))
