"""Recording cost inside one process: ResNet-50 inferences in blocks, recording and paused
(calls passed through) in turn, ABBA order. Run under `GPULESS_DIAG=pause gpuless record`.

Between processes the hot latency of the same program moves by up to a quarter on the device
hosts; within one process it is steady, so this isolates what recording costs over the hooks.
Prints one JSON line: block medians and the median ratio recording / paused.
"""
import ctypes, json, os, statistics as st, sys, time

import torch, torchvision

blocks = int(os.environ.get("AB_BLOCKS", 12))
per = int(os.environ.get("AB_ITERS", 25))
lib = ctypes.CDLL(None)
pause = getattr(lib, "gpuless_diag_pause", None)
if pause is None:
    sys.exit("gpuless_diag_pause not found: run under GPULESS_DIAG=pause gpuless record")
torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None).eval().cuda()
x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
out = {"rec": [], "pass": []}
with torch.no_grad():
    for _ in range(30):
        model(x)
    torch.cuda.synchronize()
    for b in range(blocks):
        for mode in (("rec", "pass") if b % 2 == 0 else ("pass", "rec")):
            pause(1 if mode == "pass" else 0)
            ts = []
            for _ in range(per):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t0) * 1e3)
            out[mode].append(st.median(ts))
    pause(0)
ratios = [a / b for a, b in zip(out["rec"], out["pass"])]
print(json.dumps({"rec_ms": [round(v, 4) for v in out["rec"]], "pass_ms": [round(v, 4) for v in out["pass"]],
                  "ratio_median": round(st.median(ratios), 4), "ratios": [round(r, 4) for r in ratios]}))
