#!/usr/bin/env python3
"""Reads `gpuless analyze --json TRACE` on stdin and prints a one-line summary."""
import json, sys

d = json.load(sys.stdin)["stats"]
names = []
for u in d.get("unmodeled", [])[:8]:
    names.append(u.get("name", str(u)) if isinstance(u, dict) else str(u))
print(f"{d['calls']} calls, {d['kernel_launches']} launches, {d['unmodeled_calls']} unmodeled"
      + (f" ({', '.join(names)})" if names else ""))
