#!/bin/sh
# Baseline: the kernel's ib_iser to a LIO ramdisk LUN over rxe, the four fio workloads.
. "$VMLAB_LIB"
set -eu

step rxe-up rxe_up
step lio-target lio_target "$VMLAB_IQN" rd:256
step kernel-iser-login iscsi_login "$VMLAB_IQN" iser >disk
step fio-baseline fio_baseline "$(cat disk)" kernel-iser
step logout iscsi_logout_all
