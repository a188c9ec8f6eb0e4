#!/bin/sh
# Baseline: the kernel's iscsi_tcp to the same kind of LIO LUN, same address, same workloads.
. "$VMLAB_LIB"
set -eu

step rxe-up rxe_up
step lio-target lio_target "$VMLAB_IQN" rd:256
step kernel-tcp-login iscsi_login "$VMLAB_IQN" tcp >disk
step fio-baseline fio_baseline "$(cat disk)" kernel-tcp
step logout iscsi_logout_all
