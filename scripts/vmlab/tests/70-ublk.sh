#!/bin/sh
# The ublk frontend (issue 5). iser-attach version --verbose's feature table (UPDATE_SIZE
# offered from 6.16 on). bin/ublk.test against ublk_drv with an in-memory backend:
# O_DIRECT dd in/out, fsync -> Flush, O_DSYNC -> FUA, blkdiscard -> Trim, blkdiscard -z ->
# WriteZeroes, a backend error -> EIO in dd, ext4 mkfs/mount/remount, fio verify QD32,
# Detach + Recover in one process. Then user recovery across processes with bin/ublkmem
# (a tmpfs-backed device): ext4 mounted and fio verify running, the server is SIGKILLed, a
# new process reattaches with -recover, fio's verify passes and the files are intact.
# Fails (never skips) when ublk_drv is missing.
. "$VMLAB_LIB"
set -eu

step binaries test -x "$VMLAB_BIN/ublk.test" -a -x "$VMLAB_BIN/ublkmem"
step ublk-load ublk_load

# The feature table (version --verbose): every flag's line, and UBLK_F_UPDATE_SIZE offered
# exactly on Linux >= 6.16 (7.2: yes, 6.12: no).
iser-attach version --verbose >"$VMLAB_RESULTS/ublk-features.txt"
cat "$VMLAB_RESULTS/ublk-features.txt"
rel=$(uname -r)
maj=${rel%%.*}
min=${rel#*.}
min=${min%%[!0-9]*}
want=no
if [ "$maj" -gt 6 ] || { [ "$maj" -eq 6 ] && [ "$min" -ge 16 ]; }; then
	want=yes
fi
step feature-table grep -Eq '^  UBLK_F_USER_RECOVERY_REISSUE +yes ' "$VMLAB_RESULTS/ublk-features.txt"
step feature-update-size grep -Eq "^  UBLK_F_UPDATE_SIZE +$want " "$VMLAB_RESULTS/ublk-features.txt"
step go-lab env UBLK_LAB=1 "$VMLAB_BIN/ublk.test" -test.run '^TestLab' -test.v -test.count=1 -test.timeout 240s

# Recovery across processes.
img=/dev/shm/ublk-recover.img
idf=/tmp/ublk.id
mnt=/mnt/ublk
rm -f "$img" "$idf"
mkdir -p "$mnt"
ublkmem -backing "$img" -size 160M -depth 32 -id-file "$idf" >"$VMLAB_RESULTS/ublkmem-1.log" 2>&1 &
pid1=$!
step server-ready wait_for 30 test -s "$idf"
id=$(cat "$idf")
dev=/dev/ublkb$id
step mkfs mkfs.ext4 -q -F "$dev"
step mount mount "$dev" "$mnt"
step write-files sh -c "head -c 6M /dev/urandom >$mnt/a && head -c 3M /dev/urandom >$mnt/b && sync"
sha256sum "$mnt/a" "$mnt/b" >/tmp/ublk.sums
# The write phase is rate-limited to about 8 s so the kill lands in it, with up to 32 writes in
# flight: those must be reissued to the new server, or fio sees EIO and its verify fails.
fio --name=recover --directory="$mnt" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k-64k \
	--iodepth=32 --size=32M --rate=,4m --verify=crc32c --verify_state_save=0 --do_verify=1 \
	--output="$VMLAB_RESULTS/fio-recover.txt" &
fio=$!
sleep 2
step fio-running kill -0 $fio
step kill-server kill -KILL $pid1
wait $pid1 || true
step device-stays test -b "$dev"
rm -f "$idf"
ublkmem -backing "$img" -recover "$id" -id-file "$idf" >"$VMLAB_RESULTS/ublkmem-2.log" 2>&1 &
pid2=$!
step server-recovered wait_for 60 test -s "$idf"
step same-device test "$(cat "$idf")" = "$id"
step fio-verify-after-recovery wait $fio
step files-intact sha256sum -c /tmp/ublk.sums
step umount umount "$mnt"
step fsck e2fsck -f -n "$dev"
step remount mount "$dev" "$mnt"
step files-intact-remount sha256sum -c /tmp/ublk.sums
step umount-2 umount "$mnt"
step server-stop kill -TERM $pid2
step server-exit wait $pid2
# The recovered server took over fio's writes (more than 4 MiB of the 32).
written=$(sed -n 's/.*BytesWritten:\([0-9]*\).*/\1/p' "$VMLAB_RESULTS/ublkmem-2.log")
echo "recovered server wrote ${written:-?} bytes"
step recovered-server-wrote test "${written:-0}" -gt 4194304
step device-removed sh -c "! test -e $dev"
grep -h 'ublkmem' "$VMLAB_RESULTS"/ublkmem-*.log || true
rm -f "$img"
