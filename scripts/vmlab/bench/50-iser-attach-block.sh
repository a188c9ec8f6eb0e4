#!/bin/sh
# iser-attach as a block device over iSER: fio (libaio, O_DIRECT) on /dev/ublkbN and /dev/nbdN
# against the same kind of LIO ramdisk LUN as the kernel's ib_iser baseline in this run. Each
# row carries the daemon's CPU time per I/O; after the runs, a row with its memory and its CPU
# share while idle. Both attach with --queue-depth 128 (the ublk queue then has 128 tags too).
# Where the kernel offers UBLK_F_BATCH_IO (Linux >= 7.0), which ublk then uses, a third device
# is served without it (ISER_ATTACH_UBLK_BATCH=0: one FETCH/COMMIT per request), its rows
# iser-attach-ublk-nobatch-iser. For each ublk device, rows of kind "syscalls": the daemon's
# system calls per I/O under strace at QD1 and QD32 (syscall_rows, VMLAB_SYSCALL_WORKLOADS).
# vmlab-timeout: 600
. "$VMLAB_LIB"
set -eu

ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:bench --log-level warn "$@"; }
qd=128
rc=0
step rxe-up rxe_up
step ublk-load ublk_load
step nbd-load nbd_load
step lio-target lio_target "$VMLAB_IQN" rd:256

fes="ublk nbd"
iser-attach version --verbose >"$VMLAB_RESULTS/ublk-features.txt" 2>&1 || true
grep -q 'UBLK_F_BATCH_IO  *yes' "$VMLAB_RESULTS/ublk-features.txt" && fes="ublk ublk-nobatch nbd"
echo "frontends: $fes"
for fe in $fes; do
	batch=
	[ "$fe" = ublk-nobatch ] && batch=0
	dev=$(ISER_ATTACH_UBLK_BATCH=$batch ia attach --daemon --frontend "${fe%-nobatch}" --transport iser \
		--portal "$VMLAB_ADDR:$LIO_PORT" --target "$VMLAB_IQN" --lun 0 --queue-depth "$qd" --name "bench-$fe")
	step "attach-$fe" test -b "$dev"
	pid=$(vol_pid "bench-$fe") || fail "step daemon-pid-$fe: no daemon for volume bench-$fe"
	echo "--- step fio-$fe: $dev, daemon pid $pid" >&2
	# A failed workload leaves a row saying why; the other frontend still runs.
	fio_baseline "$dev" "iser-attach-$fe-iser" "" "$pid" || {
		echo "FAIL step fio-$fe: a workload failed (its row in bench.jsonl says why)" >&2
		rc=1
	}
	case $fe in ublk*)
		syscall_rows "$dev" "iser-attach-$fe-iser" "$pid" || {
			echo "FAIL step syscalls-$fe: counting system calls failed" >&2
			rc=1
		}
		;;
	esac
	idle=$(daemon_idle_cpu "$pid") || fail "step idle-cpu-$fe: no CPU time for pid $pid"
	step "memory-$fe" daemon_mem_row "iser-attach-$fe-iser" "$pid" queue_depth="$qd" frontend="$fe" "$idle"
	step "detach-$fe" ia detach "bench-$fe"
done
exit $rc
