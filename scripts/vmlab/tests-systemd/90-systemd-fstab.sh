#!/bin/sh
# 90-systemd-fstab: with systemd as the guest's init, a volume that is enabled and listed in
# fstab is attached and mounted at boot, and unmounted and detached cleanly at shutdown; a
# second volume whose target is down for the first 60 s of the boot is mounted when it
# attaches, on a later start of its unit, with no one's help.
#
#   setup    (guest, before systemd) dpkg -i of the package `make deb` built
#            (bin/iser-attach_VERSION-1_ARCH.deb; its postinst runs while systemd is not yet
#            PID 1), vol1.conf, systemctl enable iser-attach@vol1, iser-fstab add vol1
#            /mnt/vol1 ext4; the lab's units: vmlab-target.service (soft-RoCE + LIO with iSER,
#            the LUN's backing file in the out share, mkfs.ext4 on it; before
#            network-online.target) and markers on iser-attach@vol1's stop. vol2: the same
#            with a second LIO target on port 3261 whose portal appears only 60 s after
#            vmlab-target.service started (systemd-run --on-active=60: target-late); its
#            unit's drop-in has TimeoutStartSec=30, so the outage outlasts the first start,
#            as an outage of over 2 minutes would the packaged TimeoutStartSec=120, and the
#            volume attaches on a start that Restart= makes
#   check    (guest, vmlab-check.service, after mnt-vol1.mount) the package is installed and
#            its files unchanged, iser-attach@vol1 runs the packaged unit and
#            /usr/sbin/iser-attach; /mnt/vol1 is mounted from /dev/iser/vol1 -> /dev/ublkbN, by systemd's units in the
#            right order; a file written and synced; dpkg -i again with systemd up (an
#            upgrade in place) reloads it and leaves the volume running; vol2: /mnt/vol2
#            mounted within 120 s of the check, after at least one restart of its unit, the file made
#            with its file system read back, a file written; journald: vol1's info line
#            hidden at -p warning, vol2's failed logins shown there; then poweroff
#   host     (host, after the VM exited) the markers: the file system was unmounted before
#            the daemon got SIGTERM, the daemon exited 0 having removed the device and its
#            link and logged out; the file system on the LUN's backing file is clean and holds
#            the file (e2fsck -fn, debugfs); vol2's backing file clean and holding its file
#            vol3: a volume whose CHAP secret its target refuses (a third LIO target, port
#            3262, asking for CHAP; a login refused with status class 2, authentication
#            failure; LIO answers an unknown target with class 3, which is retried, so not
#            that): its unit fails once with exit status 3 and
#            systemd does not start it again (RestartPreventExitStatus=3): NRestarts 0 at the
#            check, well after RestartSec
# Unit hooks: target-start, target-stop (vmlab-target.service), stop-begin (ExecStop= of
# iser-attach@vol1, before its SIGTERM), stopped (its ExecStopPost=).
set -eu
what=${1:-}
NAME=vol1
MNT=/mnt/vol1
L=/usr/local/lib/vmlab
# The volume whose target comes up late: its own LIO target and portal.
LATE=vol2
LATE_MNT=/mnt/vol2
LATE_PORT=3261
LATE_DELAY=60
late_iqn() { echo "$VMLAB_IQN-late"; }
# The volume whose login the target refuses for good: a wrong CHAP secret.
REFUSED=vol3
REFUSED_PORT=3262

# journal_priorities: vol1's info line "attached" is in its journal but not at -p warning; vol2's
# JSON lines at -p warning (its failed logins while the target was down) exist and are all
# warnings or errors.
journal_priorities() {
	all=$(journalctl -b -u iser-attach@$NAME.service -o cat | grep -c '"message":"attached"' || true)
	warn=$(journalctl -b -u iser-attach@$NAME.service -p warning -o cat | grep -c '"message":"attached"' || true)
	echo "vol1 \"attached\": $all line(s) in its journal, $warn at -p warning"
	[ "$all" -ge 1 ] && [ "$warn" = 0 ] || return 1
	journalctl -b -u iser-attach@$LATE.service -p warning -o cat | grep '^{' >/tmp/late-warn || true
	echo "vol2: $(wc -l </tmp/late-warn) JSON line(s) at -p warning; first: $(head -n 1 /tmp/late-warn)"
	[ -s /tmp/late-warn ] || return 1
	if grep -v '"level":"\(warn\|error\)"' /tmp/late-warn; then
		echo "lines above are below warning"
		return 1
	fi
}

# mark EVENT KEY=VALUE...: one line in shutdown.log (out share) and on the console.
mark() {
	_m="$(cut -d' ' -f1 /proc/uptime) $*"
	echo "$_m" >>/mnt/out/shutdown.log
	echo "vmlab: mark $_m" >/dev/console 2>/dev/null || true
}

# packaged_files_intact: dpkg --verify finds no installed file of the package changed.
packaged_files_intact() {
	_v=$(dpkg --verify iser-attach 2>&1)
	[ -z "$_v" ] && return 0
	echo "$_v" >&2
	return 1
}

# packaged_unit UNIT: systemctl cat UNIT starts with the package's iser-attach@.service, as
# shipped (then the lab's drop-in).
packaged_unit() {
	_f=/lib/systemd/system/iser-attach@.service
	_cat=$(systemctl cat "$1") || return 1
	echo "systemctl cat $1: $(printf '%s\n' "$_cat" | grep -E '^# /[^ ]+$' | tr '\n' ' ')"
	_first=$(printf '%s\n' "$_cat" | head -n1)
	_path=${_first#\# }
	[ "$(readlink -f "$_path")" = "$(readlink -f $_f)" ] || {
		echo "the unit's file is '$_path', not the package's $_f" >&2
		return 1
	}
	packaged $_f || return 1
	printf '%s\n' "$_cat" | sed -n "2,$(($(wc -l <$_f) + 1))p" | cmp -s - $_f || {
		echo "systemctl cat $1 differs from $_f" >&2
		return 1
	}
}

# reloads: how many reloads systemd logged in this boot.
reloads() {
	journalctl -b -o cat _PID=1 2>/dev/null | grep -c 'Reloading' || true
}

# reloaded_since N: systemd logged more than N reloads (journald may store the line late).
reloaded_since() {
	wait_for 10 sh -c "test \$(journalctl -b -o cat _PID=1 | grep -c Reloading) -gt $1"
}

# packaged PATH...: each PATH belongs to the package iser-attach.
packaged() {
	for _p; do
		dpkg-query -S "$_p" | grep -qx "iser-attach: $_p" || {
			echo "$_p: not from the package: $(dpkg-query -S "$_p" 2>&1)" >&2
			return 1
		}
	done
}

case $what in
setup)
	. "$VMLAB_LIB"
	# The package `make deb` built, installed as an administrator would (no `make install`).
	set -- "$VMLAB_BIN"/iser-attach_*.deb
	step deb-built sh -c "test -f '$1' || { echo 'no bin/iser-attach_*.deb: run make deb (make e2e does)' >&2; false; }"
	step deb-one sh -c "test $# = 1 || { echo 'more than one package: $*' >&2; false; }"
	deb=$1
	echo "package: ${deb##*/}, version $(dpkg-deb -f "$deb" Version)"
	# A package older than the tree it is tested with proves little: say so.
	newer=$(cd "$VMLAB_SRC" && find cmd initiator rdma nbd ublk volume scripts/systemd scripts/deb \
		scripts/install.sh scripts/iser-fstab scripts/iser-fstab.8 -newer "$deb" -type f 2>/dev/null | head -n 3)
	[ -z "$newer" ] || echo "vmlab: warning: ${deb##*/} is older than $(echo $newer) (make deb)" | tee /dev/console
	step no-local-install test ! -e /usr/local/sbin/iser-attach -a ! -e /usr/local/lib/systemd/system/iser-attach@.service
	# The postinst reloads systemd and udev only where they run; here they do not yet.
	echo "before systemd: /run/systemd/system $(test -d /run/systemd/system && echo present || echo absent)," \
		"/run/udev/control $(test -S /run/udev/control && echo present || echo absent)"
	step no-systemd-yet test ! -d /run/systemd/system
	step dpkg-install dpkg -i "$deb"
	step dpkg-installed sh -c "dpkg-query -W -f='\${Status}\n' iser-attach | grep -qx 'install ok installed'"
	step installed test -x /usr/sbin/iser-attach -a -x /usr/sbin/iser-fstab \
		-a -f /lib/systemd/system/iser-attach@.service -a -f /lib/systemd/system/iser-attach.target \
		-a -f /lib/udev/rules.d/60-iser-attach.rules -a -f /usr/share/man/man8/iser-attach.8.gz
	step binary-version /usr/sbin/iser-attach version
	# The postinst enabled the target through deb-systemd-helper (and recorded that).
	step target-enabled systemctl -q is-enabled iser-attach.target
	step target-state test -e /var/lib/systemd/deb-systemd-helper-enabled/iser-attach.target.dsh-also
	step volume-dir test -d /etc/iser-attach/volumes
	cat >/etc/iser-attach/volumes/$NAME.conf <<-EOF
		# vmlab: the LIO target of vmlab-target.service over soft-RoCE
		portal = $VMLAB_ADDR:3260
		target = $VMLAB_IQN
		lun = 0
		transport = iser
		frontend = ublk
	EOF
	cat >/etc/iser-attach/volumes/$LATE.conf <<-EOF
		# vmlab: a LIO target whose portal appears $LATE_DELAY s after vmlab-target.service started
		portal = $VMLAB_ADDR:$LATE_PORT
		target = $(late_iqn)
		lun = 0
		transport = iser
		frontend = ublk
	EOF
	cat >/etc/iser-attach/volumes/$REFUSED.conf <<-EOF
		# vmlab: a target that asks for CHAP, given the wrong secret: refused (class 2), for good
		portal = $VMLAB_ADDR:$REFUSED_PORT
		target = $VMLAB_IQN-chap
		lun = 0
		transport = iser
		frontend = ublk
		chap_user = vmlabuser
		chap_secret_file = /etc/iser-attach/vol3.secret
	EOF
	printf 'not-the-secret-9' >/etc/iser-attach/vol3.secret
	chmod 600 /etc/iser-attach/vol3.secret
	step enable-volume systemctl enable iser-attach@$NAME.service iser-attach@$LATE.service \
		iser-attach@$REFUSED.service
	step volume-enabled systemctl -q is-enabled iser-attach@$NAME.service
	step fstab-add /usr/sbin/iser-fstab add $NAME $MNT ext4
	step fstab-line grep -qx "/dev/iser/$NAME $MNT ext4 defaults,_netdev,nofail,x-systemd.requires=iser-attach@$NAME.service 0 0" /etc/fstab
	step fstab-add-late /usr/sbin/iser-fstab add $LATE $LATE_MNT ext4
	step fstab-check /usr/sbin/iser-fstab check
	grep /dev/iser/ /etc/fstab

	# The lab's stand-ins for the network and the storage array, and the shutdown markers.
	cat >/etc/systemd/system/vmlab-target.service <<-EOF
		[Unit]
		Description=vmlab soft-RoCE and LIO target with iSER
		Before=network-online.target
		RequiresMountsFor=/mnt/out
		[Service]
		Type=oneshot
		RemainAfterExit=yes
		ExecStart=/bin/sh $L/test.sh target-start
		ExecStop=/bin/sh $L/test.sh target-stop
		StandardOutput=journal+console
		StandardError=journal+console
		[Install]
		WantedBy=network-online.target
	EOF
	step enable-target systemctl enable -q vmlab-target.service
	mkdir -p /etc/systemd/system/iser-attach@$NAME.service.d /etc/systemd/system/vmlab-check.service.d
	cat >/etc/systemd/system/iser-attach@$NAME.service.d/vmlab.conf <<-EOF
		# vmlab: the daemon's log on the console too; markers around its stop.
		[Unit]
		RequiresMountsFor=/mnt/out
		[Service]
		StandardOutput=journal+console
		StandardError=journal+console
		ExecStop=/bin/sh $L/test.sh stop-begin
		ExecStopPost=/bin/sh $L/test.sh stopped
	EOF
	# vol2's start ends after 30 s while its target is down (the packaged 120 s would make the
	# boot long under TCG); Restart= starts it again.
	mkdir -p /etc/systemd/system/iser-attach@$LATE.service.d
	cat >/etc/systemd/system/iser-attach@$LATE.service.d/vmlab.conf <<-EOF
		[Unit]
		RequiresMountsFor=/mnt/out
		[Service]
		TimeoutStartSec=30
		StandardOutput=journal+console
		StandardError=journal+console
	EOF
	cat >/etc/systemd/system/vmlab-check.service.d/order.conf <<-EOF
		[Unit]
		After=mnt-vol1.mount iser-attach@$NAME.service
	EOF
	step units-verify systemd-analyze verify --man=no iser-attach@$NAME.service iser-attach.target
	;;

target-start)
	. $L/env
	. "$VMLAB_LIB"
	step rxe-up rxe_up
	# The LUN's backing file lives in the out share: the host checks the file system on it
	# after the guest is gone.
	step lio-target env LIO_FILE_DIR=/mnt/out/lun LIO_WCE=1 sh -c '. "$VMLAB_LIB"; lio_target "$0" file:64' "$VMLAB_IQN"
	img=$(ls /mnt/out/lun/*.img)
	step mkfs mkfs.ext4 -q -F -L vmlab-vol1 "$img"
	echo "$img" >/mnt/out/lun-image
	# vol2's target: made now, its LUN formatted with a file in it, but its portal removed
	# until target-late adds it: logins to port $LATE_PORT are refused meanwhile.
	step lio-target-late env LIO_PORT=$LATE_PORT LIO_FILE_DIR=/mnt/out/lun2 LIO_WCE=1 \
		sh -c '. "$VMLAB_LIB"; lio_target "$0" file:64' "$(late_iqn)"
	# vol3's target: CHAP, with a secret vol3.conf does not have.
	step lio-target-chap env LIO_PORT=$REFUSED_PORT LIO_CHAP_USER=vmlabuser LIO_CHAP_PASS=the-right-secret-7 \
		sh -c '. "$VMLAB_LIB"; lio_target "$0" rd:8' "$VMLAB_IQN-chap"
	np=$LIO/iscsi/$(late_iqn)/tpgt_1/np/$VMLAB_ADDR:$LATE_PORT
	step portal-late-removed sh -c "echo 0 >'$np/iser' && rmdir '$np'"
	img2=$(ls /mnt/out/lun2/*.img)
	rm -rf /run/vmlab-late && mkdir -p /run/vmlab-late
	head -c 1M /dev/urandom >/run/vmlab-late/vmlab-late
	sha256sum </run/vmlab-late/vmlab-late | cut -d' ' -f1 >/mnt/out/late.sha256
	step mkfs-late mkfs.ext4 -q -F -L vmlab-vol2 -d /run/vmlab-late "$img2"
	echo "$img2" >/mnt/out/lun2-image
	step target-late-timer systemd-run --no-block --quiet --unit=vmlab-target-late --on-active=$LATE_DELAY \
		--timer-property=AccuracySec=1s \
		/bin/sh $L/test.sh target-late
	mark target-started image="$img" late_image="$img2" late_portal="$VMLAB_ADDR:$LATE_PORT in ${LATE_DELAY}s"
	;;

target-late)
	# $LATE_DELAY s after target-start: vol2's portal appears (TCP, then iSER).
	. $L/env
	. "$VMLAB_LIB"
	np=$LIO/iscsi/$(late_iqn)/tpgt_1/np/$VMLAB_ADDR:$LATE_PORT
	mkdir -p "$np" && echo 1 >"$np/iser"
	mark target-late-up rc=$? restarts="$(systemctl show -p NRestarts --value iser-attach@$LATE.service)" \
		state="$(systemctl show -p ActiveState --value iser-attach@$LATE.service)"
	;;

target-stop)
	. $L/env
	. "$VMLAB_LIB"
	mark target-stop sessions="$(cat $LIO/iscsi/"$VMLAB_IQN"/tpgt_1/dynamic_sessions 2>/dev/null | tr -d '\n' | tr ' ' ,)"
	# The backing file stays (LIO_FILE_DIR elsewhere) for the host to check.
	LIO_FILE_DIR=/nonexistent lio_teardown
	sync
	;;

stop-begin)
	# ExecStop= of iser-attach@vol1: runs before systemd sends the daemon SIGTERM. The mount
	# must be gone by now.
	mounted=no
	mountpoint -q $MNT && mounted=yes
	mark stop-begin system="$(systemctl is-system-running 2>&1)" mounted=$mounted \
		mount_unit="$(systemctl show -p ActiveState --value mnt-vol1.mount)" pid="${MAINPID:-}"
	;;

stopped)
	# ExecStopPost=: the daemon is gone; was it clean? (udev removes the link it adopted once
	# it has seen the device go.)
	udevadm settle -t 10 || true
	dev=$(cat /run/vmlab-vol1-dev 2>/dev/null || echo unknown)
	link=gone
	[ -e /dev/iser/$NAME ] || [ -L /dev/iser/$NAME ] && link=present
	devstate=gone
	[ -b "$dev" ] && devstate=present
	. $L/env
	sess=$(cat /sys/kernel/config/target/iscsi/"$VMLAB_IQN"/tpgt_1/dynamic_sessions 2>/dev/null | tr -d '\n ')
	mark stopped system="$(systemctl is-system-running 2>&1)" result="${SERVICE_RESULT:-}" code="${EXIT_CODE:-}" \
		status="${EXIT_STATUS:-}" link=$link dev="$dev" dev_state=$devstate sessions="${sess:-none}"
	journalctl -b --no-pager -o cat -u iser-attach@$NAME.service >/mnt/out/daemon.log 2>&1 || true
	;;

check)
	. $L/env
	. "$VMLAB_LIB"
	unit=iser-attach@$NAME.service
	# The package: installed, its files as shipped (md5sums), the man page where man-db is.
	dpkg-query -W -f='${Package} ${Version} ${Status}\n' iser-attach
	step dpkg-status sh -c "dpkg -s iser-attach | grep -qx 'Status: install ok installed'"
	step dpkg-verify packaged_files_intact
	step packaged-files packaged /usr/sbin/iser-attach /usr/sbin/iser-fstab /lib/systemd/system/iser-attach.target \
		/lib/udev/rules.d/60-iser-attach.rules
	# Nothing from `make install` (/usr/local) or an administrator's copy shadows them.
	step no-other-copy sh -c 'for f in /usr/local/sbin/iser-attach /usr/local/sbin/iser-fstab \
		/usr/local/lib/systemd/system/iser-attach@.service /etc/systemd/system/iser-attach@.service \
		/usr/local/lib/udev/rules.d/60-iser-attach.rules /etc/udev/rules.d/60-iser-attach.rules; do
		test ! -e $f || { echo "$f exists" >&2; exit 1; }; done'
	step in-path test "$(command -v iser-attach)" = /usr/sbin/iser-attach
	if command -v man >/dev/null; then
		step man-page man -w iser-attach
	else
		echo "skip man-page: no man-db in the guest (dpkg -L: $(dpkg -L iser-attach | grep '/man8/iser-attach\.8'))"
	fi
	step volume-active systemctl -q is-active $unit
	systemctl status --no-pager $unit || true
	step packaged-unit packaged_unit $unit
	step type-notify test "$(systemctl show -p Type --value $unit)" = notify
	step execstart sh -c "systemctl show -p ExecStart --value $unit | grep -q 'path=/usr/sbin/iser-attach ; argv\[\]=/usr/sbin/iser-attach --log-format=json attach --volume $NAME '"
	step link test -L /dev/iser/$NAME
	dev=$(readlink -f /dev/iser/$NAME)
	echo "/dev/iser/$NAME -> $dev"
	echo "$dev" >/run/vmlab-vol1-dev
	step link-is-ublk sh -c "case '$dev' in /dev/ublkb[0-9]*) test -b '$dev' ;; *) false ;; esac"
	step mount-unit systemctl -q is-active mnt-vol1.mount
	src=$(findmnt -n -o SOURCE --mountpoint $MNT || true)
	fstype=$(findmnt -n -o FSTYPE --mountpoint $MNT || true)
	echo "$MNT: $src $fstype"
	step mounted-from-volume test "$src" = "$dev" -a "$fstype" = ext4
	# systemd knows /dev/iser/vol1 as a device: udev adopted the link (60-iser-attach.rules).
	step udev-link sh -c "udevadm info -q symlink $dev | tr ' ' '\n' | grep -qx iser/$NAME"
	step device-unit systemctl -q is-active dev-iser-$NAME.device
	# Order at boot: the target, then the volume ready, then the mount.
	t_target=$(systemctl show -p ActiveEnterTimestampMonotonic --value vmlab-target.service)
	t_ready=$(systemctl show -p ActiveEnterTimestampMonotonic --value $unit)
	t_mount=$(systemctl show -p ActiveEnterTimestampMonotonic --value mnt-vol1.mount)
	echo "active at (us since boot): vmlab-target $t_target, $unit $t_ready, mnt-vol1.mount $t_mount"
	step boot-order test "$t_target" -gt 0 -a "$t_ready" -gt "$t_target" -a "$t_mount" -gt "$t_ready"
	# The target sees the session (the logout check at shutdown reads the same file).
	step lio-session sh -c "grep -q . /sys/kernel/config/target/iscsi/$VMLAB_IQN/tpgt_1/dynamic_sessions"
	step list sh -c "/usr/sbin/iser-attach list --json | jq -e '.[] | select(.name == \"$NAME\" and .device == \"$dev\")'"
	step write sh -c "head -c 3M /dev/urandom >$MNT/vmlab-data && sync -f $MNT/vmlab-data"
	sha256sum <$MNT/vmlab-data | cut -d' ' -f1 >/mnt/out/data.sha256
	step fstab-check /usr/sbin/iser-fstab check
	# An upgrade in place, now with systemd and udevd up: dpkg -i of the package again (prerm
	# upgrade, postinst configure: deb-systemd-helper, daemon-reload, udev's reload). It exits 0,
	# systemd logs the reload, the target stays enabled, the running volume is left alone (and
	# detaches cleanly at shutdown, from the binary it started with).
	echo "with systemd: /run/systemd/system $(test -d /run/systemd/system && echo present || echo absent)," \
		"/run/udev/control $(test -S /run/udev/control && echo present || echo absent)"
	step udevd-running test -S /run/udev/control
	n0=$(reloads)
	set -- "$VMLAB_BIN"/iser-attach_*.deb
	step reinstall dpkg -i "$1"
	step postinst-reloaded reloaded_since "$n0"
	echo "systemd reloads in the journal: $n0 before the reinstall, $(reloads) after"
	step reinstalled-intact packaged_files_intact
	step target-still-enabled systemctl -q is-enabled iser-attach.target
	step volume-still-active systemctl -q is-active $unit

	# vol2: its target was down for the first $LATE_DELAY s; the unit's start timed out and
	# Restart= started it again; when the portal appeared the volume attached, and its device
	# unit (ExecStartPost=) started the mount that requires it. Nobody else does: wait for it.
	late=iser-attach@$LATE.service
	echo "$late: $(systemctl show -p ActiveState,SubState,NRestarts,Result $late | tr '\n' ' ')"
	t0=$(cut -d' ' -f1 /proc/uptime)
	wait_for 120 mountpoint -q $LATE_MNT || true
	echo "waited $(awk -v t0="$t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime) s for $LATE_MNT"
	echo "$late: $(systemctl show -p ActiveState,SubState,NRestarts,Result $late | tr '\n' ' ')"
	systemctl status --no-pager $late mnt-vol2.mount || true
	step late-mounted mountpoint -q $LATE_MNT
	dev2=$(readlink -f /dev/iser/$LATE)
	src2=$(findmnt -n -o SOURCE --mountpoint $LATE_MNT || true)
	echo "$LATE_MNT: $src2; /dev/iser/$LATE -> $dev2"
	step late-mounted-from-volume test "$src2" = "$dev2" -a -b "$dev2"
	step late-restarted test "$(systemctl show -p NRestarts --value $late)" -ge 1
	step late-active systemctl -q is-active $late
	step late-data sh -c "test \"\$(sha256sum <$LATE_MNT/vmlab-late | cut -d' ' -f1)\" = \"\$(cat /mnt/out/late.sha256)\""
	step late-write sh -c "head -c 1M /dev/urandom >$LATE_MNT/vmlab-data2 && sync -f $LATE_MNT/vmlab-data2"
	sha256sum <$LATE_MNT/vmlab-data2 | cut -d' ' -f1 >/mnt/out/data2.sha256

	# vol3: refused for good at its first login: failed with exit status 3, never restarted
	# (RestartPreventExitStatus=3), though its first start was minutes ago (RestartSec=2).
	refused=iser-attach@$REFUSED.service
	wait_for 60 sh -c "test \"\$(systemctl show -p ActiveState --value $refused)\" = failed" || true
	echo "$refused: $(systemctl show -p ActiveState,Result,ExecMainStatus,NRestarts $refused | tr '\n' ' ')"
	journalctl -b -u $refused -o cat | grep '"level":"error"' | tail -n 2 || true
	step refused-failed test "$(systemctl show -p ActiveState --value $refused)" = failed
	step refused-status-3 test "$(systemctl show -p ExecMainStatus --value $refused)" = 3
	step refused-not-restarted test "$(systemctl show -p NRestarts --value $refused)" = 0

	# journald: the daemon's lines carry their priority (JOURNAL_STREAM), so -p warning shows
	# vol1's "attached" (info) not, and vol2's failed logins (warnings, errors) only.
	step journal-info-hidden journal_priorities
	;;

host)
	# On the host (bash, e2fsprogs), after the VM exited: $2 is this test's results directory.
	d=$2
	fails=0
	ok() { echo "ok: $*"; }
	no() {
		echo "FAIL $*"
		fails=$((fails + 1))
	}
	log=$d/shutdown.log
	[ -s "$log" ] && ok "shutdown markers: $(wc -l <"$log") lines" || no "step markers: no $log"
	begin=$(grep ' stop-begin ' "$log" 2>/dev/null | tail -n1)
	stopped=$(grep ' stopped ' "$log" 2>/dev/null | tail -n1)
	tstop=$(grep ' target-stop ' "$log" 2>/dev/null | tail -n1)
	echo "stop-begin: $begin"
	echo "stopped:    $stopped"
	echo "target:     $tstop"
	case $begin in
	*" system=stopping "*) ok "the volume stopped in the shutdown" ;;
	*) no "step stop-at-shutdown: the last stop of iser-attach@vol1 was not in the shutdown: '$begin'" ;;
	esac
	case $begin in
	*" mounted=no "*) ok "$MNT was unmounted before the daemon got SIGTERM" ;;
	*) no "step unmount-before-detach: $MNT still mounted when iser-attach@vol1 began to stop: '$begin'" ;;
	esac
	case $stopped in
	*" result=success code=exited status=0 "*) ok "the daemon exited 0 on SIGTERM" ;;
	*) no "step clean-exit: the daemon did not exit 0: '$stopped'" ;;
	esac
	case $stopped in
	*" link=gone "*" dev_state=gone "*) ok "device and /dev/iser/vol1 removed" ;;
	*) no "step device-removed: '$stopped'" ;;
	esac
	case $stopped in
	*" sessions=none"*) ok "logged out (no LIO session left)" ;;
	*) no "step logout: the target still has a session after the daemon exited: '$stopped'" ;;
	esac
	# Markers in order: stop-begin, stopped, target-stop.
	order=$(awk '$2 == "stop-begin" || $2 == "stopped" || $2 == "target-stop" { printf "%s ", $2 }' "$log" 2>/dev/null)
	case $order in
	*"stop-begin stopped target-stop "*) ok "order: unmounted, daemon stopped, target stopped" ;;
	*) no "step shutdown-order: markers in order '$order'" ;;
	esac
	# The daemon's own account (journal, JSON lines): a detach, no error.
	if [ -s "$d/daemon.log" ]; then
		grep -q 'detached cleanly' "$d/daemon.log" && ok "daemon logged 'detached cleanly'" ||
			no "step daemon-log: no detach in daemon.log: $(tail -n 3 "$d/daemon.log")"
		if grep -E '"level":"(error|fatal|panic)"' "$d/daemon.log"; then
			no "step daemon-log: errors in daemon.log (above)"
		else
			ok "no error in the daemon's log"
		fi
	else
		no "step daemon-log: no $d/daemon.log"
	fi
	# The console (systemd's status lines): unmounted before the volume stopped.
	c=$(tr -d '\r' <"$d/console.log" | sed 's/\x1b\[[0-9;]*m//g')
	um=$(printf '%s\n' "$c" | grep -n 'Unmounted .*mnt/vol1' | head -n1 | cut -d: -f1)
	st=$(printf '%s\n' "$c" | grep -n 'Stopped .*iser-attach volume vol1' | head -n1 | cut -d: -f1)
	if [ -n "$um" ] && [ -n "$st" ] && [ "$um" -lt "$st" ]; then
		ok "console: 'Unmounted /mnt/vol1' (line $um) before 'Stopped iser-attach volume vol1' (line $st)"
	else
		no "step console-order: Unmounted at line '${um:-none}', Stopped at line '${st:-none}' of console.log"
	fi
	# (vol2's first start times out by design: only vol1's count here.)
	if printf '%s\n' "$c" | grep -E 'Failed unmounting .*mnt/vol|Failed to start .*(iser-attach@vol1|volume vol1)|iser-attach@vol1.*(timed out|Timed out)'; then
		no "step console-clean: failures on the console (above)"
	else
		ok "console: no failed unmount, start or timeout"
	fi
	# The data, on the LUN's backing file: a clean file system holding the file.
	img=$d/lun/$(basename "$(cat "$d/lun-image" 2>/dev/null || echo none)")
	if [ -f "$img" ]; then
		state=$(dumpe2fs -h "$img" 2>/dev/null | sed -n 's/^Filesystem state: *//p')
		[ "$state" = clean ] && ok "file system state clean" || no "step fs-clean: file system state '$state'"
		if dumpe2fs -h "$img" 2>/dev/null | grep -q '^Filesystem features:.*needs_recovery'; then
			no "step fs-journal: the journal needs recovery (not unmounted cleanly)"
		else
			ok "journal clean"
		fi
		e2fsck -fn "$img" >"$d/e2fsck.txt" 2>&1 && ok "e2fsck -fn clean" || no "step e2fsck: $(tail -n 3 "$d/e2fsck.txt")"
		want=$(cat "$d/data.sha256" 2>/dev/null || true)
		got=$(debugfs -R 'cat /vmlab-data' "$img" 2>/dev/null | sha256sum | cut -d' ' -f1)
		[ -n "$want" ] && [ "$got" = "$want" ] && ok "the file written at boot is on the LUN (sha256 $got)" ||
			no "step data: sha256 of /vmlab-data on the LUN is $got, written ${want:-nothing}"
	else
		no "step lun-image: no backing file ($img)"
	fi
	# vol2, mounted late: its backing file clean and holding both files.
	grep ' target-late-up ' "$log" 2>/dev/null || no "step target-late: no target-late-up marker"
	img2=$d/lun2/$(basename "$(cat "$d/lun2-image" 2>/dev/null || echo none)")
	if [ -f "$img2" ]; then
		e2fsck -fn "$img2" >"$d/e2fsck-late.txt" 2>&1 && ok "vol2: e2fsck -fn clean" || no "step late-e2fsck: $(tail -n 3 "$d/e2fsck-late.txt")"
		for f in vmlab-late:late.sha256 vmlab-data2:data2.sha256; do
			want=$(cat "$d/${f#*:}" 2>/dev/null || true)
			got=$(debugfs -R "cat /${f%%:*}" "$img2" 2>/dev/null | sha256sum | cut -d' ' -f1)
			[ -n "$want" ] && [ "$got" = "$want" ] && ok "vol2: /${f%%:*} on the LUN (sha256 $got)" ||
				no "step late-data: sha256 of /${f%%:*} on vol2's LUN is $got, want ${want:-nothing}"
		done
	else
		no "step late-lun-image: no backing file ($img2)"
	fi
	[ $fails = 0 ]
	;;

*)
	echo "usage: $0 setup|check|host DIR|target-start|target-stop|stop-begin|stopped" >&2
	exit 2
	;;
esac
