#!/usr/bin/env bash
# Every GPU of a host (issue 37; docs/SERVING.md "Several GPUs"), on a machine with two or more
# GPUs (the device machine's nvidia-h100-x2):
#
#   scripts/gpu-suite-gpus.sh BIN_DIR OUT_DIR
#
# Two servers side by side, both with executors confined as by default: ONE owns GPU 0
# (`--gpus 0`, 8 warm executors), ALL owns every GPU (`--gpus all`, 4 warm executors per GPU on
# two). Prints one `row|NAME|PASS, FAIL or INFO|detail` line each:
#   gpus: discovery             the ALL server's log names every GPU nvidia-smi lists
#   gpus: placement             8 sessions at once on ALL: NVML shows executors of sessions on
#                               every GPU, 4 each (gpuless_gpu_sessions)
#   gpus: --gpu                 `gpuless run --remote --gpu 1` (driver hidden): the program's
#                               device is GPU 1 (its UUID as nvidia-smi gives it)
#   gpus: 8 replays             8 concurrent `replay --remote --iterations N` of a ResNet-50
#                               trace, aggregate throughput (the sum of the sessions' hot
#                               throughputs, 1 / hot median) on ALL against ONE, interleaved
#                               rounds, median: PASS at >= x1.9 (the batch's wall time, set-up
#                               included, beside it)
#   gpus: 8 live clients b32    8 concurrent ResNet-50 programs at batch 32 through the client
#                               (driver hidden; scripts/resnet50-batch.py, timed passes begun
#                               together), the sum of their hot throughputs (1 / hot median) on
#                               ALL against ONE, interleaved rounds, median: PASS at >= x1.9
#   gpus: 8 live clients b1     the same at batch 1 (INFO): with one session alone beside it, to
#                               show how far one GPU is from busy (8 x the lone rate bounds both)
#   gpus: device nodes          each ALL executor's view holds exactly its GPU's /dev/nvidiaN
# GPULESS_GPUS_ROUNDS (default 2) rounds; GPULESS_GPUS_ITERS (default 1500) replayed iterations;
# GPULESS_GPUS_LIVE_ITERS (default 200) live hot passes at batch 32 (1000 at batch 1).
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2
mkdir -p "$out"; out=$(cd "$out" && pwd)
gl="$bin/gpuless"
export GPULESS_RECORDER="$bin/libgpuless_recorder.so"
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
workloads=${GPULESS_WORKLOADS:-$root/../shared/workloads}
[[ -d $workloads ]] || workloads="$root/.device/workloads"
rounds=${GPULESS_GPUS_ROUNDS:-2}; iters=${GPULESS_GPUS_ITERS:-1500}; live_iters=${GPULESS_GPUS_LIVE_ITERS:-200}
n=$(nvidia-smi -L | grep -c '^GPU ')
nvidia-smi -L >"$out/gpus.txt"
if [ "$n" -lt 2 ]; then
  echo "row|gpus: discovery|INFO|one GPU on this machine: the section needs two"
  exit 0
fi

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
start() { # NAME FLAGS...
  local name=$1; shift
  "$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache-$name" "$@" \
    >"$out/$name.addr" 2>"$out/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do grep -q "tcp=" "$out/$name.addr" 2>/dev/null && break; sleep 0.1; done
}
start one --gpus 0 --pool whole=8
start all --gpus all --pool whole=4
addr() { grep -o "tcp=[^ ]*" "$out/$1.addr" | cut -d= -f2; }
metrics() { grep -o "metrics=[^ ]*" "$out/$1.addr" | cut -d= -f2; }
for s in one all; do
  for _ in $(seq 600); do [ "$(grep -c 'executor ready' "$out/$s.log")" -ge 8 ] && break; sleep 0.1; done
done
# The log without its colours.
plain() { sed 's/\x1b\[[0-9;]*m//g' "$out/$1.log"; }
listed=$(plain all | grep -c 'GPU gpu=')
if [ "$listed" -eq "$n" ] && [ "$(grep -c 'executor ready' "$out/all.log")" -ge 8 ]; then
  echo "row|gpus: discovery|PASS|$n GPUs listed by nvidia-smi, $listed in the server's log, 8 executors ready ($(plain all | grep -o 'GPU gpu=[0-9]* visible=[^ ]*' | tr '\n' ';'))"
else
  echo "row|gpus: discovery|FAIL|$n GPUs listed, $listed in the log; $(grep -c 'executor ready' "$out/all.log") executors ready; $(tail -2 "$out/all.log" | tr '\n' ' ')"
fi

# A trace of one ResNet-50 inference, recorded natively.
HOT_ITERS=0 timeout 300 "$gl" record -o "$out/r50.gl" -- python3 "$workloads/resnet50.py" >"$out/record.out" 2>"$out/record.err" \
  || echo "row|gpus: 8 replays|FAIL|record: $(tail -2 "$out/record.err" | tr '\n' ' ')"

replays() { # SERVER TAG
  local a; a=$(addr "$1"); local t0 t1 ps=()
  t0=$(date +%s.%N)
  for i in $(seq 8); do
    timeout 300 "$gl" replay --remote "$a" --iterations "$iters" --json "$out/r50.gl" \
      >"$out/rep-$2-$i.json" 2>"$out/rep-$2-$i.err" & ps+=($!)
  done
  # Mid-run, once all 8 have started: sessions per GPU as the server counts them, and the
  # GPUs' compute processes.
  local m; m=$(metrics "$1")
  for _ in $(seq 100); do
    curl -s "http://$m/metrics" | grep '^gpuless_gpu_sessions' >"$out/rep-$2.gpu_sessions"
    [ "$(awk '{s += $2} END {print s + 0}' "$out/rep-$2.gpu_sessions")" -ge 8 ] && break
    sleep 0.1
  done
  nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader >"$out/rep-$2.apps"
  wait "${ps[@]}"
  t1=$(date +%s.%N)
  echo "$t0 $t1" >"$out/rep-$2.wall"
}
lives() { # SERVER TAG BATCH SESSIONS ITERATIONS
  local a; a=$(addr "$1"); local ps=()
  # The programs' timed passes begin together, 25 s from now (start-up and uploads first).
  local at=$(( $(date +%s) + 25 ))
  for i in $(seq "$4"); do
    START_AT=$at BATCH=$3 HOT_ITERS=$5 timeout 300 bash -c '. "$0"; hidden "$1" run --remote "$2" --json -- python3 "$3"' \
      "$(dirname "$0")/hidden.sh" "$gl" "$a" "$root/scripts/resnet50-batch.py" >"$out/live-$2-$i.out" 2>"$out/live-$2-$i.err" & ps+=($!)
  done
  wait "${ps[@]}"
}
# Warm both servers' caches (the first session uploads the weights).
replays one warm-one >/dev/null; replays all warm-all >/dev/null
for r in $(seq "$rounds"); do
  replays one "one-$r"; replays all "all-$r"
done
for r in $(seq "$rounds"); do
  lives one "one-$r" 32 8 "$live_iters"; lives all "all-$r" 32 8 "$live_iters"
done
# Batch 1 (INFO, one round): a lone session, then 8 on each server.
lives all solo-b1 1 1 1000
lives one "b1-one-1" 1 8 1000; lives all "b1-all-1" 1 8 1000

# Each executor of ALL sees only its GPU's device node: one line per executor.
for pid in $(pgrep -P "${pids[1]}"); do
  echo "$(ls "/proc/$pid/root/dev" 2>/dev/null | grep -E '^nvidia[0-9]+$' | tr '\n' ' ')"
done >"$out/nodes.txt"
python3 - "$out/nodes.txt" "$n" <<'PY'
import sys
execs = [l.split() for l in open(sys.argv[1])]
seen = {x for e in execs for x in e}
ok = execs and all(len(e) == 1 for e in execs) and len(seen) == int(sys.argv[2])
print(f"row|gpus: device nodes|{'PASS' if ok else 'FAIL'}|GPU device nodes in each executor's /dev: {execs}")
PY

# --gpu 1: the program's device is GPU 1.
gpu1=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader | awk -F', ' '$1 == 1 {print $2}')
hidden "$gl" run --remote "$(addr all)" --gpu 1 --json -- python3 -c \
  'import torch; p = torch.cuda.get_device_properties(0); print(torch.cuda.device_count(), p.name, "GPU-" + str(p.uuid))' \
  >"$out/gpu1.out" 2>"$out/gpu1.err"
got=$(tail -1 "$out/gpu1.out")
if [[ $got == *"$gpu1"* ]]; then
  echo "row|gpus: --gpu|PASS|the program saw: $got (nvidia-smi GPU 1: $gpu1)"
else
  echo "row|gpus: --gpu|FAIL|the program saw: ${got:-nothing} (nvidia-smi GPU 1: $gpu1); $(tail -2 "$out/gpu1.err" | tr '\n' ' ')"
fi

python3 - "$out" "$rounds" "$iters" <<'PY'
import glob, json, statistics, sys
out, rounds, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def rep(tag):
    t0, t1 = map(float, open(f"{out}/rep-{tag}.wall").read().split())
    runs = [load(f"{out}/rep-{tag}-{i}.json") for i in range(1, 9)]
    good = [r for r in runs if r and r.get("hot") and not r.get("mismatches")]
    med = statistics.median(r["hot"]["wall_ms_median"] for r in good) if good else None
    # (sum of hot throughputs, complete sessions, hot median, throughput by the batch's wall)
    return sum(1000.0 / r["hot"]["wall_ms_median"] for r in good), len(good), med, 8 * iters / (t1 - t0)
def live(tag, n=8):
    tput, ok, late = 0.0, 0, 0.0
    for i in range(1, n + 1):
        try:
            j = json.loads([l for l in open(f"{out}/live-{tag}-{i}.out") if l.startswith("{")][-1])
            tput += 1000.0 / j["hot_ms_median"]; ok += 1; late = max(late, j.get("late_s", 0))
        except Exception:
            pass
    return tput, ok, None, late
def placement(tag):
    lines = [l.split() for l in open(f"{out}/rep-{tag}.gpu_sessions") if l.strip()]
    return {l[0].replace("gpuless_gpu_sessions", ""): int(float(l[1])) for l in lines if len(l) == 2}
res = {"replay": [], "live": []}
for r in range(1, rounds + 1):
    res["replay"].append((rep(f"one-{r}"), rep(f"all-{r}")))
    res["live"].append((live(f"one-{r}"), live(f"all-{r}")))
res["live_b1"] = [(live("b1-one-1"), live("b1-all-1"))]
res["solo_b1"] = live("solo-b1", 1)
json.dump(res, open(f"{out}/gpus.json", "w"), indent=1)
p = placement("all-1")
counts = sorted(p.values())
apps = open(f"{out}/rep-all-1.apps").read()
uuids = {l.split(", ")[1] for l in apps.splitlines() if ", " in l}
verdict = "PASS" if counts == [4, 4] and len(uuids) >= 2 else "FAIL"
print(f"row|gpus: placement|{verdict}|8 sessions at once on ALL: sessions by GPU {p}; compute processes on {len(uuids)} GPUs")
solo = res["solo_b1"][0]
b1 = res["live_b1"]
if b1 and solo:
    per = "; ".join(f"ONE {o[0]:.0f}/s ALL {a[0]:.0f}/s (x{a[0]/o[0]:.2f})" for o, a in b1 if o[0])
    one, two = (statistics.median(x[k][0] for x in b1) for k in (0, 1))
    print(f"row|gpus: 8 live clients b1|INFO|ResNet-50 batch 1: one session alone {solo:.0f}/s, 8 x that {8 * solo:.0f}/s bounds both; "
          f"ONE (8 contexts time-sliced on one GPU) reaches x{one / (8 * solo):.2f} of it, ALL (4 on each) x{two / (8 * solo):.2f}: "
          f"batch-1 sessions lose to time-slicing between contexts, not to compute: {per}")
for kind, label in (("replay", "8 replays"), ("live", "8 live clients b32")):
    ratios = [a[0] / o[0] for o, a in res[kind] if o[0] > 0]
    complete = all(o[1] == 8 and a[1] == 8 for o, a in res[kind])
    if not ratios:
        print(f"row|gpus: {label}|FAIL|no throughput measured"); continue
    m = statistics.median(ratios)
    v = "PASS" if m >= 1.9 and complete else "FAIL"
    def extra(o, a):
        if kind == "replay" and o[2] and a[2]:
            return f", hot median {o[2]:.2f} vs {a[2]:.2f} ms; by the batch's wall time {o[3]:.0f}/s vs {a[3]:.0f}/s (x{a[3]/o[3]:.2f})"
        return f", the last began its timed passes {max(o[3], a[3]):.1f} s late" if o[3] is not None else ""
    per = "; ".join(f"ONE {o[0]:.0f}/s ALL {a[0]:.0f}/s (x{a[0]/o[0]:.2f}, {o[1]}+{a[1]} of 16 complete{extra(o, a)})"
                    for o, a in res[kind])
    print(f"row|gpus: {label}|{v}|aggregate ResNet-50 passes/s (batch 1 replayed, batch 32 live), two GPUs against one, median x{m:.2f} of {len(ratios)} interleaved rounds: {per}")
PY
