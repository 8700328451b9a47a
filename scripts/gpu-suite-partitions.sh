#!/usr/bin/env bash
# Partition checks of the GPU suite (issue 6), on a GPU whose MIG mode is OFF:
#
#   scripts/gpu-suite-partitions.sh BIN_DIR TRACE [OUT_DIR]
#
# BIN_DIR holds the `gpuless` binary; TRACE is a ResNet-50 trace recorded on this machine.
# Replays TRACE with `--json` on soft partitions of this GPU's smallest 1g profile and its 3g
# profile (`--emulate`; on an H200 1g.18gb: 16 SMs, 3g.71gb: 60 SMs asked, 64 granted by the
# driver's 8-SM co-scheduling alignment; an H100's 1g.10gb and 3g.40gb alike) and on the full GPU,
# then captures the error texts of a profile of another GPU model and of the 3g profile without
# `--emulate` (MIG off). Prints a table (profile, SMs asked/granted,
# replay latency, verification) and one `SUITE-ROW label|PASS-or-FAIL|details` line per check
# for the main suite; writes partitions.md and the JSON reports to OUT_DIR (default: a temporary
# folder). Exit status 0 when every check passed. An extra, informational run with
# `--exact-sms` (60 SMs, fine split) shows whether the trace's kernels survive a split without
# co-scheduling (cuDNN's cluster kernels do not); it emits no SUITE-ROW and never fails the suite.
#
# Every run is a hot replay (`--iterations $GPULESS_PARTITION_ITERS`, default 20): set-up once,
# the body once verified, then timed; the table shows the median wall and GPU time per iteration.
#
# SAFETY: read-only for MIG. Nothing here uses `--create`, toggles MIG mode or creates instances.
set -uo pipefail
bin=${1:?usage: gpu-suite-partitions.sh BIN_DIR TRACE [OUT_DIR]}
trace=${2:?usage: gpu-suite-partitions.sh BIN_DIR TRACE [OUT_DIR]}
out=${3:-$(mktemp -d)}
iters=${GPULESS_PARTITION_ITERS:-20}
gl="$bin/gpuless"
mkdir -p "$out"
[[ -x $gl ]] || { echo "missing $gl" >&2; exit 2; }
[[ -f $trace ]] || { echo "missing trace $trace" >&2; exit 2; }

# This GPU's profiles (names and SM counts differ per model: 1g.18gb / 3g.71gb on an H200,
# 1g.10gb / 3g.40gb on an H100): the smallest 1g profile without media extensions and the 3g
# one; the driver grants SMs in co-scheduled groups of 8 (60 asked -> 64).
read -r p1 s1 p3 s3 whole < <("$gl" devices --json 2>/dev/null | python3 -c '
import json, sys
g = json.load(sys.stdin)["gpus"][0]
ps = [p for p in g.get("profiles", []) if "+" not in p["name"]]
one = min((p for p in ps if p["name"].startswith("1g.")), key=lambda p: p["memory_mib"])
three = next(p for p in ps if p["name"].startswith("3g."))
print(one["name"], one["sms"], three["name"], three["sms"], g.get("sm_count") or max(p["sms"] for p in ps))')
align() { echo $((($1 + 7) / 8 * 8)); }
other=3g.20gb
[[ $p3 == 3g.20gb ]] && other=3g.71gb
export P3=$p3 OTHER=$other
# name | expected SMs (info: not a suite check) | gpuless arguments before the trace
runs=(
  "$p1 emulated|$(align "$s1")|--mig $p1 --emulate"
  "$p3 emulated|$(align "$s3")|--mig $p3 --emulate"
  "full GPU|$whole|"
  "$p3 emulated, --exact-sms (info)|info|--mig $p3 --emulate --exact-sms"
)
for r in "${runs[@]}"; do
  IFS='|' read -r label sms args <<<"$r"
  name=$(echo "$label" | tr -c 'A-Za-z0-9.\n' '-')
  # shellcheck disable=SC2086
  "$gl" replay --json --iterations "$iters" $args "$trace" >"$out/partition-$name.json" 2>"$out/partition-$name.err"
  echo "$? $sms $label" >"$out/partition-$name.rc"
done
"$gl" replay --mig "$other" "$trace" >"$out/error-missing-profile.out" 2>"$out/error-missing-profile.err"
echo $? >"$out/error-missing-profile.rc"
"$gl" replay --mig "$p3" "$trace" >"$out/error-mig-off.out" 2>"$out/error-mig-off.err"
echo $? >"$out/error-mig-off.rc"

python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows, suite, ok_all = [], [], True

def hot(r):
    h = r.get("hot")
    return f"{h['wall_ms_median']:.2f} / {h['gpu_ms_median']:.2f} ms" if h else "-"

for rc_file in sorted(glob.glob(os.path.join(out, "partition-*.rc"))):
    base = rc_file[:-3]
    rc, want, label = open(rc_file).read().strip().split(" ", 2)
    info = want == "info"
    rc, want = int(rc), (None if info else int(want))
    err = open(base + ".err").read().strip().splitlines()
    try:
        r = json.load(open(base + ".json"))
    except Exception:
        r = None
    if r is None:
        last = err[-1] if err else ""
        if info:
            rows.append((label, "-", "-", "-", "-", "-", "-", "-", f"failed (info) rc={rc}: {last}"))
            continue
        ok_all = False
        rows.append((label, "-", "-", "-", "-", "-", "-", "-", f"FAIL rc={rc}: {last}"))
        suite.append(f"partitions: {label}|FAIL|rc={rc} {last}")
        continue
    p = r.get("partition", {})
    granted = p.get("sms")
    verified, mism = r.get("results_verified", 0), len(r.get("mismatches", []))
    limit = p.get("memory_limit_bytes")
    limit_s = f"{limit / 2**30:.2f} GiB" if limit else "-"
    ok = rc == 0 and mism == 0 and verified > 0 and (info or granted == want)
    if info:
        rows.append((label, p.get("sms_requested") or "-", granted, p.get("sm_split") or "-", limit_s,
                     f"{r['replay_s'] * 1e3:.1f} ms", hot(r), f"{verified} ok / {mism} differ", "ran (info)"))
        continue
    ok_all &= ok
    fr = r.get("first_result_s")
    rows.append((label, p.get("sms_requested") or "-", granted, p.get("sm_split") or "-", limit_s,
                 f"{r['replay_s'] * 1e3:.1f} ms", hot(r), f"{verified} ok / {mism} differ",
                 ("PASS" if ok else f"FAIL rc={rc}") + f" ({p.get('kind')})"))
    suite.append(f"partitions: replay ResNet-50, {label}|{'PASS' if ok else 'FAIL'}|"
                 f"{granted} SMs granted (want {want}, split {p.get('sm_split')}), memory limit {limit_s}, "
                 f"replay {r['replay_s'] * 1e3:.1f} ms, hot {hot(r)}, first result {fr if fr is None else round(fr, 3)} s, "
                 f"{verified} results verified, {mism} mismatches; isolation: {p.get('isolation')}")
p3, other = os.environ["P3"], os.environ["OTHER"]
checks = [
    (f"error text: --mig {other} (another model's name)", "error-missing-profile",
     [f"`{other}` is not offered by this GPU", f"`{p3}`"]),
    (f"error text: --mig {p3} with MIG off", "error-mig-off",
     ["MIG mode is disabled", "nvidia-smi -i 0 -mig 1", "--emulate"]),
]
texts = []
for label, base, needles in checks:
    rc = int(open(os.path.join(out, base + ".rc")).read().strip())
    err = open(os.path.join(out, base + ".err")).read().strip()
    ok = rc == 2 and all(n in err for n in needles)
    ok_all &= ok
    texts.append((label, rc, err))
    suite.append(f"partitions: {label}|{'PASS' if ok else 'FAIL'}|rc={rc}: {err[:300]}")
hdr = ("run", "SMs asked", "SMs granted", "split", "memory limit", "replay (cold)", "hot wall / GPU per iteration",
       "verified", "result")
md = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
md += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
md.append("")
md.append("Emulated runs are soft partitions: a green context limits SMs only; memory capacity is "
          "limited by the replayer, memory bandwidth and L2 are shared (no isolation).")
for label, rc, err in texts:
    md += ["", f"{label} (exit {rc}):", "", "    " + err.replace("\n", "\n    ")]
text = "\n".join(md)
open(os.path.join(out, "partitions.md"), "w").write(text + "\n")
print(text)
print()
for s in suite:
    print("SUITE-ROW " + s)
sys.exit(0 if ok_all else 1)
PY
