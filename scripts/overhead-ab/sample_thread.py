"""Where the recorded program's main thread spends its time, recording and paused: ResNet-50
inferences in blocks (as ab.py), sampled by a SIGPROF timer every 50 us of wall time (the
thread is busy throughout: it launches, then spins in the synchronization). Run under
`GPULESS_DIAG=pause gpuless record`, with sampler.so (built from sampler.c) next to this file.

Prints one JSON line: per mode, the share of samples in the recorder, in libcuda and in the
C library, and the recorder's functions with the most samples (symbols from `nm`, when found).
Sampling shows the recorder's own time directly, and what recording saves in the driver
(stable queries answered from memory), without the noise between processes.
(Not named profile.py: a script's folder comes first on sys.path, and PyTorch imports the
standard library's `profile` through cProfile.)
"""
import bisect, collections, ctypes, json, os, statistics as st, subprocess, sys, time

import torch, torchvision

blocks = int(os.environ.get("AB_BLOCKS", 12))
per = int(os.environ.get("AB_ITERS", 25))
here = os.path.dirname(os.path.abspath(__file__))
pause = getattr(ctypes.CDLL(None), "gpuless_diag_pause", None)
if pause is None:
    sys.exit("gpuless_diag_pause not found: run under GPULESS_DIAG=pause gpuless record")
sampler = ctypes.CDLL(os.environ.get("SAMPLER", os.path.join(here, "sampler.so")))
sampler.sampler_take.restype = ctypes.c_long
torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None).eval().cuda()
x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
cap = 1 << 22
buf = (ctypes.c_uint64 * cap)()
samples = {"rec": [], "pass": []}
ms = {"rec": [], "pass": []}
with torch.no_grad():
    for _ in range(30):
        model(x)
    torch.cuda.synchronize()
    for b in range(blocks):
        for mode in (("rec", "pass") if b % 2 == 0 else ("pass", "rec")):
            pause(1 if mode == "pass" else 0)
            ts = []
            sampler.sampler_take(buf, cap)
            sampler.sampler_start(50_000)
            for _ in range(per):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t0) * 1e3)
            sampler.sampler_stop()
            samples[mode].extend(buf[: sampler.sampler_take(buf, cap)])
            ms[mode].append(st.median(ts))
    pause(0)

maps = []
for line in open("/proc/self/maps"):
    p = line.split()
    if len(p) >= 6 and "x" in p[1]:
        lo, hi = (int(v, 16) for v in p[0].split("-"))
        maps.append((lo, hi, int(p[2], 16), p[5]))
maps.sort()
starts = [m[0] for m in maps]


def where(a):
    i = bisect.bisect_right(starts, a) - 1
    if i >= 0 and a < maps[i][1]:
        return maps[i][3], a - maps[i][0] + maps[i][2]
    return "?", a


def symbols(path):
    """(file offset, name) of the defined functions of `path`, from nm and its load segments."""
    try:
        segs = []
        for l in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout.splitlines():
            p = l.split()
            if p and p[0] == "LOAD":
                segs.append((int(p[1], 16), int(p[2], 16), int(p[4], 16)))
        out = []
        for l in subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True).stdout.splitlines():
            p = l.split(" ", 2)
            if len(p) == 3 and p[1] in "tTwW":
                v = int(p[0], 16)
                for off, va, size in segs:
                    if va <= v < va + size:
                        out.append((v - va + off, p[2]))
        return sorted(out)
    except (OSError, ValueError):
        return []


recorder = next((m[3] for m in maps if "gpuless_recorder" in os.path.basename(m[3])), None)
syms = symbols(recorder) if recorder else []
sym_starts = [s[0] for s in syms]
out = {"ms": {m: round(st.median(v), 4) for m, v in ms.items()}}
for mode, v in samples.items():
    lib, fns = collections.Counter(), collections.Counter()
    for a in v:
        path, off = where(a)
        name = os.path.basename(path)
        lib["recorder" if path == recorder else "libcuda" if name.startswith("libcuda.so") else
            "libc" if name.startswith("libc.so") else "other"] += 1
        if path == recorder and syms:
            i = bisect.bisect_right(sym_starts, off) - 1
            fns[syms[i][1][:60] if i >= 0 else "?"] += 1
    n = max(len(v), 1)
    out[mode] = {"samples": len(v), **{k + "_pct": round(100 * c / n, 2) for k, c in sorted(lib.items())},
                 "recorder_top": [(k, round(100 * c / n, 2)) for k, c in fns.most_common(6)]}
print(json.dumps(out))
