#!/bin/sh
# guest/systemd-check.sh (vmlab-check.service, copied to /usr/local/lib/vmlab/check.sh): once
# the systemd boot is up, run the test's checks (TEST.sh check, output in check.log and on the
# console), write status, keep the journal so far, and power off. The shutdown that follows
# is part of the test: its units leave markers, the host reads them (TEST.sh host).
. /usr/local/lib/vmlab/env
cd /mnt/out || exit 1
echo "vmlab: systemd boot up after $(cut -d' ' -f1 /proc/uptime) s ($(systemctl is-system-running 2>&1)); checking"
rc=0
(sh /usr/local/lib/vmlab/test.sh check 2>&1; echo $? >/tmp/check.rc) | tee /mnt/out/check.log
rc=$(cat /tmp/check.rc 2>/dev/null || echo 1)
{
	echo "== systemctl --failed"
	systemctl --failed --no-pager --no-legend
	echo "== systemctl list-jobs"
	systemctl list-jobs --no-pager --no-legend
	echo "== journal"
	journalctl -b --no-pager -o short-monotonic
} >/mnt/out/journal-boot.txt 2>&1
echo "$rc" >/mnt/out/status.tmp && mv /mnt/out/status.tmp /mnt/out/status
echo "vmlab: check exit $rc; powering off"
sync
systemctl --no-block poweroff
