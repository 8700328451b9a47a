"""Where the recorded program's main thread spends its time, recording and paused: ResNet-50
inferences in blocks (as ab.py), sampled by a SIGPROF timer every 50 us of wall time (the
thread is busy throughout: it launches, then spins in the synchronization). Run under
`GPULESS_DIAG=pause gpuless record`, with sampler.so (built from sampler.c) next to this file
or named by SAMPLER.

Prints one JSON line: per mode, the share of samples in the recorder, in libcuda and in the
C library, the recorder's functions with the most samples (symbols from `nm`, when found), and
the main thread's microseconds per inference in each library (`us_per_inference`). Run without
the recorder and with SAMPLE_NATIVE=1, it samples the same blocks in one mode, `native`: the
per-library times of native and recorded processes side by side say where the time a recorded
process loses outside the recorder's own code goes.
Sampling shows the recorder's own time directly, and what recording saves in the driver
(stable queries answered from memory), without the noise between processes.
(Not named profile.py: a script's folder comes first on sys.path, and PyTorch imports the
standard library's `profile` through cProfile.)
"""
import bisect, collections, contextlib, ctypes, json, os, statistics as st, subprocess

import ab_blocks as blocks

here = os.path.dirname(os.path.abspath(__file__))
sampler = ctypes.CDLL(os.environ.get("SAMPLER", os.path.join(here, "sampler.so")))
sampler.sampler_take.restype = ctypes.c_long
cap = 1 << 22
buf = (ctypes.c_uint64 * cap)()
samples = collections.defaultdict(list)


@contextlib.contextmanager
def sampled(mode):
    """Samples the block into `samples[mode]`."""
    sampler.sampler_take(buf, cap)
    sampler.sampler_start(50_000)
    try:
        yield
    finally:
        sampler.sampler_stop()
        samples[mode].extend(buf[: sampler.sampler_take(buf, cap)])


ms = blocks.run(sampled, native=os.environ.get("SAMPLE_NATIVE") == "1")

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
    lib, fns, by_lib = collections.Counter(), collections.Counter(), collections.Counter()
    for a in v:
        path, off = where(a)
        name = os.path.basename(path)
        by_lib["gpuless_recorder" if path == recorder else name.split(".so")[0]] += 1
        lib["recorder" if path == recorder else "libcuda" if name.startswith("libcuda.so") else
            "libc" if name.startswith("libc.so") else "other"] += 1
        if path == recorder and syms:
            i = bisect.bisect_right(sym_starts, off) - 1
            fns[syms[i][1][:60] if i >= 0 else "?"] += 1
    n = max(len(v), 1)
    out[mode] = {"samples": len(v), **{k + "_pct": round(100 * c / n, 2) for k, c in sorted(lib.items())},
                 "recorder_top": [(k, round(100 * c / n, 2)) for k, c in fns.most_common(6)],
                 "us_per_inference": {k: round(c * 50 / blocks.inferences(), 1) for k, c in by_lib.most_common(12)}}
print(json.dumps(out))
