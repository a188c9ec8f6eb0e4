#!/bin/sh
# iser-attach serve over iSER and over iSCSI/TCP to the same kind of LIO ramdisk LUN as the
# kernel baselines; fio's nbd engine drives the NBD export with the workloads of
# VMLAB_WORKLOADS (2 jobs: 2 NBD connections). Each row carries serve's CPU time per I/O;
# after the runs, a row with serve's memory (queue depth 128) and its CPU share while idle.
# vmlab-timeout: 600
. "$VMLAB_LIB"
set -eu

sock=/tmp/ia-bench.sock
name=iqn.2026-11.io.iser-attach:bench
qd=128
rc=0
step rxe-up rxe_up
step lio-target lio_target "$VMLAB_IQN" rd:256

for tr in iser tcp; do
	rm -f "$sock"
	iser-attach --initiator-name "$name" serve --transport "$tr" --portal "$VMLAB_ADDR:$LIO_PORT" \
		--target "$VMLAB_IQN" --lun 0 --queue-depth "$qd" --listen "unix:$sock" \
		>"$VMLAB_RESULTS/serve-$tr.log" 2>&1 &
	pid=$!
	step "serve-$tr" wait_for 30 test -S "$sock"
	# A failed workload leaves a row saying why; the other transport still runs.
	echo "--- step fio-nbd-$tr: serve pid $pid" >&2
	fio_baseline "nbd+unix:///?socket=$sock" "iser-attach-serve-$tr" "" "$pid" || {
		echo "FAIL step fio-nbd-$tr: a workload failed (its row in bench.jsonl says why)" >&2
		rc=1
	}
	idle=$(daemon_idle_cpu "$pid") || fail "step idle-cpu-$tr: no CPU time for pid $pid"
	step "memory-$tr" daemon_mem_row "iser-attach-serve-$tr" "$pid" queue_depth="$qd" "$idle"
	kill -TERM $pid
	step "serve-$tr-exit" wait $pid
done
exit $rc
