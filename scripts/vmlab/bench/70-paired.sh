#!/bin/sh
# Paired runs: the kernel's ib_iser and iser-attach's ublk over iSER logged in to the same LIO
# ramdisk LUN at once, each goal workload run on the two in turn, round by round (A B, B A,
# A B: paired_rows), so that the host's slow spells, which move single rows of this lab by a
# factor of two between runs, fall on both sides alike. Rows of kind "paired": the ublk
# device's IOPS over ib_iser's in each round and their median. VMLAB_PAIRED_ROUNDS (3) rounds;
# 0 skips the script. VMLAB_PAIRED_NOBATCH=1, where the kernel offers UBLK_F_BATCH_IO: a second
# ublk device without it (ISER_ATTACH_UBLK_BATCH=0) paired with the first the same way.
# VMLAB_PAIRED_KEEPSCHED=1: a ublk device left on the kernel's I/O scheduler (--io-scheduler
# keep: mq-deadline) paired with the first (none).
# vmlab-timeout: 600
. "$VMLAB_LIB"
set -eu

rounds=${VMLAB_PAIRED_ROUNDS:-3}
[ "$rounds" -gt 0 ] || exit 0
# The goal workloads (VMLAB_WORKLOADS without the 256k row), unless set.
: "${VMLAB_PAIRED_WORKLOADS:=$(for w in $VMLAB_WORKLOADS; do case $w in 256k-*) ;; *) echo "$w" ;; esac; done)}"
export VMLAB_PAIRED_WORKLOADS

ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:bench --log-level warn "$@"; }
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target lio_target "$VMLAB_IQN" rd:256
step kernel-iser-login iscsi_login "$VMLAB_IQN" iser >disk
dev=$(ia attach --daemon --frontend ublk --transport iser --portal "$VMLAB_ADDR:$LIO_PORT" \
	--target "$VMLAB_IQN" --lun 0 --queue-depth 128 --name bench-paired)
step attach-ublk test -b "$dev"
rc=0
paired_rows "$(cat disk)" kernel-iser "$dev" iser-attach-ublk-iser "$rounds" || rc=1
if [ "${VMLAB_PAIRED_NOBATCH:-0}" = 1 ] && iser-attach version --verbose 2>/dev/null | grep -q 'UBLK_F_BATCH_IO  *yes'; then
	dev2=$(ISER_ATTACH_UBLK_BATCH=0 ia attach --daemon --frontend ublk --transport iser --portal "$VMLAB_ADDR:$LIO_PORT" \
		--target "$VMLAB_IQN" --lun 0 --queue-depth 128 --name bench-paired-nobatch)
	step attach-ublk-nobatch test -b "$dev2"
	paired_rows "$dev" iser-attach-ublk-iser "$dev2" iser-attach-ublk-nobatch-iser "$rounds" || rc=1
	step detach-ublk-nobatch ia detach bench-paired-nobatch
fi
if [ "${VMLAB_PAIRED_KEEPSCHED:-0}" = 1 ]; then
	dev3=$(ia attach --daemon --frontend ublk --transport iser --portal "$VMLAB_ADDR:$LIO_PORT" \
		--target "$VMLAB_IQN" --lun 0 --queue-depth 128 --name bench-paired-keep --io-scheduler keep)
	step attach-ublk-keepsched test -b "$dev3"
	paired_rows "$dev" iser-attach-ublk-iser "$dev3" iser-attach-ublk-mqdeadline-iser "$rounds" || rc=1
	step detach-ublk-keepsched ia detach bench-paired-keep
fi
step detach-ublk ia detach bench-paired
step logout iscsi_logout_all
exit $rc
