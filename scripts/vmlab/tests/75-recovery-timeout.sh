#!/bin/sh
# Recovery (issue "Operations / Recovery"): a fault longer than the replacement timeout
# (--replacement-timeout 10s, LIO TPG disabled for ~20 s, ublk over iSER). While it lasts:
# state "recovering", then "failed"; the writes fio had in flight and a new 4 KiB write both
# fail with EIO within the timeout plus a margin, not at once (they waited), never
# hanging (every wait is bounded); once failed, new I/O fails at once; /dev/ublkbN stays all
# along. After the target is back the daemon reinstates the session by itself ("attached"),
# the 16 MiB written and verified before the fault verify again, and new writes work.
# Ends with "faults survived: N".
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=rec-long
rt=10 # --replacement-timeout, seconds
ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab --log-level warn --log-format json "$@"; }
FAULTS_SURVIVED=0
trap 'recovery_cleanup "$name"' EXIT # detaches what is left, prints "faults survived: N"
trap 'exit 143' TERM INT

step binaries test -x "$VMLAB_BIN/iser-attach"
step recovery-flags sh -c 'iser-attach attach --help | grep -q -- --replacement-timeout'
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target lio_target "$iqn" file:64
step attach ia attach --daemon --frontend ublk --transport iser --portal "$portal" --target "$iqn" \
	--lun 0 --name "$name" --replacement-timeout "${rt}s" >"$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step status-attached vol_wait "$name" '.state == "attached" and .recoveries == 0' 10

# before OUT [FIO-OPTION...]: the same 16 MiB of random 16 KiB writes at 0 (same seed): written
# and verified, or with --verify_only only read back and verified.
before() {
	_o=$1
	shift
	timeout -k 5 120 fio --name=before --filename="$dev" --offset=0 --size=16M --rw=randwrite \
		--bs=16k --randseed=7501 --iodepth=16 --direct=1 --ioengine=libaio --verify=crc32c \
		--verify_fatal=1 "$@" --output-format=json --output="$VMLAB_RESULTS/fio-$_o.json" \
		2>"$VMLAB_RESULTS/fio-$_o.err" || {
		tail -n 15 "$VMLAB_RESULTS/fio-$_o.err"
		return 1
	}
	sed -n '/^{/,$p' "$VMLAB_RESULTS/fio-$_o.json" |
		jq -e '.jobs[0] | .error == 0 and .read.io_bytes == 16777216' >/dev/null || {
		echo "fio $_o: did not read back and verify 16 MiB"
		return 1
	}
	echo "fio $_o: 16 MiB verified"
}
step write-before before write-before --do_verify=1

long_fault() {
	mark=$(vol_log_mark "$name")
	# Writes in flight when the target goes away: time-based, no verify, must end in EIO.
	timeout -k 5 $((rt + 60)) fio --name=during --filename="$dev" --offset=32M --size=16M \
		--rw=randwrite --bs=4k-64k --iodepth=8 --direct=1 --ioengine=libaio --time_based \
		--runtime=300 --output="$VMLAB_RESULTS/fio-during.txt" 2>"$VMLAB_RESULTS/fio-during.err" &
	fpid=$!
	sleep 3
	kill -0 $fpid || {
		echo "fio during ended before the fault"
		return 1
	}
	vol_watch_start "$name" "$dev" "$VMLAB_RESULTS/watch-long.txt"
	t0=$(date +%s)
	lio_tpg "$iqn" 0 || return 1
	echo "fault: LIO target down at $t0"
	vol_wait "$name" '.state == "recovering"' 5 || return 1
	# A new write waits for recovery, then gets EIO at the replacement timeout.
	io_expect_eio "$dev" 13000 3 $((rt + 20)) || return 1
	rc=0
	wait $fpid || rc=$?
	dt=$(($(date +%s) - t0))
	echo "fio during: exit $rc, $dt s after the fault began"
	[ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [ $dt -le $((rt + 30)) ] || {
		echo "fio during: expected an I/O error within $((rt + 30)) s"
		tail -n 5 "$VMLAB_RESULTS/fio-during.err"
		return 1
	}
	grep -q 'Input/output error' "$VMLAB_RESULTS/fio-during.err" || {
		echo "fio during: failed, but not with EIO:"
		tail -n 5 "$VMLAB_RESULTS/fio-during.err"
		return 1
	}
	vol_wait "$name" '.state == "failed"' 5 || return 1
	dev_present "$dev" || {
		echo "$dev gone after the replacement timeout"
		return 1
	}
	# Failed: new I/O fails at once while recovery goes on.
	io_expect_eio "$dev" 13000 0 5 || return 1
	sleep 3
	lio_tpg "$iqn" 1 || return 1
	echo "fault: LIO target up again after $(($(date +%s) - t0)) s"
	vol_wait "$name" '.state == "attached" and .recoveries >= 1' 60 || return 1
	echo "recovered $(($(date +%s) - t0)) s after the fault began: $(vol_status "$name")"
	vol_watch_stop
	echo "states seen: $(awk '{print $2}' "$VMLAB_RESULTS/watch-long.txt" | uniq | tr '\n' ' ')"
	if grep -q MISSING "$VMLAB_RESULTS/watch-long.txt"; then
		echo "$dev vanished during the fault:"
		grep -m 3 MISSING "$VMLAB_RESULTS/watch-long.txt"
		return 1
	fi
	vol_warns "$name" "$mark" "  log: "
}
step long-fault long_fault
step verify-after before verify-after --verify_only
FIO_FAULT_RATE=64m
step io-after-start fio_fault_start after "$dev" 32M 16M 7502
step io-after fio_fault_wait after
FAULTS_SURVIVED=1

step detach ia detach "$name"
