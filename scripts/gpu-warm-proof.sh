#!/usr/bin/env bash
# Warm constants (issue 20) on the device machine, in one call: the client section's
# warm-constants rows (ResNet-50 and BERT through `gpuless run --remote` with the driver hidden,
# three sessions each against a server with --program-keep-alive: checksums against native,
# uploads found resident, first results), then `replay --remote` of a ResNet-50 recording against
# servers with and without warm constants (scripts/cached-replay-bench.sh, mode `kept`: every
# result verified, median replay_s against `off`).
#
#   scripts/gpu-warm-proof.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds release binaries (gpuless, libgpuless_recorder.so). Prints and appends to
# OUT_DIR/rows.txt one `row|NAME|PASS, FAIL or INFO|detail` line each; the logs go to
# OUT_DIR/warm-logs.tgz.
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH=/usr/local/cuda/bin:$PATH
sb=$out/suite-bin
bash "$root/testdata/cuda/suite/build.sh" "$sb" "$(command -v nvcc)" >"$out/build.log" 2>&1
CLIENT_PROGRAMS=" " CLIENT_TORCH_ROWS=" " CLIENT_LOOP=0 CLIENT_PIECES=0 \
  bash "$root/scripts/gpu-suite-client.sh" "$bin" "$sb" "$out/client" | grep '^row|' | tee -a "$out/rows.txt"
wl=""
for r in "$root/.device/workloads/resnet50.py" "$root/../shared/workloads/resnet50.py"; do
  if [ -f "$r" ]; then wl=$r; break; fi
done
if [ -n "$wl" ]; then
  HOT_ITERS=5 GPULESS_RECORDER="$bin/libgpuless_recorder.so" "$bin/gpuless" record -o "$out/resnet50.gl" -- \
    python3 "$wl" >"$out/record.txt" 2>&1
  summary=$(bash "$root/scripts/cached-replay-bench.sh" "$bin" "$out/resnet50.gl" "$out/bench" 2>&1 | tail -n 1)
  verdict=INFO
  [[ $summary == *'"all verified, no mismatches": true'* ]] || verdict=FAIL
  echo "row|warm constants: ResNet-50 replay --remote, uploads resident (kept) against off, cached execution beside|$verdict|$summary" |
    tee -a "$out/rows.txt"
  grep -h "were resident from the last session" "$out/bench/serve-kept.log" | head -n 4 | sed 's/^/  /'
  rm -f "$out/resnet50.gl"
else
  echo "row|warm constants: ResNet-50 replay --remote|FAIL|no resnet50.py (copy ../shared/workloads into .device/workloads)" |
    tee -a "$out/rows.txt"
fi
rm -rf "$sb" "$out/bench"/cache-* "$out/client"/cache*
tar czf "$out/warm-logs.tgz" -C "$out" client bench record.txt build.log 2>/dev/null
