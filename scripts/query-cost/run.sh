#!/usr/bin/env bash
# Per-call cost of the queries PyTorch repeats, natively and under the recorder, on a GPU
# machine: scripts/query-cost/run.sh [BIN_DIR] [CALLS]. BIN_DIR holds gpuless and
# libgpuless_recorder.so (default target/release).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-target/release}
n=${2:-1000000}
tmp=$(mktemp -d)
nvcc -O2 -o "$tmp/bench" "$here/bench.c" -lcuda
echo "== native"
"$tmp/bench" "$n"
echo "== recorded (full recording, trace discarded)"
"$bin/gpuless" record -o "$tmp/q.gl" -- "$tmp/bench" "$n"
echo "== hooks only (GPULESS_DIAG=hooks)"
GPULESS_DIAG=hooks "$bin/gpuless" record -o "$tmp/q2.gl" -- "$tmp/bench" "$n"
rm -rf "$tmp"
