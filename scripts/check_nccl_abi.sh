#!/usr/bin/env bash
# Maintainer check: compiles scripts/nccl_abi_check.cc against an NCCL source checkout, so that every size,
# offset, value and signature csrc/nccl/abi declares is held against NCCL's own plugin headers. Run it for each
# NCCL release the plugin supports (README), e.g. with a clone of github.com/NVIDIA/nccl beside this project:
#
#   git -C ../nccl checkout v2.30.7-1 && bash scripts/check_nccl_abi.sh ../nccl
#
# NCCL's nccl.h is generated at build time and needs CUDA's headers; the check needs only its ncclResult_t,
# which is taken from the checkout's src/nccl.h.in into a stand-in nccl.h in a scratch folder.
set -euo pipefail
cd "$(dirname "$0")/.."
NCCL_SRC=${1:-../nccl}
CXX=${CXX:-c++}
if [ ! -f "$NCCL_SRC/src/include/plugin/nccl_tuner.h" ] || [ ! -f "$NCCL_SRC/src/nccl.h.in" ]; then
  echo "check_nccl_abi: $NCCL_SRC is not an NCCL source checkout (no src/include/plugin/nccl_tuner.h)" >&2
  exit 2
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
{
  echo "#pragma once"
  echo "#include <stddef.h>"
  echo "#include <stdint.h>"
  awk '/typedef enum *\{ *ncclSuccess/,/\} *ncclResult_t;/' "$NCCL_SRC/src/nccl.h.in"
} > "$scratch/nccl.h"
grep -q ncclResult_t "$scratch/nccl.h" || { echo "check_nccl_abi: no ncclResult_t in $NCCL_SRC/src/nccl.h.in" >&2; exit 2; }
version=$(git -C "$NCCL_SRC" describe --tags 2>/dev/null || echo "$NCCL_SRC")
"$CXX" -std=c++17 -fsyntax-only -DNCCL_OS_LINUX -I csrc -I "$scratch" -I "$NCCL_SRC/src/include" \
  scripts/nccl_abi_check.cc
have=""
[ -f "$NCCL_SRC/src/include/plugin/tuner/tuner_v6.h" ] && have="$have, tuner v6"
[ -f "$NCCL_SRC/src/include/plugin/profiler/profiler_v6.h" ] && have="$have, profiler v6"
[ -f "$NCCL_SRC/src/include/plugin/profiler/profiler_v7.h" ] && have="$have, profiler v7"
echo "csrc/nccl/abi agrees with NCCL $version: tuner v5, profiler v5$have"
