#!/usr/bin/env bash
# What one recorded call costs the program's thread, deterministically: calls.c under callgrind's
# cache simulation, main thread only, the marginal cost per call (runs of 1000 and 3000 rounds,
# so start-up cancels) over the same call made natively: instructions and first-level misses
# (I1mr, D1mr read, D1mw write) that each recorder library given adds. Needs valgrind; no GPU.
#   scripts/cold-bench/misses.sh [LIB...]   (default: target/release/libgpuless_recorder.so)
# A model, not the device: it counted the TLS and cache-line work of session 9 (a remembered
# query's read misses 17 -> 9) that the device's sampled recorder share did not show.
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
python3 "$here/gen_pollute.py" "$d/pollute.c" 8
cc -shared -fPIC -O2 -o "$d/libcuda.so.1" "$here/libcuda_many.c"
cc -O1 -c -o "$d/pollute.o" "$d/pollute.c"
cc -O2 -I"$root/recorder/tests/fake" -o "$d/calls" "$here/calls.c" "$d/pollute.o" -ldl
[[ $# -eq 0 ]] && set -- "$root/target/release/libgpuless_recorder.so"
run() { # LIB|none MASK N: the main thread's totals
  local pre=()
  [[ $1 != none ]] && pre=(env LD_PRELOAD="$1" GPULESS_TRACE="$d/t.gl" GPULESS_COMPRESS_THREADS=1)
  rm -f "$d"/cg.*
  LD_LIBRARY_PATH=$d "${pre[@]}" valgrind --tool=callgrind --cache-sim=yes --separate-threads=yes \
    --callgrind-out-file="$d/cg.%p" "$d/calls" "$3" "$2" >/dev/null 2>&1
  rm -f "$d"/t.gl*
  local f; f=$(ls "$d"/cg.*-01 | head -1)
  echo "$(grep -m1 '^events:' "$f" | cut -d' ' -f2-)|$(grep -m1 '^summary:\|^totals:' "$f" | cut -d' ' -f2-)"
}
for mask in 1 2 4; do
  na=$(run none $mask 1000); nb=$(run none $mask 3000)
  for lib in "$@"; do
    a=$(run "$lib" $mask 1000); b=$(run "$lib" $mask 3000)
    python3 - "$a" "$b" "$(basename "$lib")" "$mask" "$na" "$nb" <<'PY'
import sys
def parse(s):
    ev, tot = s.split("|")
    return dict(zip(ev.split(), map(int, tot.split())))
marginal = lambda a, b: {k: (parse(b)[k] - parse(a)[k]) / 2000 for k in parse(a)}
rec, nat = marginal(sys.argv[1], sys.argv[2]), marginal(sys.argv[5], sys.argv[6])
m = {k: rec[k] - nat[k] for k in rec}
call = {"1": "cuCtxGetDevice", "2": "cuDevicePrimaryCtxGetState", "4": "cuLaunchKernel (48 params)"}[sys.argv[4]]
print(f"{call:28} {sys.argv[3]:28} over native: Ir {m['Ir']:7.1f}  I1mr {m['I1mr']:5.2f}  D1mr {m['D1mr']:7.2f}  D1mw {m['D1mw']:6.2f}")
PY
  done
done
