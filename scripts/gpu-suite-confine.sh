#!/usr/bin/env bash
# Executors confined for untrusted tenants (issue 37; docs/SECURITY.md), on the device machine:
# a `gpuless serve` with its default confinement (executors as `nobody`, namespaces and their
# own file-system view, the seccomp allow-list), and
#
#   scripts/gpu-suite-confine.sh BIN_DIR SUITE_BIN OUT_DIR
#
# prints one `row|NAME|PASS, FAIL or INFO|detail` line each:
#   confine: executor process     a warm executor's /proc status: not root, seccomp filter on,
#                                 no_new_privs, not dumpable, its own network and mount
#                                 namespaces, and no /root, /home or /work in its view
#   confine: hostile session      testdata/cuda/suite/hostile.cu through the client: the victim's
#                                 memory intact, the attacker saw none of it (also in its own
#                                 allocation at the same address), every copy and memset before
#                                 its own allocation an error
#   confine: hostile native       the same pair without gpuless (INFO, the reference)
#   confine: seccomp refusals     system calls the filter refused in this section's sessions
#                                 (FAIL if any: the allow-list misses what the driver needs)
set -uo pipefail
bin=$(cd "$1" && pwd); sb=$(cd "$2" && pwd); out=$3
mkdir -p "$out"; out=$(cd "$out" && pwd)
gl="$bin/gpuless"
# shellcheck source=scripts/hidden.sh
. "$(dirname "$0")/hidden.sh"

"$gl" serve --listen 127.0.0.1:0 --cache-dir "$out/cache" --pool whole=1 >"$out/serve.out" 2>"$out/serve.log" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "tcp=" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o "tcp=[^ ]*" "$out/serve.out" | cut -d= -f2)
if [ -z "$addr" ]; then
  echo "row|confine: executor process|FAIL|the server did not start: $(tail -3 "$out/serve.log" | tr '\n' ' ')"
  exit 0
fi
for _ in $(seq 300); do grep -q "executor ready" "$out/serve.log" && break; sleep 0.1; done
ex=$(pgrep -P "$srv" | head -1)
if [ -z "$ex" ] || [ ! -r "/proc/$ex/status" ]; then
  echo "row|confine: executor process|FAIL|no executor process under the server ($(grep -c ready "$out/serve.log") ready lines)"
else
  st=/proc/$ex/status
  uid=$(awk '/^Uid:/ {print $3}' "$st"); sec=$(awk '/^Seccomp:/ {print $2}' "$st"); nnp=$(awk '/^NoNewPrivs:/ {print $2}' "$st")
  netns=$( [ "$(readlink "/proc/$ex/ns/net")" != "$(readlink /proc/self/ns/net)" ] && echo own || echo host)
  mntns=$( [ "$(readlink "/proc/$ex/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] && echo own || echo host)
  view=$(ls "/proc/$ex/root/" 2>/dev/null | tr '\n' ' ')
  dumpable=$(stat -c %U "/proc/$ex/mem" 2>/dev/null)
  # Files under /root, /home or /work in its view other than the cache's (which $out may hold).
  leaks=$(for p in root home work; do
    [ -e "/proc/$ex/root/$p" ] && find "/proc/$ex/root/$p" -path "/proc/$ex/root$out/cache" -prune -o -type f -print 2>/dev/null | head -3
  done | sed "s|^/proc/$ex/root||" | tr '\n' ' ')
  detail="uid $uid, Seccomp $sec, NoNewPrivs $nnp, net ns $netns, mount ns $mntns, /proc/PID/mem owned by $dumpable; view: $view"
  if [ "$uid" != 0 ] && [ "$sec" = 2 ] && [ "$nnp" = 1 ] && [ "$netns" = own ] && [ "$mntns" = own ] && [ -z "$leaks" ]; then
    echo "row|confine: executor process|PASS|$detail"
  else
    echo "row|confine: executor process|FAIL|$detail${leaks:+; in view:$leaks}"
  fi
fi

pair() { # MODE(native|remote) DIR
  local d=$2; rm -rf "$d"; mkdir -p "$d"
  if [ "$1" = native ]; then
    timeout 150 "$sb/hostile" victim "$d" >"$d/victim.out" 2>&1 & local v=$!
    timeout 150 "$sb/hostile" attack "$d" >"$d/attack.out" 2>&1
  else
    timeout 150 bash -c '. "$0"; hidden "$1" run --remote "$2" -- "$3" victim "$4"' "$(dirname "$0")/hidden.sh" "$gl" "$addr" "$sb/hostile" "$d" >"$d/victim.out" 2>&1 & local v=$!
    timeout 150 bash -c '. "$0"; hidden "$1" run --remote "$2" -- "$3" attack "$4"' "$(dirname "$0")/hidden.sh" "$gl" "$addr" "$sb/hostile" "$d" >"$d/attack.out" 2>&1
  fi
  wait "$v"
  local a; a=$(grep '^attack' "$d/attack.out" | tr '\n' ';')
  local vic; vic=$(grep '^victim' "$d/victim.out" | tr '\n' ' ')
  local ok=1
  grep -q '^victim intact' "$d/victim.out" || ok=0
  grep -q '^attack saw-victim-bytes no' "$d/attack.out" || ok=0
  # Before it allocated anything, every access at the victim's address is an error.
  grep -E '^attack (copy|memset)' "$d/attack.out" | grep -q ' cudaSuccess$' && ok=0
  echo "$ok|$vic; $a"
}
r=$(pair remote "$out/hostile-remote")
[ "${r%%|*}" = 1 ] && v=PASS || v=FAIL
echo "row|confine: hostile session|$v|${r#*|}"
r=$(pair native "$out/hostile-native")
echo "row|confine: hostile native|INFO|${r#*|}"

# The compatibility programs through this confined server's neighbours: any refusal of the
# filter in any log of this section is a miss of the allow-list.
COMPAT_RECORD=0 COMPAT_TIMEOUT=60 timeout 200 bash "$(dirname "$0")/gpu-suite-compat.sh" "$bin" "$sb" "$out/compat" >"$out/compat.rows" 2>&1
pass=$(grep -c '|PASS|' "$out/compat.rows"); all=$(grep -c '^row|' "$out/compat.rows")
echo "row|confine: compatibility programs, confined|INFO|$pass of $all rows PASS (remote and native)"
refused=$(cat "$out"/serve.log "$out"/compat/*.log 2>/dev/null | grep -o "system call [0-9]* refused" | sort | uniq -c | tr '\n' ' ')
if [ -z "$refused" ]; then
  echo "row|confine: seccomp refusals|PASS|none in this section's sessions"
else
  echo "row|confine: seccomp refusals|FAIL|$refused"
fi
