#!/bin/sh
# The floors under the 4k rows, no network behind them: the kernel's null_blk (fio and the
# block layer alone) and a ublk device whose queue loop serves reads and writes from memory
# itself (bin/ublkmem -async on tmpfs, queue depth 128 as the iSER rows): what ublk's round trip
# costs in this lab before any iSCSI work. Their sys_us/io against the kernel-iser rows says how
# much of the whole machine's CPU per I/O ublk adds (docs/fastpath.md, "What limits the rest").
# vmlab-timeout: 300
. "$VMLAB_LIB"
set -eu

wl=
for w in $VMLAB_WORKLOADS; do
	case $w in 4k-*) wl="$wl $w" ;; esac
done
[ -n "$wl" ] || exit 0
VMLAB_WORKLOADS=$wl
rc=0

step null-blk-load modprobe null_blk nr_devices=1 gb=1
fio_baseline /dev/nullb0 floor-null-blk || rc=1
step null-blk-unload modprobe -r null_blk

step ublk-load ublk_load
# Where the kernel offers UBLK_F_BATCH_IO (which ublkmem then uses), the floor again without it.
floors=floor-ublk-mem
iser-attach version --verbose 2>/dev/null | grep -q 'UBLK_F_BATCH_IO  *yes' && floors="floor-ublk-mem floor-ublk-mem-nobatch"
for fl in $floors; do
	img=/dev/shm/floor.img idf=/tmp/floor.id
	rm -f "$img" "$idf"
	nb=
	[ "$fl" = floor-ublk-mem-nobatch ] && nb=-no-batch
	# shellcheck disable=SC2086 # $nb: a flag or nothing
	ublkmem -async $nb -backing "$img" -size 256M -depth 128 -id-file "$idf" >"$VMLAB_RESULTS/ublkmem-$fl.log" 2>&1 &
	pid=$!
	step "ublkmem-ready-$fl" wait_for 30 test -s "$idf"
	fio_baseline "/dev/ublkb$(cat "$idf")" "$fl" "" "$pid" || rc=1
	kill -TERM "$pid"
	step "ublkmem-stop-$fl" wait "$pid"
	rm -f "$img"
done
exit $rc
