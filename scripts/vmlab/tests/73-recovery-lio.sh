#!/bin/sh
# Recovery (issue "Operations / Recovery"): `iser-attach attach` (ublk over iSER, LIO) keeps
# /dev/ublkbN through faults while fio writes across each with crc32c verify, every write read
# back: (1) the LIO target restarts (TPG disabled 5 s: sessions dropped, logins refused),
# (2) the same with verifying reads in flight, (3) the daemon is SIGKILLed and started again
# (ublk user recovery), (4) the target restarts again, now under the new daemon. After all but
# (3): state "recovering" seen during the fault, "attached" with one more recovery after it, a
# warn log line with the cause; after each: the device present throughout, one LIO session
# left (reinstated, same ISID). The network fault (a silent partition) is in
# 77-recovery-network: the rxe link going down is not survivable in this lab (see the fault
# injection section of lib.sh). Ends with "faults survived: N".
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=rec-lio
ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab --log-level warn --log-format json "$@"; }
attach_rec() {
	ia attach --daemon --frontend ublk --transport iser --portal "$portal" --target "$iqn" --lun 0 \
		--name "$name" --replacement-timeout 30s
}
FAULTS_SURVIVED=0
trap 'recovery_cleanup "$name"' EXIT # detaches what is left, prints "faults survived: N"
trap 'exit 143' TERM INT


step binaries test -x "$VMLAB_BIN/iser-attach"
step recovery-flags has_recovery_flags
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target lio_target "$iqn" file:112
step attach attach_rec >"$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step status-attached vol_wait "$name" '.state == "attached" and .recoveries == 0 and .transport == "iser"' 10

export SURVIVE_LIO_IQN="$iqn"
step lio-restart survive_fault "$name" "$dev" lio-restart 0 7301 fault_lio_restart "$iqn" 5

# The same with reads in flight: 16 MiB written with crc32c headers, then read at 2 MiB/s
# across the restart, every block checked.
step fill-for-reads fio_fill fill "$dev" 96M 16M 7302
FIO_FAULT_RW=read SURVIVE_SIZE=16M
step lio-restart-reads survive_fault "$name" "$dev" lio-restart-reads 96M 7302 fault_lio_restart "$iqn" 5
unset FIO_FAULT_RW SURVIVE_SIZE

kill_restart() { # SIGKILL the daemon; a new one takes the same /dev/ublkbN over
	fault_daemon_kill "$name" || return 1
	sleep 1
	attach_rec >/tmp/dev2 || return 1
	[ "$(cat /tmp/dev2)" = "$dev" ] || {
		echo "recovered as $(cat /tmp/dev2), not $dev"
		return 1
	}
}
# A new process: no status while it is down, and its recovery count starts at 0.
SURVIVE_STATE=0 SURVIVE_WARN=0 SURVIVE_COND='.state == "attached" and .pid != $PID0'
step daemon-kill survive_fault "$name" "$dev" daemon-kill 32M 7303 kill_restart
unset SURVIVE_STATE SURVIVE_WARN SURVIVE_COND

step lio-restart-new-daemon survive_fault "$name" "$dev" lio-restart-2 64M 7304 fault_lio_restart "$iqn" 5

step detach ia detach "$name"
step device-gone sh -c '! test -b "$0"' "$dev"
