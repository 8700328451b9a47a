#!/usr/bin/env bash
# Compare the trace writer's compression throughput with `zstd -1 -T0` on the same bytes.
# Usage: scripts/bench-writer.sh [MB] (default 512). Needs the zstd CLI (apt-get install zstd).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mb="${1:-512}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cd "$root"
cargo build --release -q -p gpuless-traces --example bench-writer
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench-writer"
for run in 1 2 3; do
  "$bin" "$out" "$mb" > "$out/writer.log"
  head -1 "$out/writer.log"
  bytes=$(stat -c %s "$out/raw.bin")
  start=$(date +%s.%N)
  zstd -q -f -1 -T0 "$out/raw.bin" -o "$out/raw.bin.zst"
  end=$(date +%s.%N)
  awk -v b="$bytes" -v s="$start" -v e="$end" -v z="$(stat -c %s "$out/raw.bin.zst")" \
    'BEGIN { t = e - s; printf "zstd -1 -T0: %.1f MB -> %.1f MB in %.3f s: %.0f MB/s\n", b/1e6, z/1e6, t, b/1e6/t }'
done
