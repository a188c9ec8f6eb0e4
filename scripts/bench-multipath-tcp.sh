#!/usr/bin/env bash
# bench-multipath-tcp.sh: the path selectors on the host. One tgtd LUN behind two portals
# (127.0.0.1 and 127.0.0.2, the same port; tgt has no ALUA, so both paths are optimized),
# `iser-attach serve` over one path, then over two with --path-selector round-robin and
# queue-length, each under fio's nbd engine: 4k randread QD32 with 1 and 2 jobs. Prints one
# line per row: IOPS and the 99th percentile completion latency. One run on a shared host is
# noisy: run it twice before reading a difference into it.
#
# Needs: root (tgtd), Go, tgt, fio with the nbd engine, jq.
# Env:
#   BENCH_RUNTIME  seconds per fio run (default 10)
#   BENCH_SIZE_MB  LUN size in MiB, filled with random data first (default 256)
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
RUNTIME="${BENCH_RUNTIME:-10}"
SIZE_MB="${BENCH_SIZE_MB:-256}"

die() { echo "bench-multipath-tcp: $*" >&2; exit 1; }
log() { echo "bench-multipath-tcp: $*" >&2; }
[ "$(id -u)" = 0 ] || die "tgtd needs root: run as root"
for c in go tgtd tgtadm fio jq; do command -v "$c" >/dev/null || die "$c not found"; done
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || die "this fio has no nbd engine"

WORK="$(mktemp -d /tmp/iser-attach-mpbench.XXXXXX)"
BIN="$WORK/bin"
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

log "building"
CGO_ENABLED=0 go build -o "$BIN/" ./cmd/iser-attach ./internal/tgttest/cmd/tgtlab

log "starting tgtd with a ${SIZE_MB} MiB LUN and a second portal"
"$BIN"/tgtlab -size "${SIZE_MB}M" -dir "$WORK/lun" >"$WORK/tgtlab.env" 2>"$WORK/tgtlab.log" &
PIDS+=($!)
wait_for tgtlab "${PIDS[-1]}" grep -q '^READY=1$' "$WORK/tgtlab.env"
PORTAL=$(sed -n 's/^PORTAL=//p' "$WORK/tgtlab.env")
TARGET=$(sed -n 's/^TARGET=//p' "$WORK/tgtlab.env")
CONTROL=$(sed -n 's/^CONTROL_PORT=//p' "$WORK/tgtlab.env")
LUN1=$(sed -n 's/^LUN1=//p' "$WORK/tgtlab.env")
SECOND="127.0.0.2:${PORTAL##*:}"
tgtadm -C "$CONTROL" --lld iscsi --mode portal --op new --param "portal=$SECOND"
dd if=/dev/urandom of="$LUN1" bs=1M count="$SIZE_MB" conv=notrunc status=none

row() { # LABEL SERVE-ARGS...
	local label=$1 jobs out
	shift
	local sock="$WORK/$label.sock"
	# exec: $! is the server itself, for stop_pid.
	(exec "$BIN"/iser-attach --initiator-name iqn.2026-11.io.iser-attach:mpbench serve --target "$TARGET" \
		--lun 1 --transport tcp --listen "unix:$sock" "$@") 2>"$WORK/$label.log" &
	PIDS+=($!)
	wait_for "$label" "${PIDS[-1]}" test -S "$sock"
	for jobs in 1 2; do
		out="$WORK/$label-j$jobs.json"
		fio --name=randread --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --rw=randread --bs=4k \
			--iodepth=32 --numjobs="$jobs" --group_reporting --time_based --runtime="$RUNTIME" --ramp_time=1 \
			--output-format=json --output="$out" >"$WORK/fio.out" 2>&1 ||
			{ cat "$WORK/fio.out" "$WORK/$label.log" >&2; die "fio against $label failed"; }
		printf "%-24s %d job(s)  %8.0f IOPS  p99 %6.0f us\n" "$label" "$jobs" \
			"$(jq '.jobs[0].read.iops' "$out")" "$(jq '.jobs[0].read.clat_ns.percentile["99.000000"] / 1000' "$out")"
	done
	alive "${PIDS[-1]}" || { cat "$WORK/$label.log" >&2; die "$label died during the run"; }
	stop_pid "${PIDS[-1]}"
	unset 'PIDS[-1]'
}

echo "iSCSI/TCP to tgtd ($PORTAL and $SECOND), serve over NBD on a unix socket, fio nbd 4k randread QD32, ${RUNTIME} s per row"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -r)  $(nproc) CPUs  load $(cut -d' ' -f1-3 /proc/loadavg)"
row one-path --portal "$PORTAL"
row two-paths-round-robin --portal "$PORTAL" --portal "$SECOND" --path-selector round-robin
row two-paths-queue-length --portal "$PORTAL" --portal "$SECOND" --path-selector queue-length
