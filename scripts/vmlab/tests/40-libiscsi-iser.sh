#!/bin/sh
# libiscsi over iser:// to LIO: inquiry, capacity of a 4096-byte LUN, a short iscsi-perf read.
. "$VMLAB_LIB"
set -eu

url=iser://$VMLAB_ADDR:$LIO_PORT/$VMLAB_IQN
step rxe-up rxe_up
step lio-target lio_target "$VMLAB_IQN" rd:64 file:16:4096
step iscsi-inq sh -c 'iscsi-inq "$0/0" | grep -q "DIRECT_ACCESS"' "$url"
step readcapacity16-4096 sh -c 'iscsi-readcapacity16 "$0/1" | grep -q "LOGICAL BLOCK LENGTH IN BYTES:4096"' "$url"
step iscsi-perf sh -c '. "$VMLAB_LIB"; iscsi_perf_row libiscsi-iser 4k-randread-qd32 "$0/0" 8 32 2' "$url"
