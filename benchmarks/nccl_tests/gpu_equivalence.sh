#!/usr/bin/env bash
# GPU check: torchrun (one process per GPU) all_gather_into_tensor, reduce_scatter_tensor and
# all_reduce under online tuning against plain NCCL, every iteration checked against a local reference,
# and every call's configuration compared across ranks. No nccl-tests build (quick).
# GPU_NCCL=DIR (e.g. .carry/nccl-2.30.7, unpacked from DIR.tar.xz): both runs load that NCCL instead of
# PyTorch's (LD_PRELOAD of its libnccl.so.2, same soname), e.g. NCCL 2.30, whose tuner v6 lets the search set
# chunk sizes. ITERS (default 50) iterations.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_equivalence.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
nvidia-smi -L > "$OUT/machine.txt"; NGPU=$(nvidia-smi -L | wc -l)
source benchmarks/nccl_tests/plugin_build.sh || exit 1
if [ -n "${GPU_NCCL:-}" ]; then
  if [ ! -d "$GPU_NCCL/lib" ] && [ -f "$GPU_NCCL.tar.xz" ]; then tar -C "$(dirname "$GPU_NCCL")" -xJf "$GPU_NCCL.tar.xz"; fi
  export LD_PRELOAD=$(cd "$GPU_NCCL/lib" && pwd)/libnccl.so.2
fi
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' | tee -a "$OUT/machine.txt"
export AUTOCCL_CACHE_DIR=/tmp/eq-cache
mkdir -p /tmp/traces/eq
EQ=benchmarks/torch_check/equivalence.py; TR="torchrun --nproc-per-node $NGPU"
$TR $EQ --iters ${ITERS:-50} --out "$OUT/eq_plain.json" 2>&1 | grep -E "^equivalence|Error" | tail -3
python3 -m autoccl run --mode online --channel-ceiling 64 --trace /tmp/traces/eq/online -- \
  $TR $EQ --iters ${ITERS:-50} --out "$OUT/eq_online.json" 2>&1 | grep -E "^equivalence|Error" | tail -3
echo "[online equivalence] $(python3 $EQ --compare "$OUT/eq_plain.json" "$OUT/eq_online.json" | tail -1)"
python3 -c "
import sys; sys.path.insert(0, 'benchmarks/nccl_tests'); import sweep, glob
f = glob.glob('/tmp/traces/eq/online*.jsonl')
print('[online equivalence] trace files', len(f), 'tuned calls', sum(1 for r in sweep.trace_records(f, 'call') if r.get('algo')))
print('[online equivalence] calls with a chunk below NCCL\'s', sum(1 for r in sweep.trace_records(f, 'call') if r.get('chunk_halvings')))
print('[online equivalence] cross-rank', sweep.cross_rank_agreement(f))"
[ -d /tmp/traces ] && python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces > "$OUT/pinned.md" 2>&1
echo "total ${SECONDS} s"
