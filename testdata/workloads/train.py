"""One training step of a small CNN, repeated: forward, backward and an SGD step with momentum
(cuDNN convolutions forward and backward, cuBLAS, the optimizer's kernels), deterministic
algorithms only, so that two runs give the same weights bit for bit.

Environment: HOT_ITERS (default 20): steps after the first. Prints one JSON line like
_common.py: the checksum is the sum of the weights' magnitudes after every step.
"""
import json, os, sys, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import since_process_start
import torch
from torch import nn

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
    nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(1)
x = torch.randn(16, 3, 32, 32, generator=g).cuda()
y = torch.randint(0, 10, (16,), generator=g).cuda()
loss_fn = nn.CrossEntropyLoss()


def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss


loss = float(step())
first = since_process_start()
times = []
for _ in range(int(os.environ.get("HOT_ITERS", 20))):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    step()
    torch.cuda.synchronize(); times.append((time.perf_counter() - t0) * 1e3)
times.sort()
checksum = sum(float(p.detach().double().abs().sum()) for p in model.parameters())
print(json.dumps({"model": "train", "checksum": checksum, "first_loss": loss,
                  "first_result_s": round(first, 4),
                  "hot_ms_median": round(times[len(times) // 2], 4) if times else None}))
