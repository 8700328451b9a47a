"""Timing harness for the suite's workloads: one inference, then a hot loop.

A copy of ../shared/workloads/_common.py (the suite copies this folder onto the device machine,
where ../shared is absent). Prints one JSON line: model, checksum of the output, seconds from
process start to the first result, and the median hot latency in milliseconds (with LOCKSTEP, also
every hot inference's time, taken in turns with another run: scripts/lockstep.py).
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
    # LOCKSTEP=PREFIX (scripts/lockstep.py): each hot inference waits for a byte on PREFIX.go and
    # answers one on PREFIX.done, so that two runs of the workload (native and through the
    # client) take turns inference by inference and meet the same state of the machine.
    # A turn is LOCKSTEP_BLOCK inferences (default 10), so that the GPU's switch between the two
    # processes' contexts falls on one inference in ten.
    lock = os.environ.get("LOCKSTEP")
    block = max(1, int(os.environ.get("LOCKSTEP_BLOCK", 10)))
    go = open(lock + ".go", "rb", buffering=0) if lock else None
    done = open(lock + ".done", "wb", buffering=0) if lock else None
    times = []
    with torch.no_grad():
        for i in range(hot_iters):
            if go and i % block == 0 and not go.read(1):
                break
            torch.cuda.synchronize(); t0 = time.perf_counter()
            r = model(*x) if isinstance(x, tuple) else model(x)
            torch.cuda.synchronize(); times.append((time.perf_counter() - t0) * 1e3)
            if done and (i % block == block - 1 or i == hot_iters - 1):
                done.write(b"x")
    result = {"model": name, "checksum": float(out.double().abs().sum()),
              "first_result_s": round(first, 4)}
    if lock:
        result["hot_ms"] = [round(t, 4) for t in times]
    times.sort()
    result["hot_ms_median"] = round(times[len(times) // 2], 4) if times else None
    print(json.dumps(result))
    sys.stdout.flush()
