#!/usr/bin/env bash
# Sourced at the start of every GPU-machine call (benchmarks/gpu/bench.sh): records the machine, installs MPICH
# from the carried wheel (.whl/mpich-*.whl), builds NVIDIA's nccl-tests from its source carried in
# .carry/nccl-tests (fetched from its public repository beside the project; never committed) and the plugin
# library from this checkout, and NCCL Inspector where its source is carried. Exports NGPU, NT_BIN,
# AUTOCCL_LIB_DIR, PYTHONPATH and, with Inspector, INSPECTOR_SO. Returns non-zero, with the end of the failing
# build's log, when a build fails.
#
# NCCL: the image's (PyTorch's nvidia-nccl package), or with GPU_NCCL=DIR one carried as DIR/{include,lib} (NCCL
# built from its public source for sm_90, e.g. .carry/nccl-2.30.7 for tuner v6's chunk size), used by nccl-tests
# and every run of the call (LD_LIBRARY_PATH), plain NCCL and the plugin's alike.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T_SETUP=$SECONDS
{
  date -u +%FT%TZ; uname -a; nvidia-smi; nvidia-smi topo -m | sed 's/\x1b\[[0-9;]*m//g'  # no terminal colours
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
  nvcc --version | tail -2
} > "$OUT/machine.txt" 2>&1
NGPU=$(nvidia-smi -L | wc -l); export NGPU

python3 -m pip install -q --no-index --no-deps --prefix /opt/mpich .whl/mpich-*.whl || return 1
export PATH=/opt/mpich/bin:$PATH LD_LIBRARY_PATH=/opt/mpich/lib:${LD_LIBRARY_PATH:-}
if [ -n "${GPU_NCCL:-}" ]; then
  NCCL_PY=$(cd "$GPU_NCCL" && pwd) || return 1
else
  NCCL_PY=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
fi
mkdir -p /tmp/ncclhome/lib && ln -sfn "$NCCL_PY/include" /tmp/ncclhome/include
ln -sf "$NCCL_PY"/lib/libnccl.so.2 /tmp/ncclhome/lib/libnccl.so.2 && ln -sf libnccl.so.2 /tmp/ncclhome/lib/libnccl.so
echo "nccl: $NCCL_PY ($(strings "$NCCL_PY/lib/libnccl.so.2" | grep -m1 -oE 'NCCL version [0-9.]+[^ ]*'))" >> "$OUT/machine.txt"
export LD_LIBRARY_PATH=/tmp/ncclhome/lib:$LD_LIBRARY_PATH

# nccl-tests (single-process and MPI builds) and the plugin (Release, no Python extension, no tests) in parallel.
GENCODE="-gencode=arch=compute_90,code=sm_90"
(make -s -C .carry/nccl-tests/src -j8 BUILDDIR=/tmp/nt NCCL_HOME=/tmp/ncclhome CUDA_HOME=/usr/local/cuda \
   NVCC_GENCODE="$GENCODE" > /tmp/nt-build.log 2>&1) &
(make -s -C .carry/nccl-tests/src -j8 BUILDDIR=/tmp/nt_mpi MPI=1 MPI_HOME=/opt/mpich NAME_SUFFIX=_mpi \
   NCCL_HOME=/tmp/ncclhome CUDA_HOME=/usr/local/cuda NVCC_GENCODE="$GENCODE" > /tmp/nt-mpi-build.log 2>&1) &
(cmake -S . -B /tmp/acbuild -G Ninja -DCMAKE_BUILD_TYPE=Release -DAUTOCCL_BUILD_PYTHON=OFF \
   -DAUTOCCL_BUILD_TESTS=OFF > /tmp/acbuild.log 2>&1 &&
 cmake --build /tmp/acbuild --target autoccl_nccl -j 8 >> /tmp/acbuild.log 2>&1; echo $? > /tmp/acbuild.rc) &
# NCCL Inspector, when its source is carried in .carry/nccl-inspector (NCCL's ext-profiler/inspector at the tag of
# the image's NCCL, `git archive v2.28.9-1 ext-profiler/inspector`): a profiler plugin to chain behind autoccl's.
if [ -f .carry/nccl-inspector/inspector_plugin.cc ]; then
  (cd .carry/nccl-inspector && printf '#include "version.h"\nconst char* get_git_version_info() { return "carried"; }\n' \
     > /tmp/inspector_version.cc && g++ -I/usr/local/cuda/include -I. -Inccl -O2 -fPIC -shared -o /tmp/libnccl-profiler-inspector.so \
     inspector_plugin.cc inspector.cc json.cc /tmp/inspector_version.cc > /tmp/inspector-build.log 2>&1) &
fi
wait
[ -f /tmp/libnccl-profiler-inspector.so ] && export INSPECTOR_SO=/tmp/libnccl-profiler-inspector.so
cp /tmp/nt_mpi/*_perf_mpi /tmp/nt/ 2>/dev/null
ls /tmp/nt/*_perf /tmp/nt/*_perf_mpi > /dev/null 2>&1 || { tail -30 /tmp/nt-build.log /tmp/nt-mpi-build.log; return 1; }
[ "$(cat /tmp/acbuild.rc 2>/dev/null)" = 0 ] || { tail -40 /tmp/acbuild.log; return 1; }
export NT_BIN=/tmp/nt AUTOCCL_LIB_DIR=/tmp/acbuild/lib PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
echo "setup: ${NGPU} GPUs, nccl-tests and the plugin built in $((SECONDS - T_SETUP)) s"
