"""torch.fft on the GPU (cuFFT): a 2-D FFT of a 4 x 256 x 256 input and its inverse's magnitude.
cuFFT loads its kernels through the driver's private export tables, not cuModuleLoad*: the
suite measures which table slots it calls (issue 19) and whether its trace replays (issue 21).

Environment: HOT_ITERS (default 2). Prints one JSON line (see _common.py).
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run
import torch
from torch import nn


class Spectrum(nn.Module):
    def forward(self, x):
        f = torch.fft.fft2(x)
        return torch.fft.ifft2(f * f.abs().clamp(max=10.0)).abs()


run("fft", Spectrum,
    lambda: torch.randn(4, 256, 256, generator=torch.Generator().manual_seed(1)).cuda(),
    hot_iters=2)
