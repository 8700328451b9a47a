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
# A server that cannot be reached: the program sees no device, one gpuless: line says why.
hidden "$gl" run --remote 127.0.0.1:1 -- "$sb/driver_api" "$sb/driver_kernels.cubin" >/dev/null 2>"$out/unreachable.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "^gpuless: cannot use the GPU server at 127.0.0.1:1" "$out/unreachable.err"; then
  echo "row|client: server unreachable -> no device, one line says why|PASS|rc=$rc; $(head -c 300 "$out/unreachable.err" | tr '\n' ' ')"
else
  echo "row|client: server unreachable -> no device, one line says why|FAIL|rc=$rc; $(head -c 300 "$out/unreachable.err" | tr '\n' ' ')"
fi
kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null
