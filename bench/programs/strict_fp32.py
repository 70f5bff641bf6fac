"""Run a Python program with TF32 off everywhere (cuBLAS matmuls and cuDNN convolutions), so that its fp32
math runs as FFMA on the CUDA cores, which Nsight Compute's SASS counters count (tensor-core math is not in
them). PyTorch leaves cuDNN's TF32 on by default (``torch.backends.cudnn.allow_tf32``), which no
environment variable turns off.

    python bench/programs/strict_fp32.py PROGRAM.py [ARGS...]
"""

import os
import runpy
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

if __name__ == "__main__":
    program = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(program))  # as if run directly: its own folder first
    runpy.run_path(program, run_name="__main__")
