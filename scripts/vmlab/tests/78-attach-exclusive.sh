#!/bin/sh
# One server per volume, and a stop that keeps a mounted ublk device (ublk over iSER, LIO):
# (a) with the volume attached and mounted, a second `attach` of it (foreground and --daemon)
#     fails within seconds naming the first one's pid and device, without logging in: the first
#     daemon keeps its session (no recovery), its device and its mount, and I/O goes on;
# (b) with files written (some still dirty in the page cache), SIGTERM to the daemon: it exits 0
#     leaving the device (the node stays, the mount stays, I/O issued meanwhile waits), the next
#     attach takes the same /dev/ublkbN over, every file reads back with its checksum after
#     caches are dropped, and the kernel logged no I/O or ext4 error;
# (c) unmounted, SIGTERM removes the device and its state file as a detach would;
# (d) a device a SIGKILLed daemon left is not taken over by an attach of the same name for
#     another LUN (the state file's WWN and size differ): that attach fails, the device stays,
#     and an attach of the right LUN takes it over.
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=excl
mnt=/mnt/excl
attach_args="--frontend ublk --transport iser --portal $portal --target $iqn --lun 0 --name $name"
cleanup() {
	set +e
	[ -z "${BG_PID:-}" ] || kill "$BG_PID" 2>/dev/null
	umount "$mnt" 2>/dev/null
	timeout 30 iser-attach detach --force "$name" >/dev/null 2>&1
	timeout 30 iser-attach detach --force excl2 >/dev/null 2>&1
	cp /run/iser-attach/"$name".log "$VMLAB_RESULTS/" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 143' TERM INT

daemon_pid() { vol_status "$name" | jq -r .pid; }

# no_kernel_errors DEV SINCE LABEL: no I/O or ext4 error in the kernel log after line SINCE
# (the lab runs one test at a time: any such line is ours).
no_kernel_errors() {
	dmesg | tail -n +"$(($2 + 1))" >"$VMLAB_RESULTS/dmesg-$3.txt"
	if grep -Ei "I/O error|EXT4-fs error|Buffer I/O|blk_update_request|${1#/dev/}.*error" "$VMLAB_RESULTS/dmesg-$3.txt"; then
		echo "kernel errors (see dmesg-$3.txt)"
		return 1
	fi
}

step binaries test -x "$VMLAB_BIN/iser-attach"
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target env LIO_WCE=1 sh -c '. "$VMLAB_LIB"; lio_target "$0" file:128 file:64' "$iqn"
mkdir -p "$mnt"
dmesg0=$(dmesg | wc -l)

# shellcheck disable=SC2086
step attach sh -c "iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon $attach_args >$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step mkfs mkfs.ext4 -q -F "$dev"
step mount mount "$dev" "$mnt"
step write-a sh -c "head -c 8M /dev/urandom >$mnt/a && sync -f $mnt/a && cd $mnt && sha256sum a >/tmp/excl-sums"
pid=$(daemon_pid)
echo "daemon pid $pid"
step sessions-before test "$(lio_sessions "$iqn")" = 1

# (a) A second attach while the first serves the volume.
second() { # second [--daemon]
	t0=$(date +%s)
	# shellcheck disable=SC2086
	if timeout 60 iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach "$@" $attach_args \
		>/tmp/excl-2.out 2>/tmp/excl-2.err; then
		echo "second attach succeeded: $(cat /tmp/excl-2.out)"
		return 1
	fi
	dt=$(($(date +%s) - t0))
	cat /tmp/excl-2.err
	[ "$dt" -le 5 ] || { echo "second attach took $dt s to fail"; return 1; }
	grep -q "volume $name is already attached by pid $pid ($dev)" /tmp/excl-2.err || return 1
}
step second-attach second
step second-attach-daemon second --daemon
intact() {
	kill -0 "$pid" || { echo "first daemon gone"; return 1; }
	dev_present "$dev" || { echo "$dev gone"; return 1; }
	mountpoint -q "$mnt" || { echo "$mnt not mounted"; return 1; }
	vol_wait "$name" ".state == \"attached\" and .recoveries == 0 and .faults == 0 and .pid == $pid and .device == \"$dev\"" 5 || return 1
	[ "$(lio_sessions "$iqn")" = 1 ] || { echo "LIO sessions: $(lio_sessions "$iqn")"; return 1; }
	head -c 4M /dev/urandom >"$mnt/b" && sync -f "$mnt/b" || return 1
	echo 3 >/proc/sys/vm/drop_caches
	(cd "$mnt" && sha256sum b >>/tmp/excl-sums && sha256sum -c /tmp/excl-sums) || return 1
}
step first-intact intact
step no-errors-a no_kernel_errors "$dev" "$dmesg0" a

# (b) SIGTERM with the device mounted and dirty data in the page cache.
step write-dirty sh -c "head -c 16M /dev/urandom >$mnt/c && cd $mnt && sha256sum c >>/tmp/excl-sums"
step sigterm kill -TERM "$pid"
gone() { # the daemon exits on its own, having left the device
	for _ in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	! kill -0 "$pid" 2>/dev/null || { echo "daemon $pid still running"; return 1; }
	grep -q "left it for the next attach" /run/iser-attach/"$name".log || {
		tail -n 20 /run/iser-attach/"$name".log
		return 1
	}
	test -b "$dev" || { echo "$dev removed"; return 1; }
	mountpoint -q "$mnt" || { echo "$mnt not mounted"; return 1; }
	test -f /run/iser-attach/"$name".state || { echo "state file removed"; return 1; }
}
step daemon-left-device gone
# I/O issued while nobody serves the device waits for the next server.
(head -c 4M /dev/urandom >"$mnt/d" && sync -f "$mnt/d" && cd "$mnt" && sha256sum d >/tmp/excl-d.sum) &
BG_PID=$!
sleep 2
takeover() {
	# shellcheck disable=SC2086
	dev2=$(iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon $attach_args) || return 1
	[ "$dev2" = "$dev" ] || { echo "attached as $dev2, not $dev"; return 1; }
	grep -q "took over the device" /run/iser-attach/"$name".log || return 1
}
step takeover takeover
step waiting-io-done wait "$BG_PID"
BG_PID=
readback() {
	sync -f "$mnt/c"
	echo 3 >/proc/sys/vm/drop_caches
	cat /tmp/excl-d.sum >>/tmp/excl-sums
	(cd "$mnt" && sha256sum -c /tmp/excl-sums) || return 1
}
step readback readback
step no-errors-b no_kernel_errors "$dev" "$dmesg0" b
step umount umount "$mnt"
step fsck fsck.ext4 -fn "$dev"

# (c) SIGTERM with the device unused removes it.
removed() {
	pid=$(daemon_pid)
	kill -TERM "$pid"
	for _ in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	! kill -0 "$pid" 2>/dev/null || { echo "daemon $pid still running"; return 1; }
	! test -b "$dev" || { echo "$dev still there"; return 1; }
	! test -e /run/iser-attach/"$name".state || { echo "state file left"; return 1; }
}
step sigterm-unused-removes removed

# (d) The state file names the LUN.
other_lun() {
	# shellcheck disable=SC2086
	d0=$(iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon \
		--frontend ublk --transport iser --portal $portal --target $iqn --lun 0 --name excl2) || return 1
	p0=$(vol_status excl2 | jq -r .pid)
	kill -9 "$p0"
	sleep 1
	if iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon --frontend ublk \
		--transport iser --portal "$portal" --target "$iqn" --lun 1 --name excl2 2>/tmp/excl-other.err; then
		echo "attach of another LUN took the device"
		return 1
	fi
	cat /tmp/excl-other.err
	grep -q "shows another LUN" /tmp/excl-other.err || return 1
	test -b "$d0" || { echo "$d0 removed"; return 1; }
	d1=$(iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab attach --daemon --frontend ublk \
		--transport iser --portal "$portal" --target "$iqn" --lun 0 --name excl2) || return 1
	[ "$d1" = "$d0" ] || { echo "LUN 0 attached as $d1, not $d0"; return 1; }
	iser-attach detach excl2
}
step other-lun-refused other_lun
step lio-teardown lio_teardown
