#!/usr/bin/env bash
# What managed memory costs through the client (issue 35), on the device machine:
# testdata/cuda/suite/managed_cost (a managed array of MiB mebibytes; each step a kernel adds to
# a 1% slice, the host checks 16 values of it and writes one) natively and through
# `gpuless run --remote` with the driver hidden, against a `gpuless serve` on this GPU.
#
#   scripts/gpu-suite-managed-cost.sh BIN_DIR SUITE_BIN OUT_DIR [MIB] [STEPS]
#
# Prints `row|managed cost: ...|PASS or FAIL|detail` lines:
#   output      the client's output is the native one (exit status and every line);
#   bytes/step  bytes up and down per step, as a share of the array (target: at most 2% of it
#               each way); the set-up (allocation, the kernel that fills it) counts as step 0
#               and is reported apart from the steps, from a second run with 0 steps.
#   time        INFO: wall seconds native and through the client.
set -uo pipefail
bin=$(cd "${1:?usage: BIN_DIR SUITE_BIN OUT_DIR [MIB] [STEPS]}" && pwd)
sb=$(cd "${2:?usage}" && pwd)
out=${3:?usage}
mkdir -p "$out"; out=$(cd "$out" && pwd)
mib=${4:-1024}; steps=${5:-5}
gl="$bin/gpuless"
export GPULESS_RECORDER="$bin/libgpuless_recorder.so"
"$gl" serve --listen 127.0.0.1:0 --cache-dir "$out/cache" >"$out/serve.out" 2>"$out/serve.log" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "tcp=" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o "tcp=[^ ]*" "$out/serve.out" | cut -d= -f2)
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"
t0=$(date +%s.%N)
"$sb/managed_cost" "$mib" "$steps" >"$out/native.txt" 2>&1; rn=$?
t1=$(date +%s.%N)
hidden timeout 300 "$gl" run --remote "$addr" --json -- "$sb/managed_cost" "$mib" "$steps" >"$out/remote.txt" 2>"$out/remote.err"; rr=$?
t2=$(date +%s.%N)
hidden timeout 300 "$gl" run --remote "$addr" --json -- "$sb/managed_cost" "$mib" 0 >"$out/setup.txt" 2>"$out/setup.err"
if [ "$rn" = 0 ] && [ "$rr" = 0 ] && cmp -s "$out/native.txt" "$out/remote.txt"; then v=PASS; else v=FAIL; fi
echo "row|managed cost: managed_cost $mib MiB, $steps steps: output through the client as native|$v|rc native=$rn remote=$rr; $(diff "$out/native.txt" "$out/remote.txt" | head -4 | tr '\n' ' '); stderr: $(grep -v '^{' "$out/remote.err" | head -3 | tr '\n' ' ')"
python3 - "$out" "$mib" "$steps" <<'PY'
import json, sys
out, mib, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def stats(f):
    for l in open(f"{out}/{f}"):
        if l.startswith("{"):
            return json.loads(l)
    return {}
a, s = stats("remote.err"), stats("setup.err")
size = mib << 20
if not a or not s or steps == 0:
    print(f"row|managed cost: bytes per step at most 2% of the array each way|FAIL|no statistics (remote {bool(a)}, set-up {bool(s)})")
else:
    up = (a.get("bytes_up", 0) - s.get("bytes_up", 0)) / steps
    down = (a.get("bytes_down", 0) - s.get("bytes_down", 0)) / steps
    ok = up <= 0.02 * size and down <= 0.02 * size
    print(f"row|managed cost: bytes per step at most 2% of the array each way|{'PASS' if ok else 'FAIL'}|"
          f"per step: {up/1e6:.2f} MB up ({100*up/size:.2f}% of {mib} MiB), {down/1e6:.2f} MB down ({100*down/size:.2f}%); "
          f"set-up: {s.get('bytes_up',0)/1e6:.2f} MB up, {s.get('bytes_down',0)/1e6:.2f} MB down; waits {a.get('waits')}")
PY
echo "row|managed cost: time|INFO|native $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s, through the client $(awk "BEGIN {printf \"%.2f\", $t2 - $t1}") s"
