#!/bin/bash
# deb/check.sh: check the package `make deb` built (make deb-check): lintian reports no errors
# (warnings are printed), dpkg-deb --contents has every file with its mode and root ownership,
# the control fields, md5sums, changelog and copyright, the binary inside reports the package's
# version, its manual pages render, the documents are there (compressed over 4 KiB) and the
# units' Documentation= names them, the units point at /usr/sbin, and the maintainer scripts
# are valid sh that exit 0 with and without the systemd helpers (a chroot, a container).
#
#   scripts/deb/check.sh PACKAGE.deb
set -uo pipefail
[ $# = 1 ] && [ -f "$1" ] || {
	echo "usage: check.sh PACKAGE.deb (make deb)" >&2
	exit 2
}
DEB=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=../lib/check.sh
. "$(dirname "$0")/../lib/check.sh"

# lintian: no errors and no warnings. Its note about running as root is not about the package.
if command -v lintian >/dev/null; then
	out=$(lintian --fail-on error,warning "$DEB" 2>&1)
	rc=$?
	out=$(grep -v 'running with root privileges is not recommended' <<<"$out")
	[ -z "$out" ] || echo "$out"
	check "lintian: exit $rc" test "$rc" = 0
else
	bad "lintian not installed (scripts/deps.sh test)"
fi

contents=$(dpkg-deb --contents "$DEB") || bad "dpkg-deb --contents failed"
for f in -rwxr-xr-x:usr/sbin/iser-attach -rwxr-xr-x:usr/sbin/iser-fstab \
	-rw-r--r--:lib/systemd/system/iser-attach@.service -rw-r--r--:lib/systemd/system/iser-attach.target \
	-rw-r--r--:lib/udev/rules.d/60-iser-attach.rules \
	-rw-r--r--:usr/share/man/man8/iser-attach.8.gz -rw-r--r--:usr/share/man/man8/iser-fstab.8.gz \
	-rw-r--r--:usr/share/man/man5/iser-attach.conf.5.gz \
	-rw-r--r--:usr/share/bash-completion/completions/iser-attach \
	-rw-r--r--:usr/share/zsh/vendor-completions/_iser-attach \
	-rw-r--r--:usr/share/doc/iser-attach/copyright -rw-r--r--:usr/share/doc/iser-attach/changelog.Debian.gz \
	-rw-r--r--:usr/share/doc/iser-attach/README.md.gz -rw-r--r--:usr/share/doc/iser-attach/operations.md.gz \
	-rw-r--r--:usr/share/doc/iser-attach/iscsiadm.md.gz drwxr-xr-x:etc/iser-attach/volumes/; do
	check "contents: no ${f#*:} with mode ${f%%:*} owned by root/root" \
		grep -qE "^${f%%:*} root/root +[0-9]+ [0-9-]+ [0-9:]+ \./${f#*:}\$" <<<"$contents"
done
check "contents: files not owned by root: $(grep -v ' root/root ' <<<"$contents")" \
	test -z "$(grep -v ' root/root ' <<<"$contents")"
check "contents: an uncompressed manual page" test -z "$(grep -E 'man/man[0-9]/[^ ]*\.[0-9]$' <<<"$contents")"

mkdir -p "$T/root" "$T/ctl"
dpkg-deb -x "$DEB" "$T/root" || bad "dpkg-deb -x failed"
dpkg-deb -e "$DEB" "$T/ctl" || bad "dpkg-deb -e failed"
f() { dpkg-deb -f "$DEB" "$1"; }
version=$(f Version)
check "Package: $(f Package)" test "$(f Package)" = iser-attach
check "Architecture: $(f Architecture)" test "$(f Architecture)" = "$(dpkg --print-architecture)"
check "Depends lacks libc6: $(f Depends)" grep -qE '^libc6 \(>= 2\.[0-9]+\)' <<<"$(f Depends)"
check "Version '$version' does not end in -1" grep -qE '^[0-9][A-Za-z0-9.+~]*-1$' <<<"$version"
check "Installed-Size not a number: $(f Installed-Size)" grep -qE '^[0-9]+$' <<<"$(f Installed-Size)"
check "conffiles listed though nothing in /etc is a file" test ! -e "$T/ctl/conffiles"
check "md5sums do not match the files" sh -c "cd '$T/root' && md5sum --quiet -c '$T/ctl/md5sums'"
check "md5sums lacks the binary" grep -q ' usr/sbin/iser-attach$' "$T/ctl/md5sums"

# The binary inside: its version is the package's upstream version.
vout=$("$T/root/usr/sbin/iser-attach" version 2>&1)
upstream=${version%-1}
check "iser-attach version printed '$(head -1 <<<"$vout")', package is $version" \
	test "$(head -1 <<<"$vout" | sed 's/^iser-attach //; s/^v//; s/-/+/g')" = "${upstream#0~git}"
check "iser-attach version: no revision: $vout" grep -qE '^revision: [0-9a-f]{40}(-dirty)?$' <<<"$vout"
check "iser-attach version: no Go version: $vout" grep -qE '^go: go[0-9]' <<<"$vout"
check "changelog.Debian.gz does not start with the version" \
	test "$(gunzip -c "$T/root/usr/share/doc/iser-attach/changelog.Debian.gz" | head -1)" = \
	"iser-attach ($version) unstable; urgency=medium"
check "copyright lacks the modules linked in" grep -q '^Module: github.com/urfave/cli/v2 ' "$T/root/usr/share/doc/iser-attach/copyright"
check "copyright names the project's licence (Apache-2.0, LICENSE)" bash -c 'sed -n "1,/^Module:/p" "$0" | grep -q "^License: Apache-2.0"' "$T/root/usr/share/doc/iser-attach/copyright"
for m in man8/iser-attach.8 man8/iser-fstab.8 man5/iser-attach.conf.5; do
	if command -v man >/dev/null; then
		page=$(MANWIDTH=80 man --warnings -l "$T/root/usr/share/man/$m.gz" 2>"$T/man.err")
		check "man $m: warnings: $(cat "$T/man.err")" test ! -s "$T/man.err"
		check "man $m: no NAME section" grep -q "^NAME" <<<"$page"
	fi
done
# The documents are the tree's, compressed when over 4 KiB (Debian policy 12.3).
REPO=$(cd "$(dirname "$0")/../.." && pwd)
for d in README.md docs/operations.md docs/iscsiadm.md; do
	check "doc $d differs from the tree's" cmp -s "$REPO/$d" \
		<(gunzip -c "$T/root/usr/share/doc/iser-attach/$(basename "$d").gz" 2>/dev/null)
done
big=$(find "$T/root/usr/share/doc" -type f ! -name '*.gz' ! -name copyright -size +4k)
check "documents over 4 KiB not compressed: $big" test -z "$big"
# Every file a unit's Documentation= names is in the package.
for u in "$T"/root/lib/systemd/system/*; do
	for url in $(sed -n 's/^Documentation=//p' "$u"); do
		case $url in file://*) check "$(basename "$u"): Documentation=$url is not in the package" \
			test -f "$T/root${url#file://}" ;; esac
	done
done
check "bash completion is not bash" bash -n "$T/root/usr/share/bash-completion/completions/iser-attach"
check "unit ExecStart not /usr/sbin" grep -q '^ExecStart=/usr/sbin/iser-attach ' "$T/root/lib/systemd/system/iser-attach@.service"
check "unit lacks RestartPreventExitStatus=3" grep -qx 'RestartPreventExitStatus=3' "$T/root/lib/systemd/system/iser-attach@.service"
check "unit does not start the mounts that require it (a volume up late)" grep -q '^ExecStartPost=.*systemctl show -p RequiredBy --value %n' "$T/root/lib/systemd/system/iser-attach@.service"
check "placeholders left: $(grep -rln '@[A-Z]*@' "$T/root/lib")" test -z "$(grep -rl '@[A-Z]*@' "$T/root/lib")"

# Maintainer scripts: valid sh; exit 0 with failing helpers and without any (a chroot).
mkdir -p "$T/stub" "$T/none"
# Every helper fails, except that deb-systemd-helper says the target was enabled (as it does
# on a first installation).
for h in deb-systemd-helper systemctl udevadm; do
	printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\ncase "$*" in *was-enabled*) exit 0 ;; esac\nexit 1\n' \
		"$h" "$T" >"$T/stub/$h"
	chmod 0755 "$T/stub/$h"
done
for s in postinst prerm postrm; do
	check "$s missing or not executable" test -x "$T/ctl/$s"
	check "$s: sh -n" sh -n "$T/ctl/$s"
done
for run in "postinst configure" "prerm remove" "postrm remove" "postrm purge" "prerm upgrade 1.0-1" "postinst configure 1.0-1"; do
	set -- $run
	s=$1
	shift
	out=$(PATH="$T/stub:/usr/bin:/bin" sh "$T/ctl/$s" "$@" 2>&1)
	check "$run with failing helpers: exit $?: $out" test $? = 0
	out=$(PATH="$T/none" /bin/sh "$T/ctl/$s" "$@" 2>&1)
	check "$run without systemd helpers: exit $?: $out" test $? = 0
done
check "postinst configure did not enable iser-attach.target: $(cat "$T/calls" 2>/dev/null)" \
	grep -q '^deb-systemd-helper enable iser-attach.target$' "$T/calls"
check "postrm purge did not purge the systemd state" grep -q '^deb-systemd-helper purge iser-attach.target$' "$T/calls"

report deb-check "$DEB"
