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
# HOSTS_PIN=1 gives each rank its own share of the CPUs this script may use (`taskset`, contiguous blocks in the
# order /proc lists them): NCCL's socket and proxy threads of one rank then never share a core with the other's,
# which did not make plain NCCL steadier between launches (benchmarks/results/h200x1/hosts-cpu-pinning).
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

# HOSTS_CPU_SETS: one comma-separated CPU list per rank, ';' between ranks; empty: no pinning
cpu_sets=
if [ "${HOSTS_PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || { echo "$0: HOSTS_PIN=1 needs taskset (util-linux)" >&2; exit 2; }
  allowed=()
  IFS=, read -ra parts <<<"$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then
      for ((c = ${part%-*}; c <= ${part#*-}; c++)); do allowed+=("$c"); done
    else
      allowed+=("$part")
    fi
  done
  per=$((${#allowed[@]} / ranks))
  if [ "$per" -lt 1 ]; then
    echo "$0: HOSTS_PIN=1: ${#allowed[@]} CPUs for $ranks ranks" >&2
    exit 2
  fi
  for ((r = 0; r < ranks; r++)); do
    set_r=$(IFS=,; echo "${allowed[*]:r*per:per}")
    cpu_sets+="${cpu_sets:+;}$set_r"
  done
elif [ "${HOSTS_PIN:-0}" != 0 ]; then
  echo "$0: HOSTS_PIN=${HOSTS_PIN}: expected 0 or 1" >&2
  exit 2
fi

exec mpiexec -np "$ranks" env "${HOST_ENV[@]}" HOST_ID_PREFIX="$HOST_ID_PREFIX" HOSTS_CPU_SETS="$cpu_sets" \
  bash -c 'export NCCL_HOSTID=$HOST_ID_PREFIX${PMI_RANK:?mpiexec sets PMI_RANK}
    if [ -n "$HOSTS_CPU_SETS" ]; then
      IFS=";" read -ra sets <<<"$HOSTS_CPU_SETS"
      exec taskset -c "${sets[PMI_RANK]}" "$@"
    fi
    exec "$@"' hosts_on_one_gpu "$@"
