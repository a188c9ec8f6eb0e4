#!/bin/sh
# iser-attach as a block device over iSER: fio (libaio, O_DIRECT) on /dev/ublkbN and /dev/nbdN
# against the same kind of LIO ramdisk LUN as the kernel's ib_iser baseline in this run.
. "$VMLAB_LIB"
set -eu

ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:bench --log-level warn "$@"; }
step rxe-up rxe_up
step ublk-load ublk_load
step nbd-load nbd_load
step lio-target lio_target "$VMLAB_IQN" rd:256

for fe in ublk nbd; do
	dev=$(ia attach --daemon --frontend "$fe" --transport iser --portal "$VMLAB_ADDR:$LIO_PORT" \
		--target "$VMLAB_IQN" --lun 0 --name "bench-$fe")
	step "attach-$fe" test -b "$dev"
	step "fio-$fe" fio_baseline "$dev" "iser-attach-$fe-dev-iser"
	step "detach-$fe" ia detach "bench-$fe"
done
