#!/bin/sh
# A ublk volume (over iSER, LIO) mounted only inside another mount namespace (unshare -m
# --propagation private: a container's, a pod's, a unit's with PrivateMounts) is in use:
# (a) the root namespace does not see the mount; `iser-attach detach NAME` without --force
#     refuses, exits non-zero saying the device is in use, and the daemon keeps serving it;
# (b) SIGTERM to the daemon leaves the device quiesced (node, state file and mount stay), and
#     I/O issued in the namespace meanwhile waits;
# (c) an attach of the volume with --frontend nbd is refused before login, naming the device
#     and the ublk takeover: no second device on the same LUN, no session;
# (d) a new daemon takes the same /dev/ublkbN over, the waiting I/O completes, and every file
#     reads back with its checksum through `nsenter -t PID -m` after caches are dropped;
# (e) the namespace gone (its last process killed, the kernel unmounts soon after), a second
#     SIGTERM while a process holds the device open leaves it again; detach with no daemon
#     refuses while it is open and removes it once that process is gone.
# Before InUse asked the kernel (O_EXCL), (a)'s detach removed the device and (b)'s SIGTERM
# removed it too: the filesystem in the namespace got I/O errors.
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=nsvol
mnt=/mnt/nsvol
lab=iqn.2026-11.io.iser-attach:lab
attach_args="--transport iser --portal $portal --target $iqn --lun 0 --name $name"
cleanup() {
	set +e
	[ -z "${BG_PID:-}" ] || kill "$BG_PID" 2>/dev/null
	[ -z "${NS_PID:-}" ] || kill "$NS_PID" 2>/dev/null
	[ -z "${HOLD_PID:-}" ] || kill "$HOLD_PID" 2>/dev/null
	timeout 30 iser-attach detach --force "$name" >/dev/null 2>&1
	cp /run/iser-attach/"$name".log "$VMLAB_RESULTS/" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 143' TERM INT

daemon_pid() { vol_status "$name" | jq -r .pid; }
in_ns() { nsenter -t "$NS_PID" -m sh -c "$1"; }

step binaries test -x "$VMLAB_BIN/iser-attach"
step rxe-up rxe_up
step ublk-load ublk_load
step nbd-load nbd_load
step lio-target env LIO_WCE=1 sh -c '. "$VMLAB_LIB"; lio_target "$0" file:64' "$iqn"
mkdir -p "$mnt"
rm -f /tmp/nsvol-ready /tmp/nsvol-sums /tmp/nsvol-b.sum

# shellcheck disable=SC2086
step attach sh -c "iser-attach --initiator-name $lab attach --daemon --frontend ublk $attach_args >$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step mkfs mkfs.ext4 -q -F "$dev"

# The namespace: mount, write, sync, then a sleeping process keeps it (and the mount).
unshare -m --propagation private sh -c "mount $dev $mnt && head -c 8M /dev/urandom >$mnt/a &&
	sync -f $mnt/a && cd $mnt && sha256sum a >/tmp/nsvol-sums && touch /tmp/nsvol-ready &&
	exec sleep 3600" &
NS_PID=$!
step ns-mounted wait_for 30 test -e /tmp/nsvol-ready
step ns-mount-private sh -c "! mountpoint -q $mnt && ! grep -q ' $mnt ' /proc/self/mountinfo"
step ns-sees-mount in_ns "mountpoint -q $mnt"
pid=$(daemon_pid)
echo "daemon pid $pid, namespace pid $NS_PID"

# (a) detach without --force refuses.
refused() {
	if timeout 60 iser-attach detach "$name" >/tmp/nsvol-detach.out 2>/tmp/nsvol-detach.err; then
		echo "detach succeeded: $(cat /tmp/nsvol-detach.out)"
		return 1
	fi
	cat /tmp/nsvol-detach.err
	grep -q "is in use (claimed by another user of the device, e.g. a mount in another mount namespace" \
		/tmp/nsvol-detach.err || return 1
	kill -0 "$pid" || { echo "daemon gone"; return 1; }
	dev_present "$dev" || { echo "$dev gone"; return 1; }
	vol_wait "$name" ".state == \"attached\" and .pid == $pid" 5 || return 1
	in_ns "head -c 4k $mnt/a >/dev/null" || return 1
}
step detach-refused refused

# (b) SIGTERM leaves the device quiesced.
step sigterm kill -TERM "$pid"
# left WHY: the daemon $pid exited, logging that it left the device in use for WHY (a pattern),
# and the device and its state file stay.
left() {
	for _ in $(seq 1 90); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	! kill -0 "$pid" 2>/dev/null || { echo "daemon $pid still running"; return 1; }
	grep "left it for the next attach" /run/iser-attach/"$name".log | tail -n 1 | grep -q "$1" || {
		tail -n 20 /run/iser-attach/"$name".log
		return 1
	}
	test -b "$dev" || { echo "$dev removed"; return 1; }
	test -f /run/iser-attach/"$name".state || { echo "state file removed"; return 1; }
}
left_mounted() {
	left "claimed by another user" || return 1
	in_ns "mountpoint -q $mnt" || { echo "$mnt no longer mounted in the namespace"; return 1; }
}
step daemon-left-device left_mounted
# I/O issued while nobody serves the device waits for the next server.
(in_ns "head -c 4M /dev/urandom >$mnt/b && sync -f $mnt/b && cd $mnt && sha256sum b >/tmp/nsvol-b.sum") &
BG_PID=$!
sleep 2

# (c) Another frontend is refused while the device is left.
other_frontend() {
	# shellcheck disable=SC2086
	if timeout 60 iser-attach --initiator-name "$lab" attach --daemon --frontend nbd $attach_args \
		>/tmp/nsvol-nbd.out 2>/tmp/nsvol-nbd.err; then
		echo "attach with nbd succeeded: $(cat /tmp/nsvol-nbd.out)"
		return 1
	fi
	cat /tmp/nsvol-nbd.err
	grep -q "volume $name: $dev, left by a previous server of the volume, still exists; --frontend nbd would open a second device" \
		/tmp/nsvol-nbd.err || return 1
	for p in /sys/block/nbd*/pid; do
		! test -e "$p" || { echo "an nbd device is connected: $p"; return 1; }
	done
	[ "$(lio_sessions "$iqn")" = 0 ] || { echo "LIO sessions: $(lio_sessions "$iqn")"; return 1; }
}
step nbd-refused other_frontend

# (d) A new daemon takes the device over; the data reads back in the namespace.
takeover() {
	mark=$(vol_log_mark "$name")
	# shellcheck disable=SC2086
	dev2=$(iser-attach --initiator-name "$lab" attach --daemon --frontend ublk $attach_args) || return 1
	[ "$dev2" = "$dev" ] || { echo "attached as $dev2, not $dev"; return 1; }
	tail -n +$((mark + 1)) /run/iser-attach/"$name".log | grep -q "took over the device" || return 1
}
step takeover takeover
step waiting-io-done wait "$BG_PID"
BG_PID=
readback() {
	cat /tmp/nsvol-b.sum >>/tmp/nsvol-sums
	echo 3 >/proc/sys/vm/drop_caches
	in_ns "cd $mnt && sha256sum -c /tmp/nsvol-sums"
}
step readback readback

# (e) The namespace ends; its mount goes with it (the daemon serves the unmount's writes).
# A process then holds the device open (a raw-device user): SIGTERM leaves the device again,
# that process exits, and detach, with no daemon to ask, removes the left device. (A mount on
# a left device cannot end by itself: its unmount writes wait for the next server.)
step ns-end kill "$NS_PID"
NS_PID=
step ns-unmounted wait_for 30 sh -c '! grep -qs " /dev/ublkb" /proc/[0-9]*/mountinfo'
sleep 3600 <"$dev" &
HOLD_PID=$!
pid=$(daemon_pid)
step sigterm-again kill -TERM "$pid"
step daemon-left-device-open left "open by pid $HOLD_PID"
detach_left() {
	iser-attach detach "$name" >/tmp/nsvol-left.out 2>&1
	_rc=$?
	cat /tmp/nsvol-left.out
	return $_rc
}
not_detached() { ! detach_left; }
step detach-left-refused-while-open not_detached
grep -q "left by a previous server of the volume, is in use" /tmp/nsvol-left.out ||
	fail "step detach-left-refused-while-open: not refused as in use: $(cat /tmp/nsvol-left.out)"
step holder-exit kill "$HOLD_PID"
wait "$HOLD_PID" 2>/dev/null || true
HOLD_PID=
step detach-left wait_for 20 detach_left
grep -qx "removed $name ($dev), left by a previous server of the volume" /tmp/nsvol-left.out ||
	fail "step detach-left: printed $(cat /tmp/nsvol-left.out)"
step device-removed sh -c "! test -b $dev && ! test -e /run/iser-attach/$name.state && ! test -e /dev/iser/$name"
step lio-teardown lio_teardown
