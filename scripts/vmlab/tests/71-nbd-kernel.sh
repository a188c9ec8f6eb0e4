#!/bin/sh
# The kernel NBD frontend (package nbd/kernel): /dev/nbdN configured over the nbd generic
# netlink family with 4 sockets served in-process from a counting in-memory export. The Go
# test drives dd O_DIRECT, fsync (Flush), O_DSYNC (FUA), blkdiscard (Trim, WriteZeroes),
# a backend error (EIO), mkfs.ext4 + mount, fio verify=crc32c QD32, and detach (size 0).
# Fails when the nbd module is missing.
. "$VMLAB_LIB"
set -eu

step binary test -x "$VMLAB_BIN/nbdkernel.test"
step nbd-load nbd_load
step nbd-kernel-device env ISER_LAB_NBD=1 "$VMLAB_BIN/nbdkernel.test" -test.run '^TestLab' \
	-test.v -test.count=1 -test.timeout 280s
# Nothing left bound: every /dev/nbdN the test used has size 0.
step nbd-all-unbound sh -c 'for s in /sys/block/nbd*/size; do [ "$(cat "$s")" = 0 ] || { echo "$s: $(cat "$s")"; exit 1; }; done'
