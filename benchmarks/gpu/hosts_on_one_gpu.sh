#!/usr/bin/env bash
# An mpirun for a machine with one GPU: `hosts_on_one_gpu.sh -np N CMD [ARGS...]` starts N ranks of CMD through
# MPICH's mpiexec, every rank on GPU 0 (NCCL_TESTS_DEVICE) and each a host of its own to NCCL (hosts_env.sh). It
# gives a communicator of NCCL's multi-host kind (NET transport, one rank per node, PAT for all_gather /
# reduce_scatter) where only one GPU is lent; the two ranks share the GPU's SMs, so its times say nothing of
# NVLink machines.
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
source "$(dirname "$0")/hosts_env.sh"
exec mpiexec -np "$ranks" env "${HOST_ENV[@]}" HOST_ID_PREFIX="$HOST_ID_PREFIX" \
  bash -c 'export NCCL_HOSTID=$HOST_ID_PREFIX${PMI_RANK:?mpiexec sets PMI_RANK}; exec "$@"' hosts_on_one_gpu "$@"
