#!/usr/bin/env bash
# bench-tcp.sh: what `make bench-tcp` runs. Compares (a) `iser-attach serve`
# with (b) qemu-nbd + libiscsi, both exporting the same tgtd LUN (iSCSI over
# TCP on 127.0.0.1) over NBD on a unix socket, with fio's nbd engine:
# 4k randread QD32, 4k randwrite QD32, 1M sequential read QD8. Prints one
# table with the ratio a/b per row, then each run's CPU time per I/O of the
# server and of tgtd and the machine's busy share (the host's two CPUs run
# fio, the server and tgtd: tgtd's share per I/O bounds what either server
# can reach); the fio JSON results stay in $BENCH_OUT.
#
# Needs: root (tgtd), Go, and on Debian 12:
#   apt-get install tgt fio qemu-utils qemu-block-extra
# Env:
#   BENCH_RUNTIME  seconds per fio run (default 10)
#   BENCH_RAMP     seconds of warm-up per run, not counted (default 1)
#   BENCH_SIZE_MB  LUN size in MiB, filled with random data first (default 256)
#   BENCH_SIDES    which sides to run: "a b" (default), "a" or "b"
#   BENCH_OUT      result directory (default testdata-out/bench-tcp)
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
RUNTIME="${BENCH_RUNTIME:-10}"
RAMP="${BENCH_RAMP:-1}"
SIZE_MB="${BENCH_SIZE_MB:-256}"
SIDES="${BENCH_SIDES:-a b}"
OUT="${BENCH_OUT:-testdata-out/bench-tcp}"

die() { echo "bench-tcp: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found (try: apt-get install $2)"; }
log() { echo "bench-tcp: $*" >&2; }

[ "$(id -u)" = 0 ] || die "tgtd needs root: run as root"
need go golang
need tgtd tgt
need fio fio
need jq jq
case " $SIDES " in *" b "*)
	need qemu-nbd qemu-utils
	[ -n "$(find /usr/lib -path '*qemu*' -name 'block-iscsi.so' -print -quit 2>/dev/null)" ] ||
		die "qemu's iSCSI driver not found (try: apt-get install qemu-block-extra)"
	;;
esac
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || die "this fio has no nbd engine (need fio >= 3.20 built with libnbd)"

WORK="$(mktemp -d /tmp/iser-attach-bench.XXXXXX)"
BIN="$WORK/bin" # never bin/: the VM lab shares that with cgo builds
PIDS=()
# shellcheck source=lib/proc.sh
. "$(dirname "$0")/lib/proc.sh"

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_all
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


stop_last() { # stop the most recently started background process
	stop_pid "${PIDS[-1]}"
	unset 'PIDS[-1]'
}

log "building"
case " $SIDES " in *" a "*) CGO_ENABLED=0 go build -o "$BIN/" ./cmd/iser-attach ;; esac
CGO_ENABLED=0 go build -o "$BIN/" ./internal/tgttest/cmd/tgtlab
CGO_ENABLED=0 go build -o "$BIN/" ./internal/tgttest/cmd/fiotable

mkdir -p "$OUT"
rm -f "$OUT"/[ab]-*.json

log "starting tgtd with a ${SIZE_MB} MiB LUN"
"$BIN"/tgtlab -size "${SIZE_MB}M" -dir "$WORK/lun" >"$WORK/tgtlab.env" 2>"$WORK/tgtlab.log" &
PIDS+=($!)
wait_for tgtlab "${PIDS[-1]}" grep -q '^READY=1$' "$WORK/tgtlab.env"
PORTAL=$(sed -n 's/^PORTAL=//p' "$WORK/tgtlab.env")
TARGET=$(sed -n 's/^TARGET=//p' "$WORK/tgtlab.env")
LUN1=$(sed -n 's/^LUN1=//p' "$WORK/tgtlab.env")
# Real data everywhere, so reads are not served from holes.
dd if=/dev/urandom of="$LUN1" bs=1M count="$SIZE_MB" conv=notrunc status=none

# workload file rw bs iodepth
WORKLOADS=(
	"randread randread 4k 32"
	"randwrite randwrite 4k 32"
	"seqread read 1M 8"
)

# cpu_ticks PID...: the CPU clock ticks (utime + stime) the processes used so far.
cpu_ticks() {
	local t=0 p v
	for p in "$@"; do
		v=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }')
		t=$((t + ${v:-0}))
	done
	echo "$t"
}

# busy_ticks: "BUSY TOTAL" clock ticks of all CPUs so far (/proc/stat).
busy_ticks() { awk '$1 == "cpu" { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6; exit }' /proc/stat; }

# Where each run's CPU went: the server's, tgtd's and the whole machine's
# (tgtd and fio share the host with the server: when the machine is busy
# throughout, IOPS follow what a path costs per I/O, the target included).
CPU_ROWS=()
cpu_row() { # SIDE WORKLOAD FIO.json SERVER0 TGTD0 BUSY0 TOTAL0 SERVER1 TGTD1 BUSY1 TOTAL1
	local ios
	ios=$(jq '.jobs[0] | .read.total_ios + .write.total_ios' "$3")
	CPU_ROWS+=("$(echo "$4 $5 $6 $7 $8 $9 ${10} ${11}" | awk -v side="$1" -v w="$2" -v ios="$ios" \
		-v hz="$(getconf CLK_TCK)" -v rt="$RUNTIME" -v ramp="$RAMP" '{
		f = rt / (rt + ramp) # fio counts no I/O in the ramp; the ticks count it
		printf "%-4s %-10s %11.1f %11.1f %6.1f\n", side, w, ($5 - $1) / hz * 1e6 * f / ios,
			($6 - $2) / hz * 1e6 * f / ios, (($8 - $4) > 0 ? ($7 - $3) * 100 / ($8 - $4) : 0) }')")
}

run_side() { # SIDE LABEL SERVER-COMMAND...
	local side=$1 label=$2
	shift 2
	local sock="$WORK/$side.sock"
	log "side $side: $label"
	"$@" "$sock" >"$WORK/$side.log" 2>&1 &
	PIDS+=($!)
	wait_for "$label" "${PIDS[-1]}" test -S "$sock"
	local server=${PIDS[-1]} before
	for w in "${WORKLOADS[@]}"; do
		set -- $w
		log "  fio $1 (bs=$3 iodepth=$4, ${RUNTIME}s)"
		# shellcheck disable=SC2046 # tgtd's pids, one word each
		before="$(cpu_ticks "$server") $(cpu_ticks $(pgrep -x tgtd)) $(busy_ticks)"
		fio --name="$1" --ioengine=nbd --uri="nbd+unix:///?socket=$sock" \
			--rw="$2" --bs="$3" --iodepth="$4" --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" \
			--output-format=json --output="$OUT/$side-$1.json" >"$WORK/fio.out" 2>&1 ||
			{ cat "$WORK/fio.out" "$WORK/$side.log" >&2; die "fio $1 against $label failed"; }
		# shellcheck disable=SC2046,SC2086 # word lists
		cpu_row "$side" "$1" "$OUT/$side-$1.json" $before "$(cpu_ticks "$server")" "$(cpu_ticks $(pgrep -x tgtd))" $(busy_ticks)
	done
	alive "${PIDS[-1]}" || { cat "$WORK/$side.log" >&2; die "$label died during the run"; }
	stop_last
}

serve_a() { exec "$BIN"/iser-attach serve --portal "$PORTAL" --target "$TARGET" --lun 1 --listen "unix:$1"; }
# exec: $! must be the server itself, not a subshell, for the TERM at the
# end. --persistent: keep serving after a client leaves (one fio run per
# workload).
serve_b() { exec qemu-nbd --format=raw --persistent --socket="$1" "iscsi://$PORTAL/$TARGET/1"; }

case " $SIDES " in *" a "*) run_side a iser-attach serve_a ;; esac
case " $SIDES " in *" b "*) run_side b qemu-nbd serve_b ;; esac

echo
echo "iSCSI/TCP to tgtd on 127.0.0.1, NBD over a unix socket, fio ioengine=nbd, ${RUNTIME} s per run (+${RAMP} s ramp), ${SIZE_MB} MiB LUN"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -r)  $(nproc) CPUs  $(fio --version)  $(qemu-nbd --version 2>/dev/null | head -1)"
echo "a = iser-attach serve, b = qemu-nbd with libiscsi; results in $OUT"
echo
"$BIN"/fiotable -dir "$OUT" -a iser-attach -b qemu-nbd
echo
echo "CPU per I/O in microseconds (utime + stime over the run, ramp scaled out) and the machine's busy share"
printf "%-4s %-10s %11s %11s %6s\n" side workload server_us/io tgtd_us/io busy%
printf "%s\n" "${CPU_ROWS[@]}"
