#!/usr/bin/env bash
# Fail when traces/src/generated/ differs from what flatc generates from traces/schema/*.fbs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$root/traces/schema/regen.sh" "$tmp"
status=0
for f in "$tmp"/*.rs; do
  name="$(basename "$f")"
  if ! diff -u "$root/traces/src/generated/$name" "$f"; then
    echo "check-generated: traces/src/generated/$name is stale; run traces/schema/regen.sh" >&2
    status=1
  fi
done
exit $status
