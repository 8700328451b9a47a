"""Writes pollute.c: 48 functions of distinct straight-line code (~70 KB compiled; `gen_pollute.py
FILE N` writes N), which the cold-cache bench runs between two driver calls to evict the
recorder's code and data from the first-level caches, as a framework's own work does."""
import sys

n = int(sys.argv[2]) if len(sys.argv) > 2 else 48

out = ["#include <stdint.h>"]
for f in range(n):
    body = "".join(f"  a = a * {1664525 + 2 * (f * 97 + i)}u + {f * 131 + i}u; a ^= a >> {(i % 13) + 3};\n"
                   for i in range(80))
    out.append(f"uint32_t pol{f}(uint32_t a) {{\n{body}  return a; }}")
out.append("uint32_t pollute_code(uint32_t a) {" + "".join(f" a = pol{f}(a);" for f in range(n)) + " return a; }")
open(sys.argv[1] if len(sys.argv) > 1 else "pollute.c", "w").write("\n".join(out) + "\n")
