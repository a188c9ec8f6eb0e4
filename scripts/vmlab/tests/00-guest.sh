#!/bin/sh
# The guest has every kernel feature and tool the lab's tests rely on; a missing one fails here
# first, by name.
. "$VMLAB_LIB"
set -eu

step kernel-modules need_module rdma_rxe ib_uverbs rdma_ucm ib_iser ib_isert iscsi_tcp \
	iscsi_target_mod target_core_file sd_mod
step nbd nbd_load
step ublk ublk_load
for t in ibv_devices ibv_devinfo rping ibv_rc_pingpong iscsiadm iscsid iscsi-perf iscsi-inq \
	iscsi-readcapacity16 tgtd tgtadm fio nbd-client nbdinfo nbdkit sg_inq lsscsi jq; do
	step "tool-$t" command -v "$t"
done
step 9p-share test -f "$VMLAB_SRC/scripts/vmlab/guest/lib.sh"
step 9p-out-writable touch "$VMLAB_RESULTS/written"
echo "host bin: $(ls "$VMLAB_BIN" 2>/dev/null | tr '\n' ' ')"
