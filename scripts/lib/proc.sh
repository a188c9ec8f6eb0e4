# scripts/lib/proc.sh: process helpers shared by demo.sh, bench-tcp.sh and
# bench-multipath-tcp.sh (bash).

# alive PID: true while PID runs (a zombie, exited but not waited for, does not).
alive() {
	local st
	st=$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[ "$st" != Z ]
}

# stop_pid PID: SIGTERM, then SIGKILL if it is still there after 5 s.
stop_pid() {
	kill -TERM "$1" 2>/dev/null || return 0
	for _ in $(seq 50); do
		alive "$1" || break
		sleep 0.1
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# stop_all: stop_pid on every pid of the caller's array PIDS, the last
# started first (fio before serve before tgtd).
stop_all() {
	local i
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		stop_pid "${PIDS[i]}"
	done
}

# wait_for DESC PID TEST...: poll TEST for 30 s while PID lives; the calling
# script's die reports a failure.
wait_for() {
	local desc=$1 pid=$2
	shift 2
	for _ in $(seq 300); do
		"$@" && return 0
		alive "$pid" || die "$desc: process $pid exited"
		sleep 0.1
	done
	die "$desc: not ready after 30 s"
}
