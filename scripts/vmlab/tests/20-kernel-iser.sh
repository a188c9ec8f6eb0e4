#!/bin/sh
# LIO with iSER on rxe, the kernel's ib_iser logged in: random data written and read back on a
# 512-byte ramdisk LUN and a 4096-byte fileio LUN, then the baseline fio set, briefly.
# ISER_VMLAB_LOGIN_IQN makes the initiator log in to another IQN (to see this test fail).
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
login_iqn=${ISER_VMLAB_LOGIN_IQN:-$iqn}
step rxe-up rxe_up
step lio-target lio_target "$iqn" rd:128 file:32:4096
step kernel-iser-login iscsi_login "$login_iqn" iser >disk0
disk0=$(cat disk0)
step session-is-iser sh -c 'iscsiadm -m session | grep -q "^iser: .* $0 "' "$iqn"
step write-read-lun0 verify_rw "$disk0" 8
step lun1-disk sh -c '. "$VMLAB_LIB"; iscsi_disk "$0" 1 >disk1' "$iqn"
disk1=$(cat disk1)
step lun1-4096 test "$(blockdev --getss "$disk1")" = 4096
step write-read-lun1 verify_rw "$disk1" 4
step fio-baseline fio_baseline "$disk0" kernel-iser "${VMLAB_E2E_FIO_SECONDS:-2}"
step logout iscsi_logout_all
