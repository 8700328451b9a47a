"""A tiny PyTorch model (2 convolutions + a linear layer, random weights, 4 x 3 x 32 x 32 input):
the smallest realistic PyTorch trace; its recording should stay well under 5 MB.

Environment: HOT_ITERS (default 2). Prints one JSON line (see _common.py).
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run
import torch
from torch import nn


def build():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


run("tiny", build,
    lambda: torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)).cuda(),
    hot_iters=2)
