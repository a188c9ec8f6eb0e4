#!/bin/sh
# vmlab-timeout: 240
# Multipath against tgt (STGT over iSER; no ALUA: failover only): tgtd's iSER listener takes
# connections on every address, so a two-path ublk volume logs in through $MP_ADDR_A:3260 and
# $MP_ADDR_B:3260, a session each. Under fio with crc32c verify (random 4k-64k writes at
# 2 MiB/s, then all read back) the busiest path (the one whose I/O count in `list --json` grew
# more) goes silent: its address removed for 8 s, no reset, no answer. fio must end with no
# error, its worst completion at most VMLAB_MP_SILENT_MAX s (6), and the path must be up and
# take I/O again within 20 s of its address coming back. Prints one line:
#   multipath tgt-silent: PASS|FAIL ...
. "$VMLAB_LIB"
set -eu

iqn=iqn.2003-01.org.vmlab:tgt-mp
name=mptgt
: "${VMLAB_MP_SILENT_MAX:=6}"
ia() { iser-attach --initiator-name iqn.2026-11.io.iser-attach:lab --log-level info --log-format json "$@"; }
cleanup() {
	set +e
	recovery_cleanup "$name" >/dev/null
	tgt_stop
	mp_addrs_down
}
trap cleanup EXIT
trap 'exit 143' TERM INT

step addresses mp_addrs_up
step ublk-load ublk_load
export TGT_INITIATORS=iqn.2026-11.io.iser-attach:lab # tgt allows the initiator names bound to its target
step tgt-iser tgt_iser "$iqn" 128
step attach ia attach --daemon --frontend ublk --transport iser --portal "$MP_ADDR_A:3260" --portal "$MP_ADDR_B:3260" \
	--target "$iqn" --lun 1 --name "$name" --no-path-timeout 10s >"$VMLAB_RESULTS/dev"
dev=$(cat "$VMLAB_RESULTS/dev")
echo "attached $name: $dev"
step paths-up vol_wait "$name" '(.paths | length) == 2 and all(.paths[]; .state == "up")' 20

# ios N: path N's (1: A, 2: B) I/O count.
ios() { vol_status "$name" | jq --arg p "$(mp_addr "$1"):3260" '[.paths[] | select(.portal | split(",")[0] == $p) | .ios] | first // 0'; }

fio_fault_start tgt-silent "$dev" 0 24M 8601
sleep 2
a0=$(ios 1) b0=$(ios 2)
sleep 1.5
v=1
[ $(($(ios 2) - b0)) -gt $(($(ios 1) - a0)) ] && v=2
vname=$(echo "$v" | tr 12 AB)
echo "busiest path: $vname"
step silent-on mp_path_silent "$v" 1
sleep 8
step silent-off mp_path_silent "$v" 0
t1=$(cut -d' ' -f1 /proc/uptime)
fb=never
i0=$(ios "$v")
for _ in $(seq 100); do
	if vol_status "$name" | jq -e 'all(.paths[]; .state == "up")' >/dev/null 2>&1 && [ "$(ios "$v")" -gt "$i0" ]; then
		fb=$(awk -v a="$t1" '{ printf "%.1f", $1 - a }' /proc/uptime)
		break
	fi
	# once fio has finished, a few direct reads keep I/O going
	kill -0 "$FIO_PID" 2>/dev/null || dd if="$dev" of=/dev/null bs=4k count=8 iflag=direct status=none 2>/dev/null || true
	sleep 0.2
done
fio=ok
fio_fault_wait tgt-silent >"$VMLAB_RESULTS/fio-tgt-silent.out" 2>&1 || fio="FAILED ($(tail -n 3 "$VMLAB_RESULTS/fio-tgt-silent.out" | tr '\n' ' '))"
worst=$(sed -n '/^{/,$p' "$VMLAB_RESULTS/fio-tgt-silent.json" 2>/dev/null |
	jq -r '[.jobs[0].read.clat_ns.max, .jobs[0].write.clat_ns.max] | max / 1e9 | . * 100 | floor / 100' 2>/dev/null || echo "?")
txt="victim path $vname silent 8 s; fio $fio; worst completion $worst s (bound $VMLAB_MP_SILENT_MAX); failback $fb s (bound 20); paths $(vol_status "$name" | jq -c '.paths' 2>/dev/null)"
if [ "$fio" = ok ] && awk -v w="$worst" -v b="$VMLAB_MP_SILENT_MAX" 'BEGIN { exit !(w != "?" && w + 0 <= b + 0) }' && [ "$fb" != never ]; then
	echo "multipath tgt-silent: PASS $txt"
else
	echo "multipath tgt-silent: FAIL $txt"
	exit 1
fi
step detach ia detach "$name"
