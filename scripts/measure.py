#!/usr/bin/env python3
"""Runs a command, reading its stdout, and prints one JSON line: wall seconds, peak RSS of the
command (from wait4), stdout bytes, and how often each --count PATTERN occurs in stdout.

    measure.py [--label L] [--count PATTERN]... -- CMD ARGS...
"""
import json, os, subprocess, sys, time

def main():
    args = sys.argv[1:]
    label, patterns = None, []
    while args and args[0] != "--":
        if args[0] == "--label":
            label, args = args[1], args[2:]
        elif args[0] == "--count":
            patterns, args = patterns + [args[1].encode()], args[2:]
        else:
            sys.exit(f"measure.py: unknown option {args[0]}")
    cmd = args[1:]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    nbytes, hits, tail = 0, [0] * len(patterns), b""
    keep = max((len(pat) for pat in patterns), default=1) - 1
    while True:
        chunk = p.stdout.read(1 << 20)
        if not chunk:
            break
        nbytes += len(chunk)
        if patterns:
            data = tail + chunk
            # count matches that end in the new chunk only, so none is counted twice
            for i, pat in enumerate(patterns):
                hits[i] += data.count(pat) - tail.count(pat)
            tail = data[-keep:] if keep else b""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out = {"label": label or os.path.basename(cmd[0]), "wall_s": round(wall, 3),
           "max_rss_mb": round(usage.ru_maxrss / 1024, 1), "stdout_bytes": nbytes,
           "exit": os.waitstatus_to_exitcode(status)}
    if patterns:
        out["count"] = hits[0]
        out["counts"] = {pat.decode(): h for pat, h in zip(patterns, hits)}
    print(json.dumps(out))

main()
