#!/bin/sh
# tgt (STGT) with iSER on 3260, the kernel's ib_iser logged in, data written and read back.
. "$VMLAB_LIB"
set -eu

iqn=iqn.2003-01.org.vmlab:tgt
step rxe-up rxe_up
step tgt-iser tgt_iser "$iqn" 64
export ISCSI_LUN=1 # tgt: LUN 0 is its controller
step kernel-iser-login-tgt iscsi_login "$iqn" iser >disk
step write-read verify_rw "$(cat disk)" 16
step logout iscsi_logout_all
