"""ResNet-50 training annotated with dlscope's phases, with the input pipeline problems people
really have: CPU normalization in the training loop, a pageable host-to-device copy, and an
`.item()` sync every step. Recorded on the GPU machine; the profile is bundled for the demo
(examples/data) so that machines without a GPU see every layer. Run under
`dlscope profile --batch-size 64 -- python bench/programs/resnet_phases.py [STEPS]`."""

import sys

import numpy as np
import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dlscope


class Decoded(Dataset):
    """uint8 HWC images, as a JPEG decoder would hand them over."""

    def __len__(self):
        return 64 * 64

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        return rng.integers(0, 255, size=(224, 224, 3), dtype=np.uint8), int(rng.integers(0, 1000))


MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
model = torchvision.models.resnet50(weights=None).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(Decoded(), batch_size=64, num_workers=2)
with dlscope.profile("resnet_phases.dlscope", batch_size=64) as prof:
    for i, (images, labels) in enumerate(loader):
        if i == steps:
            break
        with prof.phase("preprocess"):
            x = (images.numpy().astype(np.float32) / 255.0 - MEAN) / STD
            x = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().cuda()  # pageable copy
            y = labels.cuda()
        with prof.phase("train_step"):
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        with prof.phase("postprocess"):
            acc = (out.argmax(1) == y).float().mean().item()  # host sync
        prof.step()
print("accuracy", acc)
