#!/usr/bin/env bash
# An mpirun for a machine with one GPU: `hosts_on_one_gpu.sh -np N CMD [ARGS...]` starts N ranks of CMD through
# MPICH's mpiexec, every rank on GPU 0 (NCCL_TESTS_DEVICE) and each a host of its own to NCCL (NCCL_HOSTID): NCCL
# refuses two ranks of one host on one GPU, and ranks of different hosts meet through its network transport, here
# sockets over loopback (NCCL_NET=Socket, NCCL_SOCKET_IFNAME=lo). It gives a communicator of NCCL's multi-host
# kind (NET transport, one rank per node, PAT for all_gather/reduce_scatter) where only one GPU is lent; the two
# ranks share the GPU's SMs, so its times say nothing of NVLink machines.
#
# Under `autoccl run`, whose own coordinator (AUTOCCL_RUN_ADDR) the library refuses for a communicator of several
# hosts (each host would meet at its own), the hosts here are all this machine: the run's coordinator is named as
# the job's (AUTOCCL_COORD_ADDR/TOKEN), as a multi-host launcher's variables would name one.
#
#   autoccl bench nccl-tests --launch mpi --gpus 2 --mpirun benchmarks/gpu/hosts_on_one_gpu.sh ...
set -euo pipefail
if [ "${1:-}" != -np ] || [ -z "${2:-}" ] || [ -z "${3:-}" ]; then
  echo "usage: $0 -np N CMD [ARGS...]" >&2
  exit 2
fi
ranks=$2
shift 2
if [ -n "${AUTOCCL_RUN_ADDR:-}" ] && [ -z "${AUTOCCL_COORD_ADDR:-}" ]; then
  export AUTOCCL_COORD_ADDR=$AUTOCCL_RUN_ADDR AUTOCCL_COORD_TOKEN=${AUTOCCL_RUN_TOKEN:?autoccl run sets it}
fi
exec mpiexec -np "$ranks" env NCCL_TESTS_DEVICE=0 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
  bash -c 'export NCCL_HOSTID=autoccl-host-${PMI_RANK:?mpiexec sets PMI_RANK}; exec "$@"' hosts_on_one_gpu "$@"
