#!/usr/bin/env bash
# Recorder overhead on ResNet-50 (device machine): interleaved rounds of the workload run natively
# and under `gpuless record` in diagnostic modes, each process printing its median hot latency.
#
#   scripts/overhead.sh [ROUNDS] [MODE...]      default: 6 native full
#   scripts/overhead.sh selftime                 the recorder's self time per function
#
# MODE: native | full | bare (the recorder loaded, nothing interposed) | hooks (calls passed
# through, nothing recorded) | hooks-driver (the same, cuDNN/cuBLAS not interposed) | nowrite
# (records built, dropped) | noarena (full, arena off) | hooks-noarena | pinned (native on CPUs
# 4,5) | full-pinned | norand (native, address randomization off). Environment: BIN (gpuless and libgpuless_recorder.so; default .device/bin),
# WORKLOAD (default ../shared/workloads/resnet50.py, else .device/workloads/resnet50.py),
# HOT_ITERS (default 200). Prints each mode's medians and its ratios to native: median of the
# per-round ratios, median of medians, minimum over minimum (one process's median varies by up
# to a quarter between processes on the same host, so a single pair says little).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/.device/bin}
w=${WORKLOAD:-$root/../shared/workloads/resnet50.py}
[[ -f $w ]] || w=$root/.device/workloads/resnet50.py
export HOT_ITERS=${HOT_ITERS:-200}
rec() { GPULESS_RECORDER=$bin/libgpuless_recorder.so "$@" "$bin/gpuless" record -o "$tmp/t.gl" -- python3 "$w" 2>/dev/null; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ ${1:-} == selftime ]]; then
  HOT_ITERS=100 GPULESS_DIAG=selftime GPULESS_RECORDER=$bin/libgpuless_recorder.so "$bin/gpuless" record \
    -o "$tmp/t.gl" -- python3 "$w" 2>&1 >/dev/null | grep "gpuless selftime"
  exit 0
fi

rounds=${1:-6}
shift || true
modes=("$@")
[[ ${#modes[@]} -eq 0 ]] && modes=(native full)
for _ in $(seq "$rounds"); do
  for m in native "${modes[@]}"; do
    case $m in
      native) python3 "$w" ;;
      pinned) taskset -c 4,5 python3 "$w" ;;
      full) rec env ;;
      full-pinned) rec taskset -c 4,5 ;;
      bare) rec env GPULESS_DIAG=bare ;;
      hooks) rec env GPULESS_DIAG=hooks ;;
      hooks-driver) rec env GPULESS_DIAG=hooks GPULESS_LEVELS=runtime ;;
      norand) setarch "$(uname -m)" -R python3 "$w" ;;
      nowrite) rec env GPULESS_DIAG=nowrite ;;
      noarena) rec env GPULESS_ARENA=off ;;
      hooks-noarena) rec env GPULESS_DIAG=hooks GPULESS_ARENA=off ;;
      *) echo "unknown mode $m" >&2; exit 2 ;;
    esac | tail -n 1 | sed "s/^/$m /"
  done
done >"$tmp/runs.txt"
python3 - "$tmp/runs.txt" <<'PY'
import collections, json, statistics as st, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, j = line.split(" ", 1)
    d[mode].append(json.loads(j)["hot_ms_median"])
nat = d.pop("native")
print(f"{'native':14} {[round(x, 3) for x in nat]} median {st.median(nat):.3f} ms")
for mode, v in d.items():
    pairs = [a / b for a, b in zip(v, nat)]
    print(f"{mode:14} {[round(x, 3) for x in v]} median {st.median(v):.3f} ms | pair ratios "
          f"{[round(x, 3) for x in pairs]} median x{st.median(pairs):.3f} | median/median "
          f"x{st.median(v) / st.median(nat):.3f} | min/min x{min(v) / min(nat):.3f}")
PY
