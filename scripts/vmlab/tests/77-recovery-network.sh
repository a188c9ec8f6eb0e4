#!/bin/sh
# Recovery (issue "Operations / Recovery") through a silent network partition: `iser-attach
# attach` (ublk, iSCSI/TCP to LIO, keepalive --nop-interval 1s --nop-timeout 2s) while every
# TCP packet to or from the portal's port is dropped for 8 s (tc on lo: nothing is refused or
# reset, so only the NOP-Out keepalive can notice; reconnects' SYNs are dropped too until it
# heals). fio writes across it with crc32c verify, every write read back; state "recovering"
# seen, "attached" with one more recovery after, the cause a keepalive timeout, the device
# present throughout, one LIO session left (the half-dead one reinstated). The rxe link going
# down is not survivable in this lab (lib.sh, fault injection section), so the partition is on
# TCP. Ends with "faults survived: N".
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
name=rec-net
ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab --log-level warn --log-format json "$@"; }
FAULTS_SURVIVED=0
trap 'recovery_cleanup "$name"; tcp_partition 3260 0' EXIT # prints "faults survived: N"
trap 'exit 143' TERM INT


step binaries test -x "$VMLAB_BIN/iser-attach"
step recovery-flags has_recovery_flags
step rxe-up rxe_up
step ublk-load ublk_load
step lio-target lio_target "$iqn" file:64
step attach ia attach --daemon --frontend ublk --transport tcp --portal "$portal" --target "$iqn" \
	--lun 0 --name "$name" --nop-interval 1s --nop-timeout 2s --replacement-timeout 30s >"$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step status-attached vol_wait "$name" '.state == "attached" and .recoveries == 0 and .transport == "tcp"' 10

export SURVIVE_LIO_IQN="$iqn"
step tcp-partition survive_fault "$name" "$dev" tcp-partition 0 7701 fault_tcp_partition 3260 8
step cause-keepalive sh -c 'grep -i -q -e keepalive -e nop /tmp/vol_warns.txt || {
	echo "no warn line names the keepalive as the cause:"; cat /tmp/vol_warns.txt; exit 1; }'

step detach ia detach "$name"
