#!/bin/sh
# LIO with mutual CHAP, the kernel's iscsi_tcp: the right secrets log in and move data.
# (A wrong-password login with the kernel initiator is no longer tried here: on 6.12.107 it
# oopsed once under load, NULL fput in iscsi_sw_tcp_conn_stop after "Security negotiation
# failed", which takes the whole lab down. iser-attach's own wrong-secret and wrong-mutual-
# secret refusals against this LIO set-up are checked in 60-iser-attach-lio.)
. "$VMLAB_LIB"
set -eu

export LIO_CHAP_USER=vmlab-in LIO_CHAP_PASS=secret-in-12345
export LIO_CHAP_MUTUAL_USER=vmlab-out LIO_CHAP_MUTUAL_PASS=secret-out-1234
step rxe-up rxe_up
step lio-target-chap lio_target "$VMLAB_IQN" rd:64

export ISCSI_CHAP_USER=vmlab-in ISCSI_CHAP_PASS=secret-in-12345 ISCSI_CHAP_MUTUAL_USER=vmlab-out ISCSI_CHAP_MUTUAL_PASS=secret-out-1234
step kernel-tcp-chap-login iscsi_login "$VMLAB_IQN" tcp >disk
step session-is-tcp sh -c 'iscsiadm -m session | grep -q "^tcp: "'
step write-read verify_rw "$(cat disk)" 16
step logout iscsi_logout_all
