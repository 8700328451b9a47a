#!/usr/bin/env bash
# Exports the CUDA samples that scripts/samples/list.tsv runs (their directories without docs,
# and Common/) from a git snapshot of NVIDIA/cuda-samples into DEST, to be carried to the GPU
# machine (scripts/gpu-suite-samples.sh builds and runs them there). Nothing of the samples is
# committed to this repository; DEST (e.g. .samples/ in the repository root) stays ignored.
#
#   scripts/samples/prepare.sh DEST
#
# SAMPLES_GIT: the snapshot's git directory (default: the first under
# /work/.mirror/NVIDIA+cuda-samples*); SAMPLES_REF: the tag (default v13.0, the samples of
# CUDA 13.0). Files over 256 KiB are stored gzipped (the GPU script unpacks them); files the snapshot lacks (it leaves out some large blobs) are listed and skipped.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DEST" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
list=$here/list.tsv
dest=$1
ref=${SAMPLES_REF:-v13.0}

gitdir=${SAMPLES_GIT:-}
if [ -z "$gitdir" ]; then
  for d in /work/.mirror/NVIDIA+cuda-samples*/repo /work/.mirror/NVIDIA+cuda-samples*; do
    if git --git-dir="$d" rev-parse --verify -q "$ref^{commit}" >/dev/null 2>&1; then gitdir=$d; break; fi
  done
fi
[ -n "$gitdir" ] || { echo "no NVIDIA/cuda-samples snapshot with $ref: set SAMPLES_GIT" >&2; exit 2; }
g() { git --git-dir="$gitdir" "$@"; }
commit=$(g rev-parse "$ref^{commit}")

# The directories to export: Common/ and every `run` row.
dirs=(Common)
while IFS=$'\t' read -r path decision _; do
  [[ $path == \#* || -z $path ]] && continue
  [ "$decision" = run ] && dirs+=("$path")
done <"$list"

for d in "${dirs[@]}"; do
  g rev-parse --verify -q "$commit:$d" >/dev/null || { echo "$d is not in $ref" >&2; exit 2; }
done

rm -rf "$dest"
mkdir -p "$dest"
# Left out: documentation, Windows libraries and the OpenGL headers (no selected sample uses them),
# the images of Common/data only the FreeImage NPP samples read, NV12toBGRandResize's inputs
# for sizes it does not run by default, and outputs committed beside some samples' sources
# (their runs write them again).
skip_re='(^|/)doc/|\.(doc|docx|pdf|dll|lib)$|^Common/(lib|GL)/|^Common/data/[^/]*[^y]\.(raw|pgm)$'
skip_re+='|/(teapot512_(cuda|gold)[^/]*\.bmp|Flow(CPU|GPU)\.flo|test(1280x720|640x480)\.nv12)$'
missing=0 n=0
while IFS=$'\t' read -r meta path; do
  read -r mode type sha <<<"$meta"
  [ "$type" = blob ] || continue
  [[ $path =~ $skip_re ]] && continue
  mkdir -p "$dest/$(dirname "$path")"
  if g cat-file blob "$sha" >"$dest/$path" 2>/dev/null; then
    [ "$mode" = 100755 ] && chmod +x "$dest/$path"
    # Large files travel compressed: scripts/gpu-suite-samples.sh unpacks every *.gz.
    if [ "$(stat -c %s "$dest/$path")" -gt 262144 ]; then gzip -9 "$dest/$path"; fi
    n=$((n + 1))
  else
    rm -f "$dest/$path"
    echo "absent from the snapshot: $path" >&2
    missing=$((missing + 1))
  fi
done < <(g ls-tree -r "$commit" -- "${dirs[@]}")

printf 'NVIDIA/cuda-samples %s %s\n' "$ref" "$commit" >"$dest/SOURCE"
echo "exported $n files of ${#dirs[@]} directories at $ref ($commit) to $dest ($missing absent from the snapshot; files over 256 KiB gzipped): $(du -sh --apparent-size "$dest" | cut -f1)"
