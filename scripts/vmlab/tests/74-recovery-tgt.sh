#!/bin/sh
# Recovery (issue "Operations / Recovery") against tgt: `iser-attach attach` (nbd frontend,
# iSER) keeps /dev/nbdN while tgtd is killed (SIGKILL: its RDMA connections drop at once) and,
# 4 s later, started again with the same target re-created by tgtadm (tgt keeps no
# configuration) on the same backing file; fio writes across it with crc32c verify, every
# write read back. Then: state "recovering" seen, "attached" with one more recovery, the device
# present throughout, a warn log line with the cause. Ends with "faults survived: N".
. "$VMLAB_LIB"
set -eu

iqn=iqn.2026-11.io.iser-attach:tgt
ini=iqn.2026-11.io.iser-attach:lab
portal=$VMLAB_ADDR:3260
name=rec-tgt
ia() { iser-attach --initiator-name "$ini" --log-level warn --log-format json "$@"; }
FAULTS_SURVIVED=0
trap 'recovery_cleanup "$name"' EXIT # detaches what is left, prints "faults survived: N"
trap 'exit 143' TERM INT
export TGT_INITIATORS="$ini"

step binaries test -x "$VMLAB_BIN/iser-attach"
step recovery-flags sh -c 'iser-attach attach --help | grep -q -- --replacement-timeout'
step rxe-up rxe_up
step nbd-load nbd_load
step tgt-iser tgt_iser "$iqn" 96
step attach ia attach --daemon --frontend nbd --transport iser --portal "$portal" --target "$iqn" \
	--lun 1 --name "$name" --replacement-timeout 30s >"$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step status-attached vol_wait "$name" '.state == "attached" and .recoveries == 0 and .transport == "iser"' 10

step tgtd-restart survive_fault "$name" "$dev" tgtd-restart 0 7401 fault_tgt_restart "$iqn" 96 4

step detach ia detach "$name"
step tgt-stop tgt_stop
