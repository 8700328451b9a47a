#!/usr/bin/env bash
# GPU functions (issue 20, docs/FUNCTIONS.md), called by scripts/gpu-suite.sh, or alone on the
# device machine:
#
#   scripts/gpu-suite-function.sh BIN_DIR WORKLOADS_DIR OUT_DIR
#
# BIN_DIR holds gpuless and libgpuless_recorder.so; WORKLOADS_DIR holds resnet50_fn.py (the
# suite passes testdata/workloads; where it is not there, this checkout's testdata/workloads is
# used); OUT_DIR gets every file, the big ones included (recordings, the function file, its
# damaged copies). Prints one `SUITE-ROW label|PASS, FAIL or INFO|details` line per check on
# stdout and only progress on stderr. Every command is limited to $GPULESS_CHECK_TIMEOUT seconds
# (default 300). FUNCTION_HOT_ITERS: hot iterations of step f (default 200).
#   a. native: `resnet50_fn.py once SEED DIR` for seeds 1, 2 and 3 (3 is never recorded: the
#      new input), each writing its input xSEED.bin and output ySEED.bin;
#   b. recorded: seeds 1 and 2 under `gpuless record` (a.gl, b.gl);
#   c. compiled: `gpuless compile a.gl b.gl`; `--show` must list exactly one 602112-byte input
#      and one 4000-byte output;
#   d. cold: 3 fresh processes of `gpuless invoke --json` (the recorded input, outputs verified
#      against the recording): median first result <= 0.3 s;
#   e. new input: seed 3's input through `invoke --input`, the output byte for byte native's;
#   f. hot: `invoke --iterations N` against PyTorch's own CUDA-graph replay of the model
#      (`resnet50_fn.py graph N`), two interleaved pairs (ABBA): median ratio <= 1.0; against
#      PyTorch eager (informational);
#   g. bad input, refused with exit code 2 and the problem named, nothing run: an input of the
#      wrong size, the function file cut in half, one byte of it flipped, sm_100 code;
#   h. remote (`gpuless deploy`, `gpuless invoke --remote`): a `gpuless serve` on this GPU (its
#      cache in a temporary directory, functions kept warm 300 s), resnet50.gfn deployed; a first
#      session, a new process on a warm executor that reads and sets the function up (outputs
#      verified; its first result shown); two more sessions, each a new process, served by the
#      executor that kept the function set up (median first result <= 0.3 s, prepare_s 0 on
#      both, counted warm by the server's metrics); hot with N iterations against step f's local
#      hot invocations (median ratio <= 1.10); seed 3's input, the output byte for byte step e's
#      local one (a warm executor writes each session's inputs); a wrong input size refused by
#      the server (exit 2, names 602112).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: gpu-suite-function.sh BIN_DIR WORKLOADS_DIR OUT_DIR"
bin=$(cd "${1:?$usage}" && pwd) || exit 2
wl=${2:?$usage}
out=${3:?$usage}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
gl=$bin/gpuless
[[ -f $bin/libgpuless_recorder.so ]] && export GPULESS_RECORDER=$bin/libgpuless_recorder.so
fn=$wl/resnet50_fn.py
[[ -f $fn ]] || fn=$root/testdata/workloads/resnet50_fn.py
fn=$(cd "$(dirname "$fn")" && pwd)/$(basename "$fn")
iters=${FUNCTION_HOT_ITERS:-200}
gfn=$out/resnet50.gfn
lim=()
command -v timeout >/dev/null && lim=(timeout -k 10 "${GPULESS_CHECK_TIMEOUT:-300}")
bounded() { if ((${#lim[@]})); then "${lim[@]}" "$@"; else "$@"; fi; }
# A row's details must not hold `|` (the suite splits rows on it).
row() { local d=${3//|//}; echo "SUITE-ROW $1|$2|${d//$'\n'/ }"; }
say() { echo "gpu-suite-function: $*" >&2; }
first_line() { grep -m 1 -v '^[[:space:]]*$' "$1" 2>/dev/null | cut -c1-300; }
tail_of() { tail -n "${2:-2}" "$1" 2>/dev/null | tr '\n' ' ' | cut -c1-400; }
now() { date +%s.%N; }
# Files of an earlier run in the same OUT_DIR must not pass for this one's.
# (Only files of this script's own names: OUT_DIR may hold others.)
rm -f "$out"/{a,b}.gl "$out"/{resnet50,truncated,flipped,sm100}.gfn "$out"/{y3.gfn,bad-size.result}.bin "$out/show.out" \
  "$out"/native/[xy][123].bin "$out"/rec[12]/[xy][12].bin
echo "resnet50_fn.py: $fn; gpuless: $gl" >&2
if [[ ! -f $fn || ! -x $gl ]]; then
  row "function: set-up" FAIL "missing $fn or $gl"
  exit 0
fi

# ---- a. native ----------------------------------------------------------------------------
mkdir -p "$out/native"
for s in 1 2 3; do
  say "native run, seed $s"
  bounded python3 "$fn" once "$s" "$out/native" >"$out/native-$s.out" 2>"$out/native-$s.err"
  echo $? >"$out/native-$s.rc"
done
res=$(python3 - "$out" <<'PY' 2>&1 | tail -n 1
import json, os, sys
d = sys.argv[1]
def lastjson(p):
    try:
        return json.loads([l for l in open(p).read().splitlines() if l.strip().startswith("{")][-1])
    except Exception:
        return None
ok, parts = True, []
for s in (1, 2, 3):
    rc = open(f"{d}/native-{s}.rc").read().strip()
    j = lastjson(f"{d}/native-{s}.out")
    sizes = [os.path.getsize(f) if os.path.exists(f) else None for f in (f"{d}/native/x{s}.bin", f"{d}/native/y{s}.bin")]
    good = rc == "0" and j is not None and sizes == [602112, 4000]
    ok &= good
    if j is not None:
        parts.append(f"seed {s}: first result {j['first_result_s']} s, checksum {j['checksum']:.4f}")
    else:
        parts.append(f"seed {s}: rc={rc}, no JSON line")
    if not good:
        parts[-1] += f" (x/y bytes {sizes[0]}/{sizes[1]})"
print(("PASS" if ok else "FAIL") + "|" + "; ".join(parts))
PY
)
[[ $res == *"|"* ]] || res="FAIL|$res"
[[ $res == PASS* ]] || res="$res; $(tail_of "$out/native-1.err")"
row "function: resnet50_fn.py natively, seeds 1-3 (inputs and outputs written)" "${res%%|*}" "${res#*|}"

# ---- b. recorded --------------------------------------------------------------------------
for s in 1 2; do
  name=$([[ $s == 1 ]] && echo a || echo b)
  mkdir -p "$out/rec$s"
  say "recording seed $s ($name.gl)"
  t0=$(now)
  bounded "$gl" record -o "$out/$name.gl" -- python3 "$fn" once "$s" "$out/rec$s" >"$out/rec-$s.out" 2>"$out/rec-$s.err"
  echo $? >"$out/rec-$s.rc"
  python3 -c "print(f'{$(now) - $t0:.1f}')" >"$out/rec-$s.time" 2>/dev/null
done
res=$(python3 - "$out" <<'PY' 2>&1 | tail -n 1
import filecmp, json, os, sys
d = sys.argv[1]
def lastjson(p):
    try:
        return json.loads([l for l in open(p).read().splitlines() if l.strip().startswith("{")][-1])
    except Exception:
        return None
ok, parts = True, []
for s, name in ((1, "a"), (2, "b")):
    rc = open(f"{d}/rec-{s}.rc").read().strip()
    t = open(f"{d}/rec-{s}.time").read().strip() if os.path.exists(f"{d}/rec-{s}.time") else "?"
    trace = f"{d}/{name}.gl"
    have = os.path.exists(trace)
    ok &= rc == "0" and have
    j = lastjson(f"{d}/rec-{s}.out")
    same = lambda f: os.path.exists(f"{d}/native/{f}") and os.path.exists(f"{d}/rec{s}/{f}") and \
        filecmp.cmp(f"{d}/native/{f}", f"{d}/rec{s}/{f}", shallow=False)
    parts.append(f"{name}.gl (seed {s}): rc={rc}, {os.path.getsize(trace) / 1e6:.1f} MB" if have else f"{name}.gl (seed {s}): rc={rc}, no trace")
    parts[-1] += (f", {t} s, first result {j['first_result_s'] if j else '?'} s; input identical to native: {same(f'x{s}.bin')}, "
                  f"output identical to native: {same(f'y{s}.bin')}")
print(("PASS" if ok else "FAIL") + "|" + "; ".join(parts))
PY
)
[[ $res == *"|"* ]] || res="FAIL|$res"
[[ $res == PASS* ]] || res="$res; $(tail_of "$out/rec-1.err") $(tail_of "$out/rec-2.err")"
row "function: ResNet-50 (resnet50_fn.py once) recorded with seeds 1 and 2" "${res%%|*}" "${res#*|}"

# ---- c. compiled --------------------------------------------------------------------------
label="function: compile a.gl b.gl, one 602112-byte input and one 4000-byte output"
if [[ -f $out/a.gl && -f $out/b.gl ]]; then
  say "compiling"
  t0=$(now)
  bounded "$gl" compile "$out/a.gl" "$out/b.gl" -o "$gfn" >"$out/compile.out" 2>"$out/compile.err"
  crc=$?
  ctime=$(python3 -c "print(f'{$(now) - $t0:.1f}')" 2>/dev/null)
  src=-
  if [[ $crc == 0 && -f $gfn ]]; then
    bounded "$gl" compile --show "$gfn" >"$out/show.out" 2>"$out/show.err"
    src=$?
  fi
  res=$(python3 - "$out/show.out" "$gfn" "$crc" "$src" "$ctime" <<'PY' 2>&1 | tail -n 1
import os, re, sys
show, gfn, crc, src, ctime = sys.argv[1:]
text = open(show).read() if os.path.exists(show) else ""
ins = [int(m) for m in re.findall(r"^input\s+(\d+) B", text, re.M)]
outs = [int(m) for m in re.findall(r"^output\s+(\d+) B", text, re.M)]
keep = [" ".join(l.split()) for l in text.splitlines() if l.split() and l.split()[0] in ("records", "code", "input", "output")]
size = f"{os.path.getsize(gfn) / 1e6:.1f} MB" if os.path.exists(gfn) else "no file"
ok = crc == "0" and src == "0" and ins == [602112] and outs == [4000]
print(("PASS" if ok else "FAIL") + f"|compile rc={crc} ({ctime} s), show rc={src}; {size}; " + "; ".join(keep))
PY
  )
  [[ $res == *"|"* ]] || res="FAIL|$res"
  [[ $crc == 0 ]] || res="$res; $(tail_of "$out/compile.err" 3)"
  [[ $src == 0 || $src == - ]] || res="$res; show: $(tail_of "$out/show.err")"
  row "$label" "${res%%|*}" "${res#*|}"
else
  crc=1
  row "$label" FAIL "no recordings (a.gl, b.gl)"
fi
have_gfn=no
[[ $crc == 0 && -f $gfn ]] && have_gfn=yes

# ---- d. cold ------------------------------------------------------------------------------
label="function: invoke cold, ResNet-50 (<= 0.3 s to result)"
if [[ $have_gfn == yes ]]; then
  for i in 1 2 3; do
    say "invoke cold $i"
    bounded "$gl" invoke "$gfn" --json >"$out/cold-$i.json" 2>"$out/cold-$i.err"
    echo $? >"$out/cold-$i.rc"
  done
  res=$(python3 - "$out" <<'PY' 2>&1 | tail -n 1
import json, statistics, sys
d = sys.argv[1]
def lastjson(p):
    try:
        return json.loads([l for l in open(p).read().splitlines() if l.strip().startswith("{")][-1])
    except Exception:
        return None
runs = [(open(f"{d}/cold-{i}.rc").read().strip(), lastjson(f"{d}/cold-{i}.json")) for i in (1, 2, 3)]
native = [j["first_result_s"] for j in (lastjson(f"{d}/native-{s}.out") for s in (1, 2, 3)) if j]
nat = statistics.median(native) if native else None
good = [j for rc, j in runs if rc == "0" and j is not None and j.get("first_result_s") is not None]
ok = len(good) == 3 and all(j.get("mismatches") == 0 and (j.get("verified") or 0) >= 1 for j in good)
med = statistics.median(j["first_result_s"] for j in good) if good else None
ok = ok and med is not None and med <= 0.3
figs = ", ".join(f"{j['first_result_s']:.3f}" if rc == "0" and j and j.get("first_result_s") is not None else f"rc={rc}"
                 for rc, j in runs)
extra = "".join(f"the first: prepare {j.get('prepare_s')} s, graph {j.get('graph')}; " for j in good[:1])
cmp = f"native once median {nat} s" + (f" (x{med / nat:.3f})" if med is not None and nat else "")
print(("PASS" if ok else "FAIL") + f"|first result {figs} s (median {med if med is None else round(med, 3)}); "
      f"{extra}every run: verified {[j.get('verified') for j in good]}, mismatches {[j.get('mismatches') for j in good]}; {cmp}")
PY
  )
  [[ $res == *"|"* ]] || res="FAIL|$res"
  [[ $res == PASS* ]] || res="$res; $(tail_of "$out/cold-1.err")"
  row "$label" "${res%%|*}" "${res#*|}"
else
  row "$label" FAIL "no function file (see the compile row)"
fi

# ---- e. new input -------------------------------------------------------------------------
label="function: invoke with a new input (seed 3, never recorded), output identical to native"
if [[ $have_gfn == yes && -f $out/native/x3.bin && -f $out/native/y3.bin ]]; then
  say "invoke with seed 3's input"
  bounded "$gl" invoke "$gfn" --input "$out/native/x3.bin" --output "$out/y3.gfn.bin" --json \
    >"$out/new.json" 2>"$out/new.err"
  nrc=$?
  res=$(python3 - "$out/y3.gfn.bin" "$out/native/y3.bin" "$out/native/y1.bin" "$nrc" "$out/new.json" <<'PY' 2>&1 | tail -n 1
import array, json, os, sys
got, want, y1, rc, js = sys.argv[1:]
try:
    j = json.loads([l for l in open(js).read().splitlines() if l.strip().startswith("{")][-1])
    jt = f"first result {j.get('first_result_s')} s, outputs {j.get('outputs')} ({j.get('output_bytes')} B)"
except Exception:
    jt = "no JSON line"
if not os.path.exists(got):
    print(f"FAIL|rc={rc}, no output file; {jt}"); sys.exit()
a, b = open(got, "rb").read(), open(want, "rb").read()
same = a == b
diff = "n/a"
if len(a) == len(b) and len(a) % 4 == 0:
    fa, fb = array.array("f", a), array.array("f", b)
    diff = f"{max((abs(x - y) for x, y in zip(fa, fb)), default=0.0):.3g}"
    ndiff = sum(x != y for x, y in zip(a, b))
else:
    ndiff = "?"
other = os.path.exists(y1) and a != open(y1, "rb").read()
print(("PASS" if rc == "0" and same else "FAIL") + f"|rc={rc}; {len(a)} bytes against native's {len(b)}, "
      f"identical {same} ({ndiff} bytes differ), max abs diff {diff}; differs from seed 1's output: {other}; {jt}")
PY
  )
  [[ $res == *"|"* ]] || res="FAIL|$res"
  [[ $nrc == 0 ]] || res="$res; $(tail_of "$out/new.err")"
  row "$label" "${res%%|*}" "${res#*|}"
else
  row "$label" FAIL "function file ($have_gfn) or native seed 3 input/output missing"
fi

# ---- f. hot -------------------------------------------------------------------------------
label="function: invoke hot vs PyTorch CUDA-graph replay (<= 1.0x)"
label_eager="function: invoke hot vs PyTorch eager (informational)"
if [[ $have_gfn == yes ]]; then
  for i in 1 2; do
    # ABBA: PyTorch first in the first pair, gpuless first in the second.
    if ((i == 1)); then order="graph invoke"; else order="invoke graph"; fi
    for who in $order; do
      say "hot pair $i: $who"
      if [[ $who == graph ]]; then
        bounded python3 "$fn" graph "$iters" >"$out/graph-$i.json" 2>"$out/graph-$i.err"
        echo $? >"$out/graph-$i.rc"
      else
        bounded "$gl" invoke "$gfn" --iterations "$iters" --json >"$out/hot-$i.json" 2>"$out/hot-$i.err"
        echo $? >"$out/hot-$i.rc"
      fi
    done
  done
  res=$(python3 - "$out" <<'PY' 2>&1 | tail -n 2
import json, statistics, sys
d = sys.argv[1]
def lastjson(p):
    try:
        return json.loads([l for l in open(p).read().splitlines() if l.strip().startswith("{")][-1])
    except Exception:
        return None
ok, parts, ratios, eratios = True, [], [], []
for i in (1, 2):
    grc, hrc = (open(f"{d}/{k}-{i}.rc").read().strip() for k in ("graph", "hot"))
    g, h = lastjson(f"{d}/graph-{i}.json"), lastjson(f"{d}/hot-{i}.json")
    if grc != "0" or hrc != "0" or not g or not h or not h.get("hot_ms_median") or not g.get("graph_ms_median"):
        ok = False
        parts.append(f"pair {i}: graph rc={grc}, invoke rc={hrc}, incomplete")
        continue
    r = h["hot_ms_median"] / g["graph_ms_median"]
    er = h["hot_ms_median"] / g["eager_ms_median"]
    ratios.append(r); eratios.append(er)
    ok &= h.get("mismatches") == 0
    parts.append(f"pair {i}: invoke {h['hot_ms_median']:.3f} ms (min {h.get('hot_ms_min')}, graph {h.get('graph')}, "
                 f"{h.get('iterations')} iterations, mismatches {h.get('mismatches')}) / PyTorch graph "
                 f"{g['graph_ms_median']:.3f} ms (min {g['graph_ms_min']}) = x{r:.3f}; eager {g['eager_ms_median']:.3f} ms; "
                 f"graph_equal {g['graph_equal']}")
med = statistics.median(ratios) if ratios else None
ok = ok and len(ratios) == 2 and med <= 1.0
print(("PASS" if ok else "FAIL") + f"|median ratio {'?' if med is None else f'x{med:.3f}'}; " + "; ".join(parts))
em = statistics.median(eratios) if eratios else None
print("INFO|" + (f"invoke hot / PyTorch eager: median x{em:.3f} ({', '.join(f'x{e:.3f}' for e in eratios)})" if eratios else "no complete pair"))
PY
  )
  graph_res=$(head -n 1 <<<"$res")
  eager_res=$(tail -n 1 <<<"$res")
  [[ $graph_res == *"|"* ]] || graph_res="FAIL|$graph_res"
  [[ $eager_res == *"|"* ]] || eager_res="INFO|$eager_res"
  if [[ $graph_res != PASS* ]]; then
    for i in 1 2; do
      [[ $(cat "$out/hot-$i.rc" 2>/dev/null) == 0 ]] || graph_res="$graph_res; invoke: $(tail_of "$out/hot-$i.err")"
      [[ $(cat "$out/graph-$i.rc" 2>/dev/null) == 0 ]] || graph_res="$graph_res; graph: $(tail_of "$out/graph-$i.err")"
    done
  fi
  row "$label" "${graph_res%%|*}" "${graph_res#*|}"
  row "$label_eager" "${eager_res%%|*}" "${eager_res#*|}"
else
  row "$label" FAIL "no function file (see the compile row)"
fi

# ---- g. bad input -------------------------------------------------------------------------
# refused NAME LABEL NOTE MUST... : the last invoke (NAME.out, NAME.err, exit code $rc) must
# exit 2, print no JSON line (nothing run), and name each MUST in its stderr; the row shows NOTE
# and the first line of stderr (and the line naming the first MUST where that is another).
refused() {
  local name=$1 label=$2 note=$3; shift 3
  local first missing=() m
  first=$(first_line "$out/$name.err")
  for m in "$@"; do grep -qF -- "$m" "$out/$name.err" || missing+=("$m"); done
  local printed=no
  grep -q '^[[:space:]]*{' "$out/$name.out" 2>/dev/null && printed=yes
  local d="${note:+$note; }rc=$rc; $first"
  if ((${#missing[@]})); then
    d="$d; stderr does not name: ${missing[*]} ($(tail_of "$out/$name.err" 3))"
  else
    local named
    named=$(grep -m 1 -F -- "${1:-}" "$out/$name.err" | cut -c1-300)
    [[ -n $named && $named != "$first" ]] && d="$d ... $named"
  fi
  [[ $printed == yes ]] && d="$d; a result was printed: $(tail_of "$out/$name.out" 1)"
  if [[ $rc == 2 && ${#missing[@]} == 0 && $printed == no ]]; then row "$label" PASS "$d"; else row "$label" FAIL "$d"; fi
}
label_size="function bad input: --input of 1000 bytes (exit 2, names 602112)"
label_cut="function bad input: function file cut in half (exit 2, named)"
label_flip="function bad input: one byte flipped in the middle of the file (exit 2, named)"
if [[ $have_gfn == yes ]]; then
  say "bad input: wrong input size"
  head -c 1000 /dev/zero >"$out/bad-1000.bin"
  bounded "$gl" invoke "$gfn" --input "$out/bad-1000.bin" --output "$out/bad-size.result.bin" --json \
    >"$out/bad-size.out" 2>"$out/bad-size.err"
  rc=$?
  if [[ -s $out/bad-size.result.bin ]]; then
    row "$label_size" FAIL \
      "rc=$rc; an output was written ($(stat -c %s "$out/bad-size.result.bin") bytes); $(first_line "$out/bad-size.err")"
  else
    refused bad-size "$label_size" "" 602112
  fi

  say "bad input: function file cut in half"
  size=$(stat -c %s "$gfn")
  head -c $((size / 2)) "$gfn" >"$out/truncated.gfn"
  bounded "$gl" invoke "$out/truncated.gfn" --json >"$out/truncated.out" 2>"$out/truncated.err"
  rc=$?
  refused truncated "$label_cut" \
    "$((size / 2)) of $size bytes" truncated.gfn

  say "bad input: one byte flipped"
  at=$(python3 - "$gfn" "$out/flipped.gfn" <<'PY' 2>&1 | tail -n 1
import shutil, sys
shutil.copyfile(sys.argv[1], sys.argv[2])
with open(sys.argv[2], "r+b") as f:
    f.seek(0, 2)
    at = f.tell() // 2
    f.seek(at)
    b = f.read(1)[0]
    f.seek(at)
    f.write(bytes([b ^ 0xFF]))
print(at)
PY
  )
  if [[ $at =~ ^[0-9]+$ && -f $out/flipped.gfn ]]; then
    bounded "$gl" invoke "$out/flipped.gfn" --json >"$out/flipped.out" 2>"$out/flipped.err"
    rc=$?
    refused flipped "$label_flip" "byte $at of $(stat -c %s "$gfn") inverted" flipped.gfn
  else
    row "$label_flip" FAIL "the damaged copy was not made: $at"
  fi
else
  for l in "$label_size" "$label_cut" "$label_flip"; do
    row "$l" FAIL "no function file (see the compile row)"
  done
fi

say "bad input: sm_100 code"
label="function bad input: sm_100-only function on this GPU (exit 2, names sm_100)"
bounded "$gl" compile "$root/testdata/traces/vecadd-sm100.gl" -o "$out/sm100.gfn" >"$out/sm100-compile.out" 2>"$out/sm100-compile.err"
rc=$?
if [[ $rc != 0 || ! -f $out/sm100.gfn ]]; then
  row "$label" FAIL "compile of testdata/traces/vecadd-sm100.gl failed, rc=$rc: $(tail_of "$out/sm100-compile.err" 3)"
else
  bounded "$gl" invoke "$out/sm100.gfn" --json >"$out/sm100.out" 2>"$out/sm100.err"
  rc=$?
  refused sm100 "$label" "" sm_100
fi

# ---- h. remote ----------------------------------------------------------------------------
# remote rows: added with deploy
label_deploy="function remote: gpuless deploy resnet50.gfn to a gpuless serve on this GPU"
label_rcold="function remote: invoke --remote first session (executor warm, function cold)"
label_rwarm="function remote: invoke --remote second session, function kept warm (<= 0.3 s to result)"
label_rhot="function remote: invoke --remote hot vs local invoke hot (<= 1.10x)"
label_rnew="function remote: invoke --remote with seed 3's input, output identical to local invoke's"
label_rbad="function remote: --input of 1000 bytes refused by the server (exit 2, names 602112)"
if [[ $have_gfn == yes ]]; then
  fncache=$(mktemp -d)
  rm -f "$out"/remote-*.json "$out"/remote-*.err "$out"/remote-*.rc "$out/remote-warm.metrics" "$out/y3.remote.bin" \
    "$out/serve.addr"
  say "remote: starting gpuless serve"
  GPULESS_LOG=info "$gl" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$fncache" --pool whole=2 \
    --function-keep-alive 300 --warm-functions-max 4 \
    >"$out/serve.addr" 2>"$out/serve.log" &
  serve_pid=$!
  stop_server() {
    [[ -n ${serve_pid:-} ]] || return 0
    kill -TERM "$serve_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$serve_pid" 2>/dev/null
    wait "$serve_pid" 2>/dev/null
    serve_pid=""
    rm -rf "$fncache"
  }
  trap stop_server EXIT
  for _ in $(seq 100); do grep -q listening "$out/serve.addr" 2>/dev/null && break; sleep 0.1; done
  tcp=$(grep -o 'tcp=[^ ]*' "$out/serve.addr" | cut -d= -f2)
  metrics=$(grep -o 'metrics=[^ ]*' "$out/serve.addr" | cut -d= -f2)
  # Each session takes a warm executor (its CUDA context made); the pool refills behind it.
  wait_warm() {
    for _ in $(seq 150); do
      curl -s "http://$metrics/metrics" 2>/dev/null | grep -q 'gpuless_executors{kind="warm"} [1-9]' && break
      sleep 0.2
    done
  }
  wait_warm
  say "remote: deploy to $tcp"
  bounded "$gl" deploy "$gfn" --remote "$tcp" --name resnet50 >"$out/remote-deploy.out" 2>"$out/remote-deploy.err"
  drc=$?
  entry=$fncache/disk/functions/resnet50
  if [[ $drc == 0 && -f $entry ]]; then
    row "$label_deploy" PASS "$(grep -E '^(file|signature)' "$out/remote-deploy.out" | tr '\n' ' ' | tr -s ' '); registry: $(cat "$entry")"
  else
    row "$label_deploy" FAIL "rc=$drc, registry entry $([[ -f $entry ]] && echo present || echo missing); $(tail_of "$out/remote-deploy.err" 3)"
  fi
  say "remote: invoke, first session (function cold)"
  wait_warm
  bounded "$gl" invoke resnet50 --remote "$tcp" --json >"$out/remote-cold-1.json" 2>"$out/remote-cold-1.err"
  echo $? >"$out/remote-cold-1.rc"
  # The first session's executor stays, with the function set up, for the next session of it.
  wait_kept() {
    for _ in $(seq 50); do
      curl -s "http://$metrics/metrics" 2>/dev/null | grep -q 'gpuless_warm_functions{function="resnet50"} [1-9]' && break
      sleep 0.1
    done
  }
  for i in 1 2; do
    say "remote: invoke, session $((i + 1)) (function kept warm)"
    wait_kept
    bounded "$gl" invoke resnet50 --remote "$tcp" --json >"$out/remote-warm-$i.json" 2>"$out/remote-warm-$i.err"
    echo $? >"$out/remote-warm-$i.rc"
  done
  curl -s "http://$metrics/metrics" >"$out/remote-warm.metrics" 2>/dev/null
  say "remote: invoke hot ($iters iterations)"
  wait_warm
  bounded "$gl" invoke resnet50 --remote "$tcp" --iterations "$iters" --json >"$out/remote-hot.json" 2>"$out/remote-hot.err"
  echo $? >"$out/remote-hot.rc"
  res=$(python3 - "$out" <<'PY' 2>&1 | tail -n 3
import json, os, statistics, sys
d = sys.argv[1]
def lastjson(p):
    try:
        return json.loads([l for l in open(p).read().splitlines() if l.strip().startswith("{")][-1])
    except Exception:
        return None
def rc(p):
    return open(p).read().strip() if os.path.exists(p) else "?"
def good(runs):
    return [j for r, j in runs if r == "0" and j and j.get("remote") and j.get("first_result_s") is not None]
def verified(js):
    return all(j.get("mismatches") == 0 and (j.get("verified") or 0) >= 1 for j in js)
local = [j["first_result_s"] for j in (lastjson(f"{d}/cold-{i}.json") for i in (1, 2, 3)) if j and j.get("first_result_s")]
lm = statistics.median(local) if local else None
# The first session: the executor reads the function and sets it up (as every session did
# before functions were kept warm).
cold = good([(rc(f"{d}/remote-cold-1.rc"), lastjson(f"{d}/remote-cold-1.json"))])
ok = len(cold) == 1 and verified(cold)
c = cold[0] if cold else {}
print(("PASS" if ok else "FAIL") + f"|rc={rc(f'{d}/remote-cold-1.rc')}; first result {c.get('first_result_s')} s, server "
      f"prepare {c.get('prepare_s')} s, graph {c.get('graph')}, {c.get('bytes_up')} B up, {c.get('bytes_down')} B down; "
      f"verified {c.get('verified')}, mismatches {c.get('mismatches')}; local invoke cold median {lm} s")
# Two more sessions, each a new process: the executor kept the function set up.
runs = [(rc(f"{d}/remote-warm-{i}.rc"), lastjson(f"{d}/remote-warm-{i}.json")) for i in (1, 2)]
warm = good(runs)
med = statistics.median(j["first_result_s"] for j in warm) if warm else None
try:
    text = open(f"{d}/remote-warm.metrics").read()
except OSError:
    text = ""
def metric(name):
    return next((float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + " ")), 0.0)
served = metric('gpuless_function_sessions_total{function="resnet50",start="warm"}')
kept = metric('gpuless_warm_functions{function="resnet50"}')
ok = (len(warm) == 2 and verified(warm) and med <= 0.3 and all(j.get("prepare_s") == 0 for j in warm)
      and served >= 2 and kept >= 1)
figs = ", ".join(f"{j['first_result_s']:.3f}" if r == "0" and j else f"rc={r}" for r, j in runs)
cmp = f"; first session {c['first_result_s']:.3f} s (x{med / c['first_result_s']:.3f})" if med and c else ""
print(("PASS" if ok else "FAIL") + f"|first result {figs} s (median {med if med is None else round(med, 3)}); server "
      f"prepare {[j.get('prepare_s') for j in warm]} s; served warm {served:.0f}, kept warm {kept:.0f}; verified "
      f"{[j.get('verified') for j in warm]}, mismatches {[j.get('mismatches') for j in warm]}{cmp}")
h = lastjson(f"{d}/remote-hot.json")
lh = [j["hot_ms_median"] for j in (lastjson(f"{d}/hot-{i}.json") for i in (1, 2)) if j and j.get("hot_ms_median")]
if rc(f"{d}/remote-hot.rc") != "0" or not h or not h.get("hot_ms_median") or not lh:
    print(f"FAIL|remote rc={rc(f'{d}/remote-hot.rc')}, local hot figures {lh}: incomplete")
else:
    r = h["hot_ms_median"] / statistics.median(lh)
    ok = r <= 1.10 and h.get("mismatches") == 0
    print(("PASS" if ok else "FAIL") + f"|remote {h['hot_ms_median']:.3f} ms median (min {h.get('hot_ms_min')}, on the server "
          f"{h.get('run_ms_median')} ms, graph {h.get('graph')}, {h.get('iterations')} iterations, mismatches "
          f"{h.get('mismatches')}, {h.get('bytes_up')} B up) / local {statistics.median(lh):.3f} ms = x{r:.3f}")
PY
  )
  cold_res=$(sed -n 1p <<<"$res")
  warm_res=$(sed -n 2p <<<"$res")
  hot_res=$(sed -n 3p <<<"$res")
  [[ $cold_res == *"|"* ]] || cold_res="FAIL|$cold_res"
  [[ $warm_res == *"|"* ]] || warm_res="FAIL|$warm_res"
  [[ $hot_res == *"|"* ]] || hot_res="FAIL|$hot_res"
  [[ $cold_res == PASS* ]] || cold_res="$cold_res; $(tail_of "$out/remote-cold-1.err")"
  [[ $warm_res == PASS* ]] || warm_res="$warm_res; $(tail_of "$out/remote-warm-1.err")"
  [[ $hot_res == PASS* ]] || hot_res="$hot_res; $(tail_of "$out/remote-hot.err")"
  row "$label_rcold" "${cold_res%%|*}" "${cold_res#*|}"
  row "$label_rwarm" "${warm_res%%|*}" "${warm_res#*|}"
  row "$label_rhot" "${hot_res%%|*}" "${hot_res#*|}"

  if [[ -f $out/native/x3.bin ]]; then
    say "remote: invoke with seed 3's input"
    bounded "$gl" invoke resnet50 --remote "$tcp" --input "$out/native/x3.bin" --output "$out/y3.remote.bin" --json \
      >"$out/remote-new.json" 2>"$out/remote-new.err"
    nrc=$?
    if [[ $nrc == 0 && -f $out/y3.remote.bin && -f $out/y3.gfn.bin ]] && cmp -s "$out/y3.remote.bin" "$out/y3.gfn.bin"; then
      same_native=no
      cmp -s "$out/y3.remote.bin" "$out/native/y3.bin" && same_native=yes
      row "$label_rnew" PASS "rc=0; $(stat -c %s "$out/y3.remote.bin") bytes identical to local invoke's; identical to native's: $same_native"
    else
      row "$label_rnew" FAIL "rc=$nrc; remote output $([[ -f $out/y3.remote.bin ]] && stat -c %s "$out/y3.remote.bin" || echo missing), local $([[ -f $out/y3.gfn.bin ]] && stat -c %s "$out/y3.gfn.bin" || echo missing) bytes, not identical; $(tail_of "$out/remote-new.err")"
    fi
  else
    row "$label_rnew" FAIL "no seed 3 input (see the native row)"
  fi

  say "remote: wrong input size"
  head -c 1000 /dev/zero >"$out/bad-1000.bin"
  bounded "$gl" invoke resnet50 --remote "$tcp" --input "$out/bad-1000.bin" --json >"$out/remote-bad.out" 2>"$out/remote-bad.err"
  rc=$?
  refused remote-bad "$label_rbad" "" 602112 "nothing was run"
  calls=$(curl -s "http://$metrics/metrics" 2>/dev/null | grep '^gpuless_function_invocations_total' | tr '\n' ' ')
  row "function remote: invocations counted by the server (informational)" INFO "${calls:-none}"
  stop_server
else
  for l in "$label_deploy" "$label_rcold" "$label_rwarm" "$label_rhot" "$label_rnew" "$label_rbad"; do
    row "$l" FAIL "no function file (see the compile row)"
  done
fi
