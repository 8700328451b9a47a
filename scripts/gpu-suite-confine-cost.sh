#!/usr/bin/env bash
# What confinement costs (issue 37; docs/SECURITY.md): ResNet-50 batch 1 through the client,
# hot, against two servers on this GPU side by side — one with its default confinement, one with
# none (`--confine-off all --allow-root-executors`) — in CONFINE_ROUNDS (default 4) interleaved
# pairs; the ratio of the medians of each run's hot median.
#
#   scripts/gpu-suite-confine-cost.sh BIN_DIR OUT_DIR [RESNET_SCRIPT]
#
# RESNET_SCRIPT defaults to .device/workloads/resnet50.py or ../shared/workloads/resnet50.py.
# Prints `row|confine: ResNet-50 hot, confined vs unconfined server|PASS or FAIL|detail` with
# the target ≤ ×1.01.
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2
mkdir -p "$out"; out=$(cd "$out" && pwd)
gl="$bin/gpuless"
script=${3:-}
for r in .device/workloads/resnet50.py ../shared/workloads/resnet50.py; do
  [ -z "$script" ] && [ -f "$r" ] && script=$r
done
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"
name="confine: ResNet-50 hot, confined vs unconfined server"
[ -f "$script" ] || { echo "row|$name|FAIL|no resnet50.py"; exit 0; }

start() { # TAG FLAGS...
  local tag=$1; shift
  "$gl" serve --listen 127.0.0.1:0 --cache-dir "$out/cache-$tag" "$@" >"$out/serve-$tag.out" 2>"$out/serve-$tag.log" &
  echo $! >"$out/pid-$tag"
  for _ in $(seq 100); do grep -q "tcp=" "$out/serve-$tag.out" 2>/dev/null && break; sleep 0.1; done
  grep -o "tcp=[^ ]*" "$out/serve-$tag.out" | cut -d= -f2
}
confined=$(start confined)
open=$(start open --confine-off all --allow-root-executors)
trap 'kill $(cat "$out"/pid-* 2>/dev/null) 2>/dev/null' EXIT
for r in $(seq "${CONFINE_ROUNDS:-4}"); do
  for tag in open confined; do
    addr=$open; [ $tag = confined ] && addr=$confined
    HOT_ITERS=${CONFINE_HOT_ITERS:-50} hidden "$gl" run --remote "$addr" -- python3 "$script" >"$out/$tag.r$r.txt" 2>"$out/$tag.r$r.err"
  done
done
python3 - "$out" "${CONFINE_ROUNDS:-4}" "$name" <<'PY'
import json, statistics, sys
out, rounds, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def hot(tag, r):
    try:
        for line in open(f"{out}/{tag}.r{r}.txt"):
            if line.startswith("{"):
                return json.loads(line).get("hot_ms_median")
    except Exception:
        return None
pairs = [(hot("open", r), hot("confined", r)) for r in range(1, rounds + 1)]
pairs = [p for p in pairs if p[0] and p[1]]
if not pairs:
    print(f"row|{name}|FAIL|no results ({out})")
    sys.exit()
o, c = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
ratio = c / o
v = "PASS" if ratio <= 1.01 else "FAIL"
print(f"row|{name}|{v}|hot median {c:.3f} ms confined vs {o:.3f} ms unconfined (x{ratio:.3f}; pairs "
      + ", ".join(f"{b:.3f}/{a:.3f}" for a, b in pairs) + "); target <= x1.01")
PY
