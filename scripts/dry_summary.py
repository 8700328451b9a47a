#!/usr/bin/env python3
"""Reads `gpuless replay --dry-run --json TRACE` on stdin and prints a one-line summary."""
import json, sys

r = json.load(sys.stdin)
print(f"dry run: {r['checked']} checked, {r['violation_count']} violations"
      + (f" (first: {r['violations'][0]})" if r["violations"] else ""))
