#!/usr/bin/env bash
# Client mode on the device machine (issue 19): `gpuless run --remote` runs a program whose
# process cannot reach the NVIDIA driver — a mount namespace where libcuda, libnvidia-ml and
# /dev/nvidia* are hidden — against a `gpuless serve` on this machine's GPU (loopback TCP).
#
#   scripts/gpu-suite-client.sh BIN_DIR SUITE_BIN OUT_DIR
#
# SUITE_BIN holds the suite's programs (testdata/cuda/suite/build.sh). For each program: the
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
if [ -x "$sb/driver_loop" ] && unshare -m true 2>/dev/null; then
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
# A CUDA-runtime program: cudart needs the driver's private export tables, which client mode
# does not provide yet; the program must fail with a line naming what is missing.
if [ -x "$sb/streams" ] && unshare -m true 2>/dev/null; then
  hidden "$gl" run --remote "$addr" -- "$sb/streams" >"$out/streams.remote.txt" 2>"$out/streams.remote.err"
  rc=$?
  v=FAIL
  [ $rc -ne 0 ] && grep -q "cuGetExportTable is not supported in client mode" "$out/streams.remote.err" && v=PASS
  echo "row|client: a CUDA-runtime program (streams) fails with a line naming what client mode lacks|$v|rc=$rc; $(head -c 400 "$out/streams.remote.err" | tr '\n' ' ')"
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
