#!/bin/bash
# Shared by the GPU scripts of this folder: safety variables, install, GPU count, logging, timing.
# Runs on the GPU box from the repository root; everything goes under $OUT.
set -euo pipefail
: "${OUT:?set OUT to the output folder}"
export PYTHONUNBUFFERED=1
# NVLink multicast must stay off in every launch (it can take a shared host down); the harness also
# sets these for every mode, plain nccl included.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

install_autoccl() {
  # The box has no internet: build with the present scikit-build-core/pybind11/cmake/ninja, no deps.
  if python3 -c "from autoccl._paths import plugin_path; plugin_path()" 2>/dev/null \
     && [ -f /tmp/autoccl-installed ] && [ "$(cat /tmp/autoccl-installed)" = "$(src_hash)" ]; then
    echo "autoccl already installed ($(src_hash))"; return
  fi
  local t0=$SECONDS
  python3 -m pip install --no-build-isolation --no-deps . > "$OUT/pip-install.log" 2>&1 \
    || { tail -40 "$OUT/pip-install.log"; exit 1; }
  src_hash > /tmp/autoccl-installed
  echo "installed autoccl in $((SECONDS - t0)) s"
  python3 -c "import click, rich, numpy" || { echo "click/rich/numpy missing on this box"; exit 1; }
}

src_hash() { find python csrc CMakeLists.txt pyproject.toml -type f -not -path '*__pycache__*' 2>/dev/null | sort | xargs cat | sha1sum | cut -c1-12; }

gpu_count() { python3 -c "import torch; print(torch.cuda.device_count())"; }

machine_info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sort | uniq -c
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
}

# run_part NAME BUDGET_S CMD...: prints the harness's own estimate first (dry run), then runs, then the time.
run_part() {
  local name=$1 budget=$2; shift 2
  echo "=== $name (budget ${budget} s; GPUs: $(gpu_count))"
  # (bench train has no dry run: its estimate is skipped silently)
  "$@" --dry-run --est-busbw "${EST_BUSBW:-150}" --est-startup "${EST_STARTUP:-25}" 2>/dev/null | tail -1 || true
  local t0=$SECONDS
  timeout "$budget" "$@" --no-progress -o "$OUT/$name" || echo "=== $name: exit status $?"
  echo "=== $name took $((SECONDS - t0)) s"
}
