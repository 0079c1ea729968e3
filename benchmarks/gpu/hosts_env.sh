# Sourced by hosts_on_one_gpu.sh and bench.sh's two-host plans: the environment that makes every rank on this
# machine's GPU 0 a host of its own to NCCL. NCCL refuses two ranks of one host on one GPU; ranks of different
# hosts (NCCL_HOSTID=$HOST_ID_PREFIX<rank>) meet through its network transport, here sockets over loopback.
# shellcheck disable=SC2034  # read by the scripts that source this file
HOST_ENV=(NCCL_TESTS_DEVICE=0 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
HOST_ID_PREFIX=autoccl-host-
