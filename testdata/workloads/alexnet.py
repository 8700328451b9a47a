"""AlexNet (torchvision, random weights, no download), batch 1 of 224x224: one of issue 34's six
PyTorch workloads. Environment: HOT_ITERS. Prints one JSON line (see _common.py)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run
import torch, torchvision
run("alexnet", lambda: torchvision.models.alexnet(weights=None),
    lambda: torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda())
