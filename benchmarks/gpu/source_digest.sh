#!/usr/bin/env bash
# Prints one digest of the sources a GPU run builds and runs (the C++ and the Python package). bench.sh writes
# it next to commit.txt: the device machine's copy of .git can be older than the working tree it is sent, so
# commit.txt alone does not say which code ran. To match a result to a commit, run this at that commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
find csrc python CMakeLists.txt pyproject.toml -type f \
  \( -name '*.cc' -o -name '*.cpp' -o -name '*.h' -o -name '*.py' -o -name '*.map' -o -name '*.in' \
     -o -name CMakeLists.txt -o -name pyproject.toml \) -not -path '*/__pycache__/*' -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
