#!/usr/bin/env python3
"""Lists every driver API symbol that a CUDA toolkit's cuda.h (and cudaProfiler.h) declares: the one list of the driver
API that analyzer/build.rs turns into the API table (every symbol gets an entry: the lines of
analyzer/src/api/driver.api model a function; the rest get one from this listing) and that
analyzer/tests/header_coverage.rs checks driver.api against.

    scripts/api-signatures.py CUDA_INCLUDE_DIR > analyzer/src/api/cuda-13.0-driver.txt

(cuda.h and cudaTypedefs.h of CUDA 13.0 are in PyPI's `nvidia-cuda-runtime==13.0.96` wheel, under
nvidia/cu13/include.)

cuda.h declares most functions under macro names (`cuStreamBeginCapture` is
`cuStreamBeginCapture_v2`, or `_v2_ptsz` with per-thread default streams) and the older exported
symbols only for the driver's own build (`__CUDA_API_VERSION_INTERNAL`), so the header is
preprocessed three ways (gcc -E) and the union of the prototypes is listed, one per line:

    SYMBOL<TAB>SINCE<TAB>TYPE|NAME, TYPE|NAME, ...

sorted by symbol. TYPE has its spaces normalised (`const CUdeviceptr*`); SINCE is the CUDA version
from which `cuGetProcAddress` hands out this symbol for its base name (cudaTypedefs.h: the
`PFN_cuX_vNNNNN[_ptds|_ptsz]` typedefs of a base name, in ascending version, are its exported
variants in ascending `_vN` order).
"""
import os, re, subprocess, sys, tempfile
from collections import defaultdict

if len(sys.argv) != 2:
    sys.exit(__doc__)
inc = sys.argv[1]
modes = {"default": [], "per-thread": ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], "internal": ["-D__CUDA_API_VERSION_INTERNAL"]}
proto = re.compile(r"\bCUresult\s+(?:CUDAAPI\s+)?(cu\w+)\s*\(([^()]*)\)\s*;")
found, version = {}, None
# The graphics interop headers (cudaGL.h, cudaEGL.h, cudaVDPAU.h; libcuda exports their entry
# points too) include the graphics APIs' headers, which a CUDA toolkit does not ship: stand-ins
# declare the few types their prototypes use.
stubs = tempfile.mkdtemp()
for path, text in {
    "GL/gl.h": "typedef unsigned int GLuint; typedef unsigned int GLenum;",
    "EGL/egl.h": "typedef void *EGLDisplay; typedef void *EGLSync; typedef int EGLint; typedef void *EGLImage;",
    "EGL/eglext.h": "typedef void *EGLImageKHR; typedef void *EGLStreamKHR; typedef void *EGLSyncKHR;",
    "vdpau/vdpau.h": "typedef unsigned int VdpDevice; typedef unsigned int VdpVideoSurface; "
                     "typedef unsigned int VdpOutputSurface; typedef int VdpGetProcAddress(VdpDevice, unsigned int, void **);",
}.items():
    os.makedirs(os.path.dirname(f"{stubs}/{path}"), exist_ok=True)
    open(f"{stubs}/{path}", "w").write(text + "\n")
headers = ["cuda.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"]
for flags in modes.values():
  for header in headers:
    text = subprocess.run(["gcc", "-E", "-P", *flags, "-D__CUDA_DEPRECATED=", "-I", inc, "-I", stubs, "-x", "c", f"{inc}/{header}"],
                          capture_output=True, text=True, check=True).stdout
    for name, params in proto.findall(text):
        out = []
        for i, p in enumerate(params.split(",")):
            p = " ".join(p.replace("*", " * ").split())
            if p in ("", "void"):
                continue
            words = p.split()
            pname = f"a{i}"
            # The parameter's name: the last word, when more than a type remains.
            if len(words) > 1 and re.fullmatch(r"\w+", words[-1]) and words[-1] not in ("int", "long", "char", "short", "unsigned"):
                pname, words = words[-1], words[:-1]
            out.append((" ".join(words).replace(" *", "*"), pname))
        types = [t for t, _ in out]
        if name in found and [t for t, _ in found[name]] != types:
            sys.exit(f"{name}: two signatures: ({found[name]}) and ({out})")
        found.setdefault(name, out)

# libcuda exports the profiler's entry points too (cudaProfiler.h, which includes headers of
# other toolkits): their prototypes come from cudaProfilerTypedefs.h.
for name, ver, params in re.findall(r"\bPFN_(cu\w+?)_v(\d+)\)\(([^()]*)\);", open(f"{inc}/cudaProfilerTypedefs.h").read()):
    out = []
    for i, p in enumerate(params.split(",")):
        words = " ".join(p.replace("*", " * ").split()).split()
        if not words or words == ["void"]:
            continue
        pname = words[-1] if len(words) > 1 and re.fullmatch(r"\w+", words[-1]) else f"a{i}"
        out.append((" ".join(words[:-1] if pname == words[-1] else words).replace(" *", "*"), pname))
    found.setdefault(name, out)

# Variants of a base name: (base, per-thread) -> symbols sorted by _vN.
variant = re.compile(r"^(cu\w+?)(?:_v(\d+))?(_ptsz|_ptds)?$")
def split(sym):
    m = variant.match(sym)
    return m.group(1), int(m.group(2) or 1), bool(m.group(3))
symbols = defaultdict(list)
for s in found:
    base, v, pt = split(s)
    symbols[(base, pt)].append((v, s))
# PFN typedefs: (base, per-thread) -> versions.
pfn = defaultdict(list)
typedefs = "".join(open(f"{inc}/{h}").read() for h in
                   ["cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h", "cudaVDPAUTypedefs.h"])
for base, ver, pt in re.findall(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)", typedefs):
    pfn[(base, bool(pt))].append(int(ver))
since = {}
for key, syms in symbols.items():
    vers = sorted(set(pfn.get(key, [])))
    syms.sort()
    if len(vers) != len(syms):
        sys.exit(f"{key}: {len(syms)} symbols {syms} but typedef versions {vers}")
    for (_, s), v in zip(syms, vers):
        since[s] = v

m = re.search(r"#define CUDA_VERSION (\d+)", open(f"{inc}/cuda.h").read())
print(f"# cuda.h, cudaProfiler.h and the interop headers (cudaGL.h, cudaEGL.h, cudaVDPAU.h) of CUDA_VERSION {m.group(1) if m else '?'}: {len(found)} driver API symbols (scripts/api-signatures.py)")
for name in sorted(found):
    params = ", ".join(f"{t}|{n}" for t, n in found[name])
    print(f"{name}\t{since[name]}\t{params}")
