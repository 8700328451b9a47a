"""How long a new process takes to reach a usable CUDA context (issue 20's cold-invocation
target): dlopen of libcuda, cuInit, the primary context, a first allocation — five new
processes per variant of the driver's environment variables, medians printed. Native only, on
a GPU: `python3 scripts/probe-driver-start.py`.
"""
import os, subprocess, sys, json
code = r'''
import ctypes, time, json
t0 = time.perf_counter()
c = ctypes.CDLL("libcuda.so.1")
t1 = time.perf_counter()
assert c.cuInit(0) == 0
t2 = time.perf_counter()
dev = ctypes.c_int(); ctx = ctypes.c_void_p()
c.cuDeviceGet(ctypes.byref(dev), 0)
assert c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
c.cuCtxSetCurrent(ctx)
t3 = time.perf_counter()
p = ctypes.c_uint64()
c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20))
t4 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3]))
'''
variants = {
    "default": {},
    "MAX_CONNECTIONS=1": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    "MODULE_LOADING=EAGER": {"CUDA_MODULE_LOADING": "EAGER"},
    "DISABLE_PTX_JIT": {"CUDA_DISABLE_PTX_JIT": "1"},
    "AUTO_BOOST=0": {"CUDA_AUTO_BOOST": "0"},
}
for name, env in variants.items():
    rows = []
    for _ in range(5):
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True)
        try:
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        except Exception:
            rows.append(None)
    ok = [x for x in rows if x]
    med = lambda i: sorted(x[i] for x in ok)[len(ok) // 2] if ok else -1
    print(f"{name}: dlopen {med(0)*1e3:.1f} ms, cuInit {med(1)*1e3:.1f} ms, primary ctx {med(2)*1e3:.1f} ms, first alloc {med(3)*1e3:.1f} ms (median of {len(ok)})")
