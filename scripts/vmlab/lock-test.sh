#!/bin/bash
# lock-test.sh: host test of lab_lock (scripts/vmlab/lock.sh): a second lab run waits while
# the first holds the lock, names it, and goes on once it ends; a free lock is taken at once;
# a wait longer than ISER_VMLAB_LOCK_WAIT fails in one line instead of hanging.
# `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=../lib/check.sh
. "$HERE/../lib/check.sh"
# shellcheck source=lock.sh
. "$HERE/lock.sh"

# take WHAT: lab_lock in a subshell that then exits; prints the seconds it waited (to
# hundredths) on stdout, its messages in $T/err.
take() {
	(
		s=$(date +%s%N)
		lab_lock "$T/cache" "$1" 2>"$T/err"
		echo $((($(date +%s%N) - s) / 10000000))
	)
}

# hold WHAT SECONDS: a run that takes the lock and holds it SECONDS, in the background
# (its pid in $held); returns once it is the recorded owner.
hold() {
	(
		lab_lock "$T/cache" "$1" 2>/dev/null
		sleep "$2"
	) &
	held=$!
	for _ in $(seq 50); do
		grep -q "$1" "$T/cache/lab.owner" 2>/dev/null && return
		sleep 0.05
	done
}

# A free lock: no wait, no message, the owner recorded.
w=$(take "e2e 6.12")
check "a free lock is taken at once (waited ${w}0 ms)" test "$w" -lt 50
check "a free lock says nothing" test ! -s "$T/err"
check "the owner is recorded" grep -q "pid .*, e2e 6.12, since " "$T/cache/lab.owner"

# A held lock: the first run (here a subshell holding fd 7 for 1.5 s) is waited for.
hold "first run" 1.5
w=$(take "second run")
wait $held
check "a held lock is waited for (waited ${w}0 ms)" test "$w" -ge 100
check "the wait names the holder" grep -q "holds $T/cache/lab.lock (pid .*, first run, since" "$T/err"
check "the wait ends with the lock" grep -q "lab lock taken after waiting" "$T/err"
check "the second run is the owner then" grep -q "second run" "$T/cache/lab.owner"

# A child that outlives its run (a guest's qemu) keeps the lock: fd 7 is inherited.
(
	lab_lock "$T/cache" "run with a child" 2>/dev/null
	sleep 1 &
) &
wait $!
w=$(take "after the child")
check "a child that inherited fd 7 is waited for (waited ${w}0 ms)" test "$w" -ge 40

# A lock held past ISER_VMLAB_LOCK_WAIT: the wait ends in one failing line naming the holder,
# not in a hang.
hold "stuck run" 3
s=$(date +%s%N)
(ISER_VMLAB_LOCK_WAIT=1 lab_lock "$T/cache" "impatient run" 2>"$T/err")
rc=$?
w=$((($(date +%s%N) - s) / 10000000))
check "a wait past ISER_VMLAB_LOCK_WAIT fails (status $rc)" test $rc = 1
check "it fails after the wait, not at once or later (waited ${w}0 ms)" test "$w" -ge 90 -a "$w" -lt 250
check "the failure names the holder: $(tail -n 1 "$T/err")" \
	grep -q "FAIL step lab-lock: $T/cache/lab.lock still held after 1 s (pid .*, stuck run, since" "$T/err"
check "the stuck run stays the owner" grep -q "stuck run" "$T/cache/lab.owner"
wait $held

report lock-test
