#!/usr/bin/env bash
# Server checks of the GPU suite (issue 18): `gpuless serve` on this machine's GPU, clients over
# loopback TCP and a Unix socket, side by side with local replay in the same run.
#
#   scripts/gpu-suite-server.sh BIN_DIR TRACE_DIR SUITE_BIN OUT_DIR
#
# BIN_DIR holds `gpuless`; TRACE_DIR the traces the main suite recorded (NAME.gl) and its local
# replay reports (replay-NAME.json, replay-hot-resnet50.json); SUITE_BIN the suite programs
# (segment, upload, fault). Prints one `SUITE-ROW label|PASS-or-FAIL-or-INFO|details` line per
# check and writes server.json (every figure) and the server's log and metrics to OUT_DIR.
#
# Checks: every recorded trace replayed remotely and verified like its local replay; ResNet-50
# first result with the server's cache cold and warm against local replay, and bytes sent;
# ResNet-50 hot per iteration against local hot replay; a 64-launch segment with a 4 KB download
# over TCP and the Unix socket against local hot replay (what the network adds); blob upload
# throughput; four sessions on four soft partitions at once against one on the whole GPU; a
# faulting session beside healthy ones; many sessions with clients killed at random points
# (every executor gone, no GPU memory left behind); SIGTERM drains.
#
# SAFETY: read-only for MIG: soft partitions only (green contexts), no instance is created.
set -uo pipefail
bin=${1:?usage: gpu-suite-server.sh BIN_DIR TRACE_DIR SUITE_BIN OUT_DIR}
traces=${2:?}
suite_bin=${3:?}
out=${4:?}
gl="$bin/gpuless"
mkdir -p "$out"
results="$out/server.jsonl"
: >"$results"
# Every run starts with empty caches: the cold rows must be cold.
rm -rf "$out/cache" "$out/cache-resnet"
row() { echo "SUITE-ROW $1|$2|$3"; }
lim=(timeout -k 5 "${GPULESS_CHECK_TIMEOUT:-300}")

serve_pid=""
start_server() { # cache dir, log name, extra flags...
  local cache=$1 log=$2; shift 2
  rm -f "$out/serve.addr"
  GPULESS_LOG=info "$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --socket "$out/gpuless.sock" \
    --cache-dir "$cache" "$@" >"$out/serve.addr" 2>"$out/$log" &
  serve_pid=$!
  for _ in $(seq 100); do grep -q listening "$out/serve.addr" 2>/dev/null && break; sleep 0.1; done
  tcp=$(grep -o 'tcp=[^ ]*' "$out/serve.addr" | cut -d= -f2)
  metrics=$(grep -o 'metrics=[^ ]*' "$out/serve.addr" | cut -d= -f2)
  unix="unix:$out/gpuless.sock"
  # Wait for the warm executors (their CUDA context).
  for _ in $(seq 150); do
    curl -s "http://$metrics/metrics" 2>/dev/null | grep -q 'gpuless_executors{kind="warm"} [1-9]' && break
    sleep 0.2
  done
}
stop_server() {
  [[ -n $serve_pid ]] || return 0
  kill -TERM "$serve_pid" 2>/dev/null
  local i
  for i in $(seq 100); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
  wait "$serve_pid" 2>/dev/null; local rc=$?
  serve_pid=""
  return $rc
}
trap 'stop_server' EXIT
remote() { # name, address, gpuless replay arguments...
  local name=$1 addr=$2; shift 2
  "${lim[@]}" "$gl" replay --remote "$addr" --json "$@" >"$out/remote-$name.json" 2>"$out/remote-$name.err"
  echo $? >"$out/remote-$name.rc"
}
py() { python3 - "$out" "$traces" "$@"; }

# ---- correctness: every trace of the suite, remotely, verified as locally ------------------
start_server "$out/cache" serve.log --pool whole=2
for t in vecadd_static vecadd_shared driver_api cublas_batched streams streams_static globals ptr_struct \
         texture graph alloc_bench tiny bert resnet50_once; do
  [[ -f $traces/$t.gl ]] || continue
  remote "$t" "$tcp" "$traces/$t.gl"
  py "$t" <<'PY'
import json, os, sys
out, traces, t = sys.argv[1:4]
rc = int(open(f"{out}/remote-{t}.rc").read())
try:
    r = json.load(open(f"{out}/remote-{t}.json"))
except Exception:
    r = {}
local = {}
if os.path.exists(f"{traces}/replay-{t}.json"):
    try:
        local = json.load(open(f"{traces}/replay-{t}.json"))
    except Exception:
        pass
err = open(f"{out}/remote-{t}.err").read().strip().splitlines()[-1:] 
lv = local.get("results_verified")
ok = rc == 0 and r.get("results_verified", 0) > 0 and not r.get("mismatches") and (lv is None or r["results_verified"] == lv)
tr = r.get("traffic", {})
print(f"SUITE-ROW server: {t} replayed remotely|{'PASS' if ok else 'FAIL'}|rc={rc}; "
      f"{r.get('results_verified')} results verified (local replay {lv}), {len(r.get('mismatches', []))} mismatches; "
      f"{r.get('sent')}/{r.get('calls')} records sent in {r.get('segments')} segments, {r.get('launches')} launches; "
      f"{tr.get('round_trips')} round trips ({100 * tr.get('round_trips', 0) / max(r.get('calls', 1), 1):.2f}% of calls), "
      f"{tr.get('bytes_up')} B up, {tr.get('bytes_down')} B down; {r.get('queries_answered')} state queries answered "
      f"by the server ({r.get('queries_as_recorded')} with the recorded status, {len(r.get('queries_unanswered', []))} unanswered), "
      f"event timings {r.get('event_ms', [])[:4]} ms {' '.join(err) if rc else ''}")
with open(f"{out}/server.jsonl", "a") as f:
    f.write(json.dumps({"check": "remote", "trace": t, "rc": rc, "remote": r, "local_verified": lv}) + "\n")
PY
done
stop_server

# ---- ResNet-50: cold and warm cache, hot ----------------------------------------------------
if [[ -f $traces/resnet50_once.gl ]]; then
  start_server "$out/cache-resnet" serve-resnet.log --pool whole=2
  # Local first results interleaved with the remote ones: each remote run is compared with the
  # mean of the local runs just before and after it (the host's speed drifts between runs).
  locl() { "${lim[@]}" "$gl" replay --json "$traces/resnet50_once.gl" >"$out/local-resnet-$1.json" 2>>"$out/local-resnet.err"; }
  locl 0
  remote resnet_cold "$tcp" "$traces/resnet50_once.gl"
  for i in 1 2 3; do
    locl $i
    remote "resnet_warm_$i" "$tcp" "$traces/resnet50_once.gl"
  done
  locl 4
  lhot() { "${lim[@]}" "$gl" replay --json --iterations "${SERVER_HOT_ITERS:-200}" "$traces/resnet50_once.gl" \
             >"$out/local-resnet-hot-$1.json" 2>>"$out/local-resnet.err"; }
  # The server's default cached execution (`auto`) runs a replay's repeated pieces as graphs.
  # SERVER_HOT_ROUNDS rounds (default 5) of SERVER_HOT_ITERS iterations (default 200), each
  # remote run between two local ones; the figure is the median of the rounds' ratios. The
  # eager body is close to launch-bound (234 records in about 1.06 ms on the H200), and the
  # launch rate of either process moves by up to 25% from one run to the next (local GPU time
  # 1.03-1.32 ms within a minute, executors' execution 1.04-1.36 ms; scripts/server-hot-probe.sh),
  # while what the remote path adds is about 25 us (decode, answer, socket and client).
  hot_rounds=${SERVER_HOT_ROUNDS:-5}
  lhot 0
  for i in $(seq "$hot_rounds"); do
    remote "resnet_hot_$i" "$tcp" --iterations "${SERVER_HOT_ITERS:-200}" "$traces/resnet50_once.gl"
    lhot "$i"
  done
  py <<'PY'
import json, sys
out, traces = sys.argv[1:3]
load = lambda f: json.load(open(f))
import statistics
# Local hot replays between the remote ones.
import glob
rounds = len(glob.glob(f"{out}/remote-resnet_hot_*.json"))
lhots = [load(f"{out}/local-resnet-hot-{i}.json")["hot"]["wall_ms_median"] for i in range(rounds + 1)]
cold = load(f"{out}/remote-resnet_cold.json")
hots = [load(f"{out}/remote-resnet_hot_{i}.json") for i in range(1, rounds + 1)]
warms = [load(f"{out}/remote-resnet_warm_{i}.json") for i in (1, 2, 3)]
# Local first results (process start to first verified result), 10 ms resolution.
lf = [load(f"{out}/local-resnet-{i}.json")["first_result_s"] for i in range(5)]
c = cold["first_result_s"]
c_local = (lf[0] + lf[1]) / 2
w_ratio = [w["first_result_s"] / ((lf[i] + lf[i + 1]) / 2) for i, w in enumerate(warms, start=1)]
w_med = statistics.median(w_ratio)
ok_c = c <= 1.5 * c_local and not cold["mismatches"] and cold["results_verified"] > 0
ok_w = w_med <= 1.2 and all(w["traffic"]["bytes_up"] <= 1_000_000 and not w["mismatches"] and w["results_verified"] > 0
                             for w in warms)
print(f"SUITE-ROW server: ResNet-50 first result, cache cold (<= 1.5x local replay)|{'PASS' if ok_c else 'FAIL'}|"
      f"remote {c:.3f} s vs local replay {c_local:.3f} s (mean of the runs before and after; x{c / c_local:.2f}); "
      f"{cold['traffic']['blob_bytes']} blob bytes sent "
      f"({cold['traffic']['blob_misses']} misses), {cold['traffic']['bytes_up']} B up, {cold['traffic']['round_trips']} round trips")
print(f"SUITE-ROW server: ResNet-50 first result, cache warm (<= 1.2x local, <= 1 MB sent)|{'PASS' if ok_w else 'FAIL'}|"
      f"median of 3 new sessions x{w_med:.2f} (remote {', '.join('%.2f' % w['first_result_s'] for w in warms)} s; "
      f"local {', '.join('%.2f' % l for l in lf)} s; ratios {', '.join('%.2f' % r for r in w_ratio)}); "
      f"{max(w['traffic']['bytes_up'] for w in warms)} B up at most, {warms[0]['traffic']['blob_hits']} cache hits, "
      f"{max(w['traffic']['blob_bytes'] for w in warms)} blob bytes")
warm = warms[0]
ratios = [h["hot"]["wall_ms_median"] / ((lhots[i] + lhots[i + 1]) / 2) for i, h in enumerate(hots)]
ratio = statistics.median(ratios)
hot = hots[min(range(len(ratios)), key=lambda k: abs(ratios[k] - ratio))]
h = hot["hot"]
ok_h = ratio <= 1.05 and all(not x["mismatches"] and x["results_verified"] > 0 for x in hots)
print(f"SUITE-ROW server: ResNet-50 hot per iteration (<= 1.05x local hot replay)|{'PASS' if ok_h else 'FAIL'}|"
      f"median of {rounds} rounds x{ratio:.3f} (rounds {', '.join('x%.3f' % r for r in ratios)}); remote "
      f"{', '.join('%.3f' % x['hot']['wall_ms_median'] for x in hots)} ms, local eager replay "
      f"{', '.join('%.3f' % l for l in lhots)} ms; {h['round_trips_per_iteration']:.1f} round trips and "
      f"{h['bytes_up_per_iteration']:.0f} B up per iteration; pieces {hot.get('pieces')}; "
      f"{sum(x['results_verified'] for x in hots)} results verified, "
      f"{sum(len(x['mismatches']) for x in hots)} mismatches")
lhot = {"wall_ms_median": statistics.median(lhots)}
with open(f"{out}/server.jsonl", "a") as f:
    f.write(json.dumps({"check": "resnet", "local_first_s": lf, "local_hot_ms": lhot["wall_ms_median"],
                        "cold": cold, "warm": warms, "hot": hot}) + "\n")
PY
  stop_server
fi

# ---- a small segment: what the network adds ------------------------------------------------
# Cached execution off: the executor then runs the segment as local replay does, so the
# difference is the transport's (with the default, `auto`, a replay's repeated segment runs as
# graphs: 122-163 us against local eager 276-329 us on the H200).
start_server "$out/cache" serve-seg.log --pool whole=2 --cached-execution off
if [[ -x $suite_bin/segment ]]; then
  "$gl" record -o "$out/segment.gl" -- "$suite_bin/segment" 1 >"$out/segment.rec.out" 2>&1
  # Three rounds of local, TCP, Unix, then local once more: each remote run is compared with
  # the mean of the local runs just before and after it (the host's speed drifts within
  # seconds on a shared machine); the figure is the median of the three rounds.
  for i in 0 1 2 3; do
    "${lim[@]}" "$gl" replay --json --iterations 400 "$out/segment.gl" >"$out/local-segment-$i.json" 2>>"$out/local-segment.err"
    [[ $i == 3 ]] && break
    remote "segment_tcp_$i" "$tcp" --iterations 400 "$out/segment.gl"
    remote "segment_unix_$i" "$unix" --iterations 400 "$out/segment.gl"
  done
  py <<'PY'
import json, statistics, sys
out = sys.argv[1]
load = lambda f: json.load(open(f))
local = [load(f"{out}/local-segment-{i}.json")["hot"]["wall_ms_median"] for i in range(4)]
for kind, target in (("tcp", 0.050), ("unix", 0.025)):
    runs = [load(f"{out}/remote-segment_{kind}_{i}.json") for i in range(3)]
    added = [r["hot"]["wall_ms_median"] - (local[i] + local[i + 1]) / 2 for i, r in enumerate(runs)]
    med = statistics.median(added)
    ok = med <= target and all(not r["mismatches"] and r["results_verified"] > 0 for r in runs)
    print(f"SUITE-ROW server: 64-launch segment + 4 KB download over {kind} adds <= {target * 1000:.0f} us|"
          f"{'PASS' if ok else 'FAIL'}|median of 3 rounds +{med * 1000:.1f} us (rounds "
          f"{', '.join('%+.1f' % (a * 1000) for a in added)} us); remote medians "
          f"{', '.join('%.1f' % (r['hot']['wall_ms_median'] * 1000) for r in runs)} us, local hot replay "
          f"{', '.join('%.1f' % (l * 1000) for l in local)} us; {runs[0]['hot']['round_trips_per_iteration']:.1f} round trips/iteration; "
          f"{sum(r['results_verified'] for r in runs)} verified, {sum(len(r['mismatches']) for r in runs)} mismatches")
    with open(f"{out}/server.jsonl", "a") as f:
        f.write(json.dumps({"check": f"segment-{kind}", "local_ms": local, "added_ms": added, "remote": runs}) + "\n")
PY
else
  row "server: small segment" FAIL "segment not built"
fi

# ---- blob upload throughput ----------------------------------------------------------------
if [[ -x $suite_bin/upload ]]; then
  "$gl" record -o "$out/upload.gl" -- "$suite_bin/upload" 512 >"$out/upload.rec.out" 2>&1
  # Each upload into an empty cache: the blob must travel every time.
  for k in tcp shm shm_noprealloc unix_socket tcp_2 shm_2; do
    rm -rf "$out/cache/memory" "$out/cache/disk" 2>/dev/null
    case $k in
      tcp*) remote "upload_$k" "$tcp" "$out/upload.gl" ;;
      shm_noprealloc) GPULESS_SHM_PREALLOC=0 remote "upload_$k" "$unix" "$out/upload.gl" ;;
      shm*) remote "upload_$k" "$unix" "$out/upload.gl" ;;
      unix_socket) GPULESS_SHM=0 remote "upload_$k" "$unix" "$out/upload.gl" ;;
    esac
    # A new session with the blob cached: the server has it; the next upload must not.
    stop_server; start_server "$out/cache" serve-upload.log --pool whole=2
  done
  py <<'PY'
import json, sys
out = sys.argv[1]
def rate(k):
    try:
        r = json.load(open(f"{out}/remote-upload_{k}.json"))
    except Exception:
        return None, 0.0
    t = r["traffic"]
    return r, t["blob_bytes"] / max(t["blob_send_s"], 1e-9) / 1e9
rows = {k: rate(k) for k in ("tcp", "tcp_2", "shm", "shm_2", "shm_noprealloc", "unix_socket")}
# Honest same-host rate: a shared-memory upload whose trace loads straight into the memfd pays
# for it at load time, so the extra load time over the heap load of the TCP runs counts as
# part of the move: bytes / (upload time + max(0, load time - heap load time)).
# The load that counts: the records' and the wait for the blobs' bytes (read on a thread).
loaded = lambda r: r.get("load_s", 0.0) + r.get("blob_wait_s", 0.0)
heap_load = min((loaded(rows[k][0]) for k in ("tcp", "tcp_2") if rows[k][0]), default=0.0)
def effective(k):
    r, g = rows[k]
    if not r or not r["traffic"]["shm_bytes"]:
        return g
    t = r["traffic"]
    extra = max(0.0, loaded(r) - heap_load)
    return t["blob_bytes"] / max(t["blob_send_s"] + extra, 1e-9) / 1e9
def row(label, keys, target, shm):
    runs = [(rows[k][0], effective(k)) for k in keys if rows[k][0]]
    best = max((g for _, g in runs), default=0.0)
    ok = bool(runs) and best >= target and all(r["results_verified"] > 0 and not r["mismatches"] for r, _ in runs) \
        and all((r["traffic"]["shm_bytes"] > 0) == shm for r, _ in runs)
    def one(k):
        r, g = rows[k]
        if not r:
            return f"{k}: -"
        t = r["traffic"]
        extra = max(0.0, loaded(r) - heap_load)
        shm_note = (f" counting {extra:.3f} s of extra load (upload alone {g:.2f} GB/s: {t['blob_send_s'] * 1e3:.2f} ms,"
                    f" the descriptor and the ack)") if t["shm_bytes"] else ""
        return (f"{k}: {t['blob_bytes']} B at {effective(k):.2f} GB/s{shm_note} ({t['shm_bytes']} B through shared"
                f" memory; trace loaded in {loaded(r):.3f} s, whole run {r['total_s']:.3f} s)")
    detail = "; ".join(one(k) for k in keys)
    print(f"SUITE-ROW server: {label}|{'PASS' if ok else 'FAIL'}|{detail}")
row("blob upload over loopback TCP (>= 2 GB/s)", ["tcp", "tcp_2"], 2.0, False)
row("blob upload, same host, shared memory (>= 8 GB/s)", ["shm", "shm_2", "shm_noprealloc"], 8.0, True)
row("blob upload over the Unix socket without shared memory (for comparison)", ["unix_socket"], 0.0, False)
with open(f"{out}/server.jsonl", "a") as f:
    f.write(json.dumps({"check": "upload", "runs": {k: {"remote": r, "gb_per_s": g} for k, (r, g) in rows.items()}}) + "\n")
PY
  rm -f "$out/upload.gl"
fi
stop_server

# ---- TLS on the TCP listener: a remote replay over tls:// and the small segment's cost --------
if command -v openssl >/dev/null && [[ -f $traces/resnet50_once.gl ]]; then
  mkdir -p "$out/tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$out/tls/key.pem" -out "$out/tls/cert.pem" >"$out/tls/openssl.out" 2>&1
  start_server "$out/cache" serve-tls.log --pool whole=2 --tls-cert "$out/tls/cert.pem" --tls-key "$out/tls/key.pem"
  remote tls_resnet "tls://$tcp" --tls-ca "$out/tls/cert.pem" "$traces/resnet50_once.gl"
  [[ -f $out/segment.gl ]] && remote tls_segment "tls://$tcp" --tls-ca "$out/tls/cert.pem" --iterations 400 "$out/segment.gl"
  py <<'PY'
import json, sys
out = sys.argv[1]
def load(k):
    try:
        return json.load(open(f"{out}/remote-{k}.json")), int(open(f"{out}/remote-{k}.rc").read())
    except Exception:
        return {}, -1
r, rc = load("tls_resnet")
ok = rc == 0 and r.get("results_verified", 0) > 0 and not r.get("mismatches")
print(f"SUITE-ROW server: ResNet-50 replayed remotely over TLS|{'PASS' if ok else 'FAIL'}|rc={rc}; "
      f"{r.get('results_verified')} results verified, {len(r.get('mismatches', []))} mismatches; first result {r.get('first_result_s') or 0:.3f} s; "
      f"{r.get('traffic', {}).get('round_trips')} round trips")
s, src = load("tls_segment")
try:
    import statistics
    local = statistics.median(json.load(open(f"{out}/local-segment-{i}.json"))["hot"]["wall_ms_median"] for i in range(4))
    h = s["hot"]
    print(f"SUITE-ROW server: 64-launch segment + 4 KB download over TLS (for comparison)|INFO|remote {h['wall_ms_median'] * 1000:.1f} us "
          f"vs local hot replay {local * 1000:.1f} us: +{(h['wall_ms_median'] - local) * 1000:.1f} us; {s['results_verified']} verified")
except Exception as e:
    print(f"SUITE-ROW server: 64-launch segment + 4 KB download over TLS (for comparison)|INFO|no figure: {e}")
PY
  stop_server
fi

# ---- four soft partitions at once, a faulting session beside healthy ones -----------------
if [[ -f $traces/resnet50_once.gl ]]; then
  start_server "$out/cache" serve-soft.log --pool whole=1 --pool sms:32=4
  remote soft_whole "$tcp" --iterations 50 "$traces/resnet50_once.gl"
  # (Wait for these clients by pid: a bare `wait` would wait for the server too.)
  pids=()
  for i in 1 2 3 4; do remote "soft_$i" "$tcp" --mig sms:32 --iterations 50 "$traces/resnet50_once.gl" & pids+=($!); done
  wait "${pids[@]}"
  py <<'PY'
import json, sys
out = sys.argv[1]
load = lambda f: json.load(open(f))
whole = load(f"{out}/remote-soft_whole.json")
def maybe(f):
    try:
        return load(f)
    except Exception:
        return {}
parts = [maybe(f"{out}/remote-soft_{i}.json") for i in range(1, 5)]
rcs = [int(open(f"{out}/remote-soft_{i}.rc").read()) for i in range(1, 5)]
ok = all(rc == 0 for rc in rcs) and all(p.get("results_verified", 0) > 0 and not p.get("mismatches") for p in parts)
agg = sum(1000 / p["hot"]["wall_ms_median"] for p in parts) if ok else 0
per = ", ".join("%.2f" % p["hot"]["wall_ms_median"] for p in parts if p.get("hot"))
one = 1000 / whole["hot"]["wall_ms_median"]
print(f"SUITE-ROW server: four sessions on four soft partitions (sms:32) at once|{'PASS' if ok else 'FAIL'}|rc {rcs}; "
      f"per session {per} ms/iteration ({parts[0]['partition']}); "
      f"aggregate {agg:.0f} inferences/s vs one session on the whole GPU {one:.0f}/s (x{agg / one:.2f}); all verified: {ok}")
with open(f"{out}/server.jsonl", "a") as f:
    f.write(json.dumps({"check": "soft4", "whole": whole, "parts": parts, "aggregate_per_s": agg, "whole_per_s": one}) + "\n")
PY
  if [[ -x $suite_bin/fault ]]; then
    # Both runs are time-limited; the native one tells a hanging program from a hanging recording.
    timeout -k 5 30 "$suite_bin/fault" >"$out/fault.native.out" 2>&1; echo "native rc=$?" >>"$out/fault.native.out"
    timeout -k 5 60 "$gl" record -o "$out/fault.gl" -- "$suite_bin/fault" >"$out/fault.rec.out" 2>&1
    echo "record rc=$?" >>"$out/fault.rec.out"
    if [[ ! -f $out/fault.gl ]]; then
      row "server: a faulting session ends with its error, the others finish verified" FAIL \
        "no fault trace: $(tail -n 1 "$out/fault.native.out"), $(tail -n 2 "$out/fault.rec.out" | tr '\n' ' ')"
    fi
    pids=()
    remote healthy_1 "$tcp" --iterations 20 "$traces/resnet50_once.gl" & pids+=($!)
    remote fault "$tcp" "$out/fault.gl" & pids+=($!)
    remote healthy_2 "$tcp" --iterations 20 "$traces/resnet50_once.gl" & pids+=($!)
    wait "${pids[@]}"
    py <<'PY'
import json, sys
out = sys.argv[1]
rc = {k: int(open(f"{out}/remote-{k}.rc").read()) for k in ("fault", "healthy_1", "healthy_2")}
err = open(f"{out}/remote-fault.err").read()
healthy = [json.load(open(f"{out}/remote-healthy_{i}.json")) for i in (1, 2)]
ok = rc["fault"] == 2 and "ILLEGAL_ADDRESS" in err and rc["healthy_1"] == 0 and rc["healthy_2"] == 0 \
    and all(h["results_verified"] > 0 and not h["mismatches"] for h in healthy)
print(f"SUITE-ROW server: a faulting session ends with its error, the others finish verified|{'PASS' if ok else 'FAIL'}|"
      f"rc {rc}; fault client: {err.strip().splitlines()[-1] if err.strip() else '-'}; healthy verified "
      f"{[h['results_verified'] for h in healthy]}")
PY
  fi
  stop_server
fi

# ---- priority classes: a latency-critical and a best-effort session at once -----------------
if [[ -f $traces/resnet50_once.gl ]]; then
  start_server "$out/cache" serve-prio.log --pool whole=2
  pids=()
  remote prio_lc "$tcp" --iterations 50 "$traces/resnet50_once.gl" & pids+=($!)
  remote prio_be "$tcp" --best-effort --iterations 50 "$traces/resnet50_once.gl" & pids+=($!)
  wait "${pids[@]}"
  # Both again, best-effort as latency-critical: what the gate changes.
  pids=()
  remote prio_lc2 "$tcp" --iterations 50 "$traces/resnet50_once.gl" & pids+=($!)
  remote prio_same "$tcp" --iterations 50 "$traces/resnet50_once.gl" & pids+=($!)
  wait "${pids[@]}"
  curl -s "http://$metrics/metrics" >"$out/metrics-prio.txt" 2>/dev/null
  py <<'PY'
import json, re, sys
out = sys.argv[1]
try:
    lc, be, lc2, same = (json.load(open(f"{out}/remote-prio_{k}.json")) for k in ("lc", "be", "lc2", "same"))
    solo = sorted(json.load(open(f"{out}/remote-resnet_hot_{i}.json"))["hot"]["wall_ms_median"] for i in (1, 2, 3))[1]
    ok = all(r["results_verified"] > 0 and not r["mismatches"] for r in (lc, be, lc2, same))
    m = open(f"{out}/metrics-prio.txt").read()
    cnt = re.search(r"gpuless_best_effort_hold_seconds_count (\S+)", m)
    tot = re.search(r"gpuless_best_effort_hold_seconds_sum (\S+)", m)
    a, b, c, d = (r["hot"]["wall_ms_median"] for r in (lc, be, lc2, same))
    print(f"SUITE-ROW server: a latency-critical session beside a best-effort one (priority gate)|{'INFO' if ok else 'FAIL'}|"
          f"latency-critical {a:.3f} ms/iteration (x{a / solo:.2f} of alone, {solo:.3f} ms), best-effort {b:.3f} ms; "
          f"two latency-critical at once: {c:.3f} and {d:.3f} ms (x{c / solo:.2f}, x{d / solo:.2f}); "
          f"best-effort segments held {cnt.group(1) if cnt else '?'} times, {float(tot.group(1)) if tot else 0:.3f} s in all; verified: {ok}")
except Exception as e:
    print(f"SUITE-ROW server: a latency-critical session beside a best-effort one (priority gate)|FAIL|{e}")
PY
  stop_server
fi

# ---- many sessions, clients killed at random points ----------------------------------------
many_trace=$traces/vecadd_static.gl
[[ -f $many_trace ]] || many_trace=$traces/streams.gl
if [[ -f $many_trace ]]; then
  # A queue wait long enough for 64 clients at once on one GPU (executors start one CUDA
  # context after another).
  printf 'queue_timeout_s = 120.0\n' >"$out/many.toml"
  start_server "$out/cache" serve-many.log --config "$out/many.toml" --pool whole=4
  spid=$serve_pid
  python3 - "$gl" "$tcp" "$many_trace" "${SERVER_SESSIONS:-1000}" "${SERVER_PARALLEL:-64}" "${SERVER_MANY_CAP_S:-420}" <<'PY' >"$out/many.txt" 2>&1
import random, subprocess, sys, time
gl, addr, trace, total, par = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(7)
running, started, ok, killed, failed = [], 0, 0, 0, []
t0 = time.time()
while started < total or running:
    while started < total and len(running) < par:
        p = subprocess.Popen([gl, "replay", "--remote", addr, trace], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        kill_at = time.time() + rng.uniform(0, 1.5) if rng.random() < 1 / 3 else None
        running.append((p, kill_at)); started += 1
    keep = []
    for p, k in running:
        if k is not None and time.time() >= k and p.poll() is None:
            p.kill(); p.wait(); killed += 1
        elif p.poll() is not None:
            if p.returncode == 0: ok += 1
            elif k is None: failed.append(p.stderr.read().decode()[-300:])
            else: killed += 1
        else:
            keep.append((p, k))
    running = keep
    time.sleep(0.005)
    if time.time() - t0 > float(sys.argv[6]): break
print(f"{total} sessions, {par} at a time: {ok} completed, {killed} killed, {len(failed)} failed, {time.time() - t0:.1f} s")
for f in failed[:3]: print("FAILED:", f)
if ok + killed + len(failed) == total: print("ALL-ENDED")
PY
  sleep 3
  # Executors left beyond the warm pool, and GPU memory held by processes that are not executors
  # of the warm pool.
  left=$(pgrep -P "$spid" | wc -l)
  gpu_procs=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | wc -l)
  remote after_many "$tcp" "$many_trace"
  arc=$(cat "$out/remote-after_many.rc")
  summary=$(head -n 1 "$out/many.txt")
  if grep -q ' 0 failed' "$out/many.txt" && grep -q ALL-ENDED "$out/many.txt" && [[ $left -le 4 && $gpu_procs -le 4 && $arc == 0 ]] && kill -0 "$spid" 2>/dev/null; then
    res=PASS
  else
    res=FAIL
  fi
  row "server: many sessions with clients killed at random points" $res \
    "$summary; afterwards $left executor processes (warm pool 4), $gpu_procs processes holding GPU memory, a new session rc=$arc; $(grep FAILED "$out/many.txt" | head -n 1)"
  curl -s "http://$metrics/metrics" >"$out/metrics.txt" 2>/dev/null
  stop_server; src=$?
  left=$(pgrep -P "$spid" | wc -l)
  [[ $src == 0 && $left == 0 ]] && res=PASS || res=FAIL
  row "server: SIGTERM drains and ends every executor" $res "exit $src, $left executor processes left"
fi
