#!/usr/bin/env bash
# GPU suite, fidelity section (issue 21): test programs of testdata/cuda/suite that probe what
# a recording must not change and what a replay must reproduce — pointer attributes of arena
# memory (ptr_attrs), reads outside allocations (oob), device-to-host results completed by
# events (event_d2h), graphs used through the node handles of queries (graph_query), managed and
# mapped host memory used by kernels (managed), copies whose direction the driver infers from
# unified addresses (memcpy_default: cudaMemcpyDefault), async 2D/3D copies into padded host
# rows (pitched). Each is run
# natively and under `gpuless record` (outputs must be identical), then replayed (every result
# verified, nothing unverifiable). And programs that end abnormally: one that crashes (crash)
# and one that leaves through _exit, also after a vfork child's _exit (quick_exit): each
# recording must end as natively with a finished trace of every launch before the end.
# And replay determinism (solver: an adaptive ODE solver in myocyte's shape, 7,800 synchronous
# copies around 3,900 launches): run natively twice, recorded, replayed five times and hot once;
# every replay must verify every result with no mismatch.
#
#   scripts/gpu-suite-fidelity.sh BIN_DIR SUITE_BIN OUT_DIR
#
# BIN_DIR holds gpuless and libgpuless_recorder.so; SUITE_BIN the programs built by
# testdata/cuda/suite/build.sh. Prints one `SUITE-ROW label|PASS-or-FAIL|details` line a check.
set -uo pipefail
bin=$(cd "${1:?usage: gpu-suite-fidelity.sh BIN_DIR SUITE_BIN OUT_DIR}" && pwd)
suite_bin=$(cd "${2:?}" && pwd)
out=${3:?}
mkdir -p "$out"
gl=$bin/gpuless
export GPULESS_RECORDER=$bin/libgpuless_recorder.so
lim=(timeout -k 5 "${GPULESS_CHECK_TIMEOUT:-120}")
row() { echo "SUITE-ROW $1|$2|$3"; }

# `oob kept` reads where the driver's allocator has nothing mapped (it faults natively): it is
# recorded (the arena keeps freed chunks mapped, so it must not fault) and replayed (the replay
# must map what the recording had), with no native run to compare with.
if [[ -x $suite_bin/oob ]]; then
  "${lim[@]}" "$gl" record -o "$out/oob_kept.gl" -- "$suite_bin/oob" kept >"$out/oob_kept.rec.out" 2>"$out/oob_kept.rec.err"; rc_r=$?
  "${lim[@]}" "$gl" replay --json "$out/oob_kept.gl" >"$out/oob_kept.replay.json" 2>"$out/oob_kept.replay.err"; rc=$?
  detail=$(python3 - "$out/oob_kept.replay.json" "$rc" "$rc_r" <<'PY' 2>&1 | tail -n 1
import json, sys
path, rc, rc_r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    r = json.load(open(path))
except Exception as e:
    print(f"FAIL|recorded rc={rc_r}, replay rc={rc}, no report ({e})")
    sys.exit()
ok = rc_r == 0 and rc == 0 and not r["mismatches"] and r["results_unverified"] == 0 and r["results_verified"] >= 4
print(("PASS" if ok else "FAIL") + f"|recorded rc={rc_r}, replay rc={rc}; {r['results_verified']} results verified, "
      f"{r['results_unverified']} unverified, {len(r['mismatches'])} mismatches {r['mismatches'][:2]}")
PY
  )
  row "fidelity: oob kept (a read before an allocation, into freed memory the arena keeps mapped) recorded and replayed" \
    "${detail%%|*}" "${detail#*|} $(tail -n 1 "$out/oob_kept.rec.err") $( [[ $rc != 0 ]] && tail -n 2 "$out/oob_kept.replay.err" | tr '\n' ' ')"
fi

# A program that ends abnormally, recorded: PROGRAM [ARG] must exit WANT_RC as natively and leave
# a finished trace holding all 32 of its launches. Prints `PASS|...` or `FAIL|...`.
abnormal_end() { # name (of the trace), program, arg ("" for none), want_rc
  local name=$1 prog=$2 arg=$3 want=$4 rc_r
  "${lim[@]}" "$gl" record -o "$out/$name.gl" -- "$prog" $arg >"$out/$name.rec.out" 2>"$out/$name.rec.err"; rc_r=$?
  "$gl" analyze --json --no-progress "$out/$name.gl" 2>/dev/null | python3 -c '
import json, sys
rc, want = int(sys.argv[1]), int(sys.argv[2])
try:
    d = json.load(sys.stdin)
except Exception as e:
    print(f"FAIL|record rc={rc}, no analysis ({e})")
    sys.exit()
fin, n = d["integrity"]["finished"], d["stats"]["kernel_launches"]
ok = fin and n == 32 and rc == want
print(("PASS" if ok else "FAIL") + f"|record rc={rc} (want {want}), trace finished: {fin}, {n} launches (want 32)")' "$rc_r" "$want"
}

# A crash: the program faults in its own host code after 25 completed and 7 queued launches;
# recorded, it must still die of SIGSEGV (gpuless record exits 128 + 11).
if [[ -x $suite_bin/crash ]]; then
  detail=$(abnormal_end crash "$suite_bin/crash" "" 139)
  row "fidelity: a crashing program (SIGSEGV after 32 launches, 7 unsynchronized) leaves a finished trace with all of them" \
    "${detail%%|*}" "${detail#*|} $(tail -n 1 "$out/crash.rec.out")"
fi

# Ends that skip atexit: _exit after 32 launches (7 unsynchronized; the program's status 5), and a
# vfork child whose failed exec calls _exit before the program's last 7 launches (status 0).
if [[ -x $suite_bin/quick_exit ]]; then
  for arg in "" vfork; do
    want=$([[ -z $arg ]] && echo 5 || echo 0)
    detail=$(abnormal_end "quick_exit$arg" "$suite_bin/quick_exit" "$arg" "$want")
    what=$([[ -z $arg ]] && echo "ends through _exit" || echo "outlives a vfork child that ends through _exit")
    row "fidelity: a program that $what leaves a finished trace of all 32 launches" \
      "${detail%%|*}" "${detail#*|}"
  done
fi

for p in ptr_attrs oob event_d2h graph_query managed memcpy_default pitched; do
  if [[ ! -x $suite_bin/$p ]]; then
    row "fidelity: $p" FAIL "not built (see the build log)"
    continue
  fi
  "${lim[@]}" "$suite_bin/$p" >"$out/$p.native.out" 2>"$out/$p.native.err"; rc_n=$?
  "${lim[@]}" "$gl" record -o "$out/$p.gl" -- "$suite_bin/$p" >"$out/$p.rec.out" 2>"$out/$p.rec.err"; rc_r=$?
  if [[ $rc_n == 0 && $rc_r == 0 ]] && cmp -s "$out/$p.native.out" "$out/$p.rec.out"; then
    row "fidelity: $p recorded, output identical to the native run" PASS "$(tail -n 1 "$out/$p.rec.out")"
  else
    row "fidelity: $p recorded, output identical to the native run" FAIL \
      "rc native=$rc_n recorded=$rc_r; $(diff "$out/$p.native.out" "$out/$p.rec.out" | grep '^[<>]' | head -n 6 | tr '\n' ' ') $(tail -n 1 "$out/$p.rec.err")"
  fi
  [[ -f $out/$p.gl ]] || continue
  "${lim[@]}" "$gl" replay --json "$out/$p.gl" >"$out/$p.replay.json" 2>"$out/$p.replay.err"; rc=$?
  detail=$(python3 - "$out/$p.replay.json" "$rc" "$p" <<'PY' 2>&1 | tail -n 1
import json, sys
path, rc, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"FAIL|rc={rc}, no report ({e})")
    sys.exit()
want = {"event_d2h": 8, "graph_query": 2, "oob": 4, "ptr_attrs": 2, "managed": 5, "memcpy_default": 3, "pitched": 2}.get(name, 1)
ok = rc == 0 and not r["mismatches"] and r["results_unverified"] == 0 and r["results_verified"] >= want
print(("PASS" if ok else "FAIL") + f"|rc={rc}; {r['results_verified']} results verified (at least {want}), "
      f"{r['results_unverified']} unverified, {len(r['mismatches'])} mismatches {r['mismatches'][:2]}; "
      f"{r['executed']}/{r['calls']} records executed; not replayed {r.get('not_replayed', {})}")
PY
  )
  row "fidelity: $p replayed, every result verified" "${detail%%|*}" "${detail#*|} $( [[ $rc != 0 ]] && tail -n 2 "$out/$p.replay.err" | tr '\n' ' ')"
done

# Replay determinism (issue 21's myocyte): the same trace replayed again and again must give the
# recorded results every time.
if [[ -x $suite_bin/solver ]]; then
  p=solver
  "${lim[@]}" "$suite_bin/$p" >"$out/$p.native.out" 2>"$out/$p.native.err"; rc_n=$?
  "${lim[@]}" "$suite_bin/$p" >"$out/$p.native2.out" 2>/dev/null
  "${lim[@]}" "$gl" record -o "$out/$p.gl" -- "$suite_bin/$p" >"$out/$p.rec.out" 2>"$out/$p.rec.err"; rc_r=$?
  if [[ $rc_n == 0 && $rc_r == 0 ]] && cmp -s "$out/$p.native.out" "$out/$p.native2.out" && cmp -s "$out/$p.native.out" "$out/$p.rec.out"; then
    row "fidelity: solver deterministic natively, recorded output identical" PASS "$(tail -n 1 "$out/$p.rec.out")"
  else
    row "fidelity: solver deterministic natively, recorded output identical" FAIL \
      "rc native=$rc_n recorded=$rc_r; $(cat "$out/$p.native.out" "$out/$p.native2.out" "$out/$p.rec.out" | tr '\n' ' ') $(tail -n 1 "$out/$p.rec.err")"
  fi
  for i in 1 2 3 4 5; do
    "${lim[@]}" "$gl" replay --json "$out/$p.gl" >"$out/$p.replay$i.json" 2>"$out/$p.replay$i.err"
    echo $? >"$out/$p.replay$i.rc"
  done
  "${lim[@]}" "$gl" replay --json --iterations 3 "$out/$p.gl" >"$out/$p.hot.json" 2>"$out/$p.hot.err"
  echo $? >"$out/$p.hot.rc"
  detail=$(python3 - "$out" <<'PY' 2>&1 | tail -n 1
import json, sys
out = sys.argv[1]
ok, parts = True, []
for name in [f"replay{i}" for i in range(1, 6)] + ["hot"]:
    rc = open(f"{out}/solver.{name}.rc").read().strip()
    try:
        r = json.load(open(f"{out}/solver.{name}.json"))
    except Exception as e:
        ok = False
        parts.append(f"{name}: rc={rc}, no report ({e})")
        continue
    g = (r.get("hot") or {}).get("graph") or {}
    bad = len(r["mismatches"]) + (r.get("hot") or {}).get("mismatches", 0) + g.get("mismatches", 0)
    good = rc == "0" and bad == 0 and r["results_unverified"] == 0 and r["results_verified"] >= 3900
    ok = ok and good
    parts.append(f"{name}: rc={rc} {r['results_verified']} verified, {bad} mismatches {r['mismatches'][:2]}")
print(("PASS" if ok else "FAIL") + "|" + "; ".join(parts))
PY
  )
  row "fidelity: solver replayed 5 times and hot, every result verified each time" "${detail%%|*}" "${detail#*|}"
else
  row "fidelity: solver" FAIL "not built (see the build log)"
fi
