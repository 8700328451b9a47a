#!/usr/bin/env bash
# Runs the fuzz targets (nightly toolchain + cargo-fuzz): ./fuzz/run.sh [SECONDS] [TARGET...]
# Seeds come from testdata/bin; logs go to fuzz/logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-600}; shift || true
targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || targets=(fatbin nvinfo)
mkdir -p logs corpus/fatbin corpus/nvinfo
cp -n ../testdata/bin/*.fatbin ../testdata/bin/*.cubin corpus/fatbin/ 2>/dev/null || true
cp -n ../testdata/bin/*.cubin corpus/nvinfo/ 2>/dev/null || true
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    -max_len=262144 -print_final_stats=1 2>&1 | tee "logs/$t.log" | grep -E 'stat::|Done|ERROR|panicked' || true
done
