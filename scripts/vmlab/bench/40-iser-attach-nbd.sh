#!/bin/sh
# iser-attach serve over iSER and over iSCSI/TCP to the same kind of LIO ramdisk LUN as the
# kernel baselines; fio's nbd engine drives the NBD export with the four workloads.
. "$VMLAB_LIB"
set -eu

sock=/tmp/ia-bench.sock
name=iqn.2026-11.io.iser-attach:bench
step rxe-up rxe_up
step lio-target lio_target "$VMLAB_IQN" rd:256

# bench_nbd INITIATOR: the four workloads through the running export.
bench_nbd() {
	for _w in $VMLAB_WORKLOADS; do
		IFS=: read -r _wn _rw _bs _qd <<EOF2
$_w
EOF2
		_out=$VMLAB_RESULTS/fio-$1-$_wn.json
		fio --name=vmlab --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --output-format=json \
			--output="$_out" --rw="$_rw" --bs="$_bs" --iodepth="$_qd" --size=256M \
			--runtime="$VMLAB_FIO_SECONDS" --ramp_time=1 --time_based --numjobs=1 \
			--randrepeat=0 --norandommap >/dev/null || return 1
		fio_json_row "$1" "$_wn" "$_out" || return 1
	done
}

for tr in iser tcp; do
	rm -f "$sock"
	iser-attach --initiator-name "$name" serve --transport "$tr" --portal "$VMLAB_ADDR:$LIO_PORT" \
		--target "$VMLAB_IQN" --lun 0 --listen "unix:$sock" >"$VMLAB_RESULTS/serve-$tr.log" 2>&1 &
	pid=$!
	step "serve-$tr" wait_for 30 test -S "$sock"
	step "fio-nbd-$tr" bench_nbd "iser-attach-serve-$tr"
	kill -TERM $pid
	step "serve-$tr-exit" wait $pid
done
