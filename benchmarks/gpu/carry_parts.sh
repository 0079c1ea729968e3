#!/usr/bin/env bash
# Bring a file larger than one device call may carry (64 MiB with the working tree) to a GPU machine in parts,
# one part per call while the machine stays warm. Used for NCCL wheels from the package registry: the newest
# (nvidia-nccl-cu12 2.32.3) ships libnccl.so.2 at 474 MB, 216 MB compressed, and no public source of it exists
# to build on the machine.
#
# Here:    bash benchmarks/gpu/carry_parts.sh split NAME DIR
#            tars DIR (e.g. a wheel unpacked to {include,lib}), compresses it with xz and cuts it into
#            .carry-parts/NAME/part-NN of PART_MB MiB (default 48), with a manifest of sizes and sha256 sums.
# There:   bash benchmarks/gpu/carry_parts.sh gather NAME DEST
#            in each call, carrying .carry-parts/NAME/manifest and one or more parts: keeps the carried parts
#            in /root/carry-parts/NAME (outside the working tree, which each call replaces); once every part of
#            the manifest is there and its sum matches, unpacks into DEST and prints "complete". Exit status 0
#            when complete, 3 while parts are missing, 1 on a damaged part.
#
# Then `GPU_NCCL=DEST bash benchmarks/gpu/bench.sh` runs the plans on that NCCL (benchmarks/gpu/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmd=${1:-}; name=${2:-}; dir=${3:-}
[ -n "$cmd" ] && [ -n "$name" ] && [ -n "$dir" ] || { sed -n '2,17p' "$0"; exit 2; }
case "$name" in *[!A-Za-z0-9._-]*) echo "carry_parts: NAME may hold letters, digits, '.', '_' and '-' only" >&2; exit 2 ;; esac
here=.carry-parts/$name

case "$cmd" in
  split)
    [ -d "$dir" ] || { echo "carry_parts: no directory $dir" >&2; exit 2; }
    rm -rf "$here" && mkdir -p "$here"
    tar -C "$dir" -cf - . | xz -T0 -6 | split -b "${PART_MB:-48}M" -d -a 2 - "$here/part-"
    (cd "$here" && for p in part-*; do echo "$(sha256sum "$p" | cut -d' ' -f1) $(stat -c %s "$p") $p"; done) \
      > "$here/manifest"
    echo "carry_parts: $(wc -l < "$here/manifest") parts in $here:"
    cat "$here/manifest"
    ;;
  gather)
    [ -f "$here/manifest" ] || { echo "carry_parts: carry $here/manifest with each call" >&2; exit 2; }
    keep=/root/carry-parts/$name
    mkdir -p "$keep"
    cp "$here/manifest" "$keep/manifest"
    for p in "$here"/part-*; do [ -f "$p" ] && cp "$p" "$keep/"; done
    missing=0
    while read -r sum size part; do
      if [ ! -f "$keep/$part" ]; then echo "carry_parts: $part missing"; missing=1; continue; fi
      [ "$(stat -c %s "$keep/$part")" = "$size" ] && [ "$(sha256sum "$keep/$part" | cut -d' ' -f1)" = "$sum" ] || {
        echo "carry_parts: $part damaged (size or sum differs); carry it again" >&2; rm -f "$keep/$part"; exit 1; }
    done < "$keep/manifest"
    [ "$missing" = 0 ] || exit 3
    mkdir -p "$dir"
    cut -d' ' -f3 "$keep/manifest" | sed "s|^|$keep/|" | xargs cat | xz -d -T0 | tar -C "$dir" -xf -
    echo "carry_parts: complete, unpacked into $dir"
    ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
