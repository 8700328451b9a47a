"""Timing harness for the suite's workloads: one inference, then a hot loop.

A copy of ../shared/workloads/_common.py (the suite copies this folder onto the device machine,
where ../shared is absent). Prints one JSON line: model, checksum of the output, seconds from
process start to the first result, and the median hot latency in milliseconds.
"""
import json, os, sys, time

def since_process_start():
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")

def run(name, build, make_input, hot_iters=None):
    import torch
    hot_iters = int(os.environ.get("HOT_ITERS", hot_iters or 20))
    torch.manual_seed(0)
    model = build().eval().cuda()
    x = make_input()
    with torch.no_grad():
        y = model(*x) if isinstance(x, tuple) else model(x)
        if not torch.is_tensor(y):
            y = y[0] if isinstance(y, (tuple, list)) else y.last_hidden_state
        out = y.float().cpu()
    first = since_process_start()
    times = []
    with torch.no_grad():
        for _ in range(hot_iters):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            r = model(*x) if isinstance(x, tuple) else model(x)
            torch.cuda.synchronize(); times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(json.dumps({"model": name, "checksum": float(out.double().abs().sum()),
                      "first_result_s": round(first, 4),
                      "hot_ms_median": round(times[len(times) // 2], 4) if times else None}))
    sys.stdout.flush()
