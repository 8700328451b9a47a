#!/usr/bin/env bash
# The client's own cost per call, without a GPU: recorder/tests/fake/bench.c (the call mix
# PyTorch's ResNet-50 makes per inference) runs through `gpuless run --remote` against a
# `gpuless serve` on the stand-in driver (recorder/tests/fake/libcuda.c), ROUNDS times,
# interleaved with the same number of native runs on the stand-in; prints each run's ns per
# inference and the medians. Compares builds when given several BIN_DIRs (each holding gpuless
# and libgpuless_recorder.so), run in turn within each round:
#   scripts/client-cost/run.sh [ROUNDS] [INFERENCES] BIN_DIR...
# BENCH_ARGS passes bench.c's options ("wide", "mapped").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${1:-5}
n=${2:-2000}
shift 2 || true
[ $# -gt 0 ] || set -- "$root/target/release"
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
cc -O2 -shared -fPIC -o "$tmp/libcuda.so.1" "$root/recorder/tests/fake/libcuda.c"
cc -O2 -o "$tmp/bench" "$root/recorder/tests/fake/bench.c" -ldl
per_inf() { grep -oE 'ns_per_inference=[0-9]+' | cut -d= -f2; }
declare -A got
for r in $(seq "$rounds"); do
  v=$(LD_LIBRARY_PATH=$tmp "$tmp/bench" "$n" ${BENCH_ARGS:-} | per_inf); got[native]+="$v "
  for b in "$@"; do
    LD_LIBRARY_PATH=$tmp "$b/gpuless" serve --listen 127.0.0.1:0 --socket "$tmp/s.sock" --cache-dir "$tmp/cache" \
      >"$tmp/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q 'tcp=' "$tmp/serve.log" && break; sleep 0.1; done
    addr=$(grep -oE 'tcp=[0-9.]+:[0-9]+' "$tmp/serve.log" | head -1 | cut -d= -f2)
    v=$(GPULESS_RECORDER="$b/libgpuless_recorder.so" "$b/gpuless" run --remote "$addr" -- "$tmp/bench" "$n" ${BENCH_ARGS:-} 2>/dev/null | per_inf)
    got[$b]+="$v "
    kill $pid; wait $pid 2>/dev/null || true
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for k in native "$@"; do
  echo "$k: ${got[$k]}-> median $(echo "${got[$k]}" | median) ns per inference"
done
