#!/usr/bin/env bash
# Bad input on the GPU (issue 5), called by scripts/gpu-suite.sh, or alone on the device machine:
#
#   scripts/gpu-suite-bad-input.sh BIN_DIR SUITE_BIN TRACE_DIR OUT_DIR
#
# BIN_DIR holds gpuless; SUITE_BIN the programs of testdata/cuda/suite/build.sh (with
# libblock_arena.so); TRACE_DIR the traces recorded by the suite (streams.gl, ptr_struct.gl: the
# "address range taken" checks replay those that are there). Prints one `SUITE-ROW label|PASS or
# FAIL|details` line per check; the details keep the exact messages.
#   - address range taken: the trace's arena range is mapped PROT_NONE before the replay starts
#     (LD_PRELOAD=libblock_arena.so): the replay must warn, translate, and verify — or, for
#     pointers stored in device memory, fail clearly: results that differ (exit code 3), or a
#     device fault explained by the moved allocations (exit code 2);
#   - device too small: testdata/traces/oversized.gl allocates 200 GiB: exit code 2 with the
#     bytes needed and free;
#   - code this GPU cannot run: testdata/traces/vecadd-sm100.gl holds sm_100 code only: exit
#     code 2 naming the architecture and the kernel, before anything runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gl="$root/${1:?usage: gpu-suite-bad-input.sh BIN_DIR SUITE_BIN TRACE_DIR OUT_DIR}/gpuless"
suite_bin=${2:?}
traces=${3:?}
out=${4:?}
mkdir -p "$out"
limit=()
command -v timeout >/dev/null && limit=(timeout -k 10 "${GPULESS_CHECK_TIMEOUT:-300}")
row() { echo "SUITE-ROW $1|$2|$3"; }
last() { tail -n "${2:-1}" "$1" | tr '\n' ' ' | cut -c1-600; }

# ---- address range taken ----------------------------------------------------------------
block="$suite_bin/libblock_arena.so"
for t in streams ptr_struct; do
  trace="$traces/$t.gl"
  label="bad input: arena range taken, replay $t"
  if [[ ! -f $trace || ! -f $block ]]; then row "$label" FAIL "missing $trace or $block"; continue; fi
  base=$("$gl" analyze --json --no-progress "$trace" 2>/dev/null | python3 -c 'import json, sys; print(hex(json.load(sys.stdin)["meta"]["arena_base"]))')
  GPULESS_BLOCK_AT=$base LD_PRELOAD="$block" ${limit[@]+"${limit[@]}"} "$gl" replay --json "$trace" \
    >"$out/blocked-$t.json" 2>"$out/blocked-$t.err"
  rc=$?
  res=$(python3 - "$out/blocked-$t.json" "$out/blocked-$t.err" "$rc" <<'PY' 2>&1 | tail -n 1
import json, sys
rc = int(sys.argv[3])
err = " ".join(open(sys.argv[2]).read().split())
blocked = "taken (PROT_NONE)" in err
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    # A device fault from a pointer stored in device memory must be explained, with exit code 2.
    clear = rc == 2 and "translation cannot rewrite" in err and "is taken in this process" in err
    print(("PASS" if blocked and clear else "FAIL") + f"|rc={rc}, no report; {err[-700:]}")
    sys.exit()
warned = any("is taken in this process" in w for w in r["warnings"])
ok = blocked and warned and r["allocations_translated"] > 0 and (rc == 0 or (rc == 3 and r["mismatches"]))
print(("PASS" if ok else "FAIL") + f"|rc={rc}; warning: {r['warnings']}; allocations exact {r['allocations_exact']}, "
      f"translated {r['allocations_translated']}, parameter words rewritten {r['params_translated']}; "
      f"results verified {r['results_verified']}, mismatches {len(r['mismatches'])}"
      + (f" (first: {r['mismatches'][0]})" if r["mismatches"] else ""))
PY
  )
  row "$label" "${res%%|*}" "${res#*|}"
done

# ---- device too small ---------------------------------------------------------------------
${limit[@]+"${limit[@]}"} "$gl" replay "$root/testdata/traces/oversized.gl" >"$out/oversized.out" 2>"$out/oversized.err"
rc=$?
if [[ $rc == 2 ]] && grep -q "too little free memory" "$out/oversized.err" && grep -q "214748364800" "$out/oversized.err"; then
  row "bad input: 200 GiB trace on this GPU (exit 2, needed/free bytes)" PASS "$(last "$out/oversized.err" 3)"
else
  row "bad input: 200 GiB trace on this GPU (exit 2, needed/free bytes)" FAIL "rc=$rc $(last "$out/oversized.err" 3)"
fi

# ---- code this GPU cannot run -------------------------------------------------------------
${limit[@]+"${limit[@]}"} "$gl" replay "$root/testdata/traces/vecadd-sm100.gl" >"$out/sm100.out" 2>"$out/sm100.err"
rc=$?
if [[ $rc == 2 ]] && grep -q "cannot run the trace's code" "$out/sm100.err" && grep -q "sm_100" "$out/sm100.err" \
  && grep -q "vector_add" "$out/sm100.err"; then
  row "bad input: sm_100-only trace on this GPU (exit 2, compat refusal)" PASS "$(last "$out/sm100.err" 4)"
else
  row "bad input: sm_100-only trace on this GPU (exit 2, compat refusal)" FAIL "rc=$rc $(last "$out/sm100.err" 4)"
fi
