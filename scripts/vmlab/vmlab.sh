#!/bin/bash
# vmlab.sh: the VM lab. Builds and caches a Debian guest with RDMA (rxe), LIO, tgt, open-iscsi,
# libiscsi, nbd and ublk, boots it under qemu TCG, runs guest scripts, collects the results.
# See docs/vmlab.md and scripts/vmlab/README.md.
#
#   vmlab.sh build [--force]   build/cache the guest
#   vmlab.sh e2e               run scripts/vmlab/tests/NN-*.sh in the guest, then one boot with
#                              systemd as PID 1 per scripts/vmlab/tests-systemd/NN-*.sh
#   vmlab.sh bench             run scripts/vmlab/bench/NN-*.sh, print the table
#   vmlab.sh run 'CMD'         run CMD (bash, lib.sh sourced) in the guest
#   vmlab.sh shell             interactive shell on the guest console
#   vmlab.sh table [FILE...]   print the bench table of FILE (default: latest results); of
#                              several runs' files, each row the best of them (most IOPS), and
#                              the paired rows' rounds pooled (one median of all)
#
# Environment (all ISER_VMLAB_* and VMLAB_* variables are passed into the guest as well):
#   ISER_VMLAB_KERNEL    the guest kernel, a NAME of kernels.conf (6.12, the default; 7.2, or 7
#                        for the 7.x line); each kernel has its own cached guest
#   ISER_VMLAB_CACHE     cache directory (default /var/cache/iser-attach-vmlab)
#   ISER_VMLAB_OUT       results directory of this run (default $CACHE/results/CMD-TIME)
#   ISER_VMLAB_TIMEOUT   whole-VM timeout in seconds (default 3000; bench 1500)
#   ISER_VMLAB_TESTS     file-name patterns selecting tests, e.g. '10-* 20-kernel-iser.sh'
#   ISER_VMLAB_NOBUILD   set to skip building ./cmd/... into ./bin on the host
#   ISER_VMLAB_MEM, ISER_VMLAB_SMP   guest memory in MiB (2048) and CPUs (2)
#   ISER_VMLAB_LOGIN_IQN the IQN the kernel initiator logs in to in tests (default: the
#                        target's own); set it to a wrong IQN to see the login step fail
#   VMLAB_FIO_SECONDS    seconds per fio workload in bench (default 5; e2e uses 2)
#   ISER_VMLAB_LOCK_WAIT seconds to wait for another lab run's lock (lock.sh; default 3600)
#   VMLAB_TEST_TIMEOUT   per-test timeout inside the guest (default 300)
#   ISER_VMLAB_SYSTEMD_TIMEOUT   whole-VM timeout of each systemd boot (default 420)
#   VMLAB_SYSTEMD_WATCHDOG       seconds a systemd boot may take to reach its checks (330)
set -euo pipefail
# The braces make bash read the whole script before running it: editing the file while a
# run is in progress cannot change that run.
{

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export ISER_VMLAB_CACHE=${ISER_VMLAB_CACHE:-/var/cache/iser-attach-vmlab}
CACHE=$ISER_VMLAB_CACHE
# shellcheck source=lock.sh
. "$HERE/lock.sh"

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
	[ -n "${HOST_BUILT:-}" ] && return 0
	HOST_BUILT=1
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

# boot JOB [CMD]: run the guest once with JOB; sets OUT and QEMU_RC (124: timed out);
# returns the job's exit code. BOOT_APPEND: more kernel command line.
boot() {
	local job=$1 cmd=${2:-} g timeout_s rc qpid
	need_host_tools
	g=$(guest_dir)
	KNAME=$(sed -n 's/^name=//p' "$g/stamp")
	[ "$job" = shell ] || host_build
	# A shared lock on the stamp keeps a concurrent rebuild from deleting this guest.
	exec 8<"$g/stamp"
	flock -s 8
	results_dir "$job"
	rm -f "$OUT/status" "$OUT/console.log"
	echo "$job" >"$OUT/job"
	printf '%s\n' "$cmd" >"$OUT/cmd"
	write_env "$OUT/env"
	timeout_s=${ISER_VMLAB_TIMEOUT:-3000}
	[ "$job" = bench ] && timeout_s=${ISER_VMLAB_TIMEOUT:-1500}
	[ "$job" = shell ] && timeout_s=${ISER_VMLAB_TIMEOUT:-86400}
	local qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max
		-m "${ISER_VMLAB_MEM:-2048}" -smp "${ISER_VMLAB_SMP:-2}"
		-nographic -no-reboot
		-kernel "$g/vmlinuz" -initrd "$g/initrd.img"
		-append "console=ttyS0 quiet loglevel=4 panic=-1 ${BOOT_APPEND:-} ${ISER_VMLAB_CMDLINE:-}"
		-drive "file=$g/root.ext4,if=virtio,format=raw,snapshot=on,cache=unsafe"
		-virtfs "local,path=$REPO,mount_tag=host,security_model=none,readonly=on"
		-virtfs "local,path=$OUT,mount_tag=out,security_model=none"
		-nic none)
	say "booting guest ($KNAME: $(sed -n 's/^kernel=//p' "$g/stamp")), job $job, results $OUT, timeout ${timeout_s} s"
	local t0=$SECONDS
	QEMU_RC=0
	if [ "$job" = shell ]; then
		timeout --foreground "$timeout_s" "${qemu[@]}" || true
	else
		local attempt
		for attempt in 1 2; do
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
			QEMU_RC=$rc
			[ $rc = 124 ] && say "FAIL step vm-timeout: guest still running after ${timeout_s} s, killed"
			# A guest kernel that dies before the lab's init prints a line (measured on CI: an
			# oops in hrtimer_start_range_ns 1.3 s into boot under TCG, before any module) ran
			# nothing of ours: boot it once more, saying so; a second such death fails.
			if [ $attempt = 1 ] && [ ! -f "$OUT/status" ] && [ $rc != 124 ] &&
				! grep -q 'vmlab' "$OUT/console.log" 2>/dev/null &&
				grep -qE 'Oops|invalid opcode|Kernel panic|end trace' "$OUT/console.log" 2>/dev/null; then
				say "the guest kernel died before the lab's init ran (console tail below); booting it once more"
				console_tail 12
				mv "$OUT/console.log" "$OUT/console-boot1.log"
				continue
			fi
			break
		done
	fi
	say "guest exited after $((SECONDS - t0)) s"
	if [ ! -f "$OUT/status" ]; then
		say "FAIL step guest-status: the guest wrote no status (crash, timeout or init failure); console tail:"
		console_tail 40
		return 1
	fi
	rc=$(cat "$OUT/status")
	if [ "$rc" != 0 ] && [ "$job" != shell ] && [ "$job" != run ] && [ "$job" != systemd ]; then
		say "FAIL job $job exit $rc; summary:"
		sed 's/^/  /' "$OUT/summary.txt" >&2 2>/dev/null || true
		if ! grep -q '^FAIL' "$OUT/summary.txt" 2>/dev/null; then
			say "no test failed, so the console tail:"
			console_tail 30
		fi
	fi
	return "$rc"
}

# results_dir JOB: set OUT to $ISER_VMLAB_OUT or a new $CACHE/results/JOB-KERNEL-TIME (then
# linked as results/latest; the newest 30 kept).
results_dir() {
	OUT=${ISER_VMLAB_OUT:-$CACHE/results/$1${KNAME:+-$KNAME}-$(date +%Y%m%d-%H%M%S)}
	mkdir -p "$OUT"
	OUT=$(cd "$OUT" && pwd)
	if [ -z "${ISER_VMLAB_OUT:-}" ]; then
		ln -sfn "$OUT" "$CACHE/results/latest"
		# Keep the newest 30 runs.
		ls -1dt "$CACHE"/results/*-20[0-9][0-9][01][0-9][0-3][0-9]-* 2>/dev/null | tail -n +31 | xargs -r rm -rf
	fi
}

# selected DIR: the NN-*.sh files of DIR that ISER_VMLAB_TESTS selects (every one without
# it); the same matching as vmlab_run_dir in the guest.
selected() {
	local - f b p sel files
	files=("$1"/[0-9][0-9]-*.sh)
	set -f # the patterns match file names, not files in the current directory
	for f in "${files[@]}"; do
		[ -e "$f" ] || continue
		b=$(basename "$f")
		if [ -n "${ISER_VMLAB_TESTS:-}" ]; then
			sel=0
			for p in $ISER_VMLAB_TESTS; do
				case $b in $p | $p.sh) sel=1 ;; esac
			done
			[ $sel = 1 ] || continue
		fi
		echo "$f"
	done
}

# systemd_test FILE: one boot of the guest with systemd as PID 1 for tests-systemd/NN-name.sh
# (guest: FILE setup before systemd, FILE check once it is up, then poweroff; host: FILE host
# DIR on what the guest left). Results in $E2E_OUT/NN-name/; a PASS or FAIL line goes to
# $E2E_OUT/summary.txt like the guest's tests. Returns nonzero on FAIL.
systemd_test() {
	local f=$1 name dir rc=0 hrc=0 t0=$SECONDS why= dt
	name=$(basename "$f" .sh)
	dir=$E2E_OUT/$name
	rm -rf "$dir"
	mkdir -p "$dir"
	say "RUN  $name (a boot with systemd as PID 1)"
	ISER_VMLAB_OUT=$dir ISER_VMLAB_TIMEOUT=${ISER_VMLAB_SYSTEMD_TIMEOUT:-420} \
		BOOT_APPEND="systemd.show_status=1" boot systemd "$name" || rc=$?
	if [ "$QEMU_RC" = 124 ]; then
		why="FAIL step vm-timeout: the guest did not power off within ${ISER_VMLAB_SYSTEMD_TIMEOUT:-420} s"
	elif [ ! -f "$dir/status" ]; then
		why="FAIL step guest-status: no status (crash or init failure)"
	elif [ "$rc" != 0 ]; then
		why=$(grep -h '^FAIL' "$dir/setup.log" "$dir/check.log" 2>/dev/null | tail -n1)
		[ "$rc" = 124 ] && why="FAIL step watchdog: the boot never reached its checks (journal-watchdog.txt)"
		why=${why:-FAIL guest exit $rc}
	fi
	bash "$f" host "$dir" >"$dir/host.log" 2>&1 || hrc=$?
	if [ -z "$why" ] && [ $hrc != 0 ]; then
		why=$(grep '^FAIL' "$dir/host.log" | head -n1)
		why=${why:-FAIL host check exit $hrc}
	fi
	dt=$((SECONDS - t0))
	if [ -z "$why" ] && [ $hrc = 0 ]; then
		say "PASS $name (${dt} s)"
		echo "PASS $name ${dt}s" >>"$E2E_OUT/summary.txt"
		return 0
	fi
	say "FAIL $name (${dt} s): $why"
	{
		for l in setup.log check.log host.log; do
			[ -s "$dir/$l" ] || continue
			echo "$name/$l:"
			tail -n 12 "$dir/$l"
		done
	} | sed 's/^/vmlab:   | /' >&2
	[ -n "$(grep -l . "$dir/check.log" 2>/dev/null)" ] || console_tail 25
	echo "FAIL $name ${dt}s exit=${rc}/${hrc} $why" >>"$E2E_OUT/summary.txt"
	return 1
}

console_tail() {
	tail -n "$1" "$OUT/console.log" 2>/dev/null | tr -d '\r' |
		sed -e 's/\x1b[[?0-9;]*[a-zA-Z]//g; s/\x1bc//g' -e 's/^/  | /' >&2
}

# print_table FILE...: the table of one run's rows; of several runs', each workload's row per
# initiator the one with the most IOPS (best of N), the other rows (memory, syscalls) of the
# first run that has them.
print_table() {
	local f=$1
	[ -s "$f" ] || die "step bench-table: no rows in $f"
	if [ $# -gt 1 ] && command -v jq >/dev/null; then
		for f in "$@"; do [ -s "$f" ] || die "step bench-table: no rows in $f"; done
		echo "best of $# runs: $*"
		jq -s 'group_by([.initiator, .workload, .kind // ""])
			| map(if .[0].kind == null then (map(select(.error == null)) | max_by(.iops) // .[0])
				elif .[0].kind == "paired" then (.[0] + {ratios: (map(.ratios) | add)})
					| .rounds = (.ratios | length)
					| .median_ratio = ([.ratios[] | numbers] | sort | .[(length - 1) / 2 | floor])
				else .[0] end)
			| sort_by(.seq) | .[]' <(for f in "$@"; do jq -c --arg f "$f" '. + {seq: input_line_number}' "$f"; done) |
			jq -r -s -f "$HERE/table.jq" || die "step bench-table: jq on $*"
		return
	fi
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
# Every command that builds or boots a guest runs alone on this machine (lock.sh).
case $cmd in
build | e2e | bench | run | shell)
	[ "$(id -u)" = 0 ] || die "run as root"
	lab_lock "$CACHE" "vmlab.sh $cmd, kernel ${ISER_VMLAB_KERNEL:-6.12}, in $REPO" || exit 1
	;;
esac
case $cmd in
build)
	[ "$(id -u)" = 0 ] || die "run as root"
	"$HERE/build-guest.sh" "$@" >/dev/null || die "step build-guest"
	;;
e2e)
	[ "$(id -u)" = 0 ] || die "run as root"
	t0=$SECONDS
	rc=0
	guest_tests=$(selected "$HERE/tests")
	systemd_tests=$(selected "$HERE/tests-systemd")
	[ -n "$guest_tests$systemd_tests" ] ||
		die "step select: no test in tests/ or tests-systemd/ matches ISER_VMLAB_TESTS='${ISER_VMLAB_TESTS:-}'"
	if [ -n "$guest_tests" ]; then
		boot e2e || rc=$?
	else
		results_dir e2e
		: >"$OUT/summary.txt"
	fi
	E2E_OUT=$OUT
	if [ -s "$OUT/bench.jsonl" ]; then
		say "quick figures from the e2e tests (seconds per workload, not a benchmark):"
		print_table "$OUT/bench.jsonl" || true
	fi
	# Then a boot with systemd as the guest's init per tests-systemd/ test.
	for f in $systemd_tests; do
		systemd_test "$f" || rc=1
	done
	OUT=$E2E_OUT
	# A CI log is often read from its end only: repeat what each failed guest test printed
	# last (its log's tail, which names the cause) after everything else.
	for t in $(awk '$1 == "FAIL" { print $2 }' "$OUT/summary.txt" 2>/dev/null || true); do
		[ -s "$OUT/$t/log" ] || continue
		say "$t failed; the end of its log ($OUT/$t/log):"
		{ grep -v '^--- step .*: ok (' "$OUT/$t/log" || true; } | tail -n 25 | cut -c1-300 | sed 's/^/vmlab:   | /' >&2
	done
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
	if [ $# -gt 0 ]; then print_table "$@"; else print_table "$CACHE/results/latest/bench.jsonl"; fi
	;;
-h | --help | help | "") usage ;;
*)
	echo "vmlab: unknown command '$cmd'" >&2
	usage
	;;
esac
exit
}
