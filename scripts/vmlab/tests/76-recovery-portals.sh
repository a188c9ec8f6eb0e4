#!/bin/sh
# Recovery (issue "Operations / Recovery") with two portals: LIO listens with iSER on
# 10.99.0.1:3260 and on a second address of the rxe netdev, 10.99.0.2:3260 (same TPG);
# `iser-attach attach --portal P1 --portal P2` (ublk) logs in through P1. Then P1 is taken
# away (sessions dropped, its network portal deleted, target back 3 s later): recovery must
# land on P2. Then P1 comes back and P2 goes: recovery must wrap around to P1. fio writes across
# each fault with crc32c verify, every write read back; the device stays, one LIO session is
# left. Ends with "faults survived: N".
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
ip2=10.99.0.2
p1=$VMLAB_ADDR:3260
p2=$ip2:3260
name=rec-portals
ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab --log-level warn --log-format json "$@"; }
FAULTS_SURVIVED=0
trap 'recovery_cleanup "$name"; ip addr del "$ip2/24" dev rxe-net0 2>/dev/null' EXIT
trap 'exit 143' TERM INT

second_address() {
	ip -4 addr show dev rxe-net0 | grep -q "inet $ip2/" || ip addr add "$ip2/24" dev rxe-net0
}
step binaries test -x "$VMLAB_BIN/iser-attach"
step recovery-flags sh -c 'iser-attach attach --help | grep -q -- --replacement-timeout'
step rxe-up rxe_up
step second-address second_address
step ublk-load ublk_load
step lio-target lio_target "$iqn" file:64
step second-portal lio_portal_add "$iqn" "$p2"
step attach ia attach --daemon --frontend ublk --transport iser --portal "$p1" --portal "$p2" \
	--target "$iqn" --lun 0 --name "$name" --replacement-timeout 30s >"$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step status-first-portal vol_wait "$name" ".state == \"attached\" and .portal == \"$p1\"" 10

# portal_away GONE [BACK]: sessions dropped (TPG off), portal GONE deleted, BACK added again,
# the target up 3 s later.
portal_away() {
	lio_tpg "$iqn" 0 || return 1
	lio_portal_del "$iqn" "$1" || return 1
	[ -z "${2:-}" ] || lio_portal_add "$iqn" "$2" || return 1
	echo "fault: portal $1 gone${2:+, $2 back}; target down for 3 s"
	sleep 3
	lio_tpg "$iqn" 1
}
export SURVIVE_LIO_IQN="$iqn"
SURVIVE_COND=".state == \"attached\" and .recoveries > \$R0 and .portal == \"$p2\""
step portal-1-gone survive_fault "$name" "$dev" portal-1-gone 0 7601 portal_away "$p1"
SURVIVE_COND=".state == \"attached\" and .recoveries > \$R0 and .portal == \"$p1\""
step portal-2-gone survive_fault "$name" "$dev" portal-2-gone 32M 7602 portal_away "$p2" "$p1"
unset SURVIVE_COND

step detach ia detach "$name"
