#!/bin/sh
# iser-attach attach/detach/list (issue 5) against LIO over rxe: for ublk and for nbd, over
# iSER and over TCP: attach, mkfs.ext4, mount, write files, sync, detach refused while mounted,
# a 16 MiB blkdiscard (more than LIO fileio takes in one UNMAP), fstrim reaching the target as
# UNMAP (discard counter), fsync as SYNCHRONIZE CACHE (flush
# counter), umount, detach, attach again, checksums verified; a new ublk device's I/O scheduler
# none, mq-deadline with --io-scheduler keep; fio verify=crc32c at QD32; two LUNs
# attached at once; the daemon killed with SIGKILL during fio verify and restarted: ublk user
# recovery takes the device over, no verify error. --read-only for both frontends. A kernel NBD
# daemon killed with SIGKILL: detach, or the next attach, disconnects the device it left.
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab --log-level warn "$@"; }
counter() { # counter NAME FIELD: a volume's I/O counter from list --json
	ia list --json | jq -r --arg n "$1" --arg f "$2" '.[] | select(.name == $n) | .counters[$f]'
}

step binaries test -x "$VMLAB_BIN/iser-attach"
step rxe-up rxe_up
step ublk-load ublk_load
step nbd-load nbd_load
step lio-target env LIO_WCE=1 LIO_TPU=1 sh -c '. "$VMLAB_LIB"; lio_target "$0" file:96 file:64:4096' "$iqn"
mkdir -p /mnt/v

sched_is() { # sched_is DEV NAME: NAME is DEV's active I/O scheduler
	grep -q "\[$2\]" "/sys/block/${1#/dev/}/queue/scheduler" || {
		echo "$1: scheduler $(cat "/sys/block/${1#/dev/}/queue/scheduler"), want $2"
		return 1
	}
}

cycle() { # cycle FRONTEND TRANSPORT LUN
	fe=$1 tr=$2 lun=$3 name=v-$1-$2
	dev=$(ia attach --daemon --frontend "$fe" --transport "$tr" --portal "$portal" --target "$iqn" \
		--lun "$lun" --name "$name") || return 1
	echo "$name: $dev"
	test -b "$dev" || return 1
	ia list | grep -q "^$name .*$tr .*$fe .*attached" || { ia list; return 1; }
	# A new ublk device gets the none scheduler (--io-scheduler's default); keep, below, leaves
	# the kernel's mq-deadline.
	[ "$fe" != ublk ] || sched_is "$dev" none || return 1
	# 16 MiB is more than one UNMAP may cover on LIO fileio (8192 blocks, one descriptor):
	# the daemon splits it to the LUN's Block Limits, or the target refuses it (EIO).
	blkdiscard -f -o 0 -l 16777216 "$dev" || { echo "a 16 MiB discard failed"; return 1; }
	mkfs.ext4 -q -F "$dev" || return 1
	mount "$dev" /mnt/v || return 1
	for i in 1 2 3; do head -c 4M /dev/urandom >/mnt/v/f$i || return 1; done
	(cd /mnt/v && sha256sum f1 f2 f3 >/tmp/sums) || return 1
	flushes=$(counter "$name" flushes)
	sync -f /mnt/v/f1 || return 1
	test "$(counter "$name" flushes)" -gt "$flushes" || { echo "fsync sent no FLUSH"; return 1; }
	if ia detach "$name" 2>/tmp/refused; then echo "detach of a mounted device succeeded"; return 1; fi
	grep -q "in use" /tmp/refused || { cat /tmp/refused; return 1; }
	rm /mnt/v/f3
	fstrim /mnt/v || return 1
	test "$(counter "$name" discards)" -gt 0 || { echo "fstrim sent no discard"; return 1; }
	umount /mnt/v || return 1
	ia detach "$name" || return 1
	test ! -S /run/iser-attach/$name.sock || { echo "control socket left"; return 1; }
	keep=
	[ "$fe" != ublk ] || keep="--io-scheduler keep"
	# shellcheck disable=SC2086 # $keep: two words or none
	dev=$(ia attach --daemon --frontend "$fe" --transport "$tr" --portal "$portal" --target "$iqn" \
		--lun "$lun" --name "$name" $keep) || return 1
	[ "$fe" != ublk ] || sched_is "$dev" mq-deadline || return 1
	mount "$dev" /mnt/v || return 1
	(cd /mnt/v && sha256sum -c /tmp/sums 2>&1 | grep -v f3) >/tmp/check || true
	grep -q "f1: OK" /tmp/check && grep -q "f2: OK" /tmp/check || { cat /tmp/check; return 1; }
	umount /mnt/v || return 1
	fio --name=verify --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k-128k \
		--iodepth=32 --size=32M --verify=crc32c --verify_fatal=1 --output="$VMLAB_RESULTS/fio-$name.txt" || return 1
	ia detach "$name" || return 1
}

for fe in ublk nbd; do
	for tr in iser tcp; do
		step "cycle-$fe-$tr" cycle "$fe" "$tr" 0
	done
done

# Two LUNs at once (one 512-, one 4096-byte block), one per frontend.
two() {
	d0=$(ia attach --daemon --frontend ublk --transport iser --portal "$portal" --target "$iqn" --lun 0 --name two0) || return 1
	d1=$(ia attach --daemon --frontend nbd --transport iser --portal "$portal" --target "$iqn" --lun 1 --name two1) || return 1
	test "$(blockdev --getss "$d1")" = 4096 || return 1
	test "$(ia list --json | jq length)" = 2 || return 1
	verify_rw "$d0" 8 && verify_rw "$d1" 8 || return 1
	ia detach two0 && ia detach "$d1" || return 1
	test "$(ia list --json | jq length)" = 0
}
step two-luns two

# --read-only: the kernel device is read-only (an open for writing fails), the data unchanged,
# list --json says so; for ublk (its read-only attribute) and for nbd (NBD_FLAG_READ_ONLY).
readonly_attach() { # readonly_attach FRONTEND
	fe=$1 name=ro-$1
	dev=$(ia attach --daemon --read-only --frontend "$fe" --transport iser --portal "$portal" --target "$iqn" \
		--lun 0 --name "$name") || return 1
	test "$(blockdev --getro "$dev")" = 1 || { echo "$dev is not read-only"; return 1; }
	test "$(ia list --json | jq -r --arg n "$name" '.[] | select(.name == $n) | .read_only')" = true ||
		{ ia list --json; return 1; }
	before=$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | sha256sum)
	if head -c 4096 /dev/urandom | dd of="$dev" bs=4k count=1 oflag=direct 2>/tmp/ro-err; then
		echo "a write to read-only $dev succeeded"
		return 1
	fi
	echo "write refused: $(tail -1 /tmp/ro-err)"
	test "$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | sha256sum)" = "$before" || return 1
	ia detach "$name"
}
step read-only-ublk readonly_attach ublk
step read-only-nbd readonly_attach nbd

# SIGKILL during fio verify; a new daemon recovers the same /dev/ublkbN.
recover() {
	dev=$(ia attach --daemon --frontend ublk --transport iser --portal "$portal" --target "$iqn" --lun 0 --name rec) || return 1
	pid=$(ia list --json | jq -r '.[] | select(.name == "rec") | .pid')
	fio --name=rec --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k-64k --iodepth=32 \
		--size=48M --verify=crc32c --verify_fatal=1 --output="$VMLAB_RESULTS/fio-recover.txt" &
	fpid=$!
	sleep 3
	kill -9 "$pid"
	echo "killed daemon $pid"
	sleep 1
	dev2=$(ia attach --daemon --frontend ublk --transport iser --portal "$portal" --target "$iqn" --lun 0 --name rec) || return 1
	test "$dev2" = "$dev" || { echo "recovered as $dev2, not $dev"; return 1; }
	wait "$fpid" || { cat "$VMLAB_RESULTS/fio-recover.txt"; return 1; }
	grep -q "err= 0" "$VMLAB_RESULTS/fio-recover.txt" || return 1
	ia detach rec
}
step ublk-sigkill-recovery recover

# SIGKILL of a kernel NBD daemon: the kernel keeps /dev/nbdN configured (sysfs pid and backend
# stay) with its sockets dead. detach with no daemon disconnects it; a new attach of the volume
# disconnects it first, so the device is not left behind next to the new one.
nbd_configured() { # nbd_configured DEV: sysfs says DEV is configured by iser-attach:rec
	test -e "/sys/block/${1#/dev/}/pid" && test "$(cat "/sys/block/${1#/dev/}/backend")" = iser-attach:rec
}
nbd_killed() {
	for how in detach attach; do
		dev=$(ia attach --daemon --frontend nbd --transport iser --portal "$portal" --target "$iqn" --lun 0 --name rec) || return 1
		pid=$(ia list --json | jq -r '.[] | select(.name == "rec") | .pid')
		verify_rw "$dev" 4 || return 1
		kill -9 "$pid"
		wait_for 10 sh -c "! kill -0 $pid 2>/dev/null" || return 1
		echo "killed daemon $pid of $dev"
		nbd_configured "$dev" || { echo "$dev not configured after the kill (the kernel let it go)"; return 1; }
		case $how in
		detach)
			out=$(ia detach rec) || return 1
			echo "$out"
			echo "$out" | grep -q "^removed rec ($dev), left by a previous server" || return 1
			;;
		attach)
			dev2=$(ia attach --daemon --frontend nbd --transport iser --portal "$portal" --target "$iqn" --lun 0 --name rec) || return 1
			echo "attached again as $dev2"
			for p in /sys/block/nbd*/pid; do # only the new device is configured
				[ ! -e "$p" ] || [ "$p" = "/sys/block/${dev2#/dev/}/pid" ] || { echo "left configured: $p"; return 1; }
			done
			verify_rw "$dev2" 4 || return 1
			ia detach rec || return 1
			;;
		esac
		for p in /sys/block/nbd*/pid; do
			[ ! -e "$p" ] || { echo "left configured: $p"; return 1; }
		done
	done
}
step nbd-sigkill-left nbd_killed
step lio-teardown lio_teardown
