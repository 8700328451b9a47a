"""The hot latency of ResNet-50 from its first result on, window by window: the same start as
../shared/workloads/resnet50.py (build, upload, one inference, then the timed loop at once), with
TIMELINE_ITERS iterations (400) in windows of TIMELINE_WINDOW (20). For each window: the median
latency in ms, and the CPU time the process's other threads spent meanwhile, by thread name
(under `gpuless record` the trace writer's `gpuless-trace-*` threads). Run it natively and
recorded; prints one JSON line.

Why: the workload as shipped times 20 iterations right after the first result, and recorded that
loop was ~9% slower than native (median of a day's suite runs) while 200-iteration loops were
~3% slower — the recorded process is slower for a while after start-up.
"""
import collections, json, os, statistics as st, threading

import torch

import ab_blocks

iters = int(os.environ.get("TIMELINE_ITERS", 400))
window = int(os.environ.get("TIMELINE_WINDOW", 20))
tick = os.sysconf("SC_CLK_TCK")
me = str(os.getpid())


def threads():
    """CPU ms so far of each of this process's threads but the calling one, summed by name."""
    out = collections.Counter()
    self_tid = str(threading.get_native_id())
    for tid in os.listdir(f"/proc/{me}/task"):
        if tid == self_tid:
            continue
        try:
            with open(f"/proc/{me}/task/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1 : s.rindex(")")]
        fields = s[s.rindex(")") + 2 :].split()
        out[name.rstrip("0123456789")] += (int(fields[11]) + int(fields[12])) * 1000 / tick
    return out


model, x = ab_blocks.resnet50()
windows = []
with torch.no_grad():
    model(x).float().cpu()
    before = threads()
    ts = []
    for i in range(iters):
        ts.append(ab_blocks.timed(model, x))
        if len(ts) == window or i == iters - 1:
            now = threads()
            busy = {k: round(v - before.get(k, 0), 1) for k, v in now.items() if v - before.get(k, 0) > 0}
            windows.append({"ms": round(st.median(ts), 4), "other_threads_cpu_ms": busy})
            before, ts = now, []
print(json.dumps({"window": window, "windows": windows}))
