#!/bin/sh
# Captures LIO's replies to the commands initiator/scsi parses, as fixtures for
# lio_test.go. Runs in the VM lab guest (kernel iSCSI/TCP initiator, sg3-utils):
#
#   ISER_VMLAB_NOBUILD=1 scripts/vmlab/vmlab.sh run \
#       'sh /mnt/host/initiator/scsi/testdata/lio/capture.sh'
#
# then copy $VMLAB_OUT/lio/*.data here and save the "Raw sense data" hex that
# sg_raw prints in the three *.txt files as *.sense. LUN 0 is a 64 MiB fileio
# LUN with emulate_tpu and emulate_tpws set, LUN 1 a 32 MiB ramdisk with
# 4096-byte blocks.
. "$VMLAB_LIB"
set -eu
IQN=iqn.2025-01.test.scsicap:lio
O=$VMLAB_OUT/lio
mkdir -p "$O"
step rxe rxe_up
# LIO reports VPD pages other than 0x00 only once wwn/vpd_unit_serial is set,
# which it refuses while the device is exported: create the devices under the
# names lio_target uses, set the serial, then let lio_target finish them.
lio_load
tag=$(echo "$IQN" | cksum | cut -d' ' -f1)
mkdir -p "$LIO/core/fileio_0/vmlab${tag}_0" "$LIO/core/rd_mcp_1/vmlab${tag}_1"
_lio_put "$LIO/core/fileio_0/vmlab${tag}_0/wwn/vpd_unit_serial" 5f4dc0e1-7c3a-4f55-9d2e-0123456789ab
_lio_put "$LIO/core/rd_mcp_1/vmlab${tag}_1/wwn/vpd_unit_serial" 0a1b2c3d-4e5f-4061-8273-9485a6b7c8d9
LIO_ISER=0 step lio lio_target $IQN file:64 rd:32:4096
_lio_put "$LIO/core/fileio_0/vmlab${tag}_0/attrib/emulate_tpu" 1 || true
_lio_put "$LIO/core/fileio_0/vmlab${tag}_0/attrib/emulate_tpws" 1 || true
D=$(step login iscsi_login $IQN tcp)
D1=$(iscsi_disk $IQN 1)
uname -r >"$O/KERNEL"
sg_inq --raw --len=96 "$D" >"$O/inquiry.data" || true
for p in 00 80 83 b0 b1 b2; do sg_vpd --page=0x$p --raw "$D" >"$O/vpd-$p.data" || true; done
sg_readcap --raw "$D" >"$O/rc10.data" || true
sg_readcap --16 --raw "$D" >"$O/rc16.data" || true
sg_readcap --16 --raw "$D1" >"$O/rc16-lun1.data" || true
sg_luns --raw "$D" >"$O/reportluns.data" || true
sg_modes --six --dbd --page=8 --raw "$D" >"$O/modesense6-caching.data" || true
sg_modes --page=0x3f --raw "$D" >"$O/modesense10-all.data" || true
sg_modes --six --page=0x0a --raw "$D" >"$O/modesense6-control.data" || true
# Sense data: READ(10) past the end, an unsupported VPD page, an invalid opcode.
sg_raw -vvv -r 1024 "$D" 28 00 00 01 ff ff 00 00 02 00 >"$O/read10-oor.txt" 2>&1 || true
sg_raw -vvv -r 255 "$D" 12 01 99 00 ff 00 >"$O/vpd-99.txt" 2>&1 || true
sg_raw -vvv "$D" c7 00 00 00 00 00 >"$O/invalid-opcode.txt" 2>&1 || true
ls -l "$O"
