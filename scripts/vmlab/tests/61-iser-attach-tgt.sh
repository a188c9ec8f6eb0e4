#!/bin/sh
# iser-attach over iSER against tgt (tgtd --iser): discovery over TCP is not offered by the
# iSER-only portal here, so log in directly; random data from one block to 512 KiB at many
# offsets on tgt's LUN 1; serve over iSER checked with nbdcopy.
. "$VMLAB_LIB"
set -eu

iqn=iqn.2026-11.io.iser-attach:tgt
portal=$VMLAB_ADDR:3260
name=iqn.2026-11.io.iser-attach:lab

step binaries test -x "$VMLAB_BIN/iser-attach" -a -x "$VMLAB_BIN/initiator.test"
step rxe-up rxe_up
step tgt-iser env TGT_INITIATORS="$name" sh -c '. "$VMLAB_LIB"; tgt_iser "$0" 64' "$iqn"
step iser-read-write env ISER_LAB_PORTAL="$portal" ISER_LAB_TARGET="$iqn" ISER_LAB_TRANSPORT=iser \
	ISER_LAB_LUNS=1 "$VMLAB_BIN/initiator.test" -test.run '^TestLab' -test.v -test.count=1
step info-iser sh -c "iser-attach --initiator-name $name info --transport iser --portal $portal \
	--target $iqn --lun 1 --json | tee $VMLAB_RESULTS/info.json | jq -e '.transport == \"iser\"'"
sock=/tmp/ia-tgt.sock
iser-attach --initiator-name "$name" serve --transport iser --portal "$portal" --target "$iqn" \
	--lun 1 --listen "unix:$sock" >"$VMLAB_RESULTS/serve.log" 2>&1 &
spid=$!
step serve-ready wait_for 30 test -S "$sock"
uri="nbd+unix:///?socket=$sock"
head -c 32M /dev/urandom >/tmp/rnd.bin
step nbdcopy-in nbdcopy /tmp/rnd.bin "$uri"
step nbdcopy-out nbdcopy "$uri" /tmp/back.bin
step nbdcopy-compare sh -c 'cmp -n 33554432 /tmp/rnd.bin /tmp/back.bin'
rm -f /tmp/rnd.bin /tmp/back.bin
kill -TERM $spid
step serve-exit wait $spid
step tgt-stop tgt_stop
