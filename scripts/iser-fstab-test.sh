#!/bin/bash
# iser-fstab-test.sh: host test of scripts/iser-fstab (add, remove, check, list and their
# errors) on a scratch fstab; runs in about a second, needs no root. `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOOL=$HERE/iser-fstab
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export ISER_FSTAB=$T/etc/fstab ISER_ATTACH_CONFIG_DIR=$T/volumes
mkdir -p "$T/etc" "$ISER_ATTACH_CONFIG_DIR"
# shellcheck source=lib/check.sh
. "$(dirname "$0")/lib/check.sh"

# run EXPECTED_RC ARGS...: run the tool; its stdout+stderr in $OUT.
run() {
	local want=$1 rc=0
	shift
	OUT=$("$TOOL" "$@" 2>&1) || rc=$?
	if [ "$rc" = "$want" ]; then ok; else bad "iser-fstab $*: exit $rc, want $want; output: $OUT"; fi
}
# says TEXT: the last run's output contains TEXT.
says() {
	if grep -qF -- "$1" <<<"$OUT"; then ok; else bad "output lacks '$1': $OUT"; fi
}
# same A B: two files have the same content.
same() {
	if cmp -s "$1" "$2"; then ok; else bad "$1 and $2 differ: $(diff "$1" "$2")"; fi
}
# line N TEXT: line N of the fstab is TEXT.
line() {
	local got
	got=$(sed -n "$1p" "$ISER_FSTAB")
	if [ "$got" = "$2" ]; then ok; else bad "fstab line $1 is '$got', want '$2'"; fi
}

# A system fstab with comments and a last line without its newline.
printf '# /etc/fstab: static file system information.\nUUID=1234 / ext4 errors=remount-ro 0 1\n\n# data\n/dev/sdb1 /data/ ext4 defaults 0 2\n/swapfile none swap sw 0 0' >"$ISER_FSTAB"
chmod 0640 "$ISER_FSTAB"
cp "$ISER_FSTAB" "$T/orig"

# Usage.
run 2
says "usage: iser-fstab add NAME MOUNTPOINT"
run 2 --help
says "iser-fstab check"
run 2 frobnicate
says "unknown command 'frobnicate'"
run 2 add vol1
says "add takes NAME MOUNTPOINT"
run 2 remove
run 2 check extra

# add: defaults, trailing slash, the last line's missing newline.
run 0 add vol1 /mnt/vol1/
says "added to $ISER_FSTAB: /dev/iser/vol1 /mnt/vol1 auto defaults,_netdev,nofail,x-systemd.requires=iser-attach@vol1.service 0 0"
says "$ISER_ATTACH_CONFIG_DIR/vol1.conf does not exist yet"
line 6 "/swapfile none swap sw 0 0"
line 7 "/dev/iser/vol1 /mnt/vol1 auto defaults,_netdev,nofail,x-systemd.requires=iser-attach@vol1.service 0 0"
same "$T/orig" "$ISER_FSTAB~"
[ "$(stat -c %a "$ISER_FSTAB")" = 640 ] && ok || bad "mode $(stat -c %a "$ISER_FSTAB"), want 640 (kept)"
head -n 5 "$ISER_FSTAB" | cmp -s - <(head -n 5 "$T/orig") && ok || bad "the old lines changed"
[ -z "$(ls "$T/etc" | grep -v -e '^fstab$' -e '^fstab~$')" ] && ok || bad "files left in $T/etc: $(ls "$T/etc")"

# add: type and options given; the three additions are not repeated.
run 0 add db_2.x /srv/db xfs noatime,nofail,x-systemd.requires=iser-attach@db_2.x.service,_netdev
line 8 "/dev/iser/db_2.x /srv/db xfs noatime,nofail,x-systemd.requires=iser-attach@db_2.x.service,_netdev 0 0"
run 0 add logs /var/log/app ext4 noatime,x-systemd.automount
line 9 "/dev/iser/logs /var/log/app ext4 noatime,x-systemd.automount,_netdev,nofail,x-systemd.requires=iser-attach@logs.service 0 0"

# add: refusals leave the fstab alone.
cp "$ISER_FSTAB" "$T/before"
run 1 add vol1 /mnt/other
says "line 7 already mounts /dev/iser/vol1 (at /mnt/vol1); iser-fstab remove vol1 first"
run 1 add vol9 /mnt/vol1
says "line 7 already mounts /dev/iser/vol1 at /mnt/vol1"
run 1 add vol9 /mnt/vol1/
run 1 add vol9 /data
says "line 5 already mounts /dev/sdb1 at /data"
run 2 add vol9 /
says "refusing to mount a volume on /"
run 2 add vol9 relative/dir
says "mount point 'relative/dir' is not an absolute path"
run 2 add 'bad name' /mnt/x
says "volume name 'bad name'"
run 2 add .hidden /mnt/x
run 2 add 'a/b' /mnt/x
run 2 add "$(printf 'x%.0s' {1..65})" /mnt/x
says "1 to 64"
run 2 add vol9 /mnt/x 'ext4 ro'
run 2 add vol9 /mnt/x ext4 'ro, sync'
run 2 add vol9 /mnt/x ext4 'ro,,sync'
says "empty item"
run 2 add vol9 /mnt/x 'e$t4'
run 2 add vol9 '/mnt/a\040b'
same "$T/before" "$ISER_FSTAB"
# A name of 64 characters is fine.
run 0 add "$(printf 'y%.0s' {1..64})" /mnt/long
run 0 remove "$(printf 'y%.0s' {1..64})"

# No fstab.
ISER_FSTAB=$T/none run 1 add vol9 /mnt/x
says "$T/none does not exist"
ISER_FSTAB=$T/none run 1 check

# check: every problem with its line number.
run 1 check
says "$ISER_FSTAB:7: /dev/iser/vol1: no volume configuration $ISER_ATTACH_CONFIG_DIR/vol1.conf"
says "$ISER_FSTAB:8: /dev/iser/db_2.x: no volume configuration"
touch "$ISER_ATTACH_CONFIG_DIR"/{vol1,db_2.x,logs}.conf
run 0 check
says "ok: 3 iser-attach line(s) in $ISER_FSTAB"
cp "$ISER_FSTAB" "$T/good"
{
	echo "/dev/iser/vol1 /mnt/again ext4 defaults,_netdev,nofail,x-systemd.requires=iser-attach@vol1.service 0 0"
	echo "/dev/iser/nonet /mnt/vol1 ext4 defaults,nofail,x-systemd.requires=iser-attach@nonet.service 0 0"
	echo "/dev/iser/nofail /mnt/nofail ext4 _netdev,x-systemd.requires=iser-attach@nofail.service 0 0"
	echo "/dev/iser/noreq /mnt/noreq ext4 _netdev,nofail,x-systemd.requires=iser-attach@other.service 0 0"
	echo "	# /dev/iser/commented /mnt/c ext4 defaults 0 0"
	echo "/dev/iser/short /mnt/short"
	echo "/dev/iser/.dot /mnt/dot ext4 _netdev,nofail 0 0"
} >>"$ISER_FSTAB"
touch "$ISER_ATTACH_CONFIG_DIR"/{nonet,nofail,noreq}.conf
run 1 check
says "$ISER_FSTAB:10: /dev/iser/vol1 is also on line 7"
says "$ISER_FSTAB:11: mount point /mnt/vol1 is also on line 7"
says "$ISER_FSTAB:11: /dev/iser/nonet: no _netdev"
says "$ISER_FSTAB:12: /dev/iser/nofail: no nofail"
says "$ISER_FSTAB:13: /dev/iser/noreq: no x-systemd.requires=iser-attach@noreq.service"
says "$ISER_FSTAB:15: /dev/iser/short: 2 fields"
says "$ISER_FSTAB:16: \"/dev/iser/.dot\": not a volume name"
grep -q commented <<<"$OUT" && bad "check looked at a comment: $OUT" || ok
[ "$(grep -c "^$ISER_FSTAB:" <<<"$OUT")" = 7 ] && ok || bad "want 7 problems, got: $OUT"

# list.
run 0 list
says "7: /dev/iser/vol1 /mnt/vol1 auto"
says "16: /dev/iser/.dot"
grep -q commented <<<"$OUT" && bad "list showed a comment" || ok

# remove: every line of the name, nothing else; the backup is the file before.
cp "$ISER_FSTAB" "$T/before"
run 0 remove vol1
says "removed line 7,10 (/dev/iser/vol1)"
same "$T/before" "$ISER_FSTAB~"
grep -q '^/dev/iser/vol1 ' "$ISER_FSTAB" && bad "vol1 still in the fstab" || ok
[ "$(wc -l <"$ISER_FSTAB")" = $(($(wc -l <"$T/before") - 2)) ] && ok || bad "remove took more than two lines"
grep -q '^# data$' "$ISER_FSTAB" && grep -q '^/swapfile none swap sw 0 0$' "$ISER_FSTAB" && ok || bad "remove lost other lines"
run 1 remove vol1
says "has no line for /dev/iser/vol1"
run 2 remove 'x y'
# A removed name can be added again.
cp "$T/good" "$ISER_FSTAB"
run 0 remove vol1
run 0 add vol1 /mnt/vol1 ext4
run 0 check

# A symbolic link: the file it points at changes, the link stays.
mv "$ISER_FSTAB" "$T/etc/fstab.real"
ln -s fstab.real "$ISER_FSTAB"
run 0 add linked /mnt/linked
[ -L "$ISER_FSTAB" ] && grep -q '^/dev/iser/linked ' "$T/etc/fstab.real" && ok || bad "symlinked fstab replaced or not updated"

# The tool is POSIX sh: dash runs it too.
if command -v dash >/dev/null; then
	rm -f "$ISER_FSTAB"
	cp "$T/good" "$ISER_FSTAB"
	rc=0
	OUT=$(dash "$TOOL" add dashvol /mnt/dash ext4 2>&1) || rc=$?
	[ $rc = 0 ] && grep -q '^/dev/iser/dashvol /mnt/dash ext4 defaults,_netdev,nofail,x-systemd.requires=iser-attach@dashvol.service 0 0$' "$ISER_FSTAB" &&
		ok || bad "dash: exit $rc: $OUT"
	rc=0
	OUT=$(dash "$TOOL" add 'x y' /mnt/z 2>&1) || rc=$?
	[ $rc = 2 ] && ok || bad "dash: bad name exit $rc: $OUT"
fi

report iser-fstab-test
