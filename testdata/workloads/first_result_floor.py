"""The floor under any client's first result for the ResNet-50 workload
(`../shared/workloads/resnet50.py`): the seconds from process start to the end of the work the
program does on its CPU before its first CUDA call — importing torch and torchvision, building
the model with its random weights (seeded as the workload seeds it) and the input. A client
that runs the program unmodified does all of it; only what follows (the transfer to the GPU,
the first inference, its result) can be faster remotely. Prints one JSON line.
"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import since_process_start
import torch, torchvision

torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None).eval()
x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
print(json.dumps({"model": "resnet50", "cpu_floor_s": round(since_process_start(), 4)}))
