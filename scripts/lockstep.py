#!/usr/bin/env python3
"""Two runs of one PyTorch workload taking turns, inference by inference: the GPU suite's way of
comparing the client with native hot latency on a host whose speed drifts between processes.

    scripts/lockstep.py ITERS OUT_PREFIX "CMD_A" "CMD_B"

Each command (run with `bash -c`, e.g. the workload natively and the same through `gpuless run
--remote`) gets LOCKSTEP=OUT_PREFIX.a / .b and HOT_ITERS=ITERS (testdata/workloads/_common.py):
both start together and warm up at their own pace; then they take turns of LOCKSTEP_BLOCK
inferences (default 10: the GPU's switch between the two processes' contexts falls on the first of
each turn, which the medians leave out), A first in even turns and B first in odd ones, so that
whatever the machine does meets both alike (clock changes, other tenants), where back-to-back
processes each meet their own. Stdout and
stderr of each go to OUT_PREFIX.{a,b}.{out,err}. LOCKSTEP_CPUS (a `taskset -c` list) puts both runs,
with every process they start, on the same CPUs: they never run at once, and a process's speed on
this host depends on where it lands. Prints one JSON line: both checksums, both
medians, the ratio of the medians (B over A) and the median of the per-inference ratios.
Exits 1 when a run fails or stops early; each wait is bounded (READY_S for warm-up, 60 s per
inference).
"""
import errno, json, os, select, statistics, subprocess, sys, time

READY_S = float(os.environ.get("LOCKSTEP_READY_S", 600))


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    iters, prefix, cmds = int(sys.argv[1]), sys.argv[2], sys.argv[3:5]
    runs = []
    for tag, cmd in zip("ab", cmds):
        p = f"{prefix}.{tag}"
        for f in (p + ".go", p + ".done"):
            if os.path.exists(f):
                os.unlink(f)
            os.mkfifo(f)
        # The read end of .done first (never blocks), so the run's open of its write end does not.
        done = os.open(p + ".done", os.O_RDONLY | os.O_NONBLOCK)
        env = dict(os.environ, LOCKSTEP=p, HOT_ITERS=str(iters))
        cpus = os.environ.get("LOCKSTEP_CPUS")
        argv = (["taskset", "-c", cpus] if cpus else []) + ["bash", "-c", cmd]
        proc = subprocess.Popen(argv, env=env, stdout=open(p + ".out", "w"), stderr=open(p + ".err", "w"))
        runs.append({"tag": tag, "prefix": p, "done": done, "proc": proc, "go": None})

    def fail(why):
        for r in runs:
            r["proc"].kill()
        print(json.dumps({"ok": False, "why": why}))
        sys.exit(1)

    # The write end of .go opens once the run reaches its hot loop (it opens the read end there).
    deadline = time.monotonic() + READY_S
    for r in runs:
        while r["go"] is None:
            try:
                r["go"] = os.open(r["prefix"] + ".go", os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                if r["proc"].poll() is not None:
                    fail(f"run {r['tag']} exited with {r['proc'].returncode} before its hot loop")
                if time.monotonic() > deadline:
                    fail(f"run {r['tag']} not ready after {READY_S} s")
                time.sleep(0.01)
        os.set_blocking(r["go"], True)

    def turn(r, i):
        os.write(r["go"], b"g")
        ready, _, _ = select.select([r["done"]], [], [], 60)
        if not ready or os.read(r["done"], 1) != b"x":
            fail(f"run {r['tag']} did not finish turn {i}")

    block = max(1, int(os.environ.get("LOCKSTEP_BLOCK", 10)))
    for i in range((iters + block - 1) // block):
        for r in (runs if i % 2 == 0 else runs[::-1]):
            turn(r, i)
    for r in runs:
        os.close(r["go"])
        try:
            r["proc"].wait(timeout=120)
        except subprocess.TimeoutExpired:
            fail(f"run {r['tag']} did not exit")
    res = []
    for r in runs:
        try:
            res.append(json.loads(open(r["prefix"] + ".out").read().strip().splitlines()[-1]))
        except Exception as e:
            fail(f"run {r['tag']} (rc {r['proc'].returncode}) printed no result: {e}")
    a, b = res
    if len(a.get("hot_ms", [])) != iters or len(b.get("hot_ms", [])) != iters:
        fail("a run timed fewer inferences than asked")
    ma, mb = statistics.median(a["hot_ms"]), statistics.median(b["hot_ms"])
    per = statistics.median(y / x for x, y in zip(a["hot_ms"], b["hot_ms"]))
    q = lambda v, f: sorted(v)[min(len(v) - 1, int(f * len(v)))]
    print(json.dumps({"ok": all(r["proc"].returncode == 0 for r in runs), "iters": iters,
                      "checksum_a": a["checksum"], "checksum_b": b["checksum"],
                      "median_a_ms": round(ma, 4), "median_b_ms": round(mb, 4), "ratio": round(mb / ma, 4),
                      "median_of_ratios": round(per, 4),
                      "p90_a_ms": round(q(a["hot_ms"], 0.9), 4), "p90_b_ms": round(q(b["hot_ms"], 0.9), 4)}))


if __name__ == "__main__":
    main()
