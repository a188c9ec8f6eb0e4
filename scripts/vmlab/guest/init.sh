#!/bin/sh
# guest/init.sh: run one vmlab job inside the guest. Started by /sbin/vmlab-init (PID 1) after
# it mounted the shares; read from the share, so editing it needs no guest rebuild.
#
# The host writes into the out share (/mnt/out):
#   job   first line: e2e | bench | run | shell | systemd
#   env   shell assignments of every ISER_VMLAB_* / VMLAB_* variable on the host
#   cmd   for job=run: the command line; for job=systemd: the tests-systemd test name
# and reads back: status (exit code of the job, written last), summary.txt, NN-name/log.
export PATH=/mnt/host/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=${TERM:-linux}
export VMLAB_SRC=/mnt/host
export VMLAB_BIN=/mnt/host/bin
export VMLAB_OUT=/mnt/out
export VMLAB_LIB=/mnt/host/scripts/vmlab/guest/lib.sh
export VMLAB_BENCH_JSON=/mnt/out/bench.jsonl
[ -f /mnt/out/env ] && . /mnt/out/env
mkdir -p /etc/target # LIO looks for its db_root there when target_core_mod loads

. "$VMLAB_LIB"

job=$(head -n1 /mnt/out/job 2>/dev/null)
echo "vmlab: guest up after $(cut -d' ' -f1 /proc/uptime) s, kernel $(uname -r), job ${job:-none}"
rc=0
case $job in
e2e) vmlab_run_dir "$VMLAB_SRC/scripts/vmlab/tests" || rc=$? ;;
bench)
	: >"$VMLAB_BENCH_JSON"
	vmlab_run_dir "$VMLAB_SRC/scripts/vmlab/bench" || rc=$?
	bench_table "$VMLAB_BENCH_JSON" >/mnt/out/table.txt 2>&1 || rc=1
	;;
run)
	# The command sees the lib's functions; its output goes to the console and run.log.
	(bash -c ". \"\$VMLAB_LIB\"; $(cat /mnt/out/cmd)" 2>&1; echo $? >/tmp/run.rc) | tee /mnt/out/run.log
	rc=$(cat /tmp/run.rc)
	;;
systemd)
	# A boot with systemd as PID 1 (vmlab.sh e2e runs one per tests-systemd/NN-name.sh; cmd
	# names it): prepare the root, then /sbin/vmlab-init execs systemd. The test's check unit
	# writes the status and powers off; here only a failed preparation does.
	if sh "$VMLAB_SRC/scripts/vmlab/guest/systemd-prepare.sh" "$(cat /mnt/out/cmd)" >/mnt/out/setup.log 2>&1; then
		echo /lib/systemd/systemd >/run/vmlab-exec
		echo "vmlab: $(cat /mnt/out/cmd) prepared after $(cut -d' ' -f1 /proc/uptime) s; exec systemd"
		exit 0
	fi
	rc=1
	echo "vmlab: FAIL systemd-prepare: $(grep '^FAIL' /mnt/out/setup.log | tail -n1)"
	tail -n 15 /mnt/out/setup.log | sed 's/^/vmlab:   | /'
	;;
shell)
	echo "vmlab: shell; the lib is in \$VMLAB_LIB; 'exit' or Ctrl-D powers the guest off"
	setsid -c bash --rcfile "$VMLAB_LIB" -i </dev/ttyS0 >/dev/ttyS0 2>&1 || rc=$?
	;;
*)
	echo "vmlab: FAIL unknown job '$job'"
	rc=2
	;;
esac
echo "$rc" >/mnt/out/status.tmp && mv /mnt/out/status.tmp /mnt/out/status
echo "vmlab: job $job done, exit $rc"
sync
