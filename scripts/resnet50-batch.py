"""ResNet-50 inference at batch BATCH (default 32), HOT_ITERS (default 20) timed passes: a
workload that keeps a GPU busy (scripts/gpu-suite-gpus.sh), where batch 1 leaves it mostly idle.
With START_AT (seconds since the epoch) the timed passes wait until then, so that programs
started together time their passes together whatever their start-up took.
Prints one JSON line as the shared workloads do: checksum, first_result_s, hot_ms_median, and
late_s (how long after START_AT the timed passes began)."""
import json, os, sys, time

import torch
import torchvision

batch = int(os.environ.get("BATCH", 32))
iters = int(os.environ.get("HOT_ITERS", 20))
torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None).eval().cuda()
x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
t0 = time.perf_counter()
with torch.no_grad():
    out = model(x).float().cpu()
first = time.perf_counter() - t0
start_at = float(os.environ.get("START_AT", 0))
if start_at:
    time.sleep(max(0.0, start_at - time.time()))
late = max(0.0, time.time() - start_at) if start_at else 0.0
times = []
with torch.no_grad():
    for _ in range(iters):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
times.sort()
print(json.dumps({"model": f"resnet50-b{batch}", "checksum": float(out.double().abs().sum()),
                  "first_result_s": round(first, 4),
                  "hot_ms_median": round(times[len(times) // 2], 4) if times else None,
                  "late_s": round(late, 3)}))
sys.stdout.flush()
