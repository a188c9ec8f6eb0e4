#!/bin/sh
# Online resize of a ublk volume (UBLK_F_UPDATE_SIZE, issue 20), over iSER against LIO. The LUN
# is iblock on a device-mapper linear device over a loop file (lio_target dm:32): LIO reads an
# iblock LUN's capacity from its block device on every READ CAPACITY. 32 MiB are written, then
# the file, the loop device and the dm table grow to 48 MiB and `iser-attach resize NAME` runs.
# On Linux >= 6.16 (7.2): it prints the old and new sizes, blockdev --getsize64 shows 48 MiB,
# the first 32 MiB read back intact, fio verify=crc32c passes on the new 16 MiB; after SIGTERM
# (the device held by a dm device on top) a new attach takes it over at its new size (the
# state file recorded it; without that the takeover refuses: another LUN size). Before 6.16
# (6.12): resize fails in one line naming UBLK_F_UPDATE_SIZE and Linux >= 6.16, the device
# keeps its 32 MiB and its data.
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=rsz
lab=iqn.2026-11.io.iser-attach:lab
attach() {
	iser-attach --initiator-name $lab attach --daemon --frontend ublk --transport iser \
		--portal "$portal" --target "$iqn" --lun 0 --name $name >"$VMLAB_RESULTS/rsz-dev"
}
cleanup() {
	set +e
	dmsetup --noudevsync remove rszhold >/dev/null 2>&1
	timeout 30 iser-attach detach --force $name >/dev/null 2>&1
	cp /run/iser-attach/$name.log "$VMLAB_RESULTS/" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 143' TERM INT

rel=$(uname -r)
maj=${rel%%.*}
min=${rel#*.}
min=${min%%[!0-9]*}
can=no
if [ "$maj" -gt 6 ] || { [ "$maj" -eq 6 ] && [ "$min" -ge 16 ]; }; then
	can=yes
fi
echo "Linux $rel: UBLK_F_UPDATE_SIZE expected: $can"

step binaries test -x "$VMLAB_BIN/iser-attach"
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target sh -c '. "$VMLAB_LIB"; lio_target "$0" dm:32' "$iqn"
step attach attach
dev=$(cat "$VMLAB_RESULTS/rsz-dev")
echo "attached $name: $dev"
step size-32m test "$(blockdev --getsize64 "$dev")" = $((32 << 20))
head -c 32M /dev/urandom >/tmp/rsz-head
sha256sum </tmp/rsz-head >/tmp/rsz-head.sum
step write-head dd if=/tmp/rsz-head of="$dev" bs=1M oflag=direct status=none
head_intact() {
	dd if="$dev" bs=1M count=32 iflag=direct status=none | sha256sum | cmp -s - /tmp/rsz-head.sum
}

grow() { # the LUN's block device from 32 to 48 MiB
	dmn=vmlab$(echo "$iqn" | cksum | cut -d' ' -f1)_0
	f=$LIO_FILE_DIR/$dmn.img
	loop=$(losetup -j "$f" | cut -d: -f1)
	truncate -s 48M "$f" && losetup -c "$loop" || return 1
	dmsetup --noudevsync suspend "$dmn" || return 1
	echo "0 $((48 * 2048)) linear $loop 0" | dmsetup --noudevsync reload "$dmn" || return 1
	dmsetup --noudevsync resume "$dmn" || return 1
	test "$(blockdev --getsize64 "/dev/mapper/$dmn")" = $((48 << 20))
}
step grow-lun grow

if [ $can = yes ]; then
	step resize sh -c "iser-attach resize $name >/tmp/rsz-out"
	cat /tmp/rsz-out
	step resize-says grep -q "^$name ($dev): 33554432 -> 50331648 bytes" /tmp/rsz-out
	step size-48m test "$(blockdev --getsize64 "$dev")" = $((48 << 20))
	step tail-verify fio --name=tail --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite \
		--bs=4k-64k --iodepth=16 --offset=32M --size=16M --verify=crc32c --verify_fatal=1 \
		--output="$VMLAB_RESULTS/fio-rsz-tail.txt"
	step head-intact head_intact
	# A takeover after the resize: the state file and the device say 48 MiB, as the LUN does.
	# A dm device on top holds it (as a mount would), so SIGTERM leaves it for the next attach.
	step hold sh -c "echo '0 $((48 * 2048)) linear $dev 0' | dmsetup --noudevsync create rszhold"
	pid=$(vol_status $name | jq -r .pid)
	step sigterm kill -TERM "$pid"
	step daemon-exit wait_for 30 sh -c "! kill -0 $pid"
	step device-stays test -b "$dev"
	step reattach attach
	step same-device test "$(cat "$VMLAB_RESULTS/rsz-dev")" = "$dev"
	step size-48m-after-takeover test "$(blockdev --getsize64 "$dev")" = $((48 << 20))
	step head-intact-after-takeover head_intact
	step release dmsetup --noudevsync remove rszhold
else
	refused() {
		if iser-attach resize $name >/tmp/rsz-out 2>/tmp/rsz-err; then
			echo "resize succeeded: $(cat /tmp/rsz-out)"
			return 1
		fi
		cat /tmp/rsz-err
		test "$(wc -l </tmp/rsz-err)" = 1 &&
			grep -q "kernel lacks UBLK_F_UPDATE_SIZE (needs Linux >= 6.16)" /tmp/rsz-err
	}
	step resize-refused refused
	step size-kept test "$(blockdev --getsize64 "$dev")" = $((32 << 20))
	step head-intact head_intact
fi
step detach iser-attach detach $name
step device-removed sh -c "! test -e $dev"
