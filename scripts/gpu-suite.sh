#!/usr/bin/env bash
# The project's GPU suite: everything that must be proven on a real GPU, as ONE command on the
# device machine (see ../shared/DEVICE.md). Run from the repository root:
#
#   scripts/gpu-suite.sh [BIN_DIR]      (BIN_DIR holds release binaries; default target/release)
#
# Writes report.md and JSON files to $OUT (or ./out) and prints a summary table.
# Sections:
#   1. analyzer oracle: every kernel of the test binaries (committed, and rebuilt with this
#      machine's nvcc) and every sm_90 kernel of PyTorch's libtorch_cuda.so: layouts from the
#      cubin must equal cuKernelGetParamInfo / cuFuncGetParamInfo.
#   2. analyzer speed: `gpuless analyze --arch sm_90 --json libtorch_cuda.so` against
#      `cuobjdump -arch sm_90 -elf` on the same file, same run.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${1:-target/release}
gl="$root/$bin/gpuless"
out=${OUT:-$root/out}
mkdir -p "$out"
report="$out/report.md"
: >"$report"
pass=0; fail=0
declare -a rows
note() { echo "$*" | tee -a "$report"; }
row() { rows+=("$1|$2|$3"); if [[ $2 == PASS ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi; }

note "# gpuless GPU suite — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
note ""
note '```'
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv 2>&1 | tee -a "$report"
export PATH=/usr/local/cuda/bin:$PATH
nvcc --version 2>&1 | tail -n 2 | tee -a "$report"
note '```'
[[ -x $gl ]] || { echo "missing $gl: build release binaries and carry them" >&2; exit 2; }
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))' 2>/dev/null)

# ---- 1. analyzer oracle -----------------------------------------------------------------
fresh=$(mktemp -d)
if NVCC=$(command -v nvcc) GPULESS_TESTDATA_OUT="$fresh" bash testdata/cuda/build.sh >"$out/build.log" 2>&1; then
  row "test programs built with this machine's nvcc" PASS "$(ls "$fresh" | wc -l) binaries"
else
  row "test programs built with this machine's nvcc" FAIL "see build.log"
fi
oracle() { # label, json file, args...
  local label=$1 file=$2; shift 2
  "$gl" analyze --check-driver --no-progress "$@" >"$out/$file" 2>"$out/$file.err"
  local rc=$?
  local stats
  stats=$(python3 - "$out/$file" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{s['kernels']} kernels, {s['params']} params, {s['cubins']} cubins (skipped {s['cubins_skipped']}), "
      f"{len(s['mismatches'])} mismatches, {len(s['attribute_mismatches'])} reg/smem differences; "
      f"relocatable skipped {s['relocatable_skipped']}; smem sections {s['smem_sections']}: "
      f"=size {s['smem_equal_section']}, =size-1KB {s['smem_equal_section_minus_1k']}")
PY
  )
  [[ $rc == 0 ]] && row "$label" PASS "$stats" || row "$label" FAIL "rc=$rc ${stats:-$(tail -n 1 "$out/$file.err")}"
}
oracle "oracle: committed testdata/bin" oracle-testdata.json testdata/bin/*
oracle "oracle: testdata rebuilt here" oracle-fresh.json "$fresh"/*
if [[ -f $torch_lib ]]; then
  oracle "oracle: libtorch_cuda.so sm_90" oracle-torch.json --arch sm_90 "$torch_lib"
else
  row "oracle: libtorch_cuda.so sm_90" FAIL "torch not found"
fi

# ---- 2. analyzer speed ------------------------------------------------------------------
if [[ -f $torch_lib ]]; then
  ls -l "$torch_lib" | tee -a "$report"
  cat "$torch_lib" >/dev/null  # same page-cache state for both tools
  python3 scripts/measure.py --label cuobjdump --count KPARAM_INFO --count KPARAM_INFO_V2 \
    --count 'arch = sm_90' --count 'Function : ' --count '.nv.info.' -- \
    cuobjdump -arch sm_90 -elf "$torch_lib" >"$out/speed.jsonl"
  for i in 1 2 3; do
    python3 scripts/measure.py --label gpuless --count '"ordinal"' --count '"demangled"' -- \
      "$gl" analyze --no-progress --arch sm_90 --json "$torch_lib" >>"$out/speed.jsonl"
  done
  speed=$(python3 - "$out/speed.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
c = rows[0]; g = sorted(rows[1:], key=lambda r: r["wall_s"])[1]
ok = g["exit"] == 0 and c["exit"] == 0 and g["wall_s"] * 50 <= c["wall_s"] and g["max_rss_mb"] * 4 <= c["max_rss_mb"]
print(("PASS" if ok else "FAIL") + "|" + f"counts cuobjdump {c['counts']} gpuless {g['counts']}; " +
      f"cuobjdump {c['wall_s']} s {c['max_rss_mb']} MB ({c['count']} KPARAM records); "
      f"gpuless {g['wall_s']} s {g['max_rss_mb']} MB ({g['count']} params); "
      f"time 1/{c['wall_s'] / max(g['wall_s'], 1e-9):.0f}, memory 1/{c['max_rss_mb'] / max(g['max_rss_mb'], 1e-9):.1f}")
PY
  )
  row "speed: analyze libtorch_cuda.so vs cuobjdump" "${speed%%|*}" "${speed#*|}"
fi

# ---- summary ------------------------------------------------------------------------------
note ""
note "| check | result | details |"
note "|---|---|---|"
for r in "${rows[@]}"; do IFS='|' read -r a b c <<<"$r"; note "| $a | $b | $c |"; done
note ""
note "$pass passed, $fail failed"
[[ $fail == 0 ]]
