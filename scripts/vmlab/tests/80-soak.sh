#!/bin/sh
# vmlab-timeout: 900
# Soak: two volumes under random faults. Volume A: ublk over iSER to LIO LUN 0 (iblock on a
# dm-linear device over a loop file), ext4 mounted, fio writing files in it; volume B: kernel
# nbd over iSCSI/TCP to LUN 1 of the same LIO target (fileio), fio on the raw device. Per
# fault, both get a fresh fio round (random 4k-64k writes, rate-capped so the fault lands in
# them, every block read back and checked: verify=crc32c, own seed and region) while one fault
# is injected; the kinds, in a random order that VMLAB_SOAK_SEED repeats:
#   lio-tpg      the TPG disabled 3 s (every session dropped, logins refused), enabled again:
#                A and B each reinstate their session (one more recovery)
#   daemon-kill  A's daemon SIGKILLed and started again: it takes over the same /dev/ublkbN
#   daemon-term  A's daemon stopped with SIGTERM while the fs is mounted, started again: the
#                device must stay (ublk user recovery state) and be taken over, no fs error
#   partition    every TCP packet of port 3260 dropped (nothing refused) for 6 s, longer than
#                B's keepalive (--nop-interval 1s --nop-timeout 2s): B reinstates its session
#   dm-suspend   LUN 0's dm device suspended for 10 s: the target stops completing commands
#                but its connection stays; A's keepalive (--nop-timeout 15s) outlasts it, so
#                only --command-timeout (5s) can act: A must count command timeouts and
#                recover (ABORT TASK, LU RESET, session drop and reissue as the target allows)
# A fault survived iff its injection worked, both volumes are "attached" afterwards (with the
# recovery the kind implies), both fio rounds verified every write, and both devices were
# present in every sample taken during it. Hung I/O: a fio round that outlives its bound
# (VMLAB_SOAK_FIO_TIMEOUT, 150 s) or a device with I/O in flight and no completion for longer
# than VMLAB_SOAK_STALL (45 s). At the end: no kernel I/O error on A or B, no ext4 error,
# e2fsck clean, and exactly
#   faults survived: S/N, verify errors: V, hung I/O: H
# plus one line per kind; passes iff S = N, V = 0, H = 0.
# Env: VMLAB_SOAK_FAULTS (8; `make soak`: 50), VMLAB_SOAK_SEED (printed; repeats a run),
# VMLAB_SOAK_KINDS (the kinds above, space-separated; default all).
. "$VMLAB_LIB"
set -eu

iqn=$VMLAB_IQN
portal=$VMLAB_ADDR:3260
ini=iqn.2026-11.io.iser-attach:lab
na=soak-a
nb=soak-b
mnt=/mnt/soak
N=${VMLAB_SOAK_FAULTS:-8}
SEED=${VMLAB_SOAK_SEED:-$(($(od -An -N2 -tu2 /dev/urandom) + 1))}
KINDS=${VMLAB_SOAK_KINDS:-lio-tpg daemon-kill daemon-term partition dm-suspend}
FIO_TO=${VMLAB_SOAK_FIO_TIMEOUT:-150}
STALL=${VMLAB_SOAK_STALL:-45}
ia() { iser-attach --initiator-name "$ini" --log-level warn --log-format json "$@"; }

echo "soak: seed $SEED, $N faults, kinds: $KINDS (VMLAB_SOAK_SEED=$SEED repeats this order)"

cleanup() {
	set +e
	[ -z "${STALL_PID:-}" ] || kill "$STALL_PID" 2>/dev/null
	lio_dm "$iqn" 0 resume >/dev/null 2>&1
	tcp_partition 3260 0
	umount "$mnt" 2>/dev/null
	for _n in $na $nb; do
		_p=$(vol_status "$_n" 2>/dev/null | jq -r .pid 2>/dev/null)
		[ -n "$_p" ] || continue
		timeout 30 iser-attach detach --force "$_n" >/dev/null 2>&1 || kill -9 "$_p" 2>/dev/null
	done
	cp /run/iser-attach/*.log "$VMLAB_RESULTS/" 2>/dev/null
	return 0
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# attach_a: ublk over iSER with a 5 s command timeout, shorter than the 10 s dm-suspend.
cmdto="--command-timeout 5s"
step binaries test -x "$VMLAB_BIN/iser-attach"
step recovery-flags has_recovery_flags
attach_a() {
	# shellcheck disable=SC2086
	ia attach --daemon --frontend ublk --transport iser --portal "$portal" --target "$iqn" --lun 0 \
		--name "$na" --replacement-timeout 60s --nop-interval 2s --nop-timeout 15s $cmdto
}
step rxe-up rxe_up
step ublk-load ublk_load
step nbd-load nbd_load
step lio-target lio_target "$iqn" dm:160 file:96
step attach-a attach_a >"$VMLAB_RESULTS/dev-a"
step attach-b ia attach --daemon --frontend nbd --transport tcp --portal "$portal" --target "$iqn" \
	--lun 1 --name "$nb" --replacement-timeout 60s --nop-interval 1s --nop-timeout 2s >"$VMLAB_RESULTS/dev-b"
deva=$(cat "$VMLAB_RESULTS/dev-a")
devb=$(cat "$VMLAB_RESULTS/dev-b")
echo "soak: A $na $deva (ublk, iSER), B $nb $devb (nbd, TCP)"
step status-a vol_wait "$na" '.state == "attached" and .transport == "iser"' 10
step status-b vol_wait "$nb" '.state == "attached" and .transport == "tcp"' 10
step mkfs mkfs.ext4 -q -F "$deva"
mkdir -p "$mnt"
step mount mount "$deva" "$mnt"
dmesg_mark=$(dmesg | wc -l)

# stall_watch DEV...: every second, a device with I/O in flight whose completed reads+writes
# did not move for more than $STALL s is one hung-I/O episode (a line in stalls.txt).
stall_watch() {
	set +e
	for _d in "$@"; do
		echo "${_d#/dev/} 0 0" # name, completions, seconds without progress
	done >/tmp/stall.state
	while :; do
		sleep 1
		while read -r _b _c _s; do
			set -- $(cat "/sys/block/$_b/stat" 2>/dev/null) # 1 reads, 5 writes, 9 in flight
			_now=$((${1:-0} + ${5:-0}))
			if [ "${9:-0}" -gt 0 ] && [ "$_now" = "$_c" ]; then
				_s=$((_s + 1))
				[ "$_s" = $((STALL + 1)) ] &&
					echo "$(date +%T) $_b: ${9} I/Os in flight, none completed for ${STALL} s" >>"$VMLAB_RESULTS/stalls.txt"
			else
				_s=0
			fi
			echo "$_b $_now $_s"
		done </tmp/stall.state >/tmp/stall.next
		mv /tmp/stall.next /tmp/stall.state
	done
}
: >"$VMLAB_RESULTS/stalls.txt"
stall_watch "$deva" "$devb" &
STALL_PID=$!

# fio_round NAME FILE OFFSET SEED: random writes of 8 MiB at 2 MiB/s, every block read back and
# checked; writes NAME.res: "ok BYTES", "verify ..." or "hung".
fio_round() {
	_n=$1 _r=0
	timeout -k 5 "$FIO_TO" fio --name="$_n" --filename="$2" --offset="$3" --size=8M \
		--randseed="$4" --rw=randwrite --bs=4k-64k --rate=,2m --iodepth=16 --direct=1 \
		--ioengine=libaio --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
		--output-format=json --output="$VMLAB_RESULTS/fio-$_n.json" 2>"$VMLAB_RESULTS/fio-$_n.err" || _r=$?
	if [ $_r = 124 ] || [ $_r = 137 ]; then
		echo "hung (fio still running after $FIO_TO s)" >"$VMLAB_RESULTS/fio-$_n.res"
		return
	fi
	_j=$(sed -n '/^{/,$p' "$VMLAB_RESULTS/fio-$_n.json" 2>/dev/null |
		jq -r '.jobs[0] | "\(.error) \(.write.io_bytes) \(.read.io_bytes)"' 2>/dev/null) || _j=
	set -- $_j
	if [ $_r = 0 ] && [ "${1:-x}" = 0 ] && [ "${2:-0}" -gt 0 ] && [ "${3:-}" = "$2" ]; then
		echo "ok, wrote $2 bytes, all read back and verified" >"$VMLAB_RESULTS/fio-$_n.res"
	else
		echo "verify (exit $_r, error ${1:-?}, wrote ${2:-?}, verified ${3:-?}): $(tail -n 3 "$VMLAB_RESULTS/fio-$_n.err" | tr '\n' ' ')" \
			>"$VMLAB_RESULTS/fio-$_n.res"
	fi
}

# The faults. Each returns once it has healed; EXPECT_A / EXPECT_B: the jq condition each
# volume must meet afterwards ($R0 / $PID0 / $T0: recoveries / pid / command timeouts before).
restart_a() { # restart_a SIGNAL: stop A's daemon, check the device stays, start it again
	_p=$(vol_status "$na" | jq -r .pid) || return 1
	kill "-$1" "$_p" || return 1
	wait_for 30 sh -c "! kill -0 $_p" || {
		echo "daemon $_p still running 30 s after SIG$1"
		return 1
	}
	echo "fault: daemon $_p of $na stopped (SIG$1)"
	dev_present "$deva" || {
		echo "$deva gone after SIG$1 of its daemon (fs mounted on it)"
		return 1
	}
	sleep 1
	attach_a >/tmp/dev-a2 || return 1
	[ "$(cat /tmp/dev-a2)" = "$deva" ] || {
		echo "restarted daemon attached $(cat /tmp/dev-a2), not $deva"
		return 1
	}
}
fault() {
	EXPECT_A='.state == "attached"'
	EXPECT_B='.state == "attached"'
	case $1 in
	lio-tpg)
		EXPECT_A='.state == "attached" and .recoveries > $R0'
		EXPECT_B='.state == "attached" and .recoveries > $R0'
		fault_lio_restart "$iqn" 3
		;;
	daemon-kill)
		EXPECT_A='.state == "attached" and .pid != $PID0'
		restart_a KILL
		;;
	daemon-term)
		EXPECT_A='.state == "attached" and .pid != $PID0'
		restart_a TERM
		;;
	partition)
		EXPECT_B='.state == "attached" and .recoveries > $R0'
		fault_tcp_partition 3260 6
		;;
	dm-suspend)
		EXPECT_A='.state == "attached" and .command_timeouts > $T0'
		lio_dm "$iqn" 0 suspend || return 1
		echo "fault: LUN 0's dm device suspended for 10 s (commands stall, the connection stays)"
		sleep 10
		lio_dm "$iqn" 0 resume || return 1
		echo "fault: LUN 0's dm device resumed"
		;;
	*)
		echo "unknown fault kind $1 (VMLAB_SOAK_KINDS)"
		return 1
		;;
	esac
}

# The order: the kinds shuffled (seeded) block by block, so each kind comes up N/k times.
order=$(echo "$KINDS" | awk -v n="$N" -v seed="$SEED" '{
	srand(seed); k = NF
	while (c < n) {
		for (i = 1; i <= k; i++) a[i] = $i
		for (i = k; i > 1; i--) { j = int(rand() * i) + 1; t = a[i]; a[i] = a[j]; a[j] = t }
		for (i = 1; i <= k && c < n; i++) { print a[i]; c++ }
	}
}')
echo "soak: order: $(echo $order)"

survived=0 verrs=0 hung_fio=0 i=0
: >/tmp/soak.kinds
: >/tmp/soak.why # one line per fault not survived and per early stop, restated at the end
for kind in $order; do
	i=$((i + 1))
	lbl=$(printf 'f%02d-%s' "$i" "$kind")
	st_a=$(vol_status "$na") && st_b=$(vol_status "$nb") || {
		echo "soak $lbl: no status for a volume; stopping; list: $(timeout 10 iser-attach list --json 2>&1 | jq -c 'map({name, state, pid})' 2>/dev/null)" |
			tee -a /tmp/soak.why
		tail -n 5 /run/iser-attach/$na.log /run/iser-attach/$nb.log 2>/dev/null || true
		break
	}
	ra=$(echo "$st_a" | jq .recoveries) pa=$(echo "$st_a" | jq .pid) ta=$(echo "$st_a" | jq .command_timeouts)
	rb=$(echo "$st_b" | jq .recoveries) pb=$(echo "$st_b" | jq .pid)
	slot=$((i % 8))
	echo "=== soak $lbl (fault $i/$N): A $(echo "$st_a" | jq -c '{state, recoveries, pid}'), B $(echo "$st_b" | jq -c '{state, recoveries, pid}')"
	fio_round "$lbl-a" "$mnt/slot$slot" 0 $((SEED * 1000 + i)) &
	fa=$!
	fio_round "$lbl-b" "$devb" $((slot * 8))M $((SEED * 1000 + 500 + i)) &
	fb=$!
	sleep 2
	vol_watch "$na" "$deva" "$VMLAB_RESULTS/watch-$lbl-a.txt" &
	wa=$!
	vol_watch "$nb" "$devb" "$VMLAB_RESULTS/watch-$lbl-b.txt" &
	wb=$!
	ok=1 why=
	running=1
	kill -0 $fa 2>/dev/null && kill -0 $fb 2>/dev/null || running=0
	ma=$(vol_log_mark "$na") mb=$(vol_log_mark "$nb")
	t0=$(date +%s)
	if ! fault "$kind"; then
		ok=0 why="the fault itself failed"
	fi
	[ $running = 1 ] || { ok=0 why="${why:+$why; }a fio round ended before the fault began"; }
	ca=$(echo "$EXPECT_A" | sed "s/\$R0/$ra/g; s/\$PID0/$pa/g; s/\$T0/$ta/g")
	cb=$(echo "$EXPECT_B" | sed "s/\$R0/$rb/g; s/\$PID0/$pb/g")
	vol_wait "$na" "$ca" 60 || { ok=0 why="${why:+$why; }A not ($ca)"; }
	vol_wait "$nb" "$cb" 60 || { ok=0 why="${why:+$why; }B not ($cb)"; }
	echo "soak $lbl: healed after $(($(date +%s) - t0)) s"
	for v in a b; do # what each daemon logged about it (the causes)
		eval "_m=\$m$v _n=\$n$v"
		tail -n +$((_m + 1)) "/run/iser-attach/$_n.log" 2>/dev/null |
			jq -R -c 'fromjson? | select(.level == "warn" or .level == "error") | [.message, .error]' 2>/dev/null |
			head -n 10 | sed "s/^/soak $lbl: $v log: /"
	done
	wait $fa $fb || true
	kill $wa $wb 2>/dev/null
	wait $wa $wb 2>/dev/null || true
	for v in a b; do
		res=$(cat "$VMLAB_RESULTS/fio-$lbl-$v.res" 2>/dev/null || echo "verify (no result)")
		echo "soak $lbl: fio $v: $res"
		case $res in
		ok*) ;;
		hung*) hung_fio=$((hung_fio + 1)) ok=0 why="${why:+$why; }fio $v hung" ;;
		*) verrs=$((verrs + 1)) ok=0 why="${why:+$why; }fio $v: verify failed" ;;
		esac
		if grep -q MISSING "$VMLAB_RESULTS/watch-$lbl-$v.txt"; then
			ok=0 why="${why:+$why; }device $v vanished during the fault"
			grep -m 2 MISSING "$VMLAB_RESULTS/watch-$lbl-$v.txt"
		fi
	done
	echo "$kind $ok" >>/tmp/soak.kinds
	if [ $ok = 1 ]; then
		survived=$((survived + 1))
		echo "soak $lbl: survived ($survived so far)"
	else
		echo "soak $lbl: NOT survived: $why" | tee -a /tmp/soak.why
	fi
	if dmesg | tail -n +$((dmesg_mark + 1)) | grep -E -m 3 'BUG:|Oops|blocked for more than'; then
		echo "soak: the guest kernel oopsed or hung during $lbl (above; console.log has the trace); the $((N - i)) faults left count as not survived" |
			tee -a /tmp/soak.why
		break
	fi
	dev_present "$deva" && dev_present "$devb" || {
		echo "soak: a device is gone after $lbl (A $deva: $(dev_present "$deva" && echo present || echo gone), B $devb: $(dev_present "$devb" && echo present || echo gone)); the $((N - i)) faults left count as not survived" |
			tee -a /tmp/soak.why
		break
	}
done
sleep 2 # one more stall sample after the last round
kill "$STALL_PID" 2>/dev/null
wait "$STALL_PID" 2>/dev/null || true
STALL_PID=
stalls=$(grep -c . "$VMLAB_RESULTS/stalls.txt" || true)
[ "$stalls" = 0 ] || cat "$VMLAB_RESULTS/stalls.txt"
hung=$((hung_fio + stalls))

# The filesystem and the kernel's view: no I/O error reached the block layer, no ext4 error.
fs_ok=1
dmesg | tail -n +$((dmesg_mark + 1)) >"$VMLAB_RESULTS/dmesg.txt"
if grep -E "I/O error.*(${deva#/dev/}|${devb#/dev/})|EXT4-fs error" "$VMLAB_RESULTS/dmesg.txt"; then
	echo "soak: kernel I/O or ext4 errors (above)"
	fs_ok=0
fi
timeout 30 umount "$mnt" || fs_ok=0
timeout 60 e2fsck -f -n "$deva" >"$VMLAB_RESULTS/fsck.txt" 2>&1 || {
	cat "$VMLAB_RESULTS/fsck.txt"
	echo "soak: e2fsck found errors on $deva"
	fs_ok=0
}

echo "faults survived: $survived/$N, verify errors: $verrs, hung I/O: $hung"
for k in $KINDS; do
	awk -v k="$k" '$1 == k { n++; s += $2 } END { printf "fault %s: %d/%d survived\n", k, s, n }' /tmp/soak.kinds
done
echo "soak: seed $SEED, filesystem and kernel log $([ $fs_ok = 1 ] && echo clean || echo NOT clean)"
if ! { [ "$survived" = "$N" ] && [ "$verrs" = 0 ] && [ "$hung" = 0 ] && [ $fs_ok = 1 ]; }; then
	cat /tmp/soak.why
	fail "soak: not every fault survived cleanly (seed $SEED)"
fi
step detach-a ia detach "$na"
step detach-b ia detach "$nb"
