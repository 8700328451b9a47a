"""A function compiled by torch.compile (Inductor generates Triton kernels, compiled to cubins
on this machine and loaded through the driver: cuModuleLoadData, cuFuncGetAttribute,
cuLaunchKernel). Prints one JSON line like _common.py.

Environment: HOT_ITERS (default 20).
"""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import since_process_start
import torch


def f(x, y):
    return torch.sin(x) * torch.cos(y) + (x * y).relu().sqrt()


cf = torch.compile(f)
g = torch.Generator().manual_seed(1)
x = torch.randn(1 << 20, generator=g).cuda()
y = torch.randn(1 << 20, generator=g).cuda()
out = cf(x, y).double().cpu()
first = since_process_start()
times = []
for _ in range(int(os.environ.get("HOT_ITERS", 20))):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    cf(x, y)
    torch.cuda.synchronize(); times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(json.dumps({"model": "compiled", "checksum": float(out.abs().sum()),
                  "first_result_s": round(first, 4),
                  "hot_ms_median": round(times[len(times) // 2], 4) if times else None}))
