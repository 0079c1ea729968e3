#!/bin/bash
# A first CUDA run of the harness (everything before ran on CPU/gloo): installs the package on the GPU box,
# then a small `bench coll` (AG/RS/AR at 16 and 256 MiB, modes nccl and online, loads none and light,
# data checked) and a short `bench train` (350m, FSDP2 and DDP, nccl and online, 60 iterations).
# Not the bench matrix (evidence.sh): a check that the CUDA paths work, with numbers kept as a smoke record only.
#   OUT=... bash benchmarks/h200/smoke_cuda.sh
source "$(dirname "$0")/common.sh"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-32}
machine_info
install_autoccl
run_part smoke_coll 200 python3 -m autoccl bench coll --colls ag,rs,ar --sizes 16M,256M --modes nccl,online \
  --load none,light --check -w 3 -n 10 -r 3 --online-warmup 150
run_part smoke_train 170 python3 -m autoccl bench train --preset 350m --parallel fsdp2,ddp --modes nccl,online -n 60
