#!/usr/bin/env bash
# Diagnoses the segmentation fault of tests/synth on the GPU image (gcc 13.3, Python 3.12.3, pybind11 3.1.0,
# numpy 2.5.2; found by gpu_one_gpu_check.sh, not reproduced with gcc 12 on Python 3.11 or 3.12): each case in its
# own interpreter with the fault handler, then the extension built with AddressSanitizer + UBSan, then gdb's stack.
# Usage on the GPU machine, from a checkout's root:  OUT=<dir> bash benchmarks/nccl_tests/gpu_synth_crash.sh
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
case_ numpy_default "import numpy; import autoccl.synth as S; print(S.generate('mesh', [3, 3]))"
case_ numpy_ring "import numpy; import autoccl.synth as S; print(S.generate('ring', [4]))"
case_ numpy_topology "import numpy; import autoccl.synth as S; t = S.ext().Topology(); print(t)"
# The extension with AddressSanitizer + UBSan (warnings not errors: gcc 13 flags pybind11's own header with
# -Warray-bounds); the source tree's autoccl finds it through AUTOCCL_LIB_DIR.
if cmake -S . -B /tmp/san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAUTOCCL_SANITIZE=address -DAUTOCCL_WERROR=OFF \
     -DAUTOCCL_BUILD_TESTS=OFF > /tmp/san.log 2>&1 && cmake --build /tmp/san --target _synth -j 16 >> /tmp/san.log 2>&1; then
  (cd /tmp && PYTHONPATH=$OLDPWD/python AUTOCCL_LIB_DIR=/tmp/san/lib LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
     ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 timeout 120 python3 -X faulthandler -c \
     "import numpy; import autoccl.synth as S; print(S.ext().__file__); print($G)" > "$OUT/asan.txt" 2>&1)
  echo "[synth-crash] asan build: rc $? $(grep -m3 -E 'ERROR: AddressSanitizer|runtime error|Topology object' "$OUT/asan.txt" | tr '\n' ' ')"
else
  echo "[synth-crash] asan build failed"; grep -m5 -E "error" /tmp/san.log
fi
# No gdb on the image: a preloaded SIGSEGV handler prints each frame's object and offset, and addr2line maps
# the extension's frames (a Release build with -g, as the wheel's flags plus debug information).
cat > /tmp/segv.c <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static void onsegv(int sig) {
  void* f[64];
  int n = backtrace(f, 64);
  for (int i = 0; i < n; ++i) {
    Dl_info d;
    if (dladdr(f[i], &d) && d.dli_fname)
      fprintf(stderr, "frame %d %s +0x%lx %s\n", i, d.dli_fname, (unsigned long)((char*)f[i] - (char*)d.dli_fbase),
              d.dli_sname ? d.dli_sname : "?");
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void init(void) { signal(SIGSEGV, onsegv); }
C
gcc -shared -fPIC -O1 -o /tmp/segv.so /tmp/segv.c
if cmake -S . -B /tmp/relg -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g -DAUTOCCL_BUILD_TESTS=OFF \
     > /tmp/relg.log 2>&1 && cmake --build /tmp/relg --target _synth -j 16 >> /tmp/relg.log 2>&1; then
  (cd /tmp && PYTHONPATH=$OLDPWD/python AUTOCCL_LIB_DIR=/tmp/relg/lib LD_PRELOAD=/tmp/segv.so timeout 60 python3 -c \
     "import numpy; import autoccl.synth as S; print(S.ext().__file__); print($G)" > "$OUT/frames.txt" 2>&1)
  echo "[synth-crash] release -g build: rc $?"
  so=$(ls /tmp/relg/lib/_synth*.so)
  grep -E "^frame .*_synth" "$OUT/frames.txt" | while read -r _ i obj off _; do
    echo "frame $i: $(addr2line -C -f -i -e "$so" "${off#+}" | paste -sd' ')"
  done | tee "$OUT/frames_mapped.txt"
  grep -E "^frame" "$OUT/frames.txt" | head -12
else
  echo "[synth-crash] release -g build failed"; grep -m5 -E "error" /tmp/relg.log
fi

cat /tmp/case_*.txt > "$OUT/cases.txt"
