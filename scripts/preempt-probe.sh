#!/usr/bin/env bash
# Preemption latency on one GPU (docs/SCHEDULING.md, issue "REEF-style preemption on NVIDIA"):
# builds and runs testdata/cuda/bench/preempt_probe.cu, which measures how soon a tiny
# latency-critical (RT) kernel starts — %globaltimer in the kernel against CLOCK_REALTIME at
# submission, over an idle launch — while best-effort (BE) spin kernels keep the GPU busy, under
# each mechanism NVIDIA offers: BE in another process (time-sliced contexts), one context with
# stream priorities, one context without, green contexts (RT on 8 SMs, BE on the rest) in one
# process and across two (procgreen); each
# against three BE shapes (1 ms blocks x 4 waves, 20 us blocks x 100 waves, 20 us kernels). The
# question it answers: can RT work reach a p99 of <= 100 us from submission to kernel start?
#
#   scripts/preempt-probe.sh OUT_DIR [NVCC]      (NVCC: argument, else $NVCC, else `nvcc`)
#
# PROBES (default 400 per scenario) and SCENARIOS (comma list: idle, and MECHANISM-SHAPE with
# MECHANISM one of process priority nopriority green procgreen and SHAPE one of long short tiny; default
# all) pass through to the program. Prints its `row|preempt probe: NAME|INFO|p50 .., p90 ..,
# p99 .., max .. us; details` lines (also `not available: ERROR` for a mechanism that failed),
# writes them to OUT_DIR/preempt-probe.txt and the program's JSON line (every latency) to
# OUT_DIR/preempt-probe.json (not to the terminal). A whole run takes well under 90 s on an H100 (150 s limit).
# Exits 0: the rows carry the verdicts (a FAIL row when the build or the run fails).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../testdata/cuda/bench/preempt_probe.cu"
out=${1:?usage: preempt-probe.sh OUT_DIR [NVCC]}
NVCC=${2:-${NVCC:-nvcc}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if ! command -v "$NVCC" >/dev/null; then
  echo "row|preempt probe: build|FAIL|nvcc not found: $NVCC"
  exit 0
fi
# shellcheck source=testdata/cuda/link.sh
. "$here/../testdata/cuda/link.sh"
cuda_link "$NVCC" "$out"

if ! "$NVCC" -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -cudart shared "$src" \
    -o "$out/preempt_probe" ${link[@]+"${link[@]}"} -lcuda 2>"$out/build.log"; then
  echo "row|preempt probe: build|FAIL|nvcc failed: $(head -c 400 "$out/build.log" | tr '\n' ' ')"
  exit 0
fi

# The JSON line (tens of kB) goes to the files only, not to the terminal.
timeout 150 "$out/preempt_probe" 2>"$out/preempt-probe.err" | tee "$out/preempt-probe.txt" \
  | grep --line-buffered -v '^{'
rc=${PIPESTATUS[0]}
grep '^{' "$out/preempt-probe.txt" | tail -n 1 >"$out/preempt-probe.json"
[ -s "$out/preempt-probe.json" ] && echo "json: $out/preempt-probe.json"
if [ "$rc" != 0 ]; then
  why="exit status $rc"; [ "$rc" = 124 ] && why="timed out after 150 s"
  echo "row|preempt probe: run|FAIL|$why; stderr: $(tail -n 5 "$out/preempt-probe.err" | tr '\n' ' ')" \
    | tee -a "$out/preempt-probe.txt"
fi
exit 0
