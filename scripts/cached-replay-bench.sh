#!/usr/bin/env bash
# Cached-trace execution where the executor, not the program, is the bottleneck: a recording
# streamed by `gpuless replay --remote` (records arrive in bulk) to four servers on this GPU —
# cached execution off, on with `--cached-hold busy`, on with `always`, and off with warm
# constants (`kept`: `--program-keep-alive`, the trace's uploads resident from its last session) —
# in the order off, busy, always, kept, kept, always, busy, off after one warm-up replay each
# (blobs cached). Prints one JSON line per replay (mode, replay_s, total_s, pieces) and a summary
# line of medians and ratios to `off`.
#
#   scripts/cached-replay-bench.sh BIN_DIR TRACE [OUT_DIR]
set -uo pipefail
gl=$(cd "$1" && pwd)/gpuless; trace=$2; out=${3:-$(mktemp -d)}
mkdir -p "$out"
declare -A addr pid
for m in off busy always kept; do
  flags=(--cached-execution off)
  [ "$m" = busy ] || [ "$m" = always ] && flags=(--cached-execution on --cached-hold "$m")
  [ "$m" = kept ] && flags=(--cached-execution off --program-keep-alive 300)
  "$gl" serve --listen 127.0.0.1:0 --cache-dir "$out/cache-$m" "${flags[@]}" >"$out/serve-$m.out" 2>"$out/serve-$m.log" &
  pid[$m]=$!
done
for m in off busy always kept; do
  for _ in $(seq 100); do grep -q "tcp=" "$out/serve-$m.out" 2>/dev/null && break; sleep 0.1; done
  addr[$m]=$(grep -o "tcp=[^ ]*" "$out/serve-$m.out" | cut -d= -f2)
  "$gl" replay --remote "${addr[$m]}" --json "$trace" >"$out/warm-$m.json" 2>"$out/warm-$m.err"
done
: >"$out/runs.jsonl"
for m in off busy always kept kept always busy off; do
  "$gl" replay --remote "${addr[$m]}" --json "$trace" >"$out/run.json" 2>>"$out/runs.err"
  python3 - "$m" "$out/run.json" <<'PY' >>"$out/runs.jsonl"
import json, sys
try:
    v = json.load(open(sys.argv[2]))
except Exception as e:
    v = {"error": str(e)}
print(json.dumps({"mode": sys.argv[1], "replay_s": v.get("replay_s"), "total_s": v.get("total_s"),
                  "mismatches": len(v.get("mismatches") or []), "verified": v.get("results_verified"),
                  "pieces": v.get("pieces")}))
PY
done
cat "$out/runs.jsonl"
python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {m: statistics.median([r["replay_s"] for r in rows if r["mode"] == m and r["replay_s"]] or [0]) for m in ("off", "busy", "always", "kept")}
ok = all(r["mismatches"] == 0 and r["verified"] for r in rows)
print(json.dumps({"summary": "replay --remote, median replay_s", **{m: round(v, 4) for m, v in med.items()},
                  "busy/off": round(med["busy"] / med["off"], 3) if med["off"] else None,
                  "always/off": round(med["always"] / med["off"], 3) if med["off"] else None,
                  "kept/off": round(med["kept"] / med["off"], 3) if med["off"] else None,
                  "all verified, no mismatches": ok}))
PY
kill -TERM "${pid[@]}" 2>/dev/null; wait 2>/dev/null
