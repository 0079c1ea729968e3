#!/usr/bin/env bash
# The project's one test command (README, and .ci/run runs exactly this).
# Installs everything it needs on a fresh machine, builds the package (C++ with -Werror), lints,
# builds and runs the C++ under AddressSanitizer+UBSan and ThreadSanitizer, then runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
JOBS=${AUTOCCL_JOBS:-$(nproc)}

# Each step says when it starts (seconds since the script began): where CI's time goes.
step() { printf '\n==> %s (at %ds)\n' "$*" "$SECONDS"; }

step "install autoccl and its test dependencies"
"$PY" -m pip install -q --upgrade ".[test]"
# CPU PyTorch for the benchmark harness's CPU tests (gloo backend).
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0"

# GoogleTest for the C++ tests (test-only, never linked into the plugin), from the system's packages.
if ! [ -e /usr/include/gtest/gtest.h ]; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get install -y -q libgtest-dev > /dev/null 2>&1 ||
    { $SUDO apt-get update -q > /dev/null && $SUDO apt-get install -y -q libgtest-dev > /dev/null; }
fi

step "lint"
"$PY" -m ruff check python tests benchmarks scripts
"$PY" -m ruff format --check python tests benchmarks scripts
"$PY" -m mypy python/autoccl

for san in address thread; do
  step "C++ under sanitizer: $san"
  mkdir -p build
  # -g1: the line tables a sanitizer report needs, at a quarter less compile time than full -g. ASan+UBSan
  # at -O1 (the level AddressSanitizer's documentation suggests) compiles in half the time of -O2.
  if [ "$san" = address ]; then opt=-O1; else opt=-O2; fi
  cmake -S . -B "build/san-$san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAUTOCCL_SANITIZE=$san \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" \
        -DAUTOCCL_BUILD_PYTHON=OFF > "build/san-$san.configure.log" 2>&1 || { cat "build/san-$san.configure.log"; exit 1; }
  cmake --build "build/san-$san" -j "$JOBS"
  (cd "build/san-$san" && ctest --output-on-failure -j "$JOBS")
  # The emulator suite again, with the sanitized plugin and emulator.
  AUTOCCL_LIB_DIR="$PWD/build/san-$san/lib" AUTOCCL_SANITIZER=$san \
    "$PY" -m pytest -q -m sanitize tests -p no:cacheprovider || [ $? -eq 5 ]
done

step "test suite"
# The agreement suite at full size: 120 emulator runs, 600 randomized scenarios (at least 500 asked).
# Tests run $JOBS at a time (one test file per worker), then those marked `serial` (timing or wall-clock
# deadlines that the load of the other workers would disturb) alone.
export AUTOCCL_AGREEMENT_FULL=1
"$PY" -m pytest -q tests -p no:cacheprovider -m "not serial" -n "$JOBS" --dist loadfile
"$PY" -m pytest -q tests -p no:cacheprovider -m serial
step "done"
