#!/bin/bash
# vmlab.sh: the VM lab. Builds and caches a Debian guest with RDMA (rxe), LIO, tgt, open-iscsi,
# libiscsi, nbd and ublk, boots it under qemu TCG, runs guest scripts, collects the results.
# See docs/vmlab.md and scripts/vmlab/README.md.
#
#   vmlab.sh build [--force]   build/cache the guest
#   vmlab.sh e2e               run scripts/vmlab/tests/NN-*.sh in the guest
#   vmlab.sh bench             run scripts/vmlab/bench/NN-*.sh, print the table
#   vmlab.sh run 'CMD'         run CMD (bash, lib.sh sourced) in the guest
#   vmlab.sh shell             interactive shell on the guest console
#   vmlab.sh table [FILE]      print the bench table of FILE (default: latest results)
#
# Environment (all ISER_VMLAB_* and VMLAB_* variables are passed into the guest as well):
#   ISER_VMLAB_CACHE     cache directory (default /var/cache/iser-attach-vmlab)
#   ISER_VMLAB_OUT       results directory of this run (default $CACHE/results/CMD-TIME)
#   ISER_VMLAB_TIMEOUT   whole-VM timeout in seconds (default 900; bench 1200)
#   ISER_VMLAB_TESTS     file-name patterns selecting tests, e.g. '10-* 20-kernel-iser.sh'
#   ISER_VMLAB_NOBUILD   set to skip building ./cmd/... into ./bin on the host
#   ISER_VMLAB_MEM, ISER_VMLAB_SMP   guest memory in MiB (2048) and CPUs (2)
#   ISER_VMLAB_LOGIN_IQN the IQN the kernel initiator logs in to in tests (default: the
#                        target's own); set it to a wrong IQN to see the login step fail
#   VMLAB_FIO_SECONDS    seconds per fio workload in bench (default 5; e2e uses 2)
#   VMLAB_TEST_TIMEOUT   per-test timeout inside the guest (default 300)
set -euo pipefail
# The braces make bash read the whole script before running it: editing the file while a
# run is in progress cannot change that run.
{

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export ISER_VMLAB_CACHE=${ISER_VMLAB_CACHE:-/var/cache/iser-attach-vmlab}
CACHE=$ISER_VMLAB_CACHE

say() { echo "vmlab: $*" >&2; }
die() {
	echo "vmlab: FAIL $*" >&2
	exit 1
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 2
}

need_host_tools() {
	local t
	for t in qemu-system-x86_64 timeout; do
		command -v "$t" >/dev/null || die "step host-tools: $t missing (apt-get install qemu-system-x86 coreutils)"
	done
}

guest_dir() {
	"$HERE/build-guest.sh" || die "step build-guest (see the messages above)"
}

# host_build: the project's binaries into ./bin, cgo on (rdma/ links rdma-core 44 like the guest).
host_build() {
	[ -n "${ISER_VMLAB_NOBUILD:-}" ] && return 0
	[ -d "$REPO/cmd" ] || return 0
	ls "$REPO"/cmd/*/*.go >/dev/null 2>&1 || return 0
	command -v go >/dev/null || die "step host-build: go not in PATH (or set ISER_VMLAB_NOBUILD=1)"
	say "building ./cmd/... into ./bin (CGO_ENABLED=1)"
	mkdir -p "$REPO/bin"
	(cd "$REPO" && CGO_ENABLED=1 go build -o bin/ ./cmd/...) ||
		die "step host-build: go build ./cmd/... failed (ISER_VMLAB_NOBUILD=1 skips it)"
}

# write_env FILE: every ISER_VMLAB_* / VMLAB_* variable, shell-quoted, for the guest.
write_env() {
	local v
	: >"$1"
	for v in $(compgen -v | grep -E '^(ISER_VMLAB_|VMLAB_)' || true); do
		case $v in ISER_VMLAB_CACHE | ISER_VMLAB_OUT) continue ;; esac
		printf 'export %s=%q\n' "$v" "${!v}" >>"$1"
	done
}

# boot JOB [CMD]: run the guest once with JOB; sets OUT; returns the job's exit code.
boot() {
	local job=$1 cmd=${2:-} g timeout_s rc qpid
	need_host_tools
	g=$(guest_dir)
	[ "$job" = shell ] || host_build
	# A shared lock on the stamp keeps a concurrent rebuild from deleting this guest.
	exec 8<"$g/stamp"
	flock -s 8
	OUT=${ISER_VMLAB_OUT:-$CACHE/results/$job-$(date +%Y%m%d-%H%M%S)}
	mkdir -p "$OUT"
	OUT=$(cd "$OUT" && pwd)
	rm -f "$OUT/status" "$OUT/console.log"
	if [ -z "${ISER_VMLAB_OUT:-}" ]; then
		ln -sfn "$OUT" "$CACHE/results/latest"
		# Keep the newest 30 runs.
		ls -1dt "$CACHE"/results/*-20[0-9][0-9][01][0-9][0-3][0-9]-* 2>/dev/null | tail -n +31 | xargs -r rm -rf
	fi
	echo "$job" >"$OUT/job"
	printf '%s\n' "$cmd" >"$OUT/cmd"
	write_env "$OUT/env"
	timeout_s=${ISER_VMLAB_TIMEOUT:-900}
	[ "$job" = bench ] && timeout_s=${ISER_VMLAB_TIMEOUT:-1200}
	[ "$job" = shell ] && timeout_s=${ISER_VMLAB_TIMEOUT:-86400}
	local qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max
		-m "${ISER_VMLAB_MEM:-2048}" -smp "${ISER_VMLAB_SMP:-2}"
		-nographic -no-reboot
		-kernel "$g/vmlinuz" -initrd "$g/initrd.img"
		-append "console=ttyS0 quiet loglevel=4 panic=-1 ${ISER_VMLAB_CMDLINE:-}"
		-drive "file=$g/root.ext4,if=virtio,format=raw,snapshot=on,cache=unsafe"
		-virtfs "local,path=$REPO,mount_tag=host,security_model=none,readonly=on"
		-virtfs "local,path=$OUT,mount_tag=out,security_model=none"
		-nic none)
	say "booting guest ($(sed -n 's/^kernel=//p' "$g/stamp")), job $job, results $OUT, timeout ${timeout_s} s"
	local t0=$SECONDS
	if [ "$job" = shell ]; then
		timeout --foreground "$timeout_s" "${qemu[@]}" || true
	else
		# The console goes to console.log; its "vmlab:" lines are progress, shown live.
		timeout -k 10 "$timeout_s" "${qemu[@]}" </dev/null >"$OUT/console.log" 2>&1 &
		qpid=$!
		if [ "$job" = run ]; then
			tail -n +1 -F --pid=$qpid "$OUT/console.log" 2>/dev/null | sed -u 's/\r//g' |
				sed -u -n -e 's/\x1b[[?0-9;]*[a-zA-Z]//g; s/\x1bc//g' -e '/vmlab: guest up/,$p' >&2 || true
		else
			tail -n +1 -F --pid=$qpid "$OUT/console.log" 2>/dev/null | sed -u 's/\r//g' |
				grep --line-buffered -E '^(vmlab|FAIL|Kernel panic)' >&2 || true
		fi
		rc=0
		wait $qpid || rc=$?
		[ $rc = 124 ] && say "FAIL step vm-timeout: guest still running after ${timeout_s} s, killed"
	fi
	say "guest exited after $((SECONDS - t0)) s"
	if [ ! -f "$OUT/status" ]; then
		say "FAIL step guest-status: the guest wrote no status (crash, timeout or init failure); console tail:"
		console_tail 40
		return 1
	fi
	rc=$(cat "$OUT/status")
	if [ "$rc" != 0 ] && [ "$job" != shell ] && [ "$job" != run ]; then
		say "FAIL job $job exit $rc; summary:"
		sed 's/^/  /' "$OUT/summary.txt" >&2 2>/dev/null || true
		if ! grep -q '^FAIL' "$OUT/summary.txt" 2>/dev/null; then
			say "no test failed, so the console tail:"
			console_tail 30
		fi
	fi
	return "$rc"
}

console_tail() {
	tail -n "$1" "$OUT/console.log" 2>/dev/null | tr -d '\r' |
		sed -e 's/\x1b[[?0-9;]*[a-zA-Z]//g; s/\x1bc//g' -e 's/^/  | /' >&2
}

print_table() {
	local f=$1
	[ -s "$f" ] || die "step bench-table: no rows in $f"
	if command -v jq >/dev/null; then
		jq -r -s -f "$HERE/table.jq" "$f" || die "step bench-table: jq on $f"
	elif [ -f "$(dirname "$f")/table.txt" ]; then
		cat "$(dirname "$f")/table.txt"
	else
		die "step bench-table: jq missing on the host and no table.txt next to $f"
	fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
build)
	[ "$(id -u)" = 0 ] || die "run as root"
	"$HERE/build-guest.sh" "$@" >/dev/null || die "step build-guest"
	;;
e2e)
	[ "$(id -u)" = 0 ] || die "run as root"
	t0=$SECONDS
	rc=0
	boot e2e || rc=$?
	if [ -s "$OUT/bench.jsonl" ]; then
		say "quick figures from the e2e tests (seconds per workload, not a benchmark):"
		print_table "$OUT/bench.jsonl" || true
	fi
	# The guest's summary.txt has a PASS or FAIL line per test: end with the
	# plain count that test runners and CI read.
	passed=$(grep -c '^PASS ' "$OUT/summary.txt" 2>/dev/null || true)
	failed=$(grep -c '^FAIL ' "$OUT/summary.txt" 2>/dev/null || true)
	if [ $rc = 0 ]; then
		say "e2e PASS in $((SECONDS - t0)) s (results $OUT)"
		echo "vmlab: ${passed:-0} passed, ${failed:-0} failed"
	else
		say "e2e FAIL (exit $rc) after $((SECONDS - t0)) s (results $OUT)"
		echo "vmlab: ${passed:-0} passed, $(( ${failed:-0} > 0 ? ${failed:-0} : 1 )) failed"
		exit 1
	fi
	;;
bench)
	[ "$(id -u)" = 0 ] || die "run as root"
	rc=0
	boot bench || rc=$?
	[ -s "$OUT/bench.jsonl" ] && print_table "$OUT/bench.jsonl"
	if [ $rc != 0 ]; then
		say "bench FAIL (exit $rc) (results $OUT)"
		exit 1
	fi
	say "bench rows: $OUT/bench.jsonl"
	;;
run)
	[ "$(id -u)" = 0 ] || die "run as root"
	[ $# -gt 0 ] || die "usage: vmlab.sh run 'CMD'"
	rc=0
	boot run "$*" || rc=$?
	exit $rc
	;;
shell)
	[ "$(id -u)" = 0 ] || die "run as root"
	boot shell
	;;
table)
	print_table "${1:-$CACHE/results/latest/bench.jsonl}"
	;;
-h | --help | help | "") usage ;;
*)
	echo "vmlab: unknown command '$cmd'" >&2
	usage
	;;
esac
exit
}
