#!/usr/bin/env bash
# Where a remote hot iteration's time goes (issue 18's ResNet-50 hot target, <= 1.05x local hot
# replay): ResNet-50 recorded once, then PAIRS interleaved runs of local `replay --iterations
# ITERS` and `replay --remote --iterations ITERS` against one `gpuless serve` whose executors
# write their timelines (GPULESS_EXECUTOR_TIMELINE). Prints each pair's ratio and, from the
# timelines, a hot iteration's segments: records, decode, execution and answer on the server,
# and the gap from one answer to the next segment's arrival (the client and the socket). Needs a
# GPU.
#
#   [POOL=whole=2] [SERVE_FLAGS="--cached-execution on"] scripts/server-hot-probe.sh BIN_DIR WORKLOADS_DIR OUT_DIR [PAIRS] [ITERS]
set -uo pipefail
bin=$(cd "${1:?usage: server-hot-probe.sh BIN_DIR WORKLOADS_DIR OUT_DIR [PAIRS] [ITERS]}" && pwd)
workloads=$(cd "${2:?}" && pwd); out=${3:?}; pairs=${4:-5}; iters=${5:-200}
mkdir -p "$out/tl"
gl=$bin/gpuless
export GPULESS_RECORDER=$bin/libgpuless_recorder.so
HOT_ITERS=0 "$gl" record -o "$out/r.gl" -- python3 "$workloads/resnet50.py" >"$out/rec.out" 2>"$out/rec.err" \
  || { tail -3 "$out/rec.err"; exit 1; }
GPULESS_EXECUTOR_TIMELINE=$out/tl "$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache" \
  --pool "${POOL:-whole=2}" ${SERVE_FLAGS:-} >"$out/serve.addr" 2>"$out/serve.log" &
serve_pid=$!
trap 'kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q listening "$out/serve.addr" 2>/dev/null && break; sleep 0.1; done
tcp=$(grep -o 'tcp=[^ ]*' "$out/serve.addr" | cut -d= -f2)
metrics=$(grep -o 'metrics=[^ ]*' "$out/serve.addr" | cut -d= -f2)
for _ in $(seq 150); do
  curl -s "http://$metrics/metrics" 2>/dev/null | grep -q 'gpuless_executors{kind="warm"} [1-9]' && break
  sleep 0.2
done
"$gl" replay --remote "$tcp" --json "$out/r.gl" >"$out/remote-warmup.json" 2>"$out/remote-warmup.err"
"$gl" replay --json --iterations "$iters" "$out/r.gl" >"$out/local-0.json" 2>>"$out/local.err"
for i in $(seq "$pairs"); do
  "$gl" replay --remote "$tcp" --json --iterations "$iters" "$out/r.gl" >"$out/remote-$i.json" 2>>"$out/remote.err"
  "$gl" replay --json --iterations "$iters" "$out/r.gl" >"$out/local-$i.json" 2>>"$out/local.err"
done
kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null; trap - EXIT
python3 - "$out" "$pairs" "$iters" <<'PY'
import glob, json, statistics, sys
out, pairs, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
load = lambda f: json.load(open(f))
local = [load(f"{out}/local-{i}.json")["hot"] for i in range(pairs + 1)]
remote = [load(f"{out}/remote-{i}.json") for i in range(1, pairs + 1)]
ratios = []
for i, r in enumerate(remote):
    h = r["hot"]
    l = (local[i]["wall_ms_median"] + local[i + 1]["wall_ms_median"]) / 2
    ratios.append(h["wall_ms_median"] / l)
    print(f"pair {i + 1}: remote {h['wall_ms_median']:.3f} ms (min {h['wall_ms_min']:.3f}) vs local {l:.3f} ms "
          f"(GPU {local[i]['gpu_ms_median']:.3f}): x{ratios[-1]:.3f}; {h['round_trips_per_iteration']:.1f} round trips, "
          f"{h['bytes_up_per_iteration']:.0f} B up per iteration; verified {r['results_verified']}, "
          f"mismatches {len(r['mismatches'])}; pieces {r.get('pieces')}")
print(f"median x{statistics.median(ratios):.3f}; local mins {[round(l['wall_ms_min'], 3) for l in local]}")
# The executors' timelines, one per session (in the order the sessions ran): a hot iteration
# closes with the answered segment of the next.
import os
files = sorted(glob.glob(f"{out}/tl/executor-*.jsonl"), key=os.path.getmtime)
for f in files:
    segs = [json.loads(x) for x in open(f) if x.startswith('{"segment_at_us"')]
    answered = [i for i, s in enumerate(segs) if s["answer_us"] >= 0]
    if len(answered) < iters + 1:
        print(f"{os.path.basename(f)}: {len(segs)} segments, {len(answered)} answered (not a hot session)")
        continue
    tail = answered[-iters - 1:]
    per_it = []
    for a, b in zip(tail, tail[1:]):
        its = segs[a + 1:b + 1]
        prev = segs[a]
        prev_end = prev["segment_at_us"] + prev["decode_us"] + prev["exec_us"] + prev["answer_us"]
        end = its[-1]["segment_at_us"] + its[-1]["decode_us"] + its[-1]["exec_us"] + its[-1]["answer_us"]
        per_it.append({
            "segments": len(its), "records": sum(s["records"] for s in its),
            "decode": sum(s["decode_us"] for s in its), "exec": sum(s["exec_us"] for s in its),
            "answer": sum(max(s["answer_us"], 0) for s in its), "gap": its[0]["segment_at_us"] - prev_end,
            "span": end - prev_end,
        })
    med = lambda k: statistics.median(p[k] for p in per_it)
    print(f"{os.path.basename(f)}: a hot iteration (median of {len(per_it)}): {med('segments')} segments, "
          f"{med('records')} records; decode {med('decode')} us, execution {med('exec')} us, answer {med('answer')} us; "
          f"gap from the last answer to the next segment {med('gap')} us; answer to answer {med('span')} us")
slow = {}
for f in glob.glob(f"{out}/tl/executor-*.jsonl"):
    for x in open(f):
        if x.startswith('{"slow_seq"'):
            d = json.loads(x)
            slow.setdefault(d["call"], []).append(d["us"])
print("slow records (>= 50 us):", {k: (len(v), statistics.median(v)) for k, v in sorted(slow.items(), key=lambda kv: -len(kv[1]))[:8]})
PY
