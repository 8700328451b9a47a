"""ResNet-50 hot latency in units of the CPU the process runs on: each timed inference follows a
fixed pure-Python loop (CALIBRATE_SPIN iterations, 20000), timed the same way, and the process
reports the median of the per-iteration ratios inference / loop besides the plain median.

Why: on the device host the speed of a vCPU varies up to 3x from moment to moment (a pure-Python
loop took 230-690 ms for the same work, 2026-11-21), and a process that lands on a slow one is
slower in every library by the same factor (docs/benchmarks/recorder-overhead-history.md,
session 8). That is most of the noise between processes in every native-vs-recorded comparison.
The loop makes no CUDA call, so the recorder does not touch it; dividing by it cancels the CPU's
speed, not the recorder's cost.

Runs like the workload (build, upload, one inference = first result, CALIBRATE_WARMUP (30) more,
then CALIBRATE_ITERS (200) timed pairs); prints one JSON line with the workload's fields
(`checksum`, `first_result_s`, `hot_ms_median`) and the calibrated ones. Run it natively and
under `gpuless record`; compare `normalised_median` (scripts/overhead-ab/calibrated-pairs.sh, the
GPU suite's overhead row).
"""
import json, os, statistics as st, time

import torch

import ab_blocks

spin_n = int(os.environ.get("CALIBRATE_SPIN", 20000))
iters = int(os.environ.get("CALIBRATE_ITERS", 200))
warmup = int(os.environ.get("CALIBRATE_WARMUP", 30))


def spin():
    """The calibration loop's time in ms."""
    t0 = time.perf_counter()
    s = 0
    for i in range(spin_n):
        s += i
    return (time.perf_counter() - t0) * 1e3


model, x = ab_blocks.resnet50()
lat, cal = [], []
with torch.no_grad():
    out = model(x).float().cpu()
    first = ab_blocks.since_process_start()
    for _ in range(warmup):
        model(x)
    for _ in range(iters):
        cal.append(spin())
        lat.append(ab_blocks.timed(model, x))
print(json.dumps({
    "checksum": float(out.double().abs().sum()),
    "first_result_s": round(first, 4),
    "hot_ms_median": round(st.median(lat), 4),
    "spin_ms_median": round(st.median(cal), 4),
    "normalised_median": round(st.median(l / c for l, c in zip(lat, cal)), 5),
    "iters": iters,
}))
