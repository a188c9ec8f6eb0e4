#!/bin/sh
# Multipath against one path, side by side: one LIO ramdisk LUN behind two TPGs in two ALUA
# groups, both active/optimized (lio_mp_target, as tests/84-multipath.sh), attached as ublk over
# iSER once through portal A alone (row iser-attach-ublk-1path) and once through both portals
# (iser-attach-ublk-2path, round-robin over the two paths). Workloads: VMLAB_MP_WORKLOADS (4k
# random read at QD32 with 1 and 2 jobs). Each row carries the daemon's CPU time per I/O.
# vmlab-timeout: 600
. "$VMLAB_LIB"
set -eu

ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:bench --log-level warn "$@"; }
qd=128
rc=0
VMLAB_WORKLOADS=${VMLAB_MP_WORKLOADS:-4k-randread-qd32:randread:4k:32 4k-randread-qd32-2jobs:randread:4k:32:2}
pa=$MP_ADDR_A:$LIO_PORT
pb=$MP_ADDR_B:$LIO_PORT
trap 'mp_addrs_down' EXIT
step lio-teardown lio_teardown
step addresses mp_addrs_up
step ublk-load ublk_load
step lio-mp-target lio_mp_target "$VMLAB_IQN" rd:256

for paths in 1 2; do
	portals="--portal $pa"
	[ "$paths" = 1 ] || portals="$portals --portal $pb"
	# shellcheck disable=SC2086 # $portals: flags and their values
	dev=$(ia attach --daemon --frontend ublk --transport iser $portals \
		--target "$VMLAB_IQN" --lun 0 --queue-depth "$qd" --name "bench-mp$paths")
	step "attach-${paths}path" test -b "$dev"
	pid=$(vol_pid "bench-mp$paths") || fail "step daemon-pid-${paths}path: no daemon for volume bench-mp$paths"
	echo "--- step fio-${paths}path: $dev, daemon pid $pid" >&2
	fio_baseline "$dev" "iser-attach-ublk-${paths}path" "" "$pid" || {
		echo "FAIL step fio-${paths}path: a workload failed (its row in bench.jsonl says why)" >&2
		rc=1
	}
	step "detach-${paths}path" ia detach "bench-mp$paths"
done
step lio-teardown-end lio_teardown
exit $rc
