#!/usr/bin/env bash
# Compatibility programs of issues 34 and 35 on the device machine: each of
# testdata/cuda/suite's driver_answers, jit_lists, stream_sync, printf, big_copy, callbacks, bad_inputs
# and ipc (issue 34) and managed_linked, mapped_mem, polling, vmm, pools, graph_mem and conditional (issue 35:
# memory models and graph node kinds) runs natively, through `gpuless run --remote` in a mount
# namespace without the driver (against a `gpuless serve` on this machine's GPU, loopback TCP),
# and under `gpuless record` (then `gpuless replay` of the trace); the outputs are compared line
# by line with the native one.
#
#   scripts/gpu-suite-compat.sh BIN_DIR SUITE_BIN OUT_DIR
#
# BIN_DIR holds gpuless and libgpuless_recorder.so; SUITE_BIN the programs built by
# testdata/cuda/suite/build.sh. COMPAT_PROGRAMS chooses the programs (default: all fifteen),
# COMPAT_RECORD=0 leaves out record and replay, COMPAT_TIMEOUT limits every run (default 120 s).
# Prints one `row|NAME|PASS or FAIL|detail` line a check:
#   compat: NAME native      the program's own checks pass natively (exit status 0)
#   compat: NAME remote      same exit status and output as native; differences in detail and
#                            in OUT_DIR/compat-NAME.diff (diff -u native remote)
#   compat: NAME recorded    the same for `gpuless record` (OUT_DIR/compat-NAME.record.diff)
#   compat: NAME replayed    `gpuless replay --json` of that trace: exit 0, no mismatch (INFO
#                            with why for a program whose replay cannot match: replay_na)
#   compat: exports          names libcuda.so.1 exports that the client library does not (the
#                            debugger's cudbg* interface, left out by design, and names no
#                            CUDA 13.0 header declares are counted apart)
# Also writes OUT_DIR/driver-errors.tsv (the native driver_answers' `err CODE NAME "STRING"`
# lines: code, name, string; reference data for the client's cuGetErrorName/String),
# OUT_DIR/libcuda-exports.txt and OUT_DIR/client-exports.txt (nm -D --defined-only names of the
# driver and of BIN_DIR/libgpuless_recorder.so) and OUT_DIR/exports-missing.txt.
set -uo pipefail
bin=$(cd "${1:?usage: gpu-suite-compat.sh BIN_DIR SUITE_BIN OUT_DIR}" && pwd)
sb=$(cd "${2:?usage: gpu-suite-compat.sh BIN_DIR SUITE_BIN OUT_DIR}" && pwd)
out=${3:?usage: gpu-suite-compat.sh BIN_DIR SUITE_BIN OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
gl="$bin/gpuless"
rec="$bin/libgpuless_recorder.so"
lim=(timeout -k 5 "${COMPAT_TIMEOUT:-120}")
# Replays that cannot match by the trace's nature (INFO rows when they fail, docs/FIDELITY.md).
declare -A replay_na=(
  [polling]="its kernels wait for flags the host writes while they run; a trace holds what the host wrote at the calls, so each replayed kernel gives up after 3 s"
)
programs=${COMPAT_PROGRAMS:-driver_answers jit_lists stream_sync printf big_copy callbacks bad_inputs ipc managed_linked mapped_mem polling vmm pools graph_mem conditional}

# ---- exports: the driver's names against the client library's ------------------------------
exports() { # LIBRARY: its defined dynamic symbol names, one a line, sorted, without versions
  nm -D --defined-only "$1" 2>/dev/null | awk 'NF >= 3 {print $NF}' | sed 's/@.*//' | sort -u
}
drv=/usr/local/nvidia/lib64/libcuda.so.1
[ -e "$drv" ] || drv=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
if [ -n "$drv" ] && [ -e "$drv" ] && [ -f "$rec" ]; then
  exports "$drv" >"$out/libcuda-exports.txt"
  exports "$rec" >"$out/client-exports.txt"
  comm -23 "$out/libcuda-exports.txt" "$out/client-exports.txt" >"$out/exports-missing.txt"
  n_drv=$(wc -l <"$out/libcuda-exports.txt"); n_cli=$(wc -l <"$out/client-exports.txt")
  # Counted apart: cudbg*, the debugger's interface into the driver's own process (cuda-gdb
  # reads and writes those variables and calls those functions in the process that runs the
  # kernels), left out by design (docs/FIDELITY.md): exported from the preloaded library they
  # would shadow the driver's under cuda-gdb while recording, and in client mode no kernel runs
  # in the process; and names no CUDA 13.0 header declares (no signature to implement). The row
  # holds the client to every exported name the headers declare
  # (analyzer/src/api/cuda-13.0-driver.txt).
  listing=$(dirname "$0")/../analyzer/src/api/cuda-13.0-driver.txt
  grep -v '^#' "$listing" | cut -f1 | sort -u >"$out/header-names.txt"
  grep -v '^cudbg' "$out/exports-missing.txt" | comm -12 - "$out/header-names.txt" >"$out/exports-missing-api.txt"
  grep -v '^cudbg' "$out/exports-missing.txt" | comm -23 - "$out/header-names.txt" >"$out/exports-undeclared.txt"
  n_miss=$(wc -l <"$out/exports-missing-api.txt"); n_dbg=$(grep -c '^cudbg' "$out/exports-missing.txt")
  n_und=$(wc -l <"$out/exports-undeclared.txt")
  [ "$n_drv" -gt 0 ] && [ -s "$out/header-names.txt" ] && [ "$n_miss" -eq 0 ] && v=PASS || v=FAIL
  echo "row|compat: exports: every name libcuda.so.1 exports that a CUDA 13.0 header declares, the client library exports too|$v|$n_miss of $n_drv driver names missing; apart: $n_dbg cudbg* (the debugger's interface, by design), $n_und no header declares ($(tr '\n' ' ' <"$out/exports-undeclared.txt")) (the client exports $n_cli names; driver $(readlink -f "$drv")); first 30 missing: $(head -n 30 "$out/exports-missing-api.txt" | tr '\n' ' ')"
else
  echo "row|compat: exports: every name libcuda.so.1 exports, the client library exports too|FAIL|no libcuda.so.1 found ('${drv:-}') or no $rec"
fi

# ---- the server and the namespace without the driver (as scripts/gpu-suite-client.sh) -------
"$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache" >"$out/serve.out" 2>"$out/serve.log" &
srv=$!
for _ in $(seq 100); do grep -q "tcp=" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o "tcp=[^ ]*" "$out/serve.out" | cut -d= -f2)
[ -n "$addr" ] || echo "row|compat: server start|FAIL|$(tail -3 "$out/serve.log" | tr '\n' ' ')"

# `hidden CMD...`: CMD in a mount namespace without the driver.
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"
can_hide=yes
unshare -m true 2>/dev/null || can_hide=no

# Where two outputs differ, in one short line: how many lines, then up to three places, each as
# native 'line' / other 'line' (a missing side is <none>).
differ() { # NATIVE OTHER LABEL
  python3 - "$1" "$2" "$3" <<'PY'
import difflib, sys
def lines(p):
    try:
        return open(p, errors="replace").read().splitlines()
    except OSError:
        return []
a, b, label = lines(sys.argv[1]), lines(sys.argv[2]), sys.argv[3]
ops = [o for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if o[0] != "equal"]
if not ops:
    print(f"{len(a)} lines identical")
    sys.exit()
n = sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in ops)
cut = lambda s: (s[:90] + "...") if len(s) > 90 else s
parts = []
for _, i1, i2, j1, j2 in ops[:3]:
    x = cut(a[i1]) if i1 < i2 else "<none>"
    y = cut(b[j1]) if j1 < j2 else "<none>"
    parts.append(f"line {i1 + 1}: native '{x}' / {label} '{y}'" + (f" (+{max(i2 - i1, j2 - j1) - 1} more)" if max(i2 - i1, j2 - j1) > 1 else ""))
print(f"{n} lines differ (native {len(a)} lines, {label} {len(b)}); " + "; ".join(parts))
PY
}

# The first lines of a stderr file, for a detail.
errs() { grep -v '^{' "$1" 2>/dev/null | head -c "${2:-300}" | tr '\n' ' '; }

for p in $programs; do
  prog="$sb/$p"
  if [ ! -x "$prog" ]; then
    echo "row|compat: $p|FAIL|not built: $prog"
    continue
  fi
  # Native.
  "${lim[@]}" "$prog" >"$out/$p.native.txt" 2>"$out/$p.native.err"; rn=$?
  [ $rn -eq 0 ] && v=PASS || v=FAIL
  echo "row|compat: $p native (its own checks pass on the driver)|$v|rc=$rn; $(wc -l <"$out/$p.native.txt") lines; last: $(tail -n 1 "$out/$p.native.txt" | head -c 120); $(errs "$out/$p.native.err" 200)"
  if [ "$p" = driver_answers ]; then  # the driver's error names and strings, as reference data
    python3 - "$out/$p.native.txt" "$out/driver-errors.tsv" <<'PY'
import re, sys
rows = [m.groups() for m in (re.match(r'^err (\d+) (\S+) "(.*)"$', l) for l in open(sys.argv[1], errors="replace")) if m]
with open(sys.argv[2], "w") as f:
    f.write("code\tname\tstring\n")
    for c, n, s in rows:
        f.write(f"{c}\t{n}\t{s}\n")
PY
  fi
  # Through the client, the driver hidden.
  if [ -n "$addr" ] && [ $can_hide = yes ]; then
    hidden "${lim[@]}" "$gl" run --remote "$addr" --json -- "$prog" >"$out/$p.remote.txt" 2>"$out/$p.remote.err"; rr=$?
    grep -m1 '^{' "$out/$p.remote.err" >"$out/$p.stats.json"
    diff -u "$out/$p.native.txt" "$out/$p.remote.txt" >"$out/compat-$p.diff"
    if [ $rr -eq $rn ] && cmp -s "$out/$p.native.txt" "$out/$p.remote.txt"; then v=PASS; else v=FAIL; fi
    echo "row|compat: $p remote (gpuless run --remote, driver hidden) output identical to native|$v|rc native=$rn remote=$rr; $(differ "$out/$p.native.txt" "$out/$p.remote.txt" remote); remote stderr: $(errs "$out/$p.remote.err")"
  else
    echo "row|compat: $p remote (gpuless run --remote, driver hidden) output identical to native|FAIL|no server (${addr:-none}) or unshare -m not permitted ($can_hide)"
  fi
  # Recorded, then replayed.
  if [ "${COMPAT_RECORD:-1}" != 0 ]; then
    GPULESS_RECORDER="$rec" "${lim[@]}" "$gl" record -o "$out/$p.gl" -- "$prog" >"$out/$p.rec.txt" 2>"$out/$p.rec.err"; rc_r=$?
    diff -u "$out/$p.native.txt" "$out/$p.rec.txt" >"$out/compat-$p.record.diff"
    if [ $rc_r -eq $rn ] && cmp -s "$out/$p.native.txt" "$out/$p.rec.txt" && [ -f "$out/$p.gl" ]; then v=PASS; else v=FAIL; fi
    echo "row|compat: $p recorded (gpuless record) output identical to native|$v|rc native=$rn recorded=$rc_r; $(differ "$out/$p.native.txt" "$out/$p.rec.txt" recorded); trace $(stat -c %s "$out/$p.gl" 2>/dev/null || echo none) bytes; stderr: $(errs "$out/$p.rec.err" 200)"
    if [ -f "$out/$p.gl" ]; then
      "${lim[@]}" "$gl" replay --json "$out/$p.gl" >"$out/$p.replay.json" 2>"$out/$p.replay.err"; rp=$?
      d=$(python3 - "$out/$p.replay.json" "$rp" <<'PY'
import json, sys
rc = int(sys.argv[2])
# The report is the JSON object at the end of stdout; what the replayed kernels print
# (device printf) comes before it.
text = open(sys.argv[1], errors="replace").read()
r = None
for i in [0] + [k + 1 for k, ch in enumerate(text) if ch == "\n"]:
    if text.startswith("{", i):
        try:
            r = json.loads(text[i:])
            break
        except ValueError:
            pass
if not isinstance(r, dict):
    print(f"FAIL|replay rc={rc}, no report in its output")
    sys.exit()
m = r.get("mismatches", [])
ok = rc == 0 and not m
print(("PASS" if ok else "FAIL") + f"|replay rc={rc}; {r.get('results_verified')} results verified, "
      f"{r.get('results_unverified')} unverified, {len(m)} mismatches {json.dumps(m[:2])[:300]}")
PY
      )
      v=${d%%|*}
      # What a trace cannot carry by its nature: the row is INFO when it fails, with why.
      if [ "$v" = FAIL ] && [ -n "${replay_na[$p]:-}" ]; then v=INFO; d="$v|not applicable: ${replay_na[$p]}; ${d#*|}"; fi
      echo "row|compat: $p replayed (gpuless replay, results verified)|$v|${d#*|}; stderr: $(tail -n 2 "$out/$p.replay.err" | head -c 300 | tr '\n' ' ')"
      rm -f "$out/$p.gl"  # big_copy's trace holds gigabytes of uploads
    fi
  fi
done

if [ -n "${srv:-}" ]; then
  kill -TERM "$srv" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
fi
exit 0
