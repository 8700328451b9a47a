#!/usr/bin/env bash
# The recorder's cost with cold caches, on a stand-in driver (no GPU needed): 220 launches of
# 100 kernels with 3–42 parameters and 1,100 repeated queries per "inference", with 70 KB of
# code and 1 MB of data touched between two calls. Prints ns per inference without the
# pollution, native and recorded, interleaved; with two recorder libraries, an A/B of them.
#   scripts/cold-bench/run.sh [LIB_A [LIB_B]] [N]   (default: target/release/libgpuless_recorder.so, 6)
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
python3 "$here/gen_pollute.py" "$d/pollute.c"
cc -shared -fPIC -O2 -o "$d/libcuda.so.1" "$here/libcuda_many.c"
cc -O1 -c -o "$d/pollute.o" "$d/pollute.c"
cc -O2 -o "$d/bench" "$here/bench.c" "$d/pollute.o" -ldl
a=${1:-$root/target/release/libgpuless_recorder.so}; b=${2:-}; n=${3:-6}
run() { LD_LIBRARY_PATH=$d "$@" "$d/bench" 60 1 | sed 's/.*excluding_pollution=\([0-9]*\).*/\1/'; rm -f "$d"/t.gl*; }
for _ in $(seq "$n"); do
  echo "native $(run env)"
  echo "A $(run env LD_PRELOAD="$a" GPULESS_TRACE="$d/t.gl")"
  [[ -n $b ]] && echo "B $(run env LD_PRELOAD="$b" GPULESS_TRACE="$d/t.gl")"
done | python3 -c "
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in sys.stdin:
    k, v = l.split(); d[k].append(int(v))
for k, v in d.items(): print(f'{k:7} ns per inference: median {st.median(v):.0f}, min {min(v)}  {sorted(v)}')"
