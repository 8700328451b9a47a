#!/usr/bin/env python3
"""Lists every driver API symbol that a CUDA toolkit's cuda.h declares, with its parameter types:
the reference that analyzer/tests/header_coverage.rs checks analyzer/src/api/driver.api against.

    scripts/api-signatures.py CUDA_INCLUDE_DIR > testdata/api/cuda-VERSION-driver.txt

cuda.h declares most functions under macro names (`cuStreamBeginCapture` is
`cuStreamBeginCapture_v2`, or `_v2_ptsz` with per-thread default streams) and the older exported
symbols only for the driver's own build (`__CUDA_API_VERSION_INTERNAL`), so the header is
preprocessed three ways (gcc -E) and the union of the prototypes is listed, one per line:
`SYMBOL<TAB>TYPE, TYPE, ...` (parameter names dropped, spaces normalised), sorted.
"""
import re, subprocess, sys

if len(sys.argv) != 2:
    sys.exit(__doc__)
inc = sys.argv[1]
modes = {"default": [], "per-thread": ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], "internal": ["-D__CUDA_API_VERSION_INTERNAL"]}
proto = re.compile(r"\bCUresult\s+(cu\w+)\s*\(([^()]*)\)\s*;")
found, version = {}, None
for flags in modes.values():
    text = subprocess.run(["gcc", "-E", "-P", *flags, "-I", inc, "-x", "c", f"{inc}/cuda.h"],
                          capture_output=True, text=True, check=True).stdout
    for name, params in proto.findall(text):
        types = []
        for p in params.split(","):
            p = " ".join(p.replace("*", " * ").split())
            if p in ("", "void"):
                continue
            words = p.split()
            # Drop the parameter's name (the last word, when more than a type remains).
            if len(words) > 1 and re.fullmatch(r"\w+", words[-1]) and words[-1] not in ("int", "long", "char", "short", "unsigned"):
                words = words[:-1]
            types.append(" ".join(words).replace(" *", "*"))
        sig = ", ".join(types)
        if found.get(name, sig) != sig:
            sys.exit(f"{name}: two signatures: ({found[name]}) and ({sig})")
        found[name] = sig
m = re.search(r"#define CUDA_VERSION (\d+)", open(f"{inc}/cuda.h").read())
print(f"# cuda.h of CUDA_VERSION {m.group(1) if m else '?'}: {len(found)} driver API symbols (scripts/api-signatures.py)")
for name in sorted(found):
    print(f"{name}\t{found[name]}")
