#!/bin/sh
# vmlab-timeout: 600
# The CSI Node service (issue 21) against a LIO pool over iSER with mutual CHAP: four 32 MiB
# LUNs and one of 48 MiB (rd), one of 40 MiB (iblock on dm, to grow), `iser-attach csi` serving
# Identity, Controller and Node with a pool file. csi.test's TestLabKubeletOrder drives kubelet's order: create, stage ext4 (the
# plugin attaches through attach --daemon and makes the filesystem), publish, write 4 MiB,
# a read-only publish (EROFS), stats, unstage refused while published, unpublish, unstage;
# staged again the file is there; then a block volume (publish onto a file, write, read back).
# After it nothing is left: no attached volume, no ublk/nbd mount, no session on the target,
# no node state. Then csi-sanity v5.4.0 with every Node spec enabled ("should work", "should be
# idempotent", stage, publish, stats, expansion), and again nothing is left. Last, csi.test's
# TestLabExpand stages the 40 MiB LUN as ext4, writes, grows the LUN to 56 MiB on the target and
# calls NodeExpandVolume: on Linux >= 6.16 the device and the filesystem grow; before, it is
# FAILED_PRECONDITION naming UBLK_F_UPDATE_SIZE. The file is intact either way. TestLabFence:
# a second node plugin's read-write stage of a volume the first holds is FAILED_PRECONDITION
# naming the first's initiator, and works once the first unstaged. Then, with a volume staged
# and published and fio writing to it under crc32c verify, the plugin restarts twice: a SIGTERM
# (its attach daemon lives on), then a SIGKILL of the plugin and of the daemon: the new plugin
# attaches the volume again, taking the ublk device over; fio sees no error, and the file
# system reads and writes; then it unpublishes and unstages it (TestLabRestart). Last, the
# kubelet order again with --frontend nbd (kernel NBD).
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
lab=iqn.2026-11.io.iser-attach:lab
d=/tmp/csi85
sock=$d/csi.sock
cleanup() {
	set +e
	[ -n "${cpid:-}" ] && kill -TERM "$cpid" 2>/dev/null && wait "$cpid"
	[ -n "${bpid:-}" ] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid"
	for m in $(awk '$5 ~ "^/tmp/csi" {print $5}' /proc/self/mountinfo | sort -r); do umount "$m"; done
	for s in /run/iser-attach/csi-*.sock; do
		[ -e "$s" ] || continue
		n=$(basename "$s" .sock)
		cp "/run/iser-attach/$n.log" "$VMLAB_RESULTS/" 2>/dev/null
		timeout 30 iser-attach detach --force "$n" >/dev/null 2>&1
	done
}
trap cleanup EXIT
trap 'exit 143' TERM INT

step binaries test -x "$VMLAB_BIN/iser-attach" -a -x "$VMLAB_BIN/csi.test" -a -x "$VMLAB_BIN/csi-sanity"
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target env LIO_SERIAL=1 LIO_CHAP_USER=csiuser LIO_CHAP_PASS=csisecret12345 \
	LIO_CHAP_MUTUAL_USER=csitarget LIO_CHAP_MUTUAL_PASS=targetsecret123 \
	sh -c '. "$VMLAB_LIB"; lio_target "$0" rd:32 rd:32 rd:32 rd:32 rd:48 dm:40' "$iqn"
rm -rf $d
mkdir -p $d/state $d/paths
printf csisecret12345 >$d/chap.secret
printf targetsecret123 >$d/mutual.secret
chmod 600 $d/*.secret
cat >$d/pool.conf <<POOL
portal = $portal
target = $iqn
transport = iser
chap_user = csiuser
chap_secret_file = $d/chap.secret
mutual_user = csitarget
mutual_secret_file = $d/mutual.secret
POOL

start_csi() { # start_csi [FLAG...]: the plugin, its log appended to csi.log
	# A killed plugin leaves its socket: ready must wait for the new one's (which takes over
	# dead daemons' volumes before it listens).
	rm -f $sock
	iser-attach --initiator-name $lab csi --endpoint unix://$sock --node-id vmlab --pool $d/pool.conf \
		--state-dir $d/state "$@" >>"$VMLAB_RESULTS/csi.log" 2>&1 &
	cpid=$!
}
start_csi
ready() {
	for _ in $(seq 100); do
		[ -S $sock ] && return 0
		kill -0 $cpid 2>/dev/null || return 1
		sleep 0.2
	done
	return 1
}
step csi-ready ready

nothing_left() { # no attached volume, no mount of ours, no session, no node state
	ok=0
	n=$(iser-attach list --json | jq length)
	[ "$n" = 0 ] || { echo "attached: $n"; iser-attach list; ok=1; }
	if grep -E ' /tmp/csi| /dev/(ublkb|nbd)' /proc/self/mountinfo; then echo "mounts left"; ok=1; fi
	ls /dev/ublkb* 2>/dev/null && { echo "ublk devices left"; ok=1; }
	s=$(lio_sessions "$iqn")
	[ "$s" = 0 ] || { echo "sessions on the target: $s"; ok=1; }
	ls $d/state/node/*.json 2>/dev/null && { echo "node state left"; ok=1; }
	return $ok
}
settle() { # sessions end a moment after the daemons exit
	for _ in $(seq 50); do nothing_left >/dev/null 2>&1 && return 0; sleep 0.2; done
	nothing_left
}

step kubelet-order sh -c "ISER_CSI_LAB_ENDPOINT=unix://$sock ISER_CSI_LAB_DIR=$d/paths \
	'$VMLAB_BIN/csi.test' -test.run '^TestLabKubeletOrder\$' -test.count=1 -test.v >'$VMLAB_RESULTS/kubelet-order.txt' 2>&1"
grep -E 'took|stats:|unstage while' "$VMLAB_RESULTS/kubelet-order.txt" || true
grep '"staged' "$VMLAB_RESULTS/csi.log" || true
step kubelet-nothing-left settle

step csi-sanity sh -c "'$VMLAB_BIN/csi-sanity' -csi.endpoint unix://$sock -csi.testvolumesize 33554432 \
	-csi.testvolumeexpandsize 33554432 -csi.stagingdir $d/sanity-staging -csi.mountdir $d/sanity-mount \
	-ginkgo.no-color -ginkgo.v >'$VMLAB_RESULTS/csi-sanity.txt' 2>&1"
grep -E '^Ran [0-9]+ of|SUCCESS!|FAIL!' "$VMLAB_RESULTS/csi-sanity.txt" || true
step sanity-node-specs-ran grep -q 'Node Service should work' "$VMLAB_RESULTS/csi-sanity.txt"
step sanity-nothing-left settle

rel=$(uname -r)
maj=${rel%%.*}
min=${rel#*.}
min=${min%%[!0-9]*}
can=no
if [ "$maj" -gt 6 ] || { [ "$maj" -eq 6 ] && [ "$min" -ge 16 ]; }; then
	can=yes
fi
echo "Linux $rel: UBLK_F_UPDATE_SIZE expected: $can"
dmn=vmlab$(echo "$iqn" | cksum | cut -d' ' -f1)_5
cat >$d/grow.sh <<GROW
set -e
loop=\$(losetup -j $LIO_FILE_DIR/$dmn.img | cut -d: -f1)
truncate -s 56M $LIO_FILE_DIR/$dmn.img
losetup -c \$loop
dmsetup --noudevsync suspend $dmn
echo "0 $((56 * 2048)) linear \$loop 0" | dmsetup --noudevsync reload $dmn
dmsetup --noudevsync resume $dmn
test \$(blockdev --getsize64 /dev/mapper/$dmn) = $((56 << 20))
GROW
step expand sh -c "ISER_CSI_LAB_ENDPOINT=unix://$sock ISER_CSI_LAB_DIR=$d/paths ISER_CSI_LAB_GROW='sh $d/grow.sh' \
	ISER_CSI_LAB_EXPAND_SIZE=$((40 << 20)) ISER_CSI_LAB_GROWN_SIZE=$((56 << 20)) ISER_CSI_LAB_UPDATE_SIZE=$can \
	'$VMLAB_BIN/csi.test' -test.run '^TestLabExpand\$' -test.count=1 -test.v >'$VMLAB_RESULTS/expand.txt' 2>&1"
grep -E 'filesystem:|NodeExpandVolume' "$VMLAB_RESULTS/expand.txt" || true
step expand-nothing-left settle

# Fencing: a second node plugin (node ID vmlab-b, initiator name $lab-b, Node service only) on
# the same pool. A's read-write stage holds the LUN's reservation; B's stage of it is
# FAILED_PRECONDITION naming A's initiator (LIO's READ FULL STATUS) until A unstages.
sockb=$d/csi-b.sock
mkdir -p $d/state-b
iser-attach --initiator-name $lab-b csi --endpoint unix://$sockb --node-id vmlab-b --pool $d/pool.conf \
	--state-dir $d/state-b --controller=false >>"$VMLAB_RESULTS/csi-b.log" 2>&1 &
bpid=$!
readyb() {
	for _ in $(seq 100); do
		[ -S $sockb ] && return 0
		kill -0 $bpid 2>/dev/null || return 1
		sleep 0.2
	done
	return 1
}
step csi-b-ready readyb
step fence sh -c "ISER_CSI_LAB_ENDPOINT=unix://$sock ISER_CSI_LAB_ENDPOINT_B=unix://$sockb ISER_CSI_LAB_DIR=$d/paths \
	ISER_CSI_LAB_HOLDER=$lab '$VMLAB_BIN/csi.test' -test.run '^TestLabFence\$' -test.count=1 -test.v >'$VMLAB_RESULTS/fence.txt' 2>&1"
grep -E 'NodeStageVolume|fenced:' "$VMLAB_RESULTS/fence.txt" || true
kill -TERM $bpid
step csi-b-exit wait $bpid
bpid=
step fence-nothing-left settle

# Two restarts of the plugin while a pod writes to a published ext4 volume, under fio crc32c
# verify (random 4k-64k O_DIRECT writes at 1 MiB/s to a 16 MiB file on it, then all read back): a
# SIGTERM (a DaemonSet rollout of the plugin process: its attach daemons live on), then a
# SIGKILL of the plugin and of the volume's daemon (what a restart of the plugin's container
# does to the daemons in its cgroup): the new plugin attaches the volume again before it
# serves, taking the ublk device over (user recovery), and the I/O held meanwhile carries on.
# fio sees no error; its worst completion is the pause the pod saw. Then the new plugin
# unpublishes and unstages the volume (TestLabRestart).
lab_restart() {
	ISER_CSI_LAB_ENDPOINT=unix://$sock ISER_CSI_LAB_DIR=$d/paths ISER_CSI_LAB_PHASE=$1 \
		"$VMLAB_BIN/csi.test" -test.run '^TestLabRestart$' -test.count=1 -test.v >>"$VMLAB_RESULTS/restart.txt" 2>&1
}
step restart-before lab_restart before
dev=$(iser-attach list --json | jq -r '.[0].device')
FIO_FAULT_RATE=1m fio_fault_start csi-restart $d/paths/pod5/mount/fio.dat 0 16M 8501
sleep 2
kill -TERM $cpid
step restart-sigterm-exit wait $cpid
step restart-sigterm-device-kept sh -c "iser-attach list --json | jq -e 'length == 1 and .[0].state == \"attached\" and .[0].device == \"$dev\"' >/dev/null"
start_csi
step csi-ready-sigterm ready
sleep 2
dpid=$(iser-attach list --json | jq -r '.[0].pid')
kill -KILL $cpid "$dpid"
wait $cpid || true
step daemon-gone sh -c "for _ in \$(seq 50); do kill -0 $dpid 2>/dev/null || exit 0; sleep 0.1; done; exit 1"
t0=$(cut -d' ' -f1 /proc/uptime)
start_csi
step csi-ready-sigkill ready
echo "the new plugin served $(awk -v t0="$t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime) s after the SIGKILL"
step restart-recovered sh -c "iser-attach list --json | jq -e 'length == 1 and .[0].state == \"attached\" and .[0].device == \"$dev\"' >/dev/null"
grep 'recover:' "$VMLAB_RESULTS/csi.log" || true
step restart-fio-verified fio_fault_wait csi-restart
echo "restarts under fio: worst completion (the pod's pause) $(sed -n '/^{/,$p' "$VMLAB_RESULTS/fio-csi-restart.json" |
	jq -r '[.jobs[0].write.clat_ns.max, .jobs[0].read.clat_ns.max] | max / 1e9 | . * 100 | floor / 100') s"
step restart-after lab_restart after
step restart-nothing-left settle

# Kernel NBD as the frontend (--frontend nbd; what a node without ublk_drv gets), after a SIGTERM.
kill -TERM $cpid
step csi-exit wait $cpid
step nbd-load nbd_load
start_csi --frontend nbd
step csi-ready-nbd ready
step kubelet-order-nbd sh -c "ISER_CSI_LAB_ENDPOINT=unix://$sock ISER_CSI_LAB_DIR=$d/paths \
	'$VMLAB_BIN/csi.test' -test.run '^TestLabKubeletOrder\$' -test.count=1 -test.v >'$VMLAB_RESULTS/kubelet-order-nbd.txt' 2>&1"
step nbd-used grep -q 'frontend=nbd' "$VMLAB_RESULTS/csi.log"
step nbd-nothing-left settle

kill -TERM $cpid
step csi-exit-nbd wait $cpid
cpid=
