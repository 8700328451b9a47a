#!/usr/bin/env bash
# `gpuless invoke` of the compiled ResNet-50 with one hardware work queue (its default since
# issue 20's cold-start work) against the driver's default of eight, side by side: cold first
# results (new processes, ABAB) and hot latency (--iterations 200). Needs a GPU.
#
#   scripts/invoke-connections.sh BIN_DIR OUT_DIR [COLD_RUNS]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:?usage: invoke-connections.sh BIN_DIR OUT_DIR [COLD_RUNS]}" && pwd); out=${2:?}; runs=${3:-5}
mkdir -p "$out/rec"
gl=$bin/gpuless
export GPULESS_RECORDER=$bin/libgpuless_recorder.so
fn=$root/testdata/workloads/resnet50_fn.py
"$gl" record -o "$out/a.gl" -- python3 "$fn" once 1 "$out/rec" >"$out/rec.out" 2>"$out/rec.err" || { tail -3 "$out/rec.err"; exit 1; }
"$gl" compile "$out/a.gl" -o "$out/r.gfn" >"$out/compile.out" 2>"$out/compile.err" || { tail -3 "$out/compile.err"; exit 1; }
for i in $(seq "$runs"); do
  "$gl" invoke "$out/r.gfn" --json >"$out/cold1-$i.json" 2>/dev/null
  CUDA_DEVICE_MAX_CONNECTIONS=8 "$gl" invoke "$out/r.gfn" --json >"$out/cold8-$i.json" 2>/dev/null
done
for q in 1 8 1 8; do
  CUDA_DEVICE_MAX_CONNECTIONS=$q "$gl" invoke "$out/r.gfn" --iterations 200 --json >>"$out/hot$q.jsonl" 2>/dev/null
done
python3 - "$out" "$runs" <<'PY'
import glob, json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def load(pattern):
    r = []
    for f in sorted(glob.glob(f"{out}/{pattern}")):
        for line in open(f):
            try:
                r.append(json.loads(line))
            except Exception:
                pass
    return r
for q in (1, 8):
    cold = load(f"cold{q}-*.json")
    fr = sorted(x.get("first_result_s", 0) for x in cold)
    init = sorted(x.get("init_s", 0) or 0 for x in cold)
    hot = load(f"hot{q}.jsonl")
    hk = next((k for k in ("hot_ms_median", "ms_median", "median_ms") if hot and k in hot[0]), None)
    print(f"connections {q}: cold first result median {statistics.median(fr) if fr else -1:.3f} s {['%.3f' % v for v in fr]}, "
          f"driver start median {statistics.median(init) if init else -1:.3f} s; "
          f"hot {[h.get(hk) for h in hot] if hk else [sorted(h.keys()) for h in hot[:1]]} ms; "
          f"mismatches {[x.get('mismatches') for x in cold + hot]}")
PY
