#!/usr/bin/env bash
# Builds .snap/, what one GPU call needs from this checkout (device tool: carry [".snap"], then
# `cd .snap && ...` in the command): a git archive of HEAD without benchmarks/results, the oracle table the
# cycles check reads, the commit id (COMMIT: the GPU scripts copy it to commit.txt; the machine's copy of
# .git is not this one), and the ignored .carry/ (nccl-tests source) and .whl/ (MPICH wheel) that
# benchmarks/nccl_tests/setup_gpu.sh uses. The tool also copies the working tree, which with
# benchmarks/results is over its 64 MiB: move that folder out for the call and back afterwards
# (mv benchmarks/results /tmp/results_hold ... mv /tmp/results_hold benchmarks/results).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "device_snapshot: uncommitted changes are not in the snapshot (it is HEAD, $(git rev-parse --short HEAD))" >&2
fi
rm -rf .snap && mkdir .snap
git archive HEAD -- . ':!benchmarks/results' | tar -x -C .snap
mkdir -p .snap/benchmarks/results/h200x4/nccl_tests
cp benchmarks/results/h200x4/nccl_tests/env_oracle_best.json .snap/benchmarks/results/h200x4/nccl_tests/
git rev-parse HEAD > .snap/COMMIT
for d in .carry .whl; do
  if [ -d "$d" ]; then cp -r "$d" .snap/; else echo "device_snapshot: no $d/ (see setup_gpu.sh)" >&2; fi
done
du -sh .snap
