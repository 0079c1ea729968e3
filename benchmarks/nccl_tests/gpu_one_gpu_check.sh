#!/usr/bin/env bash
# What one GPU (nvidia-h100-x1 / nvidia-h200) can check of a commit on the GPU image, where NCCL refuses two
# ranks on one GPU and so no collective of two ranks can run:
#  1. the package builds and installs there (Python 3.12, scikit-build-core, the image's compilers, no
#     internet: no build isolation, no dependencies fetched) and `autoccl demo` runs from the installed package;
#  2. the plugin under the image's NCCL (2.28.9) on one GPU: nccl-tests (-g 1, data checked) under
#     `autoccl run` (online): NCCL loads it as tuner and profiler and every result checks out. A one-rank
#     communicator never asks the tuner (NCCL copies locally), so this checks loading, init and finalize only;
#  3. the C++ tests (Debug, warnings as errors) with the image's compiler;
#  4. the Python suite on Python 3.12 (`AUTOCCL_AGREEMENT_FULL=1 pytest tests`, as scripts/test.sh; pytest,
#     pytest-timeout and hypothesis from wheels carried in .carry/wheels-py312, fetched beside the project with
#     `pip download "pytest>=7.4" "pytest-timeout>=2.2" "hypothesis>=6.90" --python-version 3.12
#     --only-binary=:all: --platform manylinux_2_28_x86_64 -d .carry/wheels-py312`).
# Each step has its own time limit; the summary lines start with "[one-gpu]". STEPS (default "install nccl cxx
# pytest") picks steps; install always runs when pytest does. PYTEST_ARGS (default: the whole suite) narrows the
# suite. Logs other than the summary, the suite's output and the C++ test output go to $OUT/logs.tgz (the device
# tool brings back 8 files).
# Usage on the GPU machine, from a checkout's root:
#   OUT=<dir> bash benchmarks/nccl_tests/gpu_one_gpu_check.sh
STEPS=${STEPS:-install nccl cxx pytest}
want() { [[ " $STEPS " == *" $1 "* ]]; }
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
mkdir -p /tmp/logs
[ -f COMMIT ] && cp COMMIT "$OUT/commit.txt"
{ gcc --version | head -1; cmake --version | head -1; } >> "$OUT/machine.txt" 2>&1
say() { echo "[one-gpu] $*" | tee -a "$OUT/summary.txt"; }
step_start() { T_STEP=$SECONDS; }
took() { echo "$((SECONDS - T_STEP)) s"; }

# 1. install and demo
missing=$(python3 -c "
import importlib.util as u
print(' '.join(m for m in ('click', 'rich', 'numpy', 'yaml', 'matplotlib', 'scipy', 'torch') if u.find_spec(m) is None))")
say "runtime dependencies missing on this image: ${missing:-none}"
step_start
if timeout 240 python3 -m pip install --no-build-isolation --no-deps . > /tmp/logs/pip_install.log 2>&1; then
  say "pip install (Python $(python3 -c 'import sys; print(sys.version.split()[0])')): ok in $(took)"
  # How the toolchain links libstdc++, and what the synth extension exports (a static libstdc++ exported from it
  # crashed generate() once numpy was loaded first: benchmarks/results/h200x1/gpu-image-check/).
  synth=$(python3 -c "import autoccl._synth as m; print(m.__file__)" 2>/dev/null)
  say "g++ libstdc++.so: $(g++ -print-file-name=libstdc++.so); _synth exports $(nm -D --defined-only "$synth" | wc -l) symbols, $(nm -D --defined-only "$synth" | grep -c ' _ZNS[ot]\| _ZNKS[ot]') of them std::; needs $(ldd "$synth" | grep -c libstdc++) shared libstdc++"
  (cd /tmp && python3 -X faulthandler -c "import numpy; import autoccl.synth as S; print(S.generate('mesh', [3, 3]))" \
     > /tmp/logs/synth_after_numpy.txt 2>&1)
  say "numpy, then synth.generate('mesh', [3, 3]): rc $?"
  step_start
  if (cd /tmp && timeout 120 autoccl demo -o /tmp/demo > /tmp/logs/demo.txt 2>&1); then
    say "autoccl demo: ok in $(took): $(python3 -c "import json; d = json.load(open('/tmp/demo/results.json')); print(f'all tasks {100 * d[\"total_gain\"]:+.1f} %')")"
    cp /tmp/demo/tasks.md "$OUT/demo_tasks.md" 2>/dev/null
  else
    say "autoccl demo: FAILED (rc $?) after $(took)"; tail -20 /tmp/logs/demo.txt
  fi
else
  say "pip install: FAILED after $(took)"; tail -40 /tmp/logs/pip_install.log
fi

# 2. the plugin in the image's NCCL, one GPU
want nccl && step_start && for coll in all_reduce all_gather reduce_scatter broadcast reduce; do
  NCCL_DEBUG=INFO timeout 60 autoccl run --mode online -- "$NT_BIN/${coll}_perf" -b 1M -e 64M -f 4 -g 1 -c 1 -n 20 -w 5 \
    > "/tmp/logs/nt_${coll}.log" 2>&1
  rc=$?
  errs=$(awk '/^ +[0-9]+ +[0-9]+ +[a-z]/ {n++; if ($9 != "0" || $13 != "0") bad++} END {print n + 0, bad + 0}' "/tmp/logs/nt_${coll}.log")
  tuner=$(grep -m1 -oE "TUNER/Plugin: Using [^ ]+ \(v[0-9]+\)" "/tmp/logs/nt_${coll}.log")
  prof=$(grep -m1 -oE "PROFILER/Plugin: Loaded [^ ]+ \(v[0-9]+\)" "/tmp/logs/nt_${coll}.log")
  say "nccl-tests ${coll} -g 1 online: rc $rc, rows/rows with errors: ${errs}; ${tuner:-no TUNER/Plugin line}; ${prof:-no PROFILER/Plugin line}"
done
want nccl && say "nccl-tests: $(took)"

# 3. C++ tests
step_start
if ! want cxx; then :
elif timeout 200 bash -c 'cmake -S . -B /tmp/cxx -G Ninja -DCMAKE_BUILD_TYPE=Debug -DAUTOCCL_BUILD_PYTHON=OFF > /tmp/cxx.log 2>&1 &&
    cmake --build /tmp/cxx -j 16 >> /tmp/cxx.log 2>&1'; then
  (cd /tmp/cxx && timeout 150 ctest -j 16 > "$OUT/ctest.txt" 2>&1)
  say "C++ Debug build + ctest: rc $? in $(took): $(grep -E 'tests passed' "$OUT/ctest.txt")"
else
  say "C++ Debug build: FAILED after $(took)"; grep -E "error|warning" /tmp/cxx.log | head -20; cp /tmp/cxx.log /tmp/logs/
fi

# 4. the Python suite on 3.12 (-v: a crash shows the test it was in)
step_start
if ! want pytest; then :
elif python3 -m pip install -q --no-index --no-deps .carry/wheels-py312/*.whl > /tmp/logs/pip_test_deps.log 2>&1; then
  left=$(( ${CALL_LIMIT_S:-570} - SECONDS - 10 ))
  AUTOCCL_AGREEMENT_FULL=1 PYTHONFAULTHANDLER=1 timeout "$left" python3 -m pytest -v ${PYTEST_ARGS:-tests} \
    -p no:cacheprovider > "$OUT/pytest.txt" 2>&1
  say "pytest (Python 3.12, agreement suite full): rc $? in $(took): $(tail -1 "$OUT/pytest.txt")"
else
  say "test dependencies: FAILED"; tail -5 /tmp/logs/pip_test_deps.log
fi
say "total ${SECONDS} s"
tar -C /tmp -czf "$OUT/logs.tgz" logs acbuild.log 2>/dev/null
