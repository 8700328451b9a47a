#!/usr/bin/env bash
# NVIDIA's CUDA samples as a compatibility suite (issue 34), on the device machine:
#
#   scripts/gpu-suite-samples.sh BIN_DIR SAMPLES_DIR OUT_DIR
#
# SAMPLES_DIR is what scripts/samples/prepare.sh exported (Common/ and the selected samples'
# directories, large files gzipped); BIN_DIR holds gpuless and libgpuless_recorder.so.
# Every `run` row of scripts/samples/list.tsv is built with this machine's nvcc for sm_90
# (SAMPLES_JOBS parallel builds, default 12, all of them within SAMPLES_BUILD_TIMEOUT seconds,
# default 300), then run, each run limited to SAMPLES_TIMEOUT seconds (default 60), in a copy of
# its directory (samples find their data and kernels relative to the working directory):
#   native  the sample alone;
#   record  `gpuless record -o T.gl -- ./sample ARGS`: exit code and output (normalized by
#           scripts/samples/normalize.py) equal to native's; then `gpuless replay T.gl` exits 0
#           (every recorded result verified);
#   remote  `gpuless run --remote ADDR -- ./sample ARGS` in a mount namespace without the driver,
#           against one `gpuless serve` on this GPU: exit code and normalized output as native's.
# Samples whose native run fails (or is waived, exit 2) are reported and not counted against
# gpuless; a sample whose list note says `remote n/a: WHY` (what the client cannot give it by
# its nature) is reported INFO in remote mode when it fails there, and left out of the remote
# count. Prints `row|samples: NAME MODE|PASS or FAIL|detail` lines, a summary line, and writes
# OUT_DIR/samples.tsv. SAMPLES_ONLY="a b" runs some samples; SAMPLES_MODES (default "record
# remote") chooses the gpuless modes, and `again` (a second native run compared with the first)
# finds output the normalizer does not cover yet; SAMPLES_TOTAL (default 480) is the whole
# script's time: runs that would start after it are reported as not run. SAMPLES_NATIVE_JOBS (8),
# SAMPLES_RECORD_JOBS (6) and SAMPLES_REMOTE_JOBS (4) run that many at a time; every run has
# CUDA_CACHE_DISABLE=1. SAMPLES_KEEP=1 keeps the builds, run directories and traces (by default
# only the text outputs stay in OUT_DIR). SAMPLES_GPUS=N runs the remote mode as a session of N
# GPUs (`run --gpus N`: the sample sees N devices, as natively on an N-GPU machine);
# SAMPLES_ADDR=A,B runs it against servers started by the caller instead (one list: a session
# across several servers). On an H100: ~60 s of builds, ~5.5 minutes in all.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
here=$(dirname "$self")

# ---- workers (the script calls itself through xargs) ----------------------------------------
row_of() { awk -F'\t' -v n="$1" '$2 == "run" { k = split($1, p, "/"); if (p[k] == n) { print; exit } }' "$S_LIST"; }
late() { [ "$(date +%s)" -ge "$S_DEADLINE" ]; }

worker_build() { # NAME: builds into $S_OUT/build/NAME; writes build.status (ok|fail SECONDS)
  local name=$1 path decision sources flags extra needs args note
  IFS=$'\t' read -r path decision sources flags extra needs args note <<<"$(row_of "$name")"
  local b=$S_OUT/build/$name t0=$SECONDS
  mkdir -p "$b" && cp -r "$S_OUT/src/$path/." "$b/" && cd "$b" || return 0
  local inc=(-I"$S_OUT/src/Common" -I.) srcs=() s e kind from to
  [ -d inc ] && inc+=(-Iinc)
  for s in $sources; do srcs+=("${s/#@Common\//$S_OUT/src/Common/}"); done
  [ "$flags" = - ] && flags=
  (
    set -e
    for e in $extra; do
      [ "$e" = - ] && continue
      IFS=: read -r kind from to <<<"$e"
      case $kind in
        fatbin) echo "+ nvcc -fatbin $from"; timeout 240 nvcc -arch=sm_90 "${inc[@]}" -fatbin -o "$to" "$from" ;;
        ptx) echo "+ nvcc -ptx $from"; timeout 240 nvcc -arch=sm_90 "${inc[@]}" -ptx -o "$to" "$from" ;;
        cudainc) cp -r "$S_CUDA/include/$from" "$to" ;;
        common) cp "$S_OUT/src/Common/$from" "$to" ;;
        *) echo "unknown extra $e"; false ;;
      esac
    done
    # shellcheck disable=SC2086 # flags are words: "-lcublas -Xcompiler -fopenmp"
    echo "+ nvcc -arch=sm_90 -std=c++17 --extended-lambda -rdc=true -O2 ${inc[*]} -o $name ${srcs[*]} $flags"
    # shellcheck disable=SC2086
    timeout 240 nvcc -arch=sm_90 -std=c++17 --extended-lambda -rdc=true -O2 -Wno-deprecated-gpu-targets \
      "${inc[@]}" -o "$name" "${srcs[@]}" $flags
  ) >build.log 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && [ -x "$name" ]; then echo "ok $((SECONDS - t0))" >build.status; else echo "fail $((SECONDS - t0))" >build.status; fi
}

# The namespace that hides the driver: `hidden CMD...` (scripts/hidden.sh).
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"

worker_run() { # MODE NAME: one run in $S_OUT/run/NAME/MODE; record also replays
  local mode=$1 name=$2 path decision sources flags extra needs args note
  IFS=$'\t' read -r path decision sources flags extra needs args note <<<"$(row_of "$name")"
  local d=$S_OUT/run/$name/$mode res=$S_OUT/res/$name
  [ "$args" = - ] && args=
  if late; then echo "not run: the suite's time (SAMPLES_TOTAL) was up" >"$res.$mode"; return 0; fi
  rm -rf "$d"; mkdir -p "$d" && cp -r "$S_OUT/build/$name/." "$d/" && rm -f "$d/build.log" "$d/build.status"
  cd "$d" || return 0
  local t0 t1 rc cmd=()
  # shellcheck disable=SC2206 # arguments are words
  local argv=(./"$name" $args)
  case $mode in
    native | again) cmd=("${argv[@]}") ;;
    record) cmd=("$S_GL" record -o "$S_OUT/traces/$name.gl" -- "${argv[@]}") ;;
    remote) cmd=(bash "$self" __hidden "$S_GL" run --remote "$S_ADDR" --json ${S_GPUS:+--gpus "$S_GPUS"} -- "${argv[@]}") ;;
  esac
  t0=$(date +%s.%N)
  timeout -k 5 "$S_TIMEOUT" "${cmd[@]}" >stdout.txt 2>stderr.txt </dev/null
  rc=$?
  t1=$(date +%s.%N)
  echo "$rc $(awk "BEGIN{printf \"%.2f\", $t1-$t0}")" >rc.txt
  python3 "$S_NORM" --sample "$name" stdout.txt >norm.txt 2>norm.err || echo "(normalizer failed: $(tail -n 1 norm.err))" >norm.txt
  [ "$mode" = native ] && return 0

  # Against native: the same exit code and the same normalized output.
  local n=$S_OUT/run/$name/native rn rr secs ns verdict detail
  read -r rn ns <"$n/rc.txt"; read -r rr secs <rc.txt
  if [ "$rr" = "$rn" ] && cmp -s "$n/norm.txt" norm.txt; then
    verdict=PASS detail="rc=$rr, $(wc -l <norm.txt) lines as native's after normalization; ${secs} s (native ${ns} s)"
  else
    verdict=FAIL detail="rc=$rr (native $rn)"
    [ "$rr" = 124 ] || [ "$rr" = 137 ] && detail+=" timed out after ${S_TIMEOUT} s"
    local was now
    was=$(diff "$n/norm.txt" norm.txt | grep -m1 '^<' | cut -c3-140)
    now=$(diff "$n/norm.txt" norm.txt | grep -m1 '^>' | cut -c3-140)
    [ -n "$was$now" ] && detail+="; first difference: native '${was}', $mode '${now}'"
    detail+="; stderr: $(grep -v '^{' stderr.txt | tail -n 3 | cut -c1-200 | tr '\n' ' ')"
  fi
  [ "$mode" = remote ] && grep -m1 '^{' stderr.txt >stats.json
  echo "$verdict|$detail" >"$res.$mode"

  if [ "$mode" = record ]; then
    local tr=$S_OUT/traces/$name.gl size
    if [ ! -s "$tr" ]; then echo "FAIL|no trace written (record rc=$rr)" >"$res.replay"; return 0; fi
    if late; then echo "not run: the suite's time (SAMPLES_TOTAL) was up" >"$res.replay"; return 0; fi
    size=$(du -h "$tr" | cut -f1)
    t0=$(date +%s.%N)
    timeout -k 5 "$S_TIMEOUT" "$S_GL" replay "$tr" >replay.txt 2>replay.err </dev/null
    rc=$?
    t1=$(date +%s.%N)
    local v; v=$(grep -m1 '^verified' replay.txt | sed 's/^verified *//')
    if [ $rc -eq 0 ]; then
      echo "PASS|${v:-no verification line}; trace $size; $(awk "BEGIN{printf \"%.2f\", $t1-$t0}") s" >"$res.replay"
    else
      echo "FAIL|rc=$rc; ${v:+$v; }$(grep -m1 'MISMATCH' replay.txt | cut -c1-200)$(tail -n 2 replay.err | cut -c1-200 | tr '\n' ' '); trace $size" >"$res.replay"
    fi
    [ "${SAMPLES_KEEP:-0}" = 1 ] || rm -f "$tr"
  fi
}

case ${1:-} in
  __build) shift; worker_build "$@"; exit 0 ;;
  __run) shift; worker_run "$@"; exit 0 ;;
  __hidden) shift; hidden "$@"; exit $? ;;
esac

# ---- main ----------------------------------------------------------------------------------
[ $# -eq 3 ] || { echo "usage: $0 BIN_DIR SAMPLES_DIR OUT_DIR" >&2; exit 2; }
bin=$(cd "$1" && pwd) || exit 2
samples=$(cd "$2" && pwd) || exit 2
mkdir -p "$3" && out=$(cd "$3" && pwd) || exit 2
export S_OUT=$out S_LIST=${SAMPLES_LIST:-$here/samples/list.tsv} S_NORM=$here/samples/normalize.py
export S_GL=$bin/gpuless S_TIMEOUT=${SAMPLES_TIMEOUT:-60} S_CUDA=${CUDA_HOME:-/usr/local/cuda}
export S_GPUS=${SAMPLES_GPUS:-}
export S_DEADLINE=$(($(date +%s) + ${SAMPLES_TOTAL:-480}))
export PATH=$S_CUDA/bin:$PATH
# JIT results cached by one run change what the next prints (ptxjit's linker log): no cache.
export CUDA_CACHE_DISABLE=1
jobs=${SAMPLES_JOBS:-12}
modes=" ${SAMPLES_MODES:-record remote} "
SAMPLES_GPU_NAMES=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort -u | paste -sd'|')
export SAMPLES_GPU_NAMES
t_start=$SECONDS

rm -rf "$out/src" "$out/build" "$out/run" "$out/res" "$out/traces"
mkdir -p "$out/src" "$out/build" "$out/run" "$out/res" "$out/traces"
cp -r "$samples/." "$out/src/" && find "$out/src" -name '*.gz' -exec gunzip -f {} +

# The selection: every `run` row (or those SAMPLES_ONLY names), less those whose library this
# machine lacks.
have_lib() {
  compgen -G "$S_CUDA/lib64/lib$1.so*" >/dev/null || compgen -G "$S_CUDA/lib64/lib$1.a" >/dev/null ||
    compgen -G "$S_CUDA/targets/*/lib/lib$1.*" >/dev/null || ldconfig -p | grep -q "lib$1\.so"
}
selected=() build=()
while IFS=$'\t' read -r path decision _ _ _ needs _ _; do
  [[ $path == \#* || $decision != run ]] && continue
  name=${path##*/}
  [ -n "${SAMPLES_ONLY:-}" ] && [[ " $SAMPLES_ONLY " != *" $name "* ]] && continue
  selected+=("$name")
  missing=
  for l in $needs; do [ "$l" = - ] || have_lib "$l" || missing+=" lib$l"; done
  if [ -n "$missing" ]; then echo "absent|not built: this machine lacks$missing" >"$out/res/$name.build"; else build+=("$name"); fi
done <"$S_LIST"

# Build, SAMPLES_JOBS at a time, within SAMPLES_BUILD_TIMEOUT.
printf '%s\n' "${build[@]}" | timeout -k 10 "${SAMPLES_BUILD_TIMEOUT:-300}" xargs -r -P "$jobs" -n 1 bash "$self" __build
built=()
for name in "${build[@]}"; do
  st=$(cat "$out/build/$name/build.status" 2>/dev/null)
  if [[ $st == ok* ]]; then
    built+=("$name"); echo "ok|${st#ok } s" >"$out/res/$name.build"
  else
    echo "fail|${st:-not finished within SAMPLES_BUILD_TIMEOUT}: $(grep -m2 -E 'error|undefined' "$out/build/$name/build.log" | cut -c1-220 | tr '\n' ' ')" >"$out/res/$name.build"
  fi
done
echo "samples: built ${#built[@]} of ${#build[@]} in $((SECONDS - t_start)) s" >&2

# Native runs, 8 at a time (they compare correctness, not timing).
printf '%s\n' "${built[@]}" | xargs -r -P "${SAMPLES_NATIVE_JOBS:-8}" -n 1 bash "$self" __run native
ok=()
for name in "${built[@]}"; do
  read -r rc secs <"$out/run/$name/native/rc.txt" 2>/dev/null || rc=none
  if [ "$rc" = 0 ]; then ok+=("$name"); fi
done
echo "samples: native runs done at $((SECONDS - t_start)) s, ${#ok[@]} ok" >&2

# gpuless: record + replay (6 at a time) beside remote runs (4 at a time, one server).
export S_ADDR=''
srv=
if [[ $modes == *" remote "* ]] && [ -n "${SAMPLES_ADDR:-}" ]; then
  S_ADDR=$SAMPLES_ADDR
elif [[ $modes == *" remote "* ]]; then
  "$S_GL" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --cache-dir "$out/cache" >"$out/serve.out" 2>"$out/serve.log" &
  srv=$!
  for _ in $(seq 100); do grep -q "tcp=" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
  S_ADDR=$(grep -o "tcp=[^ ]*" "$out/serve.out" | cut -d= -f2)
  if [ -z "$S_ADDR" ]; then
    echo "row|samples: server start|FAIL|$(tail -n 3 "$out/serve.log" | tr '\n' ' ')"
  elif ! unshare -m true 2>/dev/null; then
    echo "row|samples: mount namespace|FAIL|unshare -m is not permitted here"; S_ADDR=
  fi
fi
pids=()
if [[ $modes == *" record "* ]]; then
  if [ -f "$bin/libgpuless_recorder.so" ]; then
    printf '%s\n' "${ok[@]}" | xargs -r -P "${SAMPLES_RECORD_JOBS:-6}" -n 1 bash "$self" __run record &
    pids+=($!)
  else
    echo "row|samples: record|FAIL|$bin/libgpuless_recorder.so is missing"
  fi
fi
if [[ $modes == *" remote "* ]] && [ -n "$S_ADDR" ]; then
  printf '%s\n' "${ok[@]}" | xargs -r -P "${SAMPLES_REMOTE_JOBS:-4}" -n 1 bash "$self" __run remote &
  pids+=($!)
fi
if [[ $modes == *" again "* ]]; then
  printf '%s\n' "${ok[@]}" | xargs -r -P "${SAMPLES_NATIVE_JOBS:-8}" -n 1 bash "$self" __run again &
  pids+=($!)
fi
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
if [ -n "$srv" ]; then
  kill -TERM "$srv" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
fi

# ---- rows, table, summary ------------------------------------------------------------------
field() { [ -f "$out/res/$1.$2" ] && cat "$out/res/$1.$2"; }
printf 'sample\tbuild\tnative\trecord\treplay\tremote\tnote\n' >"$out/samples.tsv"
nb=0 nok=0 nrec=0 nrep=0 nrem=0 nagain=0 again_ok=0 nna=0 na_names=''
for name in "${selected[@]}"; do
  b=$(field "$name" build) note='' native=- rec=- rep=- rem=-
  bs=${b%%|*}
  case $bs in
    absent) echo "row|samples: $name|INFO|${b#*|}"; note=${b#*|} ;;
    fail) echo "row|samples: $name build|FAIL|${b#*|}"; note=${b#*|} ;;
    ok)
      nb=$((nb + 1))
      read -r rc secs <"$out/run/$name/native/rc.txt" 2>/dev/null || rc=none
      if [ "$rc" != 0 ]; then
        case $rc in 2) why=waived ;; 124 | 137) why="timed out after $S_TIMEOUT s" ;; *) why=failed ;; esac
        native="rc=$rc"
        note="native $why: $(tail -n 2 "$out/run/$name/native/stdout.txt" "$out/run/$name/native/stderr.txt" 2>/dev/null | grep -v '^==>' | grep . | tail -n 2 | cut -c1-160 | tr '\n' ' ')"
        echo "row|samples: $name native|INFO|rc=$rc, $note (not counted against gpuless)"
      else
        native=ok nok=$((nok + 1))
        for m in again record replay remote; do
          [[ $m == replay && $modes != *" record "* ]] && continue
          [[ $modes == *" ${m/replay/record} "* ]] || continue
          r=$(field "$name" "$m")
          [ -n "$r" ] || r="FAIL|no result (the run did not finish)"
          v=${r%%|*}
          # A sample the client cannot run by its nature (list.tsv's note: "remote n/a: WHY"):
          # reported, not counted either way.
          if [ "$m" = remote ] && [ "$v" != PASS ] && na=$(row_of "$name" | cut -f8 | grep -o 'remote n/a: .*'); then
            echo "row|samples: $name $m|INFO|${na}; this run: ${r#*|}"
            rem=n/a nna=$((nna + 1)) na_names+=" $name"
            continue
          fi
          [[ $v == "not run: "* ]] && { echo "row|samples: $name $m|FAIL|$v"; v=FAIL; r="FAIL|$v"; } || echo "row|samples: $name $m|$r"
          case $m in record) rec=$v ;; replay) rep=$v ;; remote) rem=$v ;; again) nagain=$((nagain + 1)); [ "$v" = PASS ] && again_ok=$((again_ok + 1)) ;; esac
          if [ "$v" = PASS ]; then
            case $m in record) nrec=$((nrec + 1)) ;; replay) nrep=$((nrep + 1)) ;; remote) nrem=$((nrem + 1)) ;; *) ;; esac
          elif [ -z "$note" ]; then note="$m: ${r#*|}"
          fi
        done
      fi
      ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "${bs:-none}" "$native" "$rec" "$rep" "$rem" "$(cut -c1-300 <<<"$note")" >>"$out/samples.tsv"
done
summary="samples: ${#selected[@]} selected, $nb built, native $nok ok, record $nrec/$nok, replay $nrep/$nok, remote $nrem/$((nok - nna))"
[ "$nna" -gt 0 ] && summary+=" ($nna not applicable remotely:$na_names)"
[ "$nagain" -gt 0 ] && summary+=", native again $again_ok/$nagain"
summary+=" ($((SECONDS - t_start)) s)"
echo "row|samples: summary|INFO|$summary; table in samples.tsv"
echo "$summary"
echo "$summary" >"$out/summary.txt"

# Only the text outputs stay (the suite's details.tgz takes OUT_DIR as it is).
if [ "${SAMPLES_KEEP:-0}" != 1 ]; then
  rm -rf "$out/src" "$out/cache" "$out/traces"
  find "$out/build" "$out/run" -type f ! \( -name stdout.txt -o -name stderr.txt -o -name rc.txt -o -name norm.txt \
    -o -name stats.json -o -name 'replay.*' -o -name 'build.*' \) -delete 2>/dev/null
  find "$out/build" "$out/run" -depth -type d -empty -delete 2>/dev/null
fi
exit 0
