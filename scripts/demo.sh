#!/usr/bin/env bash
# demo.sh: what `make demo` runs. Shows iser-attach end to end against a real
# iSCSI target (tgtd on 127.0.0.1, iSCSI over TCP): discovery, LUN info, an
# NBD export of the LUN, and a random-data write/read-back through it.
#
# Needs: root (tgtd), Go, and on Debian 12 tgt and libnbd-bin (make demo installs them first:
# scripts/deps.sh demo).
# Env: DEMO_SIZE (LUN size, default 64M; the data written fills it).
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
SIZE="${DEMO_SIZE:-64M}"

if [ -t 1 ]; then bold=$'\e[1m'; off=$'\e[0m'; else bold=; off=; fi
n=0
step() { n=$((n + 1)); printf '\n%s==> [%d] %s%s\n' "$bold" "$n" "$*" "$off"; }
die() { echo "demo: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found (try: apt-get install $2)"; }

[ "$(id -u)" = 0 ] || die "tgtd needs root: run as root"
command -v go >/dev/null 2>&1 || die "go not found: install Go from https://go.dev/dl and put /usr/local/go/bin on PATH"
need tgtd tgt
need tgtadm tgt
need nbdinfo libnbd-bin
need nbdcopy libnbd-bin
need sha256sum coreutils

WORK="$(mktemp -d /tmp/iser-attach-demo.XXXXXX)"
BIN="$WORK/bin" # never bin/: the VM lab shares that with cgo builds
SOCK="$WORK/nbd.sock"
URI="nbd+unix:///?socket=$SOCK"
PIDS=()

# shellcheck source=lib/proc.sh
. "$(dirname "$0")/lib/proc.sh"

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ ${#PIDS[@]} -gt 0 ]; then
		printf '\n%s==> shutting down%s\n' "$bold" "$off"
		stop_all
	fi
	rm -rf "$WORK"
	if [ "$rc" = 0 ]; then echo "demo: OK"; else echo "demo: FAILED (exit $rc)" >&2; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


step "build iser-attach and tgtlab (CGO_ENABLED=0)"
CGO_ENABLED=0 go build -o "$BIN/" ./cmd/iser-attach
CGO_ENABLED=0 go build -o "$BIN/" ./internal/tgttest/cmd/tgtlab
ls -l "$BIN"/iser-attach "$BIN"/tgtlab

step "start tgtd with one $SIZE LUN on a free port on 127.0.0.1"
"$BIN"/tgtlab -size "$SIZE" -dir "$WORK/lun" >"$WORK/tgtlab.env" 2>"$WORK/tgtlab.log" &
PIDS+=($!)
wait_for tgtlab "${PIDS[-1]}" grep -q '^READY=1$' "$WORK/tgtlab.env"
PORTAL=$(sed -n 's/^PORTAL=//p' "$WORK/tgtlab.env")
TARGET=$(sed -n 's/^TARGET=//p' "$WORK/tgtlab.env")
LUN1=$(sed -n 's/^LUN1=//p' "$WORK/tgtlab.env")
CONTROL_PORT=$(sed -n 's/^CONTROL_PORT=//p' "$WORK/tgtlab.env")
echo "portal $PORTAL, target $TARGET, LUN 1 backed by $LUN1"
tgtadm -C "$CONTROL_PORT" --lld iscsi --mode target --op show | sed -n '1p;/LUN: 1/,/Backing store path/p'

step "iser-attach discover $PORTAL"
"$BIN"/iser-attach discover "$PORTAL"

step "iser-attach info --portal $PORTAL --target $TARGET --lun 1"
"$BIN"/iser-attach info --portal "$PORTAL" --target "$TARGET" --lun 1

step "iser-attach serve ... --listen unix:$SOCK (background)"
"$BIN"/iser-attach serve --portal "$PORTAL" --target "$TARGET" --lun 1 --listen "unix:$SOCK" &
PIDS+=($!)
wait_for "iser-attach serve" "${PIDS[-1]}" test -S "$SOCK"
echo "listening on $SOCK"

step "nbdinfo '$URI'"
nbdinfo "$URI"

step "write $SIZE of random data with nbdcopy, read it back, compare sha256"
BYTES=$(nbdinfo --size "$URI")
head -c "$BYTES" /dev/urandom >"$WORK/random.bin"
nbdcopy --flush "$WORK/random.bin" "$URI"
nbdcopy "$URI" "$WORK/readback.bin"
want=$(sha256sum <"$WORK/random.bin" | cut -d' ' -f1)
got=$(sha256sum <"$WORK/readback.bin" | cut -d' ' -f1)
disk=$(sha256sum <"$LUN1" | cut -d' ' -f1)
printf '%-28s %s\n' "written:" "$want" "read back through NBD:" "$got" "target's backing file:" "$disk"
[ "$want" = "$got" ] || die "read-back data differ from what was written"
[ "$want" = "$disk" ] || die "the target's backing file differs from what was written"
echo "all three match"
