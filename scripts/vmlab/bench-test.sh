#!/bin/bash
# bench-test.sh: host test of the vmlab bench helpers (scripts/vmlab/guest/lib.sh, run by dash
# as in the guest) and of table.jq: fio_baseline on a file and, through fio's nbd engine, on a
# qemu-nbd export (two jobs: two connections), the CPU-per-I/O meter against a stub
# `iser-attach list`, the memory row, a failing workload's row, /proc/PID/stat parsing, and
# the table printed from those rows. Needs fio, jq, qemu-nbd; about 20 s. `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
QPID=
BPID=
cleanup() {
	[ -z "$QPID" ] || kill "$QPID" 2>/dev/null
	[ -z "$BPID" ] || kill "$BPID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
# shellcheck source=../lib/check.sh
. "$HERE/../lib/check.sh"

for t in dash fio jq qemu-nbd; do
	command -v $t >/dev/null || {
		echo "bench-test: $t missing (make test-deps)" >&2
		exit 1
	}
done
for f in "$HERE"/bench/[0-9][0-9]-*.sh; do
	check "$(basename "$f") parses" dash -n "$f"
done

export VMLAB_BENCH_JSON=$T/bench.jsonl VMLAB_RESULTS=$T VMLAB_FIO_SECONDS=1
export VMLAB_WORKLOADS="4k-randread-qd1:randread:4k:1 4k-randread-qd8-2jobs:randread:4k:8:2 64k-write-qd4:write:64k:4"
# lib CMD [ARG...]: CMD in dash with lib.sh sourced ($1... the ARGs), the stubs first on PATH.
lib() {
	PATH="$T/stub:$PATH" dash -c '. "$0"; '"$1" "$HERE/guest/lib.sh" "${@:2}"
}
not() { ! "$@"; }
# rows JQ: the bench rows, slurped, through JQ.
rows() { jq -s -r -c "$@" "$VMLAB_BENCH_JSON"; }

truncate -s 64M "$T/disk.img"

# fio_baseline on a file: one row per workload, jobs from the 5th field, 2 jobs summed.
lib 'fio_baseline "$1" file-ini' "$T/disk.img" >"$T/out" 2>&1
check "fio_baseline on a file: exit 0: $(cat "$T/out")" test $? = 0
check "three rows for file-ini" test "$(rows '[.[] | select(.initiator == "file-ini")] | length')" = 3
check "the 2-job row says jobs 2" test "$(rows '.[] | select(.workload == "4k-randread-qd8-2jobs") | .jobs')" = 2
check "the 2-job result is one job (group_reporting)" \
	test "$(jq '.jobs | length' "$T/fio-file-ini-4k-randread-qd8-2jobs.json")" = 1
check "the 2-job row's ios is the sum of both jobs' reads" test "$(rows '.[] | select(.workload == "4k-randread-qd8-2jobs") | .ios')" = \
	"$(jq '.jobs[0].read.total_ios' "$T/fio-file-ini-4k-randread-qd8-2jobs.json")"
check "the write workload reports writes" \
	test "$(rows '.[] | select(.workload == "64k-write-qd4") | .ios > 0 and .mbps > 0')" = true
check "no cpu fields without a PID" test "$(rows '[.[] | select(.cpu_us_per_io != null)] | length')" = 0
check "every row has the machine's busy share and its CPU per I/O" test "$(rows '[.[] | select(.initiator == "file-ini")
	| .sys_busy_pct >= 0 and .sys_busy_pct <= 100 and .sys_us_per_io > 0] | all')" = true
check "sys_us_per_io is the busy share of all CPUs over IOPS (within the rounding of both to 0.1): $(rows -c '[.[] | select(.initiator == "file-ini") | [.sys_busy_pct, .sys_us_per_io, .iops]]')" test "$(rows --argjson n "$(nproc)" '[.[] | select(.initiator == "file-ini")
	| ((.sys_us_per_io - .sys_busy_pct / 100 * $n * 1e6 / .iops) | fabs) <= (0.05 + .sys_us_per_io * (0.05 / .sys_busy_pct + 1 / 500))] | all')" = true

# The meter against a stub `iser-attach list --json`: the process's counters grow by 1 MiB
# per query, so every workload counts 1 MiB / BS I/Os; the process is a busy loop.
mkdir -p "$T/stub"
cat >"$T/stub/iser-attach" <<'STUB'
#!/bin/sh
n=$(cat "$STUB_DIR/bytes" 2>/dev/null || echo 0)
echo $((n + 1048576)) >"$STUB_DIR/bytes"
echo "[{\"name\":\"other\",\"pid\":1,\"counters\":{\"read_bytes\":7,\"write_bytes\":7}},{\"name\":\"v\",\"pid\":$STUB_PID,\"counters\":{\"read_bytes\":$n,\"write_bytes\":5}}]"
STUB
chmod 0755 "$T/stub/iser-attach"
# The busy loop's command name holds ") " and spaces, as /proc/PID/stat parsing must expect.
cp "$(command -v dash)" "$T/x) y z"
"$T/x) y z" -c 'while :; do :; done' &
BPID=$!
export STUB_DIR=$T STUB_PID=$BPID
lib 'fio_baseline "$1" meter-ini "" "$2"' "$T/disk.img" "$BPID" >"$T/out" 2>&1
check "fio_baseline with a PID: exit 0: $(cat "$T/out")" test $? = 0
check "the I/O count is the daemon's bytes over BS: 4k x1 -> 256, 64k -> 16" \
	test "$(rows '[.[] | select(.initiator == "meter-ini") | .cpu_ios | tostring] | join(",")')" = 256,256,16
check "a busy loop beside fio: the machine at least one CPU's share busy" \
	test "$(rows --argjson n "$(nproc)" '[.[] | select(.initiator == "meter-ini") | .sys_busy_pct >= 90 / $n] | all')" = true
check "cpu_ios_from daemon" test "$(rows '[.[] | select(.initiator == "meter-ini") | .cpu_ios_from] | unique | join(",")')" = daemon
check "cpu_us_per_io is cpu_s over cpu_ios" test "$(rows '[.[] | select(.initiator == "meter-ini")
	| ((.cpu_us_per_io - .cpu_s * 1e6 / .cpu_ios) | fabs) <= (0.05 + 5e3 / .cpu_ios)] | all')" = true
# Without counters for the PID, fio's own count.
STUB_PID=0 lib 'VMLAB_WORKLOADS=4k-randread-qd1:randread:4k:1 fio_baseline "$1" fallback-ini "" "$2"' "$T/disk.img" "$BPID" >"$T/out" 2>&1
check "fallback: exit 0: $(cat "$T/out")" test $? = 0
check "fallback: fio's count" test "$(rows '.[] | select(.initiator == "fallback-ini") | [.cpu_ios_from, .cpu_ios == .ios] | map(tostring) | join(" ")')" = "fio true"

# /proc/PID/stat of the busy loop (its name holds ") "): utime + stime, counted from the end
# of the line (52 fields since Linux 3.5) for the expected value.
t=$(lib 'proc_cpu_ticks $1' "$BPID")
want=$(awk '{ print $(NF - 38) + $(NF - 37) }' "/proc/$BPID/stat")
check "proc_cpu_ticks of a busy loop counts: $t (want $want)" test "${t:-0}" -gt 0
check "proc_cpu_ticks parses past the ')' in the name: $t, want $want" test $((want - ${t:-0})) -le 5 -a "${t:-0}" -le "$want"
check "proc_cpu_ticks of no process fails" test "$(lib 'proc_cpu_ticks 999999999 || echo failed' 2>/dev/null)" = failed
check "size_bytes" test "$(lib 'echo $(size_bytes 4k) $(size_bytes 1M) $(size_bytes 256K) $(size_bytes 512)')" = "4096 1048576 262144 512"

# The busy loop's idle CPU: most of a CPU (a share, not a timing: more than 1 % of it).
idle=$(lib 'daemon_idle_cpu "$1" 1' "$BPID")
check "daemon_idle_cpu of a busy loop: $idle" test "$(echo "$idle" | awk -F= '$1 == "idle_cpu_pct" && $2 > 1 { print "ok" }')" = ok
# The memory row of a live process.
lib 'daemon_mem_row mem-ini "$1" queue_depth=128 "$2"' "$BPID" "$idle" >"$T/out" 2>&1
check "daemon_mem_row: exit 0: $(cat "$T/out")" test $? = 0
check "memory row fields" test "$(rows '.[] | select(.kind == "memory") | [.workload, .queue_depth, (.locked_kib | type), (.pinned_kib | type), .rss_kib > 0, .hwm_kib >= .rss_kib, (.idle_cpu_pct | type)] | map(tostring) | join(" ")')" = \
	"daemon-memory 128 number number true true number"

# fio's nbd engine on a qemu-nbd export, two jobs: two connections.
qemu-nbd -t -f raw -k "$T/nbd.sock" -e 4 "$T/disk.img" &
QPID=$!
for _ in $(seq 50); do [ -S "$T/nbd.sock" ] && break; sleep 0.1; done
lib 'VMLAB_WORKLOADS=4k-randread-qd8-2jobs:randread:4k:8:2 fio_baseline "$1" nbd-ini' "nbd+unix:///?socket=$T/nbd.sock" >"$T/out" 2>&1
check "fio_baseline on nbd, 2 jobs: exit 0: $(cat "$T/out")" test $? = 0
check "nbd 2-job row" test "$(rows '.[] | select(.initiator == "nbd-ini") | .jobs == 2 and .iops > 0')" = true
# System calls per I/O: strace -f -c on the server (qemu-nbd) while fio reads through it.
lib 'VMLAB_SYSCALL_WORKLOADS="4k-randread-qd1:randread:4k:1 4k-randread-qd8:randread:4k:8" VMLAB_SYSCALL_SECONDS=1 \
	syscall_rows "$1" sys-ini "$2"' "nbd+unix:///?socket=$T/nbd.sock" "$QPID" >"$T/out" 2>&1
check "syscall_rows on qemu-nbd: exit 0: $(cat "$T/out")" test $? = 0
check "two syscalls rows, each with I/Os and at least one call per I/O (a read from the socket)" \
	test "$(rows '[.[] | select(.kind == "syscalls" and .initiator == "sys-ini") | .ios > 0 and .syscalls_per_io >= 1 and .io_uring_enter >= 0] | map(tostring) | join(",")')" = true,true
check "syscalls_per_io is syscalls over ios" test "$(rows '[.[] | select(.kind == "syscalls") | ((.syscalls / .ios - .syscalls_per_io) | fabs) < 0.01] | all')" = true
printf '%s\n' '% time     seconds  usecs/call     calls    errors syscall' '------ ----------- ----------- --------- --------- ----------------' \
	' 61.05    0.141591          17      8265           io_uring_enter' ' 20.40    0.047313          12      3895       123 futex' \
	'------ ----------- ----------- --------- --------- ----------------' '100.00    0.231932          19     12160       123 total' >"$T/strace.txt"
check "strace_calls: io_uring_enter, futex (with errors), total, absent" \
	test "$(lib 'echo $(strace_calls "$1" io_uring_enter) $(strace_calls "$1" futex) $(strace_calls "$1" total) $(strace_calls "$1" read)' "$T/strace.txt")" = "8265 3895 12160 0"
kill "$QPID"
QPID=

# A workload that fails leaves a row with fio's error; the others still run; nonzero.
lib 'VMLAB_WORKLOADS="4k-randread-qd1:randread:4k:1 bad:randread:4k:1" fio_baseline "$1" err-ini' "nbd+unix:///?socket=$T/none.sock" >"$T/out" 2>&1
check "failing workloads: exit 1" test $? = 1
check "failing workloads: both rows say why" \
	test "$(rows '[.[] | select(.initiator == "err-ini") | .error | test("nbd_connect_uri") | tostring] | join(",")')" = true,true

# The table from these rows plus a kernel-iser baseline and a QD1 pair.
cat >>"$VMLAB_BENCH_JSON" <<'ROWS'
{"initiator":"kernel-iser","workload":"4k-randread-qd1","iops":400,"mbps":1.6,"lat_us":2500,"p99_us":5000}
{"initiator":"ublk-ini","workload":"4k-randread-qd1","iops":200,"mbps":0.8,"lat_us":5000,"p99_us":9000,"cpu_us_per_io":35.25,"sys_us_per_io":410.4,"sys_busy_pct":41}
ROWS
jq -r -s -f "$HERE/table.jq" "$VMLAB_BENCH_JSON" >"$T/table" 2>&1
check "table.jq: exit 0: $(cat "$T/table")" test $? = 0
tline() { grep -E "^$1 +$2 " "$T/table"; }
check "table: header" grep -qE '^workload +initiator +IOPS +MB/s +lat_us +p99_us +cpu_us/io +sys_us/io +busy% +vs_kiser$' "$T/table"
check "table: ublk-ini at half kernel-iser's IOPS, cpu 35.3, machine 410 us/io, 41% busy" \
	test "$(tline 4k-randread-qd1 ublk-ini | awk '{ print $3, $5, $7, $8, $9, $10 }')" = "200 5000 35.3 410 41 0.50x"
check "table: kernel-iser 1.00x" test "$(tline 4k-randread-qd1 kernel-iser | awk '{ print $NF }')" = 1.00x
check "table: a workload without kernel-iser has no ratio" \
	test "$(tline 64k-write-qd4 file-ini | awk '{ print $NF }')" = -
check "table: an initiator without the workload shows -" \
	test "$(tline 64k-write-qd4 ublk-ini | awk '{ print $3, $NF }')" = "- -"
check "table: the failed row" grep -qE '^bad +err-ini +failed: .*nbd_connect_uri' "$T/table"
check "table: the QD1 latency section" \
	test "$(sed -n '/^4k-randread-qd1: mean latency/,/^$/p' "$T/table" | awk '$1 == "ublk-ini" { print $2, $3 }')" = "5000 2.00x"
check "table: the memory section" \
	test "$(sed -n '/^daemons after their runs/,$p' "$T/table" | awk '$1 == "mem-ini" { print $2, ($7 > 1) }')" = "128 1"
check "table: memory rows stay out of the workload table" not grep -q '^daemon-memory' "$T/table"
printf '%s\n' '{"initiator":"kernel-iser","workload":"w1","iops":100}' '{"initiator":"ua","workload":"w1","iops":50}' >"$T/run1.jsonl"
printf '%s\n' '{"initiator":"kernel-iser","workload":"w1","iops":90}' '{"initiator":"ua","workload":"w1","iops":70}' >"$T/run2.jsonl"
"$HERE/vmlab.sh" table "$T/run1.jsonl" "$T/run2.jsonl" >"$T/best" 2>&1
check "vmlab.sh table of two runs: each row the best: $(cat "$T/best")" \
	test "$(awk '$1 == "w1" { printf "%s %s %s;", $2, $3, $NF }' "$T/best")" = "kernel-iser 100 1.00x;ua 70 0.70x;"
check "table: the system-calls section, its rows out of the workload table" \
	test "$(sed -n '/^system calls of the daemon per I\/O/,$p' "$T/table" | awk '$2 == "sys-ini" { n++ } END { print n + 0 }'):$(sed -n '1,/^system calls/p' "$T/table" | grep -c ' sys-ini ')" = 2:0

# paired_rows: two files in turn, 3 rounds: one row of kind "paired", B over A per round, the median.
truncate -s 64M "$T/disk-b.img"
lib 'VMLAB_PAIRED_WORKLOADS=4k-randread-qd1:randread:4k:1 paired_rows "$1" file-a "$2" file-b 3' "$T/disk.img" "$T/disk-b.img" >"$T/out" 2>&1
check "paired_rows: exit 0: $(cat "$T/out")" test $? = 0
check "paired_rows: one row, file-b against file-a, 3 rounds of positive ratios" \
	test "$(rows -c '[.[] | select(.kind == "paired") | [.initiator, .against, .rounds, (.ratios | map(. > 0) | all)]]')" = '[["file-b","file-a",3,true]]'
check "paired_rows: the median is the middle ratio" \
	test "$(rows '.[] | select(.kind == "paired") | (.ratios | sort | .[1]) == .median_ratio')" = true
check "paired_rows: six fio runs, each round on both" test "$(ls "$T"/fio-paired-4k-randread-qd1-[ab]-[123].json | wc -l)" = 6
check "paired_rows: a ratio is the round's IOPS of B over A" test "$(jq -n --slurpfile a "$T/fio-paired-4k-randread-qd1-a-2.json" \
	--slurpfile b "$T/fio-paired-4k-randread-qd1-b-2.json" --slurpfile r <(jq -s '[.[] | select(.kind == "paired")][0]' "$VMLAB_BENCH_JSON") \
	'(($b[0].jobs[0].read.iops / $a[0].jobs[0].read.iops) - $r[0].ratios[1]) | fabs < 0.01')" = true
lib 'VMLAB_PAIRED_WORKLOADS=4k-randread-qd1:randread:4k:1 paired_rows "$1" file-a "$2" gone-b 1' "$T/disk.img" "$T/gone.img" >"$T/out" 2>&1
check "paired_rows: a device fio cannot run on: exit 1" test $? = 1
check "paired_rows: its row has no ratio and no median" \
	test "$(rows -c '[.[] | select(.initiator == "gone-b") | [.ratios, .median_ratio]]')" = '[[[null],null]]'
jq -r -s -f "$HERE/table.jq" "$VMLAB_BENCH_JSON" >"$T/table" 2>&1
check "table: the paired section, its rows out of the workload table" \
	test "$(sed -n '/^paired runs in one boot/,$p' "$T/table" | awk '$2 == "file-b" && $3 == "file-a" && $4 ~ /x$/ && NF == 7 { n++ } $2 == "gone-b" && $4 == "-" { g++ } END { print n + 0, g + 0 }'):$(sed -n '1,/^paired runs/p' "$T/table" | grep -c ' file-b ')" = "1 1:0"
printf '%s\n' '{"kind":"paired","workload":"w1","initiator":"ua","against":"kernel-iser","rounds":3,"ratios":[1,2,3],"median_ratio":2}' >"$T/prun1.jsonl"
printf '%s\n' '{"kind":"paired","workload":"w1","initiator":"ua","against":"kernel-iser","rounds":3,"ratios":[6,5,4],"median_ratio":5}' >"$T/prun2.jsonl"
"$HERE/vmlab.sh" table "$T/prun1.jsonl" "$T/prun2.jsonl" >"$T/best" 2>&1
check "vmlab.sh table of two runs pools the paired rounds: $(cat "$T/best")" \
	test "$(awk '$1 == "w1" && $2 == "ua" { print $4, NF }' "$T/best")" = "3.00x 10"

report bench-test
