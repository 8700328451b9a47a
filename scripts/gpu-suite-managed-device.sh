#!/usr/bin/env bash
# Managed and device-mapped memory through the client under the comparison the executor does not
# use by default (issue 35): GPULESS_MANAGED_COMPARE=host (the whole managed memory copied to the
# host and compared at every pull) unless MANAGED_COMPARE says another, on the device machine:
#
#   scripts/gpu-suite-managed-device.sh BIN_DIR SUITE_BIN SAMPLES_DIR OUT_DIR
#
# Runs with GPULESS_MANAGED_COMPARE exported (the servers the sections start inherit it; an
# executor keeps every GPULESS_ variable): the compatibility section's programs that share
# memory between host and device (managed_linked, mapped_mem, polling, ipc), the managed-memory
# cost probe (1 GiB, 5 steps: at most 2 % of the array each way per step) and the samples that
# use managed or mapped memory through the client. Prints the sections' rows; a row that fails
# here and passes in the default sections is the comparison's. MANAGED_DEVICE_SAMPLES overrides
# the samples; each section has its own time limit (about 6 minutes in all on an H200). The
# default (the comparison on the device) was proven this way on an H200 on 2026-11-28.
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: $0 BIN_DIR SUITE_BIN SAMPLES_DIR OUT_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 sb=$2 samples=$3 out=$4
mkdir -p "$out"
export GPULESS_MANAGED_COMPARE=${MANAGED_COMPARE:-host}
COMPAT_PROGRAMS="managed_linked mapped_mem polling ipc" COMPAT_TIMEOUT=90 \
  timeout -k 5 200 "$here/gpu-suite-compat.sh" "$bin" "$sb" "$out/compat" 2>"$out/compat.err" | grep -v "compat: exports"
timeout -k 5 120 "$here/gpu-suite-managed-cost.sh" "$bin" "$sb" "$out/cost" 1024 5 2>"$out/cost.err"
SAMPLES_ONLY=${MANAGED_DEVICE_SAMPLES:-"UnifiedMemoryPerf UnifiedMemoryStreams conjugateGradientUM conjugateGradientMultiBlockCG simpleZeroCopy simpleStreams watershedSegmentationNPP streamOrderedAllocation"} \
  SAMPLES_MODES=remote SAMPLES_TOTAL=150 SAMPLES_TIMEOUT=90 \
  timeout -k 5 170 "$here/gpu-suite-samples.sh" "$bin" "$samples" "$out/samples" 2>"$out/samples.err" | grep '^row|'
exit 0
