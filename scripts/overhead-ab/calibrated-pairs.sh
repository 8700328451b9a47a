#!/usr/bin/env bash
# Native and recorded ResNet-50 hot latency, each normalised by the speed of the CPU it ran on
# (calibrated.py), in N pairs (ABBA order); prints the median of the pair ratios, raw and
# normalised, with bootstrap 90% intervals. Device machine:
#   scripts/overhead-ab/calibrated-pairs.sh BIN_DIR [N [KEEP_DIR]]
# (BIN_DIR holds gpuless and the recorder; KEEP_DIR, when given, gets each process's JSON line,
# native-I.json and rec-I.json, for pooling runs.)
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:?usage: calibrated-pairs.sh BIN_DIR [N [KEEP_DIR]]}" && pwd); n=${2:-12}
keep=${3:-}; [[ -n $keep ]] && mkdir -p "$keep" && keep=$(cd "$keep" && pwd)
d=$(mktemp -d); trap '[[ -n $keep ]] && cp "$d"/*.json "$keep"/; rm -rf "$d"' EXIT
cd "$here"
for i in $(seq "$n"); do
  for who in $( ((i % 2)) && echo "native rec" || echo "rec native"); do
    if [[ $who == native ]]; then
      python3 calibrated.py 2>/dev/null | tail -n 1 >"$d/native-$i.json"
    else
      GPULESS_RECORDER="$bin/libgpuless_recorder.so" "$bin/gpuless" record -o "$d/t.gl" -- \
        python3 calibrated.py 2>/dev/null | tail -n 1 >"$d/rec-$i.json"
      rm -f "$d"/t.gl*
    fi
  done
done
python3 - "$d" "$n" <<'PY'
import json, random, statistics as st, sys
d, n = sys.argv[1], int(sys.argv[2])
L = lambda f: json.loads(open(f).read())
pairs = [(L(f"{d}/native-{i}.json"), L(f"{d}/rec-{i}.json")) for i in range(1, n + 1)]
rng = random.Random(1)
def show(name, key):
    r = [b[key] / a[key] for a, b in pairs]
    boot = sorted(st.median(rng.choices(r, k=len(r))) for _ in range(2000))
    print(f"{name}: x{st.median(r):.3f} (90% x{boot[100]:.3f}-x{boot[1899]:.3f}; pairs " + " ".join(f"x{v:.3f}" for v in r) + ")")
show("hot latency, recorded / native", "hot_ms_median")
show("normalised by the CPU's speed", "normalised_median")
show("the calibration loop itself", "spin_ms_median")
PY
