#!/bin/sh
# SIGTERM of the daemon serving a mounted ublk device (over iSER, LIO) under fio, over and over
# (VMLAB_SIGTERM_CYCLES, default 15): each time the daemon leaves the device within its bound
# (DetachTimeout plus the final flush and logout: 45 s at most), the next attach takes the
# same /dev/ublkbN over, fio (writes in flight at the signal, every block read back and its
# crc32c checked) passes, and the kernel logged no oops, BUG or "file count is 0"
# Every third cycle the LUN's dm device is suspended 3 s before the signal (the target stops
# completing commands, as in the soak's dm-suspend) and resumed 12 s later: the daemon must not
# wait for the stuck commands (it abandons them; the next server gets the requests again).
# (ublk_drv before 6.15 could complete a FETCH twice when the ring's cancellation met a
# request being dispatched; the daemon holds new requests and closes its rings only once the
# driver is quiet). Ends with fsck of the filesystem.
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=termloop
mnt=/mnt/termloop
attach_args="--frontend ublk --transport iser --portal $portal --target $iqn --lun 0 --name $name"
cleanup() {
	set +e
	[ -z "${FIO_PID:-}" ] || kill "$FIO_PID" 2>/dev/null
	lio_dm "$iqn" 0 resume >/dev/null 2>&1
	umount "$mnt" 2>/dev/null
	timeout 30 iser-attach detach --force "$name" >/dev/null 2>&1
	cp /run/iser-attach/"$name".log "$VMLAB_RESULTS/" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 143' TERM INT

attach() {
	# After a stalled cycle LIO ends the old session (and waits for its tasks) before it
	# answers the new login: under load that took longer than the 15 s default once. The
	# service retries a first login under systemd; here one longer login does.
	# shellcheck disable=SC2086
	iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon $attach_args --login-timeout 60s
}

no_oops() { # no_oops SINCE LABEL
	dmesg | tail -n +"$(($1 + 1))" >"$VMLAB_RESULTS/dmesg-$2.txt"
	if grep -E "BUG|Oops|file count is 0|general protection|WARNING: CPU" "$VMLAB_RESULTS/dmesg-$2.txt"; then
		echo "kernel trouble (see dmesg-$2.txt)"
		return 1
	fi
}

step binaries test -x "$VMLAB_BIN/iser-attach"
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target lio_target "$iqn" dm:128
mkdir -p "$mnt"
dmesg0=$(dmesg | wc -l)
# shellcheck disable=SC2086
step attach sh -c "iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon $attach_args >$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
step mkfs mkfs.ext4 -q -F "$dev"
step mount mount "$dev" "$mnt"

# cycle N: fio writes in the filesystem, SIGTERM lands in its write phase, the daemon leaves
# the device, a new one takes it over, fio verifies.
cycle() {
	pid=$(vol_status "$name" | jq -r .pid)
	mark=$(vol_log_mark "$name")
	timeout -k 5 150 fio --name="c$1" --directory="$mnt" --size=8M --randseed="$1" \
		--rw=randwrite --bs=4k-64k --rate=,2m --iodepth=16 --direct=1 --ioengine=libaio \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --output="$VMLAB_RESULTS/fio-c$1.txt" &
	FIO_PID=$!
	sleep 2
	kill -0 "$FIO_PID" || { echo "fio ended before the signal"; return 1; }
	stuck=
	if [ $(($1 % 3)) = 0 ]; then
		lio_dm "$iqn" 0 suspend || return 1
		(sleep 15 && lio_dm "$iqn" 0 resume) &
		stuck=$!
		sleep 3
	fi
	t0=$(date +%s)
	kill -TERM "$pid"
	for _ in $(seq 1 90); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	dt=$(($(date +%s) - t0))
	[ -z "$stuck" ] || wait "$stuck" || return 1
	! kill -0 "$pid" 2>/dev/null || { echo "daemon $pid still running $dt s after SIGTERM"; return 1; }
	tail -n +$((mark + 1)) /run/iser-attach/"$name".log | grep -q "left it for the next attach" || {
		tail -n 20 /run/iser-attach/"$name".log
		return 1
	}
	mountpoint -q "$mnt" || { echo "$mnt not mounted"; return 1; }
	dev2=$(attach) || return 1
	[ "$dev2" = "$dev" ] || { echo "attached as $dev2, not $dev"; return 1; }
	tail -n +$((mark + 1)) /run/iser-attach/"$name".log | grep -q "took over the device" || return 1
	rc=0
	wait "$FIO_PID" || rc=$?
	FIO_PID=
	[ "$rc" = 0 ] || { echo "fio exit $rc"; tail -n 15 "$VMLAB_RESULTS/fio-c$1.txt"; return 1; }
	grep -q "err= 0" "$VMLAB_RESULTS/fio-c$1.txt" || { echo "fio reported an error"; return 1; }
	rm -f "$mnt"/c"$1".*
	echo "cycle $1: daemon $pid left $dev in $dt s${stuck:+ (target stalled)}, taken over, fio verified"
	no_oops "$dmesg0" "c$1"
}
for i in $(seq 1 "${VMLAB_SIGTERM_CYCLES:-15}"); do
	step "cycle-$i" cycle "$i"
done
step umount umount "$mnt"
step fsck fsck.ext4 -fn "$dev"
step detach iser-attach detach "$name"
step lio-teardown lio_teardown
