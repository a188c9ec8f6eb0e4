#!/bin/bash
# faults-test.sh: host test of the vmlab fault helpers' logic (scripts/vmlab/guest/lib.sh, run
# by dash as in the guest) with the lab's peers replaced by shell functions and a stub
# iser-attach: fault_tgt_restart starts tgtd again while the new one rejects every RDMA
# connection with reason 8, gives up after three, and fails at once on any other login
# failure; tgt_probe logs in over iSER and reports what failed; rerun_if_died runs a command
# once more after restarting a peer that died under it (or, with RERUN_ALIVE, stopped answering),
# and only then; rxe_gid and rping_listening (the soft-RoCE readiness waits). A second.
# `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=../lib/check.sh
. "$HERE/../lib/check.sh"
command -v dash >/dev/null || {
	echo "faults-test: dash missing (make test-deps)" >&2
	exit 1
}

# restart ANSWER...: fault_tgt_restart IQN 96 4 with tgt_kill, tgt_iser and sleep replaced by
# functions that print what they were asked, and tgt_probe answering in turn: ok (the login
# works), r8 (rejected with reason 8) or other (another failure). The calls go to $T/calls,
# stderr to $T/err; the exit status is fault_tgt_restart's.
restart() {
	echo 0 >"$T/probes"
	ANSWERS="$*" PROBES="$T/probes" dash -c '
. "$0"
tgt_kill() { echo kill; }
tgt_iser() { echo "iser $1 $2"; }
sleep() { echo "sleep $1"; }
tgt_probe() {
	_n=$(($(cat "$PROBES") + 1))
	echo "$_n" >"$PROBES"
	set -- $ANSWERS
	shift $((_n - 1))
	echo "probe $_n" >&3
	case $1 in
	ok) return 0 ;;
	r8) echo "dial iser 10.99.0.1:3260: rdma dial 10.99.0.1:3260: connect: rdma: connection rejected (reason 8)" ;;
	*) echo "login: the target refused the login: authorization failure" ;;
	esac
	return 1
}
fault_tgt_restart iqn.test:t 96 4 3>&1' "$HERE/guest/lib.sh" >"$T/calls" 2>"$T/err"
}
calls() { paste -sd, "$T/calls"; }

restart ok
check "a tgtd that takes the login: exit 0: $(cat "$T/err")" test $? = 0
check "a tgtd that takes the login: killed, 4 s, started, probed once: $(calls)" \
	test "$(calls)" = "kill,sleep 4,iser iqn.test:t 96,probe 1"

restart r8 ok
check "reason 8 once: exit 0: $(cat "$T/err")" test $? = 0
check "reason 8 once: that tgtd is killed and started again: $(calls)" \
	test "$(calls)" = "kill,sleep 4,iser iqn.test:t 96,probe 1,kill,sleep 2,iser iqn.test:t 96,probe 2"
check "reason 8 once: said on stderr" grep -q 'rejects every RDMA connection (reason 8; try 1): restarting it' "$T/err"

restart r8 r8 r8 ok
check "reason 8 three times: exit 1" test $? = 1
check "reason 8 three times: three tgtds, then it gives up: $(calls)" \
	test "$(calls)" = "kill,sleep 4,iser iqn.test:t 96,probe 1,kill,sleep 2,iser iqn.test:t 96,probe 2,kill,sleep 2,iser iqn.test:t 96,probe 3"

restart other ok
check "another login failure: exit 1" test $? = 1
check "another login failure: no restart: $(calls)" test "$(calls)" = "kill,sleep 4,iser iqn.test:t 96,probe 1"
check "another login failure: the login's error on stderr" \
	grep -q 'iSER login to the restarted tgtd failed: login: the target refused the login: authorization failure' "$T/err"

# tgt_probe itself: an iSER login to the portal on 3260 (iser-attach info), stdout dropped,
# the error printed, the status passed on.
mkdir "$T/stub"
cat >"$T/stub/iser-attach" <<'STUB'
#!/bin/sh
echo "$*" >"$STUB_ARGS"
echo "LUN 1 disk"
[ "$STUB_FAIL" = 1 ] || exit 0
echo "dial iser: connect: rdma: connection rejected (reason 8)" >&2
exit 1
STUB
chmod +x "$T/stub/iser-attach"
probe() {
	STUB_ARGS=$T/args STUB_FAIL=$1 VMLAB_ADDR=10.99.0.9 PATH="$T/stub:$PATH" \
		dash -c '. "$0"; tgt_probe iqn.test:t' "$HERE/guest/lib.sh" >"$T/out" 2>&1
}
probe 0
check "tgt_probe, login works: exit 0, nothing printed: $(cat "$T/out")" test $? = 0 -a ! -s "$T/out"
check "tgt_probe: iser-attach info over iSER to 3260: $(cat "$T/args")" grep -qE \
	'^--log-level error info --transport iser --portal 10.99.0.9:3260 --target iqn.test:t --login-timeout 10s$' "$T/args"
probe 1
check "tgt_probe, login rejected: exit 1" test $? = 1
check "tgt_probe, login rejected: the error printed: $(cat "$T/out")" \
	test "$(cat "$T/out")" = "dial iser: connect: rdma: connection rejected (reason 8)"

# rerun_if_died: a stub pidof says whether the peer lives ($T/alive); work WHAT... runs the
# WHATs in turn (ok, fail, or die: the peer exits and the run fails), again restarts the peer.
cat >"$T/stub/pidof" <<'STUB'
#!/bin/sh
[ -e "$STATE/alive" ]
STUB
chmod +x "$T/stub/pidof"
rerun() { # RESTART-RESULT WHAT... (PROBE=answers|silent: RERUN_ALIVE is set, and the peer
	# answers it or not)
	touch "$T/alive"
	rm -f "$T/answers"
	[ "${PROBE:-}" = answers ] && touch "$T/answers"
	echo 0 >"$T/runs"
	: >"$T/calls"
	STATE=$T PROBE=${PROBE:-} PATH="$T/stub:$PATH" dash -c '
. "$0"
restart=$1
shift
work() {
	_n=$(($(cat "$STATE/runs") + 1))
	echo "$_n" >"$STATE/runs"
	shift $((_n - 1))
	echo "work $_n $1" >>"$STATE/calls"
	case $1 in
	ok) return 0 ;;
	die) rm -f "$STATE/alive" ;;
	esac
	return 1
}
again() {
	echo "again $1" >>"$STATE/calls"
	[ "$restart" = ok ] || return 1
	touch "$STATE/alive"
}
probe() {
	echo "probe" >>"$STATE/calls"
	[ -e "$STATE/answers" ]
}
[ -n "$PROBE" ] && RERUN_ALIVE=probe
rerun_if_died peer "again x" work "$@"
echo "status $? RERUN $RERUN" >>"$STATE/calls"' "$HERE/guest/lib.sh" "$@" 2>"$T/err"
}
rcalls() { paste -sd, "$T/calls"; }
rerun ok ok
check "rerun_if_died, the command works: run once: $(rcalls)" test "$(rcalls)" = "work 1 ok,status 0 RERUN 0"
rerun ok fail ok
check "rerun_if_died, fails with the peer alive: not run again: $(rcalls)" \
	test "$(rcalls)" = "work 1 fail,status 1 RERUN 0"
rerun ok die ok
check "rerun_if_died, the peer died: restarted and run again: $(rcalls)" \
	test "$(rcalls)" = "work 1 die,again x,work 2 ok,status 0 RERUN 1"
check "rerun_if_died, the peer died: said on stderr" grep -q "peer died during 'work die ok': again x, then once more" "$T/err"
rerun ok die fail
check "rerun_if_died, the second run fails too: $(rcalls)" \
	test "$(rcalls)" = "work 1 die,again x,work 2 fail,status 1 RERUN 1"
rerun fail die ok
check "rerun_if_died, the restart fails: not run again: $(rcalls)" \
	test "$(rcalls)" = "work 1 die,again x,status 1 RERUN 1"
PROBE=answers rerun ok fail ok
check "rerun_if_died, fails with the peer alive and answering: not run again: $(rcalls)" \
	test "$(rcalls)" = "work 1 fail,probe,status 1 RERUN 0"
PROBE=silent rerun ok fail ok
check "rerun_if_died, fails with the peer running but not answering: restarted and run again: $(rcalls)" \
	test "$(rcalls)" = "work 1 fail,probe,again x,work 2 ok,status 0 RERUN 1"
check "rerun_if_died, the peer stopped answering: said on stderr" \
	grep -q "peer stopped answering (probe failed) during 'work fail ok': again x, then once more" "$T/err"
PROBE=silent rerun ok ok
check "rerun_if_died, the command works: no probe: $(rcalls)" test "$(rcalls)" = "work 1 ok,status 0 RERUN 0"

# The soft-RoCE readiness helpers: the GID rxe_up waits for, and rping_listening on what
# `rdma res show cm_id` prints (a listener, then only a connection).
gid=$(dash -c '. "$0"; rxe_gid 10.99.0.1' "$HERE/guest/lib.sh")
check "rxe_gid 10.99.0.1: $gid" test "$gid" = 0000:0000:0000:0000:0000:ffff:0a63:0001
gid=$(dash -c '. "$0"; rxe_gid 192.168.254.17' "$HERE/guest/lib.sh")
check "rxe_gid 192.168.254.17: $gid" test "$gid" = 0000:0000:0000:0000:0000:ffff:c0a8:fe11
listening() {
	CM="$1" dash -c '. "$0"
rdma() { printf "%s\n" "$CM"; }
rping_listening' "$HERE/guest/lib.sh"
}
not_listening() { ! listening "$@"; }
check "rping_listening: a LISTEN cm_id of rping" \
	listening "link rxe0/1 cm-idn 0 state LISTEN ps TCP comm rping src-addr 10.99.0.1:7174 dst-addr 0.0.0.0:0"
check "rping_listening: not while rping's cm_id only connects" \
	not_listening "link rxe0/1 cm-idn 1 state CONNECT ps TCP comm rping src-addr 10.99.0.1:44120 dst-addr 10.99.0.1:7174"
check "rping_listening: not for another program's listener" \
	not_listening "cm-idn 0 state LISTEN ps TCP pid 1 comm tgtd src-addr 0.0.0.0:3260 dst-addr 0.0.0.0:0"
report faults-test
