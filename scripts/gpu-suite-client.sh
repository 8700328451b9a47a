#!/usr/bin/env bash
# Client mode on the device machine (issue 19): `gpuless run --remote` runs a program whose
# process cannot reach the NVIDIA driver — a mount namespace where libcuda, libnvidia-ml and
# /dev/nvidia* are hidden — against a `gpuless serve` on this machine's GPU (loopback TCP).
#
#   scripts/gpu-suite-client.sh BIN_DIR SUITE_BIN OUT_DIR
#
# SUITE_BIN holds the suite's programs (testdata/cuda/suite/build.sh). CLIENT_PROGRAMS and
# CLIENT_TORCH_ROWS choose the CUDA programs and PyTorch workloads (default: all), CLIENT_LOOP=0
# leaves out the driver_loop timing. For each program: the
# native output, the same command in the namespace without gpuless (must see no GPU), and
# with `gpuless run --remote` (must print what the native run printed); the client's counts
# (--json) go to OUT_DIR/NAME.stats.json. Prints one `row|NAME|PASS or FAIL|detail` line each.
set -uo pipefail
bin=$(cd "$1" && pwd); sb=$(cd "$2" && pwd); out=$3
mkdir -p "$out"
gl="$bin/gpuless"

"$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache" >"$out/serve.out" 2>"$out/serve.log" &
srv=$!
for _ in $(seq 100); do grep -q "tcp=" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o "tcp=[^ ]*" "$out/serve.out" | cut -d= -f2)
if [ -z "$addr" ]; then echo "row|client: server start|FAIL|$(tail -3 "$out/serve.log")"; exit 0; fi

# What the namespace hides: every libcuda / libnvidia-ml the loader knows, and the device nodes.
hide=$(ldconfig -p | awk '/libcuda\.so|libnvidia-ml\.so/ {print $NF}' | xargs -r readlink -f | sort -u)
hidden() { # runs "$@" in a mount namespace without the driver
  unshare -m bash -c '
    for f in '"$(echo $hide)"' /dev/nvidia*; do
      if [ -d "$f" ]; then mount -t tmpfs none "$f"; elif [ -e "$f" ]; then mount --bind /dev/null "$f"; fi
    done
    exec "$@"' hidden "$@"
}

run_one() { # NAME CMD...
  local name=$1; shift
  local t0 t1 t2 t3
  t0=$(date +%s.%N)
  "$@" >"$out/$name.native.txt" 2>"$out/$name.native.err"; local rn=$?
  t1=$(date +%s.%N)
  hidden "$@" >"$out/$name.nogpu.txt" 2>"$out/$name.nogpu.err"; local rh=$?
  t2=$(date +%s.%N)
  hidden "$gl" run --remote "$addr" --json -- "$@" >"$out/$name.remote.txt" 2>"$out/$name.remote.err"; local rr=$?
  t3=$(date +%s.%N)
  local stats; stats=$(grep -m1 '^{' "$out/$name.remote.err")
  echo "$stats" >"$out/$name.stats.json"
  local detail="native rc=$rn $(awk "BEGIN{printf \"%.3f\", $t1-$t0}") s; without gpuless in the namespace rc=$rh ($(head -c 160 "$out/$name.nogpu.err" | tr '\n' ' ')); remote rc=$rr $(awk "BEGIN{printf \"%.3f\", $t3-$t2}") s; stats $stats"
  if [ $rn -eq 0 ] && [ $rh -ne 0 ] && [ $rr -eq 0 ] && cmp -s "$out/$name.native.txt" "$out/$name.remote.txt"; then
    echo "row|client: $name runs remotely with the driver hidden, output identical to native|PASS|$detail"
  else
    echo "row|client: $name runs remotely with the driver hidden, output identical to native|FAIL|$detail; remote stderr: $(grep -v '^{' "$out/$name.remote.err" | head -c 600 | tr '\n' ' '); native: $(head -c 200 "$out/$name.native.txt" | tr '\n' ' '); remote: $(head -c 200 "$out/$name.remote.txt" | tr '\n' ' ')"
  fi
}

# The namespace itself: can it hide the driver here?
if ! unshare -m true 2>/dev/null; then
  echo "row|client: mount namespace|FAIL|unshare -m is not permitted on this machine"
else
  run_one driver_api "$sb/driver_api" "$sb/driver_kernels.cubin"
fi
# Hot loop timing: native and remote runs of driver_loop interleaved (two each), per-iteration
# median; with the flusher (segments sent while the program issues more) and without it.
if [ -x "$sb/driver_loop" ] && [ "${CLIENT_LOOP:-1}" != 0 ] && unshare -m true 2>/dev/null; then
  it=${CLIENT_LOOP_ITERS:-300}
  loop_cmd=("$sb/driver_loop" "$sb/driver_kernels.cubin" "$it" 64)
  med() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["median_us"])' "$1" 2>/dev/null || echo 0; }
  nat=(); rem=(); nof=(); same=yes
  for round in 1 2; do
    "${loop_cmd[@]}" >"$out/loop.native.txt" 2>"$out/loop.native.err"; nat+=("$(med "$out/loop.native.err")")
    hidden "$gl" run --remote "$addr" --json -- "${loop_cmd[@]}" >"$out/loop.remote.txt" 2>"$out/loop.remote.err"
    rem+=("$(grep -m1 median_us "$out/loop.remote.err" > "$out/loop.r.json"; med "$out/loop.r.json")")
    cmp -s "$out/loop.native.txt" "$out/loop.remote.txt" || same=no
    GPULESS_REMOTE_FLUSH_US=0 hidden "$gl" run --remote "$addr" -- "${loop_cmd[@]}" >"$out/loop.noflush.txt" 2>"$out/loop.noflush.err"
    nof+=("$(grep -m1 median_us "$out/loop.noflush.err" > "$out/loop.n.json"; med "$out/loop.n.json")")
    cmp -s "$out/loop.native.txt" "$out/loop.noflush.txt" || same=no
  done
  for b in 8 16 32; do  # pipelined segments of B records (GPULESS_REMOTE_BATCH), informative
    GPULESS_REMOTE_BATCH=$b hidden "$gl" run --remote "$addr" -- "${loop_cmd[@]}" >"$out/loop.b$b.txt" 2>"$out/loop.b$b.err"
    grep -m1 median_us "$out/loop.b$b.err" > "$out/loop.b$b.json"
    echo "row|client: driver_loop with segments of $b records (GPULESS_REMOTE_BATCH)|INFO|median $(med "$out/loop.b$b.json") us per iteration (native ${nat[*]} us); output identical: $(cmp -s "$out/loop.native.txt" "$out/loop.b$b.txt" && echo yes || echo no)"
  done
  stats=$(grep -m1 '"round_trips"' "$out/loop.remote.err")
  verdict=$(python3 - "${nat[*]}" "${rem[*]}" "${nof[*]}" "$same" <<'PY'
import sys, statistics
nat, rem, nof = ([float(x) for x in a.split()] for a in sys.argv[1:4])
same = sys.argv[4]
n, r, f = statistics.median(nat), statistics.median(rem), statistics.median(nof)
ok = same == "yes" and n > 0 and r > 0
print(("PASS" if ok else "FAIL") + f"|native {', '.join(f'{x:.1f}' for x in nat)} us; remote {', '.join(f'{x:.1f}' for x in rem)} us (x{r/n:.3f} of native, +{r-n:.1f} us); without the flusher {', '.join(f'{x:.1f}' for x in nof)} us (x{f/n:.3f}); outputs identical: {same}")
PY
  )
  split=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); w=max(1,s.get("waits",1)); c=s.get("call_us",0); wt=s.get("wait_us",0); print(f"per wait: {c/w:.1f} us in driver calls, {wt/w:.1f} us of it waiting for the answer, {(c-wt)/w:.1f} us in the client; the executor executes {s.get(chr(115)+"erver_exec_us",0)/w:.1f} us")' "$stats" 2>/dev/null)
  echo "row|client: driver_loop hot iteration (16 KB up, 64 launches, 16 KB down) remote vs native, median|${verdict%%|*}|${verdict#*|}; $split; last stats $stats"
fi
# The private export tables cudart needs: what the real driver answers natively and what the
# client answers must be the same, except the integrity check's hash over this process's
# addresses (its inputs differ) — cudart's own check of that hash is the streams rows below.
if [ -x "$sb/tables" ] && unshare -m true 2>/dev/null; then
  "$sb/tables" >"$out/tables.native.txt" 2>"$out/tables.native.err"; rn=$?
  hidden "$gl" run --remote "$addr" -- "$sb/tables" >"$out/tables.remote.txt" 2>"$out/tables.remote.err"; rr=$?
  keep() { grep -v -e '^integrity 13002' -e '^inputs' "$1"; }
  if [ $rn -eq 0 ] && [ $rr -eq 0 ] && diff <(keep "$out/tables.native.txt") <(keep "$out/tables.remote.txt") >"$out/tables.diff"; then
    echo "row|client: private export tables answer as the driver does (sizes, primary context, context storage, checks, hooks, fixed integrity answers)|PASS|$(keep "$out/tables.remote.txt" | wc -l) lines identical"
  else
    echo "row|client: private export tables answer as the driver does (sizes, primary context, context storage, checks, hooks, fixed integrity answers)|FAIL|native rc=$rn remote rc=$rr; diff: $(head -c 600 "$out/tables.diff" | tr '\n' ' '); stderr: $(head -c 300 "$out/tables.remote.err" | tr '\n' ' ')"
  fi
fi
# CUDA-runtime programs (static and shared cudart): the runtime initializes on the client's
# private export tables (integrity check included) and runs remotely like the driver-API one.
if unshare -m true 2>/dev/null; then
  for p in ${CLIENT_PROGRAMS:-streams streams_static globals ptr_struct texture graph graph_query event_d2h ptr_attrs}; do
    [ -x "$sb/$p" ] && run_one "$p" "$sb/$p"
  done
  # cuBLAS needs tables client mode does not implement yet (21318c60): it must fail with a
  # line naming the table, never with a wrong result.
  if [ -x "$sb/cublas_batched" ]; then
    hidden "$gl" run --remote "$addr" -- "$sb/cublas_batched" >"$out/cublas.remote.txt" 2>"$out/cublas.remote.err"
    rc=$?
    "$sb/cublas_batched" >"$out/cublas.native.txt" 2>/dev/null
    if [ $rc -eq 0 ] && cmp -s "$out/cublas.native.txt" "$out/cublas.remote.txt"; then v=PASS; d="output identical to native"
    elif [ $rc -ne 0 ] && grep -q "private table" "$out/cublas.remote.err"; then v=PASS; d="fails, naming the table"
    else v=FAIL; d="rc=$rc, output differs or no line names what is missing"; fi
    echo "row|client: cublas_batched identical to native, or fails naming the private table it lacks|$v|$d; rc=$rc; $(grep -v '^{' "$out/cublas.remote.err" | head -c 400 | tr '\n' ' ')"
  fi
fi
# PyTorch through the client: tiny (cuDNN convolutions, a cuBLAS linear layer), ResNet-50 and
# BERT-base (testdata/workloads, ../shared's resnet50.py where the suite copied it). Each runs
# natively, then remotely; the output checksum must equal the native run's; hot latency, first
# result and the client's counts (round trips, waits by call) are reported with the ratios.
torch_row() { # NAME SCRIPT
  local name=$1 script=$2
  HOT_ITERS=${CLIENT_HOT_ITERS:-30} python3 "$script" >"$out/$name.native.txt" 2>"$out/$name.native.err"; local rn=$?
  HOT_ITERS=${CLIENT_HOT_ITERS:-30} GPULESS_REMOTE_WAITS="$out/$name.waits.jsonl" hidden "$gl" run --remote "$addr" --json -- python3 "$script" >"$out/$name.remote.txt" 2>"$out/$name.remote.err"; local rr=$?
  grep -m1 '^{' "$out/$name.remote.err" >"$out/$name.stats.json"
  local verdict
  verdict=$(python3 - "$out/$name.native.txt" "$out/$name.remote.txt" "$out/$name.stats.json" "$rn" "$rr" "$out/$name.waits.jsonl" "${CLIENT_HOT_ITERS:-30}" <<'PY'
import json, statistics, sys
def last(f):
    try:
        return json.loads(open(f).read().strip().splitlines()[-1])
    except Exception:
        return None
a, b, s = last(sys.argv[1]), last(sys.argv[2]), last(sys.argv[3]) or {}
rn, rr = int(sys.argv[4]), int(sys.argv[5])
same = a is not None and b is not None and a["checksum"] == b["checksum"]
ok = rn == 0 and rr == 0 and same
d = f"native rc={rn}, remote rc={rr}, same checksum: {'yes' if same else 'no'}"
if a and b and a.get("hot_ms_median") and b.get("hot_ms_median"):
    d += (f"; hot {b['hot_ms_median']:.3f} ms vs native {a['hot_ms_median']:.3f} ms (x{b['hot_ms_median']/a['hot_ms_median']:.3f})"
          f"; first result {b['first_result_s']:.2f} s vs {a['first_result_s']:.2f} s (x{b['first_result_s']/a['first_result_s']:.3f})")
if s:
    calls, rt = s.get("calls", 0), s.get("round_trips", 0)
    d += (f"; {calls} calls, {s.get('local', 0)} answered locally, {rt} round trips ({100*rt/max(calls,1):.2f}% of calls), "
          f"{s.get('bytes_up', 0)} B up, {s.get('bytes_down', 0)} B down; waits by call {json.dumps(s.get('waits_by_call', {}), sort_keys=True)}")
# The hot loop's waits (GPULESS_REMOTE_WAITS): the last synchronizations, each after one
# inference: how long the program ran between answers, how long it waited, what the executor ran.
try:
    w = [json.loads(l) for l in open(sys.argv[6])]
    hot = [x for x in w if x["call"] == "cuCtxSynchronize"][-int(sys.argv[7]):]
    if hot:
        med = lambda k: statistics.median(x[k] for x in hot)
        ups = sorted(y["bytes_up"] - x["bytes_up"] for x, y in zip(hot, hot[1:])) or [0]
        d += f"; {ups[len(ups)//2]} B up per hot inference (median)"
        d += (f"; hot syncs (median of {len(hot)}): program {med('between_us'):.0f} us between answers, "
              f"{med('sent_since'):.0f} records ({med('records'):.0f} with the wait), waited {med('wait_us'):.0f} us, "
              f"executor ran {med('exec_us'):.0f} us")
except Exception as e:
    d += f"; no wait log ({e})"
print(("PASS" if ok else "FAIL") + "|" + d)
PY
)
  echo "row|client: PyTorch $name runs remotely, output identical to native|${verdict%%|*}|${verdict#*|}; stderr: $(grep -v '^{' "$out/$name.remote.err" | grep -v '^ ' | tail -n 4 | head -c 600 | tr '\n' ' ')"
}
# The same workload again, native then remote: the server's cache now holds what the first run
# uploaded (weights, code). Bytes sent before the first result (the wait log's count at the hot
# loop's first synchronization) against LIMIT (bytes; empty: no target), and a second hot pair.
second_run() { # NAME SCRIPT LIMIT
  local name=$1 script=$2 limit=${3:-}
  HOT_ITERS=${CLIENT_HOT_ITERS:-30} python3 "$script" >"$out/$name.native2.txt" 2>"$out/$name.native2.err"
  HOT_ITERS=${CLIENT_HOT_ITERS:-30} GPULESS_REMOTE_WAITS="$out/$name.waits2.jsonl" hidden "$gl" run --remote "$addr" --json -- python3 "$script" >"$out/$name.remote2.txt" 2>"$out/$name.remote2.err"
  local v
  v=$(python3 - "$out/$name.native2.txt" "$out/$name.remote2.txt" "$out/$name.waits2.jsonl" "$limit" <<'PY'
import json, sys
def last(f):
    try:
        return json.loads(open(f).read().strip().splitlines()[-1])
    except Exception:
        return None
a, b = last(sys.argv[1]), last(sys.argv[2])
try:
    w = [json.loads(l) for l in open(sys.argv[3])]
except Exception:
    w = []
first = next((x for x in w if x["call"] == "cuCtxSynchronize"), None)
up = first["bytes_up"] if first else None
limit = int(sys.argv[4]) if sys.argv[4] else None
same = a is not None and b is not None and a["checksum"] == b["checksum"]
ok = same and up is not None and (limit is None or up <= limit)
d = f"same checksum: {'yes' if same else 'no'}; {up} B sent before the first result" + (f" (target <= {limit} B)" if limit else "")
if a and b and a.get("hot_ms_median") and b.get("hot_ms_median"):
    d += (f"; hot {b['hot_ms_median']:.3f} ms vs native {a['hot_ms_median']:.3f} ms (x{b['hot_ms_median']/a['hot_ms_median']:.3f})"
          f"; first result {b['first_result_s']:.2f} s vs {a['first_result_s']:.2f} s (x{b['first_result_s']/a['first_result_s']:.3f})")
hot = [x for x in w if x["call"] == "cuCtxSynchronize"]
if len(hot) > 2:
    ups = sorted(y["bytes_up"] - x["bytes_up"] for x, y in zip(hot, hot[1:]))
    d += f"; {ups[len(ups)//2]} B up per hot inference (median)"
print(("PASS" if ok else ("FAIL" if limit else "INFO")) + "|" + d)
PY
  )
  echo "row|client: PyTorch $name second run (server cache warm)|${v%%|*}|${v#*|}"
}
# The analyzer's `gpuless` policy on a local recording of the same workload against the waits
# the client made (its first run's --json): the policy models what the client does.
policy_row() { # NAME SCRIPT
  local name=$1 script=$2
  HOT_ITERS=${CLIENT_HOT_ITERS:-30} GPULESS_RECORDER="$bin/libgpuless_recorder.so" "$gl" record -o "$out/$name.gl" -- python3 "$script" >/dev/null 2>"$out/$name.record.err"
  local v
  v=$("$gl" analyze --json "$out/$name.gl" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = next(x for x in d["sync"] if x["policy"] == "gpuless")
s = json.loads(open(sys.argv[1]).read())
waits, pred, pct, calls, trips = s["waits"], p["syncs"], p["sync_percent"], p["calls"], s["round_trips"]
reasons = json.dumps(p["reasons"], sort_keys=True)
ok = abs(waits - pred) <= max(5, 0.05 * pred)
verdict, within = ("PASS", "yes") if ok else ("FAIL", "no")
print(f"{verdict}|policy gpuless: {pred} synchronizations ({pct:.2f}% of {calls} calls; {reasons}); "
      f"the client waited {waits} times (round trips with blob queries: {trips}); within 5%: {within}")
' "$out/$name.stats.json" 2>&1)
  [[ $v == PASS* || $v == FAIL* ]] || v="FAIL|$(echo "$v" | tail -c 300)"
  echo "row|client: PyTorch $name round trips, the analyzer's gpuless policy vs the client|${v%%|*}|${v#*|}"
  rm -f "$out/$name.gl"
}
if [ -n "${CLIENT_TORCH:-1}" ] && python3 -c 'import torch' 2>/dev/null && unshare -m true 2>/dev/null; then
  wl=$(cd "$(dirname "$0")/../testdata/workloads" && pwd)
  # train: forward, backward, optimizer; compiled: torch.compile (Triton kernels); fft: cuFFT.
  for t in ${CLIENT_TORCH_ROWS:-tiny resnet50 bert train compiled fft}; do
    case $t in
      resnet50)
        for r in "$(dirname "$0")/../.device/workloads/resnet50.py" "$(dirname "$0")/../../shared/workloads/resnet50.py"; do
          if [ -f "$r" ]; then torch_row resnet50 "$r"; second_run resnet50 "$r" $((2 << 20)); policy_row resnet50 "$r"; break; fi
        done ;;
      bert) python3 -c 'import transformers' 2>/dev/null && torch_row bert "$wl/bert.py" && second_run bert "$wl/bert.py" ;;
      *) torch_row "$t" "$wl/$t.py" ;;
    esac
  done
fi
# NVML through the client (libnvidia-ml answered by the client library): what a tool and PyTorch
# ask, the same lines as natively.
if [ -n "${CLIENT_TORCH:-1}" ] && python3 -c 'import torch' 2>/dev/null && unshare -m true 2>/dev/null; then
  nv="$(dirname "$0")/../testdata/workloads/nvml_query.py"
  python3 "$nv" >"$out/nvml.native.txt" 2>"$out/nvml.native.err"; rn=$?
  hidden "$gl" run --remote "$addr" -- python3 "$nv" >"$out/nvml.remote.txt" 2>"$out/nvml.remote.err"; rr=$?
  if [ $rn -eq 0 ] && [ $rr -eq 0 ] && cmp -s "$out/nvml.native.txt" "$out/nvml.remote.txt"; then
    echo "row|client: NVML answers (count, name, UUID, bus id, capability, memory, torch) as natively|PASS|$(tr '\n' ' ' <"$out/nvml.remote.txt" | head -c 400)"
  else
    echo "row|client: NVML answers (count, name, UUID, bus id, capability, memory, torch) as natively|FAIL|native rc=$rn remote rc=$rr; $(diff "$out/nvml.native.txt" "$out/nvml.remote.txt" | head -c 300 | tr '\n' ' '); $(tail -c 300 "$out/nvml.remote.err" | tr '\n' ' ')"
  fi
fi
# A server that cannot be reached: the program sees no device, one gpuless: line says why.
hidden "$gl" run --remote 127.0.0.1:1 -- "$sb/driver_api" "$sb/driver_kernels.cubin" >/dev/null 2>"$out/unreachable.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "^gpuless: cannot use the GPU server at 127.0.0.1:1" "$out/unreachable.err"; then
  echo "row|client: server unreachable -> no device, one line says why|PASS|rc=$rc; $(head -c 300 "$out/unreachable.err" | tr '\n' ' ')"
else
  echo "row|client: server unreachable -> no device, one line says why|FAIL|rc=$rc; $(head -c 300 "$out/unreachable.err" | tr '\n' ' ')"
fi
kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null
