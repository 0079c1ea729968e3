#!/usr/bin/env bash
# Diagnoses the segmentation fault of tests/synth on the GPU image (gcc 13.3, Python 3.12.3, pybind11 3.1.0,
# numpy 2.5.2; found by gpu_one_gpu_check.sh, not reproduced with gcc 12 on Python 3.11 or 3.12): each case in its
# own interpreter with the fault handler, then the extension built with AddressSanitizer + UBSan, then gdb's stack.
# Usage on the GPU machine, from a snapshot's root:  OUT=<dir> bash benchmarks/nccl_tests/gpu_synth_crash.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ gcc --version | head -1; python3 --version; python3 -m pip list 2>/dev/null | grep -i -E "^(pybind11|numpy|torch|scikit-build-core) "; } > "$OUT/machine.txt" 2>&1
python3 -m pip install --no-build-isolation --no-deps . > /tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; exit 1; }
G="S.generate('mesh', [3, 3], bandwidth=50 * 2**30 / 1e9, latency=0.5)"
case_() {  # name, python code
  (cd /tmp && timeout 60 python3 -X faulthandler -c "$2" > "/tmp/case_$1.txt" 2>&1)
  echo "[synth-crash] $1: rc $? $(grep -m1 -E 'Topology object|Fatal Python error|Error' "/tmp/case_$1.txt")"
}
case_ default "import autoccl.synth as S; print(S.generate('mesh', [3, 3]))"
case_ kwargs "import autoccl.synth as S; print($G)"
case_ numpy_default "import numpy; import autoccl.synth as S; print(S.generate('mesh', [3, 3]))"
case_ numpy_kwargs "import numpy; import autoccl.synth as S; print($G)"
case_ torch_default "import torch; import autoccl.synth as S; print(S.generate('mesh', [3, 3]))"
case_ torch_kwargs "import torch; import autoccl.synth as S; print($G)"
case_ torus "import autoccl.synth as S; print(S.generate('torus', [3, 3, 2]))"
case_ synthesize "import autoccl.synth as S; t = S.generate('mesh', [3, 3]); print(S.synthesize(t, 'allgather', '4M', chunks=2, seeds=2, threads=2)[1])"
# The extension with AddressSanitizer + UBSan (the source tree's autoccl finds it through AUTOCCL_LIB_DIR).
if cmake -S . -B /tmp/san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAUTOCCL_SANITIZE=address -DAUTOCCL_BUILD_TESTS=OFF \
     > /tmp/san.log 2>&1 && cmake --build /tmp/san --target _synth -j 16 >> /tmp/san.log 2>&1; then
  (cd /tmp && PYTHONPATH=$OLDPWD/python AUTOCCL_LIB_DIR=/tmp/san/lib LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
     ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 timeout 120 python3 -X faulthandler -c \
     "import numpy; import autoccl.synth as S; print(S.ext().__file__); print($G); t = S.generate('mesh', [3, 3]); print(S.synthesize(t, 'allgather', '4M', chunks=2, seeds=2, threads=2)[1])" \
     > "$OUT/asan.txt" 2>&1)
  echo "[synth-crash] asan build: rc $? $(grep -m3 -E 'ERROR: AddressSanitizer|runtime error|Topology object' "$OUT/asan.txt" | tr '\n' ' ')"
else
  echo "[synth-crash] asan build failed"; tail -20 /tmp/san.log
fi
if command -v gdb > /dev/null; then
  (cd /tmp && timeout 120 gdb -q -batch -ex run -ex bt --args python3 -c "import numpy; import autoccl.synth as S; print($G)" \
     > "$OUT/gdb.txt" 2>&1)
  echo "[synth-crash] gdb: $(grep -m1 -E '^#0' "$OUT/gdb.txt")"
else
  echo "[synth-crash] no gdb on this image"
fi
cat /tmp/case_*.txt > "$OUT/cases.txt"
