#!/usr/bin/env bash
# Scheduling between priority classes on one GPU (issue 36, REEF's scenario; docs/SCHEDULING.md):
# a latency-critical (RT) client — ResNet-50 batch 1, Poisson arrivals at a share of the GPU
# (testdata/workloads/rt_poisson.py) — beside best-effort (BE) clients running BERT-base and
# VGG19 inference at batch 32 and a ResNet-18 training step (be_loop.py), all through
# `gpuless run --remote` with the driver hidden, against `gpuless serve` on this GPU.
#
#   scripts/gpu-suite-sched.sh BIN_DIR OUT_DIR
#
# Runs, in order: each BE model alone (its throughput), RT alone at each share, then for each
# policy RT with all BE clients at each share, at the arrival rate RT alone had (BE started first, counted only while RT is
# measured). SCHED_UTILS (default "0.25 0.5"), SCHED_POLICIES (default "off gate preempt
# preempt:4": a policy, with `:N` a best-effort window of N kernels, with `:N:US` also a budget
# of US microseconds of predicted GPU time, `preempt:0:300` the budget alone), SCHED_BE (default
# "bert vgg19 train"), SCHED_SECONDS (RT's measured time, default 15). Prints one
# `row|NAME|PASS, FAIL or INFO|detail` line each:
#   sched: RT alone (share U)                p50/p99/p99.9 and the service time (INFO)
#   sched: RT with BE, POLICY (share U)      p50/p99 against alone; target ≤ ×1.05 (REEF < 2 %)
#                                            for the preempt policies (PASS/FAIL), INFO otherwise
#   sched: total work vs dedicated, POLICY (share U)   (RT + BE work) / RT work, where a
#                                            dedicated GPU would run only RT while it is active:
#                                            target ≥ 2 for the preempt policies
#   sched: BE throughput with RT, POLICY (share U)     each model against alone (INFO)
#   sched: preemption latency, POLICY (share U)   RT segment arrival at its executor to its first
#                                            kernel's start on the GPU, from GPU timestamps
#                                            (`serve --measure-preemption`), p50/p99/p99.9 from the
#                                            server's histogram: target p99 <= 100 us for the
#                                            preempt policies (PASS/FAIL), INFO for RT alone and
#                                            the others
# Writes OUT_DIR/sched.json (every run) and, with matplotlib, OUT_DIR/sched-cdf-U.png (RT
# latency CDF alone and under each policy).
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2
mkdir -p "$out"
gl="$bin/gpuless"
wl=$(cd "$(dirname "$0")/../testdata/workloads" && pwd)
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"
utils=${SCHED_UTILS:-0.25 0.5}
policies=${SCHED_POLICIES:-off gate preempt preempt:4}
bes=${SCHED_BE:-bert vgg19 train}
secs=${SCHED_SECONDS:-15}

if ! python3 -c 'import torch, torchvision' 2>/dev/null || ! unshare -m true 2>/dev/null; then
  echo "row|sched: REEF scenario|FAIL|needs PyTorch with torchvision and mount namespaces"
  exit 0
fi

srv=""
start_server() { # POLICY WINDOW [BUDGET_US]
  "$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache" --priority-policy "$1" \
    --best-effort-inflight "$2" --best-effort-budget-us "${3:-0}" --measure-preemption \
    >"$out/serve.out" 2>>"$out/serve.log" &
  srv=$!
  for _ in $(seq 100); do grep -q "tcp=" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
  addr=$(grep -o "tcp=[^ ]*" "$out/serve.out" | cut -d= -f2)
  metrics=$(grep -o "metrics=[^ ]*" "$out/serve.out" | cut -d= -f2)
}
scrape() { # FILE: the server's preemption histograms now
  python3 - "http://$metrics/metrics" >"$1" 2>/dev/null <<'PY' || true
import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().splitlines():
    if line.startswith("gpuless_preemption"):
        print(line)
PY
}
stop_server() { [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null; srv=""; }
trap 'stop_server; kill $(jobs -p) 2>/dev/null' EXIT
wait_for() { # FILE... (at most 180 s)
  for _ in $(seq 1800); do
    local all=1
    for f in "$@"; do [ -e "$f" ] || all=0; done
    [ "$all" = 1 ] && return 0
    sleep 0.1
  done
  return 1
}
rt() { # UTIL OUT [RATE]: with RATE, that arrival rate (RT alone's at the share)
  scrape "$2.m0"
  RT_UTIL=$1 RT_RATE=${3:-} RT_SECONDS=$secs RT_READY="$2.ready" hidden "$gl" run --remote "$addr" -- \
    python3 "$wl/rt_poisson.py" >"$2" 2>"$2.err"
  sleep 0.5 # the executor's last samples reach the server after the session's end
  scrape "$2.m1"
}
rate_of() { # FILE: the arrival rate RT alone used
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["rate_per_s"])' "$1" 2>/dev/null
}
be() { # MODEL OUT [GO STOP]: in the background
  BE_MODEL=$1 BE_SECONDS=$((secs + 240)) BE_READY="$2.ready" BE_GO="${3:-}" BE_STOP="${4:-}" \
    hidden "$gl" run --remote "$addr" --best-effort -- python3 "$wl/be_loop.py" >"$2" 2>"$2.err" &
  pids+=($!)
}

runs="$out/runs"
rm -rf "$runs"
mkdir -p "$runs"
start_server preempt 0
# Each BE model alone: its throughput over SCHED_SECONDS after its warm-up.
for m in $bes; do
  BE_MODEL=$m BE_SECONDS=$secs hidden "$gl" run --remote "$addr" --best-effort -- \
    python3 "$wl/be_loop.py" >"$runs/be-alone-$m.json" 2>"$runs/be-alone-$m.err"
done
# RT alone at each share.
for u in $utils; do rt "$u" "$runs/rt-alone-$u.json"; done
stop_server
# RT with every BE model under each policy.
for p in $policies; do
  policy=${p%%:*}
  window=0 budget=0
  if [ "$p" != "$policy" ]; then
    rest=${p#*:}
    window=${rest%%:*}
    [ "$rest" != "$window" ] && budget=${rest#*:}
  fi
  start_server "$policy" "$window" "$budget"
  for u in $utils; do
    tag="$p-$u"
    go="$runs/$tag.go"; stop="$runs/$tag.stop"
    rm -f "$go" "$stop"
    ready=(); pids=()
    for m in $bes; do
      be "$m" "$runs/be-$tag-$m.json" "$go" "$stop"
      ready+=("$runs/be-$tag-$m.json.ready")
    done
    wait_for "${ready[@]}" || echo "sched: BE clients of $tag not ready" >&2
    # BE counts from RT's measured start (its ready file) to its end.
    (wait_for "$runs/rt-$tag.json.ready" && touch "$go") &
    pids+=($!)
    rt "$u" "$runs/rt-$tag.json" "$(rate_of "$runs/rt-alone-$u.json")"
    touch "$stop"
    # Not a bare `wait`: the server is a background job too.
    wait "${pids[@]}"
  done
  stop_server
done

python3 - "$runs" "$out" "$utils" "$policies" "$bes" <<'PY'
import json, os, sys
runs, out, utils, policies, bes = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
def load(name):
    try:
        return json.loads(open(os.path.join(runs, name)).read().strip().splitlines()[-1])
    except Exception:
        return None
every = {}
be_alone = {m: load(f"be-alone-{m}.json") for m in bes}
every["be_alone"] = be_alone
for u in utils:
    a = load(f"rt-alone-{u}.json")
    every[f"rt_alone_{u}"] = a
    if not a or not a.get("count"):
        print(f"row|sched: RT alone (share {u})|FAIL|no result ({os.path.join(runs, f'rt-alone-{u}.json.err')})")
        continue
    print(f"row|sched: RT alone (share {u})|INFO|{a['count']} requests at {a['rate_per_s']}/s, service {a['service_ms']:.3f} ms; "
          f"p50 {a['p50_ms']:.3f} ms, p99 {a['p99_ms']:.3f} ms, p99.9 {a['p999_ms']:.3f} ms")
    for p in policies:
        tag = f"{p}-{u}"
        r = load(f"rt-{tag}.json")
        every[f"rt_{tag}"] = r
        target = p.startswith("preempt")
        if not r or not r.get("count"):
            print(f"row|sched: RT with BE, {p} (share {u})|FAIL|no result")
            continue
        r50, r99 = r["p50_ms"] / a["p50_ms"], r["p99_ms"] / a["p99_ms"]
        ok = r50 <= 1.05 and r99 <= 1.05
        verdict = ("PASS" if ok else "FAIL") if target else "INFO"
        print(f"row|sched: RT with BE, {p} (share {u})|{verdict}|p50 {r['p50_ms']:.3f} ms (x{r50:.3f}), p99 {r['p99_ms']:.3f} ms "
              f"(x{r99:.3f}), p99.9 {r['p999_ms']:.3f} ms; {r['count']} requests" + ("; target <= x1.05" if target else ""))
        work_rt = r["count"] * a["service_ms"]
        work_be, thr = 0.0, []
        for m in bes:
            b, b0 = load(f"be-{tag}-{m}.json"), be_alone.get(m)
            every[f"be_{tag}_{m}"] = b
            if b and b0 and b0.get("iter_ms_median"):
                work_be += b["iterations"] * b0["iter_ms_median"]
                thr.append(f"{m} {b['per_s']:.2f}/s (x{b['per_s'] / b0['per_s']:.3f} of alone)")
            else:
                thr.append(f"{m}: no result")
        ratio = (work_rt + work_be) / work_rt if work_rt else 0.0
        verdict = ("PASS" if ratio >= 2 else "FAIL") if target else "INFO"
        print(f"row|sched: total work vs dedicated, {p} (share {u})|{verdict}|x{ratio:.2f} (RT {work_rt/1e3:.2f} s of GPU work, "
              f"BE {work_be/1e3:.2f} s at their speed alone)" + ("; target >= x2" if target else ""))
        print(f"row|sched: BE throughput with RT, {p} (share {u})|INFO|" + "; ".join(thr))
def hist(path, name):
    """Buckets {le: count} and the count of histogram NAME in a scrape."""
    b, n = {}, 0
    try:
        for line in open(path):
            if line.startswith(name + "_bucket"):
                le = line.split('le="')[1].split('"')[0]
                b[float("inf") if le == "+Inf" else float(le)] = float(line.split()[-1])
            elif line.startswith(name + "_count"):
                n = float(line.split()[-1])
    except Exception:
        pass
    return b, n
def preemption(run):
    """The run's preemption latencies (the histogram's growth while it ran): p50/p99/p99.9 in
    us (interpolated in the bucket), the share within 100 us, count, clock uncertainty bound."""
    base = os.path.join(runs, run)
    b0, n0 = hist(base + ".m0", "gpuless_preemption_seconds")
    b1, n1 = hist(base + ".m1", "gpuless_preemption_seconds")
    n = n1 - n0
    if n <= 0:
        return None
    les = sorted(b1)
    cum = [b1[le] - b0.get(le, 0.0) for le in les]
    def q(p):
        want, lo, below = p * n, 0.0, 0.0
        for le, c in zip(les, cum):
            if c >= want:
                if le == float("inf"):
                    return float("inf")
                return (lo + (le - lo) * (want - below) / max(c - below, 1e-9)) * 1e6
            lo, below = le, c
        return float("inf")
    within = next((c for le, c in zip(les, cum) if abs(le - 1e-4) < 1e-12), 0.0) / n
    u0, _ = hist(base + ".m0", "gpuless_preemption_clock_uncertainty_seconds")
    u1, _ = hist(base + ".m1", "gpuless_preemption_clock_uncertainty_seconds")
    ul = sorted(u1)
    top = next((le for le in ul if u1[le] - u0.get(le, 0.0) >= u1[ul[-1]] - u0.get(ul[-1], 0.0)), None) if ul else None
    return {"p50_us": q(0.5), "p99_us": q(0.99), "p999_us": q(0.999), "within_100us": within, "count": int(n),
            "clock_uncertainty_le_us": None if top is None else top * 1e6}
for u in utils:
    for label, run, target in [("RT alone", f"rt-alone-{u}.json", False)] + [
            (p, f"rt-{p}-{u}.json", p.startswith("preempt")) for p in policies]:
        r = preemption(run)
        every[f"preemption_{run}"] = r
        name = f"sched: preemption latency, {label} (share {u})"
        if not r:
            print(f"row|{name}|{'FAIL' if target else 'INFO'}|no stamps (serve --measure-preemption; the server's log says why)")
            continue
        ok = r["within_100us"] >= 0.99
        verdict = ("PASS" if ok else "FAIL") if target else "INFO"
        print(f"row|{name}|{verdict}|p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us, p99.9 {r['p999_us']:.0f} us; "
              f"{100 * r['within_100us']:.1f} % within 100 us, {r['count']} segments; clock within "
              f"+-{r['clock_uncertainty_le_us'] or 0:.0f} us" + ("; target p99 <= 100 us" if target else ""))
json.dump(every, open(os.path.join(out, "sched.json"), "w"))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for u in utils:
        plt.figure(figsize=(6, 4))
        for label, r in [("alone", every.get(f"rt_alone_{u}"))] + [(p, every.get(f"rt_{p}-{u}")) for p in policies]:
            if r and r.get("latencies_ms"):
                s = sorted(r["latencies_ms"])
                plt.plot(s, [(i + 1) / len(s) for i in range(len(s))], label=label)
        plt.xscale("log"); plt.xlabel("RT latency (ms)"); plt.ylabel("CDF"); plt.legend(); plt.title(f"ResNet-50 b1, share {u}")
        plt.savefig(os.path.join(out, f"sched-cdf-{u}.png"), dpi=120, bbox_inches="tight")
except Exception as e:
    print(f"sched: no CDF plot ({e})", file=sys.stderr)
PY
