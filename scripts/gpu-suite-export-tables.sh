#!/usr/bin/env bash
# GPU suite, export-table section (issue 19's first step, issue 21's torch.fft): programs are
# recorded with GPULESS_EXPORT_TABLES=count — every code slot of every private table the
# driver hands out counted in place — and `gpuless analyze` lists which tables and slots they
# called. Rows: the output must stay identical to the native run's (PASS/FAIL); the slots
# called are INFO. torch.fft's trace is also replayed (cuFFT loads kernels through a table).
#
#   scripts/gpu-suite-export-tables.sh BIN_DIR SUITE_BIN OUT_DIR
#
# BIN_DIR holds gpuless and libgpuless_recorder.so; SUITE_BIN the programs built by
# testdata/cuda/suite/build.sh. Prints `SUITE-ROW label|PASS-or-FAIL-or-INFO|details` lines.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:?usage: gpu-suite-export-tables.sh BIN_DIR SUITE_BIN OUT_DIR}" && pwd)
suite_bin=$(cd "${2:?}" && pwd)
out=${3:?}
mkdir -p "$out"
gl=$bin/gpuless
export GPULESS_RECORDER=$bin/libgpuless_recorder.so
lim=(timeout -k 5 "${GPULESS_CHECK_TIMEOUT:-300}")
wl=$root/testdata/workloads
shared=${GPULESS_WORKLOADS:-$root/../shared/workloads}
[[ -d $shared ]] || shared=$root/.device/workloads
row() { echo "SUITE-ROW $1|$2|$3"; }

same_output() { # name, output file: whether it matches the native run's (torch: its checksum)
  if [[ $1 == torch_* ]]; then
    python3 -c 'import json,sys; a,b=(json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:]); sys.exit(a["checksum"]!=b["checksum"])' \
      "$out/$1.native.out" "$2" 2>/dev/null
  else
    cmp -s "$out/$1.native.out" "$2"
  fi
}

check() { # name, command...
  local name=$1; shift
  HOT_ITERS=2 "${lim[@]}" "$@" >"$out/$name.native.out" 2>"$out/$name.native.err"; local rc_n=$?
  HOT_ITERS=2 GPULESS_EXPORT_TABLES=count "${lim[@]}" "$gl" record -o "$out/$name.gl" -- "$@" \
    >"$out/$name.rec.out" 2>"$out/$name.rec.err"; local rc_r=$?
  local same=no
  same_output "$name" "$out/$name.rec.out" && same=yes
  if [[ $rc_n == 0 && $rc_r == 0 && $same == yes ]]; then
    row "export tables: $name recorded with every table slot counted, output identical" PASS "$(tail -n 1 "$out/$name.rec.out" | cut -c1-120)"
  else
    row "export tables: $name recorded with every table slot counted, output identical" FAIL \
      "rc native=$rc_n recorded=$rc_r same=$same; $(tail -n 2 "$out/$name.rec.err" | tr '\n' ' ')"
  fi
  [[ -f $out/$name.gl ]] || return
  "$gl" analyze --json --no-progress "$out/$name.gl" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)["stats"]
by = {}
for uuid, slot, n in s.get("export_table_slots", []):
    by.setdefault(uuid, []).append(f"{slot}x{n}")
print("; ".join(u + ": " + " ".join(v) for u, v in sorted(by.items())) or "no table slot called")
' >"$out/$name.slots" 2>&1
  row "export tables: $name, table slots called (slot x calls)" INFO "$(cat "$out/$name.slots")"
}

for p in streams streams_static cublas_batched graph; do
  [[ -x $suite_bin/$p ]] && check "$p" "$suite_bin/$p"
done
check torch_tiny python3 "$wl/tiny.py"
[[ -f $shared/resnet50.py ]] && check torch_resnet50 python3 "$shared/resnet50.py"
check torch_fft python3 "$wl/fft.py"
if [[ -f $out/torch_fft.gl ]]; then
  "${lim[@]}" "$gl" replay --json "$out/torch_fft.gl" >"$out/torch_fft.replay.json" 2>"$out/torch_fft.replay.err"; rc=$?
  detail=$(python3 - "$out/torch_fft.replay.json" "$rc" <<'PY' 2>&1 | tail -n 1
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL|rc={sys.argv[2]}, no report ({e})")
    sys.exit()
ok = int(sys.argv[2]) == 0 and not r["mismatches"] and r["results_verified"] > 0
print(("PASS" if ok else "FAIL") + f"|rc={sys.argv[2]}; {r['launches']} launches, {r['results_verified']} results verified, "
      f"{len(r['mismatches'])} mismatches")
PY
  )
  row "export tables: torch.fft replayed (cuFFT takes its kernels through a table; found by name at recording)" \
    "${detail%%|*}" "${detail#*|} $(tail -n 1 "$out/torch_fft.replay.err" | cut -c1-300)"
fi

# Which tables can each library do without? (What client mode must implement.) Each table in
# turn is refused (GPULESS_EXPORT_TABLES=deny:PREFIX: cuGetExportTable answers
# CUDA_ERROR_NOT_SUPPORTED for it) while the program is recorded; its output is compared with
# the native run's.
deny_probe() { # name, command...
  local name=$1; shift
  local needs=() without=()
  for t in d4082055 263e8860 6bd5fb6c a094798c c693336e 42d85a81 21318c60 69a28e9f 6e163fbe; do
    HOT_ITERS=2 GPULESS_EXPORT_TABLES=deny:$t "${lim[@]}" "$gl" record -o "$out/deny-$name-$t.gl" -- "$@" \
      >"$out/deny-$name-$t.out" 2>"$out/deny-$name-$t.err"; local rc=$?
    local same=no
    same_output "$name" "$out/deny-$name-$t.out" && same=yes
    local asked=no
    grep -q "export table $t" "$out/deny-$name-$t.err" && asked=yes
    if [[ $asked == no ]]; then :
    elif [[ $rc == 0 && $same == yes ]]; then without+=("$t")
    else needs+=("$t(rc=$rc: $(grep -v '^gpuless: export table' "$out/deny-$name-$t.err" | tail -n 1 | cut -c1-80))")
    fi
    rm -f "$out/deny-$name-$t.gl"
  done
  row "export tables: $name without each table it asks for" INFO "works without: ${without[*]:-none}; needs: ${needs[*]:-none}"
}
# About two minutes: only with EXPORT_DENY_PROBE=1 (measured 2026-11-24, docs/BENCHMARKS.md).
if [[ ${EXPORT_DENY_PROBE:-0} == 1 ]]; then
  for p in streams cublas_batched; do
    [[ -x $suite_bin/$p && -f $out/$p.native.out ]] && deny_probe "$p" "$suite_bin/$p"
  done
  [[ -f $out/torch_tiny.native.out ]] && deny_probe torch_tiny python3 "$wl/tiny.py"
fi
