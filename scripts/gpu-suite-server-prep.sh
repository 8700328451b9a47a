#!/usr/bin/env bash
# What scripts/gpu-suite-server.sh needs when it runs without the rest of the GPU suite: the
# suite programs built with this machine's nvcc, traces of them and of one ResNet-50 inference
# recorded here, and their local replays (plain and, for ResNet-50, hot) beside them.
#
#   scripts/gpu-suite-server-prep.sh BIN_DIR SUITE_BIN TRACE_DIR
#
# Then: scripts/gpu-suite-server.sh BIN_DIR TRACE_DIR SUITE_BIN OUT_DIR.
set -uo pipefail
bin=${1:?usage: gpu-suite-server-prep.sh BIN_DIR SUITE_BIN TRACE_DIR}
suite_bin=${2:?}
traces=${3:?}
root=$(cd "$(dirname "$0")/.." && pwd)
gl="$root/$bin/gpuless"
[[ $bin == /* ]] && gl="$bin/gpuless"
export GPULESS_RECORDER="$(dirname "$gl")/libgpuless_recorder.so"
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$suite_bin" "$traces"
bash "$root/testdata/cuda/suite/build.sh" "$suite_bin" "$(command -v nvcc)" >"$traces/build.log" 2>&1 || echo "build: $(tail -n 1 "$traces/build.log")"
rec() { # name, command...
  local name=$1; shift
  timeout -k 5 300 "$gl" record -o "$traces/$name.gl" -- "$@" >"$traces/$name.rec.out" 2>"$traces/$name.rec.err" || echo "record $name: rc=$?"
  timeout -k 5 300 "$gl" replay --json "$traces/$name.gl" >"$traces/replay-$name.json" 2>"$traces/replay-$name.err" || echo "replay $name: rc=$?"
}
rec driver_api "$suite_bin/driver_api" "$suite_bin/driver_kernels.cubin"
for p in cublas_batched streams streams_static globals ptr_struct texture graph alloc_bench; do
  [[ -x $suite_bin/$p ]] && rec "$p" "$suite_bin/$p"
done
workloads=${GPULESS_WORKLOADS:-$root/../shared/workloads}
[[ -d $workloads ]] || workloads="$root/.device/workloads"
HOT_ITERS=0 rec resnet50_once python3 "$workloads/resnet50.py"
timeout -k 5 300 "$gl" replay --iterations "${REPLAY_ITERS:-50}" --json "$traces/resnet50_once.gl" \
  >"$traces/replay-hot-resnet50.json" 2>"$traces/replay-hot-resnet50.err" || echo "hot replay: rc=$?"
ls "$traces"/*.gl | wc -l
