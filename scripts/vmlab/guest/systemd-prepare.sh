#!/bin/sh
# guest/systemd-prepare.sh TEST: the first stage of a systemd boot (job systemd), run by init.sh
# while /sbin/vmlab-init is still PID 1: make the snapshot root a systemd system that runs the
# test's checks once it is up and then powers off, and let the test prepare its part
# (tests-systemd/TEST.sh setup). init.sh then hands PID 1 to systemd. Output: setup.log in
# the out share (this test's results directory).
#
# What lands in the root:
#   /usr/local/lib/vmlab/        lib.sh, env (the job's variables), the test script, these
#                                helpers: units never need the 9p share at shutdown
#   vmlab-check.service          after multi-user.target: TEST.sh check, status, poweroff
#   vmlab-watchdog.service       after VMLAB_SYSTEMD_WATCHDOG s (330): FAIL, journal, poweroff
. "$VMLAB_LIB"
set -eu

test=$1
src=$VMLAB_SRC/scripts/vmlab/tests-systemd/$test.sh
L=/usr/local/lib/vmlab
step test-exists test -f "$src"
step systemd-present test -x /lib/systemd/systemd

mkdir -p $L
cp "$VMLAB_LIB" $L/lib.sh
cp "$src" $L/test.sh
cp "$VMLAB_SRC/scripts/vmlab/guest/systemd-check.sh" $L/check.sh
{
	echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$VMLAB_BIN"
	echo "export HOME=/root LANG=C.UTF-8"
	echo "export VMLAB_SRC=$VMLAB_SRC VMLAB_BIN=$VMLAB_BIN VMLAB_OUT=/mnt/out VMLAB_RESULTS=/mnt/out"
	echo "export VMLAB_LIB=$L/lib.sh VMLAB_TEST=$test VMLAB_BENCH_JSON=/mnt/out/bench.jsonl"
	echo "export VMLAB_ADDR=$VMLAB_ADDR VMLAB_IQN=$VMLAB_IQN"
	cat /mnt/out/env 2>/dev/null || true
} >$L/env
echo "VMLAB_SYSTEMD_WATCHDOG=${VMLAB_SYSTEMD_WATCHDOG:-330}" >$L/watchdog.env

# A system that boots quickly under TCG and keeps the console for the lab: no gettys, a
# volatile journal, jobs that hang fail within the watchdog's time.
[ -s /etc/machine-id ] || systemd-machine-id-setup >/dev/null
# The packages' own daemons stay off: tgtd would take port 3260 from LIO, open-iscsi would log
# in to whatever it finds; tests start what they need.
step mask-units systemctl mask -q serial-getty@ttyS0.service getty@tty1.service \
	apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
	tgt.service iscsid.service iscsid.socket open-iscsi.service
mkdir -p /etc/systemd/system.conf.d /etc/systemd/journald.conf.d
printf '[Manager]\nDefaultTimeoutStartSec=100s\nDefaultTimeoutStopSec=60s\n' >/etc/systemd/system.conf.d/vmlab.conf
printf '[Journal]\nStorage=volatile\n' >/etc/systemd/journald.conf.d/vmlab.conf
mkdir -p /etc/target # LIO's db_root

for u in vmlab-check.service vmlab-watchdog.service; do
	cp "$VMLAB_SRC/scripts/vmlab/guest/systemd/$u" /etc/systemd/system/
done
step enable-check systemctl enable -q vmlab-check.service vmlab-watchdog.service

# The test's own part: install, configure, enable, order the check after what it waits for.
step test-setup env VMLAB_SYSTEMD_STAGE=setup sh $L/test.sh setup
echo "vmlab: $test prepared; systemd takes over"
