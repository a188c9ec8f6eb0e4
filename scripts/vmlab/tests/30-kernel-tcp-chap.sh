#!/bin/sh
# LIO with mutual CHAP, the kernel's iscsi_tcp: the right secrets log in and move data, a wrong
# password is refused.
. "$VMLAB_LIB"
set -eu

export LIO_CHAP_USER=vmlab-in LIO_CHAP_PASS=secret-in-12345
export LIO_CHAP_MUTUAL_USER=vmlab-out LIO_CHAP_MUTUAL_PASS=secret-out-1234
step rxe-up rxe_up
step lio-target-chap lio_target "$VMLAB_IQN" rd:64

export ISCSI_CHAP_USER=vmlab-in ISCSI_CHAP_PASS=wrong-password-1
step wrong-chap-refused sh -c '. "$VMLAB_LIB"; ! iscsi_login "$0" tcp' "$VMLAB_IQN"
step logout-after-refusal iscsi_logout_all

export ISCSI_CHAP_PASS=secret-in-12345 ISCSI_CHAP_MUTUAL_USER=vmlab-out ISCSI_CHAP_MUTUAL_PASS=secret-out-1234
step kernel-tcp-chap-login iscsi_login "$VMLAB_IQN" tcp >disk
step session-is-tcp sh -c 'iscsiadm -m session | grep -q "^tcp: "'
step write-read verify_rw "$(cat disk)" 16
step logout iscsi_logout_all
