"""Probe of the driver's private export table 6e163fbe ("tools module"), slot 7, which cuFFT
calls instead of cuModuleGetFunction (issue 19: client mode must answer it). Native only, on a
GPU: the slot is replaced in place by a logging wrapper (ctypes) before torch.fft runs; every
call prints its six integer arguments and 64 bytes at each pointer-like one before and after,
and a code-pointer argument (the caller's callback) is wrapped too, so its calls are printed.
Then the driver is asked what the values are (function names and modules).
With PROBE_MODE=ptx it calls the slot itself instead, on a PTX module with three kernels
(declared out of name order) and on one without kernels, with and without a context.

What it found (H200, driver 580; docs/FIDELITY.md): `slot7(context, module, callback, user)`
calls `callback(user, function, name)` for each function of the module in the image's order
and returns the count; the context is not used.

  python3 scripts/probe-tools-module.py            (torch.fft observed)
  PROBE_MODE=ptx python3 scripts/probe-tools-module.py
  (prints `probe:` lines, each flushed)
"""
import ctypes, os, struct, sys
from ctypes import CFUNCTYPE, POINTER, byref, c_char_p, c_int, c_uint, c_uint64, c_void_p

U = c_uint64
FN6 = CFUNCTYPE(U, U, U, U, U, U, U)


def say(*a):
    print("probe:", *a, flush=True)


libc = ctypes.CDLL(None, use_errno=True)
cuda = ctypes.CDLL("libcuda.so.1")


class IOV(ctypes.Structure):
    _fields_ = [("base", c_void_p), ("len", ctypes.c_size_t)]


libc.process_vm_readv.restype = ctypes.c_ssize_t
libc.process_vm_readv.argtypes = [c_int, POINTER(IOV), ctypes.c_ulong, POINTER(IOV), ctypes.c_ulong, ctypes.c_ulong]
libc.mprotect.argtypes = [c_void_p, ctypes.c_size_t, c_int]


def peek(addr, n=96):
    if addr < 4096:
        return None
    buf = ctypes.create_string_buffer(n)
    loc, rem = IOV(ctypes.cast(buf, c_void_p), n), IOV(addr, n)
    got = libc.process_vm_readv(os.getpid(), byref(loc), 1, byref(rem), 1, 0)
    return buf.raw[:got] if got > 0 else None



def maps():
    out = []
    for line in open("/proc/self/maps"):
        f = line.split()
        a, b = (int(x, 16) for x in f[0].split("-"))
        out.append((a, b, f[1], f[5] if len(f) > 5 else ""))
    return out


def where(v):
    for a, b, prot, name in maps():
        if a <= v < b:
            return f"{os.path.basename(name) or '[anon]'}+{v - a:#x} {prot}"
    return "unmapped"


def is_exec(v):
    return any(a <= v < b and "x" in p for a, b, p, _ in maps())


def words(b, size):
    if not b:
        return "-"
    fmt = {4: "I", 8: "Q"}[size]
    return " ".join(str(x) if x < 1 << 20 else hex(x) for x in struct.unpack(f"<{len(b) // size}{fmt}", b[: len(b) // size * size]))


def mapped(v):
    return v >= 0x10000 and any(a <= v < b for a, b, _p, _n in maps())


def text(b):
    s = b.split(b"\0")[0]
    return s.decode(errors="replace") if len(s) >= 4 and all(32 <= c < 127 for c in s) else None


def deep(label, v):
    """A pointer-like value: where it points and what is there (u64 words, a string)."""
    b = peek(v, 96)
    if not b:
        return
    say(f"    {label} {v:#x} -> {where(v)} u64 {words(b, 8)}" + (f" text {text(b)!r}" if text(b) else ""))


def name_of_function(h):
    s = c_char_p()
    r = cuda.cuFuncGetName(byref(s), c_void_p(h))
    return (r, s.value.decode(errors="replace") if r == 0 and s.value else None)


def module_of_function(h):
    m = c_void_p()
    r = cuda.cuFuncGetModule(byref(m), c_void_p(h))
    return (r, m.value or 0)


def functions_of_module(m):
    n = c_uint()
    r = cuda.cuModuleGetFunctionCount(byref(n), c_void_p(m))
    if r != 0:
        return (r, [])
    arr = (c_void_p * n.value)()
    r = cuda.cuModuleEnumerateFunctions(arr, n, c_void_p(m))
    return (r, [(f or 0, name_of_function(f or 0)[1]) for f in arr])


assert cuda.cuInit(0) == 0

if os.environ.get("PROBE_MODE") == "ptx":
    # The slot on modules of our own: three kernels (declared out of name order), none.
    CB = CFUNCTYPE(U, U, U, U, U)
    seen = []
    cbf = CB(lambda user, f, name, a3: (seen.append((user, f, ctypes.string_at(name).decode() if name else None, a3)), 0)[1])
    dev, ctx = ctypes.c_int(), c_void_p()
    assert cuda.cuDeviceGet(byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    head = ".version 8.0\n.target sm_90\n.address_size 64\n"
    three = head + "".join(f".visible .entry {n}(.param .u64 p) {{ ret; }}\n" for n in ("k_b", "k_a", "k_c"))
    none = head + ".visible .global .align 4 .u32 g;\n"
    tbl = c_void_p()
    assert cuda.cuGetExportTable(byref(tbl), ctypes.create_string_buffer(bytes.fromhex("6e163fbeb958444d835ce182aff1991e"), 16)) == 0
    slot = FN6(ctypes.c_uint64.from_address(tbl.value + 7 * 8).value)
    for label, src in (("three kernels", three), ("no kernel", none)):
        mod = c_void_p()
        r = cuda.cuModuleLoadData(byref(mod), ctypes.create_string_buffer(src.encode()))
        say(label, "load", r, hex(mod.value or 0))
        for name in ("k_a", "k_b", "k_c"):
            f = c_void_p()
            rr = cuda.cuModuleGetFunction(byref(f), mod, name.encode())
            say(f"  cuModuleGetFunction {name} -> {rr} {hex(f.value or 0)}")
        for c in (ctx.value, 0):
            user = ctypes.create_string_buffer(64)
            del seen[:]
            rr = slot(c or 0, mod.value, ctypes.cast(cbf, c_void_p).value, ctypes.addressof(user), mod.value, 0)
            say(f"  slot 7 ctx {hex(c or 0)} -> {rr:#x}; callbacks " + "; ".join(
                f"(user {'ours' if u == ctypes.addressof(user) else hex(u)}, f {f:#x} {name_of_function(f)[1]}, name {n!r}, a3 {a3:#x})" for u, f, n, a3 in seen))
    say("done")
    sys.exit(0)
TABLE_ID = bytes.fromhex(os.environ.get("PROBE_TABLE", "6e163fbeb958444d835ce182aff1991e"))
SLOT = int(os.environ.get("PROBE_SLOT", "7"))
tbl = c_void_p()
r = cuda.cuGetExportTable(byref(tbl), ctypes.create_string_buffer(TABLE_ID, 16))
say("cuGetExportTable", TABLE_ID.hex(), "->", r, hex(tbl.value or 0))
base = tbl.value
size = struct.unpack("<Q", peek(base, 8))[0]
n_words = size // 8 if 8 <= size <= 4096 else 16
slots = struct.unpack(f"<{n_words}Q", peek(base, n_words * 8))
say("table size", size, "words", n_words)
for i, v in enumerate(slots):
    say(f"  slot {i}: {v:#x} {where(v)}")
real = FN6(slots[SLOT])

calls = []  # (args, before, after, ret, callback calls)
keep = []  # ctypes objects kept alive
cb_calls = []


def wrap_callback(orig):
    o = FN6(orig)

    def cb(a0, a1, a2, a3, a4, a5):
        r = o(a0, a1, a2, a3, a4, a5)
        cb_calls.append(((a0, a1, a2, a3), r))
        return r

    w = FN6(cb)
    keep.append((o, w))
    return ctypes.cast(w, c_void_p).value


def logged(a0, a1, a2, a3, a4, a5):
    args = [a0, a1, a2, a3, a4, a5]
    before = [peek(a) for a in args]
    passed = list(args)
    for i, a in enumerate(args):
        if a > 4096 and is_exec(a):
            passed[i] = wrap_callback(a)
    del cb_calls[:]
    r = real(*passed)
    after = [peek(a) for a in args]
    calls.append((args, before, after, r, list(cb_calls)))
    say(f"call {len(calls) - 1}: args {[hex(a) for a in args]} -> {r:#x}")
    for i, a in enumerate(args):
        say(f"  a{i} {a:#x} {where(a) if a > 4096 else ''}")
        if before[i]:
            say(f"    before u32 {words(before[i], 4)}")
            say(f"    before u64 {words(before[i], 8)}")
            if after[i] != before[i]:
                say(f"    after  u64 {words(after[i], 8)}")
            if not is_exec(a):
                b = before[i][: len(before[i]) // 8 * 8]
                for j, w in enumerate(struct.unpack(f"<{len(b) // 8}Q", b)):
                    if mapped(w) and w != a:
                        deep(f"a{i}[{j}]", w)
    for (c, cr) in cb_calls:
        say(f"  callback({', '.join(hex(x) for x in c)}) -> {cr:#x}")
        for j, w in enumerate(c):
            if mapped(w):
                deep(f"callback arg {j}", w)
    return r


hook = FN6(logged)
page = base & ~4095
end = (base + n_words * 8 + 4095) & ~4095
assert libc.mprotect(c_void_p(page), end - page, 3) == 0, "mprotect"
ctypes.c_uint64.from_address(base + SLOT * 8).value = ctypes.cast(hook, c_void_p).value
say("slot", SLOT, "wrapped")

import torch  # noqa: E402

x = torch.randn(4, 256, 256, generator=torch.Generator().manual_seed(1)).cuda()
y = torch.fft.ifft2(torch.fft.fft2(x)).abs()
torch.cuda.synchronize()
say("fft checksum", float(y.sum()), "calls of the slot", len(calls))

# What the values are, asked of the driver.
for k, (args, before, after, r, cbs) in enumerate(calls):
    for i, a in enumerate(args):
        if before[i] and after[i] and before[i] != after[i]:
            b = after[i][: min(64, len(after[i]) // 8 * 8)]
            for j, w in enumerate(struct.unpack(f"<{len(b) // 8}Q", b)):
                if mapped(w) and w != a:
                    say(f"call {k} a{i} word {j} {w:#x}: function name {name_of_function(w)} module {module_of_function(w)}")
    for (c, cr) in cbs:
        for w in c:
            if mapped(w):
                say(f"call {k} callback value {w:#x}: function name {name_of_function(w)} module {module_of_function(w)}")
for k, (args, *_rest) in enumerate(calls):
    for i, a in enumerate(args):
        if mapped(a) and not is_exec(a):
            rr, fs = functions_of_module(a)
            say(f"call {k} a{i} {a:#x} as a module: status {rr}, {len(fs)} functions")
            if rr == 0:
                for j, (f, nm) in enumerate(fs):
                    say(f"    [{j}] {f:#x} {nm}")

say("done")
