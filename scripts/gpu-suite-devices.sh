#!/usr/bin/env bash
# A session of several GPUs (issue 37; docs/SERVING.md "A session of several GPUs"), on a
# machine with two or more GPUs (the device machine's nvidia-h100-x2):
#
#   scripts/gpu-suite-devices.sh BIN_DIR SUITE_BIN_DIR OUT_DIR
#
# One `gpuless serve` owning every GPU (confined executors, as by default); each program runs
# natively, then through the client with the driver hidden (`gpuless run --remote ADDR
# --gpus 2`). Prints one `row|NAME|PASS, FAIL or INFO|detail` line each:
#   devices: multi_gpu          testdata/cuda/suite/multi_gpu.cu: the client's output and exit
#                               code equal the native run's
#   devices: --gpu 1,0          the same program on GPUs 1 and 0 in that order: its device 0 is
#                               the native run's device 1 and the other way round
#   devices: PyTorch            scripts/multi-gpu-torch.py: every stage's line equal to the
#                               native run's (tensors on each device, copies between them,
#                               streams and events across them, DataParallel, NCCL)
#   devices: more than owned    `--gpus 3` on a server of two: refused, the program sees no
#                               device and the message says why
#   devices: two servers        two more servers of one GPU each (GPU 0, GPU 1) and a port
#                               nothing listens on, as one list (`--remote A,DEAD,B`): multi_gpu's
#                               output equals the native run's but for the lines beginning with
#                               "peer" (the servers' GPUs do not reach each other), the dead
#                               endpoint skipped with a line
#   devices: two servers, PyTorch  the PyTorch program the same way: each stage's line against
#                               the native run's (INFO: which stages match; DataParallel and NCCL
#                               need memory both GPUs see while kernels run)
# SUITE_BIN_DIR holds testdata/cuda/suite/build.sh's programs.
set -uo pipefail
bin=$(cd "$1" && pwd); sb=$(cd "$2" && pwd); out=$3
mkdir -p "$out"; out=$(cd "$out" && pwd)
gl="$bin/gpuless"
export GPULESS_RECORDER="$bin/libgpuless_recorder.so"
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
n=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$n" -lt 2 ]; then
  echo "row|devices: multi_gpu|INFO|one GPU on this machine: the section needs two"
  exit 0
fi
"$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache" >"$out/serve.addr" 2>"$out/serve.log" &
spid=$!
trap 'kill $spid 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "tcp=" "$out/serve.addr" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o "tcp=[^ ]*" "$out/serve.addr" | cut -d= -f2)

compare() { # ROW NATIVE_PREFIX REMOTE_PREFIX
  local row=$1 a=$2 b=$3 ra rb
  ra=$(cat "$a.rc"); rb=$(cat "$b.rc")
  if [ "$ra" = "$rb" ] && cmp -s "$a.out" "$b.out"; then
    echo "row|$row|PASS|exit $rb, $(wc -l <"$b.out") lines as native's"
  else
    echo "row|$row|FAIL|exit $rb (native $ra); $(diff "$a.out" "$b.out" | grep '^[<>]' | head -6 | tr '\n' ';') $(grep -v '^gpuless:.*statistics' "$b.err" | tail -2 | tr '\n' ' ')"
  fi
}
run_native() { # NAME CMD...
  local name=$1; shift
  timeout 300 "$@" >"$out/$name.out" 2>"$out/$name.err"; echo $? >"$out/$name.rc"
}
run_remote() { # NAME FLAGS -- CMD...
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  hidden timeout 300 "$gl" run --remote "$addr" "${flags[@]}" -- "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
}

run_native native-mg "$sb/multi_gpu"
run_remote remote-mg --gpus 2 -- "$sb/multi_gpu"
compare "devices: multi_gpu" "$out/native-mg" "$out/remote-mg"

run_remote remote-mg-swapped --gpu 1,0 -- "$sb/multi_gpu"
n0=$(grep '^device 0:' "$out/native-mg.out" | cut -d: -f2-); n1=$(grep '^device 1:' "$out/native-mg.out" | cut -d: -f2-)
s0=$(grep '^device 0:' "$out/remote-mg-swapped.out" | cut -d: -f2-); s1=$(grep '^device 1:' "$out/remote-mg-swapped.out" | cut -d: -f2-)
if [ "$(cat "$out/remote-mg-swapped.rc")" = 0 ] && [ -n "$n0" ] && [ "$s0" = "$n1" ] && [ "$s1" = "$n0" ] && [ "$n0" != "$n1" ]; then
  echo "row|devices: --gpu 1,0|PASS|device 0 is GPU 1 ($s0), device 1 is GPU 0 ($s1)"
else
  echo "row|devices: --gpu 1,0|FAIL|exit $(cat "$out/remote-mg-swapped.rc"); device 0 [$s0] device 1 [$s1]; native [$n0] [$n1]; $(tail -2 "$out/remote-mg-swapped.err" | tr '\n' ' ')"
fi

run_native native-torch python3 "$root/scripts/multi-gpu-torch.py"
run_remote remote-torch --gpus 2 -- python3 "$root/scripts/multi-gpu-torch.py"
compare "devices: PyTorch" "$out/native-torch" "$out/remote-torch"

run_remote remote-3 --gpus 3 -- "$sb/multi_gpu"
if [ "$(cat "$out/remote-3.rc")" != 0 ] && grep -q "3 GPUs asked for" "$out/remote-3.err"; then
  echo "row|devices: more than owned|PASS|exit $(cat "$out/remote-3.rc"): $(grep -o 'cannot use the GPU server[^;]*;[^;]*' "$out/remote-3.err" | head -1)"
else
  echo "row|devices: more than owned|FAIL|exit $(cat "$out/remote-3.rc"); $(tail -2 "$out/remote-3.err" | tr '\n' ' ')"
fi

# Two servers, one GPU each, as one device list.
start_one() { # NAME GPU
  "$gl" serve --gpus "$2" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache-$1" \
    >"$out/serve-$1.addr" 2>"$out/serve-$1.log" &
  pids+=($!)
}
pids=()
start_one a 0
start_one b 1
trap 'kill $spid "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for name in a b; do
  for _ in $(seq 100); do grep -q "tcp=" "$out/serve-$name.addr" 2>/dev/null && break; sleep 0.1; done
done
a_addr=$(grep -o "tcp=[^ ]*" "$out/serve-a.addr" | cut -d= -f2)
b_addr=$(grep -o "tcp=[^ ]*" "$out/serve-b.addr" | cut -d= -f2)
list="$a_addr,127.0.0.1:1,$b_addr"
run_list() { # NAME CMD...
  local name=$1; shift
  hidden timeout 240 "$gl" run --remote "$list" --json -- "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
}
run_list two-mg "$sb/multi_gpu"
grep -v '^peer' "$out/native-mg.out" >"$out/native-mg-nopeer.out"; cp "$out/native-mg.rc" "$out/native-mg-nopeer.rc"
grep -v '^peer' "$out/two-mg.out" >"$out/two-mg-nopeer.out"; cp "$out/two-mg.rc" "$out/two-mg-nopeer.rc"
cp "$out/two-mg.err" "$out/two-mg-nopeer.err"
if grep -q "skipping the GPU server at 127.0.0.1:1" "$out/two-mg.err"; then
  compare "devices: two servers" "$out/native-mg-nopeer" "$out/two-mg-nopeer"
else
  echo "row|devices: two servers|FAIL|the dead endpoint was not skipped with a line: $(tail -2 "$out/two-mg.err" | tr '\n' ' ')"
fi
run_list two-torch python3 "$root/scripts/multi-gpu-torch.py"
same=$(grep -v '^peer' "$out/native-torch.out" | grep -Fxf - "$out/two-torch.out" | cut -d: -f1 | tr '\n' ',' )
differ=$(grep -v '^peer' "$out/native-torch.out" | grep -vFxf "$out/two-torch.out" | cut -d: -f1 | tr '\n' ',')
echo "row|devices: two servers, PyTorch|INFO|exit $(cat "$out/two-torch.rc") (native $(cat "$out/native-torch.rc")); as native: $same differ: $differ"
