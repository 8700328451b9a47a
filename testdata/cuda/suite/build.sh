#!/usr/bin/env bash
# Builds the GPU-suite CUDA programs for sm_90 (no GPU needed to build):
#
#   testdata/cuda/suite/build.sh OUT_DIR [NVCC]      (NVCC: argument, else $NVCC, else `nvcc`)
#
# Outputs in OUT_DIR: driver_api (driver API only: -cudart none -lcuda) and driver_kernels.cubin
# (its kernels, loaded at run time: `driver_api OUT_DIR/driver_kernels.cubin`), driver_loop (the
# same kernels in a timed hot loop, for client mode: `driver_loop CUBIN [ITERS] [LAUNCHES]`), cublas_batched
# (-lcublas), streams (shared cudart) and streams_static (static cudart), globals, ptr_struct,
# texture, graph, alloc_bench, segment, upload, fault (shared cudart; the last three for the
# server section), ptr_attrs (shared cudart and -lcuda), oob, event_d2h, graph_query (issue 21's
# fidelity section), managed, solver (issue 21's replay determinism), small_copies (issue 34's
# program bound by small synchronous copies, timed by the client section), the compatibility programs
# of issue 34 (scripts/gpu-suite-compat.sh): driver_answers and jit_lists (C, driver API only:
# -cudart none -lcuda), stream_sync and printf (shared cudart and -lcuda), big_copy, callbacks, bad_inputs
# (shared cudart), ipc (issue 34: memory and events shared between two processes, shared
# cudart), issue 35's memory models and graph node kinds (also in the compatibility
# list): managed_linked, mapped_mem, polling, pools, graph_mem, conditional (shared cudart) and vmm
# (shared cudart and -lcuda), multi_gpu (issue 37's program of two devices: shared cudart and
# -lcuda), and managed_cost (shared cudart; issue 35's cost probe for managed
# memory, run on its own: `managed_cost [MiB] [STEPS]`), and libblock_arena.so (C, built with
# $CC or cc: a preload library that takes the arena's address range, for the suite's bad-input
# checks).
# $EXTRA_NVCCFLAGS is added to every nvcc command and $EXTRA_LDFLAGS to every link (both
# word-split).
# Builds what it can, says what failed on stderr and exits 1 if anything did.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUT_DIR [NVCC]}
NVCC=${2:-${NVCC:-nvcc}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
command -v "$NVCC" >/dev/null || { echo "build.sh: nvcc not found: $NVCC" >&2; exit 2; }
echo "using $("$NVCC" --version | tail -n 1)" >&2
# shellcheck source=testdata/cuda/link.sh
. "$here/../link.sh"
cuda_link "$NVCC" "$out"
# shellcheck disable=SC2206
flags=(${EXTRA_NVCCFLAGS:-})
# shellcheck disable=SC2206
extra=(${EXTRA_LDFLAGS:-})
common=(-O2 -std=c++17 -gencode arch=compute_90,code=sm_90)

failed=()
# BUILD_JOBS (default: the machine's CPUs) programs are built at a time; BUILD_ONLY="a b" builds
# only those outputs.
jobs=${BUILD_JOBS:-$(nproc 2>/dev/null || echo 1)}
rm -rf "$out/.failed" && mkdir -p "$out/.failed"
build() { # output, nvcc arguments...
  local name=$1; shift
  if [ -n "${BUILD_ONLY:-}" ] && [[ " $BUILD_ONLY " != *" $name "* ]]; then return 0; fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  (
    if "$NVCC" ${flags[@]+"${flags[@]}"} "$@" -o "$out/$name" ${link[@]+"${link[@]}"} ${extra[@]+"${extra[@]}"}; then
      echo "built $name" >&2
    else
      echo "build.sh: FAILED $name" >&2
      touch "$out/.failed/$name"
    fi
  ) &
}

# driver_api: host code only, compiled as C++ so that no cudart registration code is emitted.
if [ -z "${BUILD_ONLY:-}" ] || [[ " $BUILD_ONLY " == *" driver_kernels.cubin "* ]]; then
  "$NVCC" ${flags[@]+"${flags[@]}"} -O2 -std=c++17 -cubin -arch=sm_90 "$here/driver_kernels.cu" -o "$out/driver_kernels.cubin" \
    || touch "$out/.failed/driver_kernels.cubin" &
fi
build driver_api -O2 -std=c++17 -x c++ -cudart none "$here/driver_api.cu" -lcuda
build driver_loop -O2 -std=c++17 -x c++ -cudart none "$here/driver_loop.cu" -lcuda
# tables: the driver's private export tables as cudart uses them (C; client mode's row compares
# what the real driver answers with what the client answers).
build tables -O2 -x c -cudart none "$here/../../../recorder/tests/fake/tables.c" -lcuda -lpthread
# How a client-mode process ends (the stand-in tests' programs, on the driver): calls at exit
# after thread-locals are gone, a crash, a child forked without exec.
build exit_calls -O2 -x c -cudart none "$here/../../../recorder/tests/fake/exit_calls.c" -lcuda
build client_crash -O2 -x c -cudart none "$here/../../../recorder/tests/fake/crash.c" -lcuda
build fork_child -O2 -x c -cudart none "$here/../../../recorder/tests/fake/fork_child.c" -lcuda
build cublas_batched "${common[@]}" -cudart shared "$here/cublas_batched.cu" -lcublas
build streams "${common[@]}" -cudart shared "$here/streams.cu"
build streams_static "${common[@]}" -cudart static "$here/streams.cu"
build ptr_attrs "${common[@]}" -cudart shared "$here/ptr_attrs.cu" -lcuda
for p in globals ptr_struct texture graph alloc_bench segment upload fault oob event_d2h graph_query managed memcpy_default pitched crash quick_exit solver small_copies; do
  build "$p" "${common[@]}" -cudart shared "$here/$p.cu"
done
# Issue 34's compatibility programs: each run natively and through the client, outputs compared.
build driver_answers -O2 -x c -cudart none "$here/driver_answers.c" -lcuda
build jit_lists -O2 -x c -cudart none "$here/jit_lists.c" -lcuda
for p in stream_sync printf; do
  build "$p" "${common[@]}" -cudart shared "$here/$p.cu" -lcuda
done
for p in big_copy callbacks bad_inputs ipc; do
  build "$p" "${common[@]}" -cudart shared "$here/$p.cu"
done
# Issue 35's programs: memory models and graph node kinds; managed_cost is a cost probe.
for p in managed_linked mapped_mem polling pools graph_mem conditional managed_cost hostile; do
  build "$p" "${common[@]}" -cudart shared "$here/$p.cu"
done
build vmm "${common[@]}" -cudart shared "$here/vmm.cu" -lcuda
build multi_gpu "${common[@]}" -cudart shared "$here/multi_gpu.cu" -lcuda
wait
for f in "$out/.failed"/*; do [ -e "$f" ] && failed+=("$(basename "$f")"); done
rm -rf "$out/.failed"
if [ -n "${BUILD_ONLY:-}" ] && [[ " $BUILD_ONLY " != *" libblock_arena.so "* ]]; then
  :
elif "${CC:-cc}" -O2 -shared -fPIC -o "$out/libblock_arena.so" "$here/block_arena.c"; then
  echo "built libblock_arena.so" >&2
else
  echo "build.sh: FAILED libblock_arena.so" >&2
  failed+=(libblock_arena.so)
fi
rm -rf "$out/.link"

if ((${#failed[@]})); then
  echo "build.sh: not built: ${failed[*]}" >&2
  exit 1
fi
