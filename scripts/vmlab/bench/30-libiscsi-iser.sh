#!/bin/sh
# Baseline: libiscsi's iscsi-perf over iser:// to the same kind of LIO LUN. iscsi-perf only
# reads, in one session, and libiscsi 1.19's iSER path fails commands above 256 KiB, so the
# rows are 4k-randread-qd32, 4k-randread-qd1 and 256k-seqread-qd8 (lat_us: QD / IOPS).
. "$VMLAB_LIB"
set -eu

url=iser://$VMLAB_ADDR:$LIO_PORT/$VMLAB_IQN/0
step rxe-up rxe_up
step lio-target lio_target "$VMLAB_IQN" rd:256
step iscsi-perf-4k-randread iscsi_perf_row libiscsi-iser 4k-randread-qd32 "$url" 8 32
step iscsi-perf-4k-randread-qd1 iscsi_perf_row libiscsi-iser 4k-randread-qd1 "$url" 8 1
step iscsi-perf-256k-seqread iscsi_perf_row libiscsi-iser 256k-seqread-qd8 "$url" 512 8
