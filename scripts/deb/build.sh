#!/bin/sh
# deb/build.sh: build the Debian package of iser-attach from the tree, offline, with dpkg-deb.
# `make deb` runs it on the binary it built; deb/check.sh (make deb-check) inspects the result.
#
#   scripts/deb/build.sh BINARY VERSION OUTDIR   # writes OUTDIR/iser-attach_DEBVERSION_ARCH.deb
#                                                # and prints its path on the last line
#
# VERSION is the Makefile's (VERSION file or git describe); the Debian version is VERSION
# without a leading "v", hyphens made "+", prefixed "0~git" when it does not start with a
# digit (a bare commit hash), with the Debian revision "-1".
# Layout: scripts/install.sh with PREFIX=/usr and Debian's directories (units and the udev
# rule under /lib for Debian 12), then the manual pages gzipped and the documents over 4 KiB
# (README.md, operations.md, iscsiadm.md) too, as policy asks, the copyright file (the Go
# modules linked in, with their license texts), changelog.Debian.gz, md5sums and the
# maintainer scripts in this directory.
# Environment: DEB_MAINTAINER ("Name <address>"), SOURCE_DATE_EPOCH (default: the HEAD commit's
# time, else now) for the changelog date and file times.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
die() {
	echo "deb: $*" >&2
	exit 1
}
[ $# = 3 ] || die "usage: build.sh BINARY VERSION OUTDIR"
BIN=$1 VERSION=$2 OUT=$3
[ -x "$BIN" ] || die "binary '$BIN' missing or not executable (make build)"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"
umask 022

debversion() {
	v=${1#v}
	v=$(printf '%s' "$v" | tr -- '-_' '++' | tr -cd 'A-Za-z0-9.+~')
	case $v in [0-9]*.*) ;; *) v=0~git$v ;; esac # a bare commit hash has no dot
	echo "$v-1"
}
DEBVERSION=$(debversion "$VERSION")
ARCH=$(dpkg --print-architecture)
MAINTAINER=${DEB_MAINTAINER:-iser-attach developers <iser-attach@users.noreply.github.com>}
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

mkdir -p "$OUT"
ROOT=$(mktemp -d "$OUT/deb-root.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT
DOC=/usr/share/doc/iser-attach

DESTDIR=$ROOT PREFIX=/usr SBINDIR=/usr/sbin UNITDIR=/lib/systemd/system UDEVRULESDIR=/lib/udev/rules.d \
	DOCDIR=$DOC MANDIR=/usr/share/man BASHCOMPDIR=/usr/share/bash-completion/completions \
	ZSHCOMPDIR=/usr/share/zsh/vendor-completions SYSCONFDIR=/etc \
	"$REPO/scripts/install.sh" install "$BIN" >/dev/null || die "install.sh failed"
gzip -9n "$ROOT/usr/share/man/man8/iser-attach.8" "$ROOT/usr/share/man/man8/iser-fstab.8" \
	"$ROOT/usr/share/man/man5/iser-attach.conf.5"
# Debian policy 12.3: documents larger than 4 KiB are compressed. The units' Documentation=
# then names the compressed file.
for f in "$ROOT$DOC"/*.md; do
	[ "$(stat -c %s "$f")" -le 4096 ] && continue
	gzip -9n "$f"
	url=file://$DOC/$(basename "$f")
	sed -i -e "/^Documentation=/s|$url\$|$url.gz|" -e "/^Documentation=/s|$url |$url.gz |" \
		"$ROOT/lib/systemd/system/iser-attach@.service" "$ROOT/lib/systemd/system/iser-attach.target"
done

# The changelog: this build.
{
	echo "iser-attach ($DEBVERSION) unstable; urgency=medium"
	echo
	echo "  * Built from the source tree at $VERSION."
	echo
	echo " -- $MAINTAINER  $(date -R -u -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$ROOT$DOC/changelog.Debian.gz"

# The copyright file: the project, then every Go module linked into the binary.
{
	echo "iser-attach: a userspace iSER/iSCSI initiator"
	echo "Source: https://github.com/iser-attach/iser-attach"
	echo
	echo "Copyright: the iser-attach authors"
	if [ -f "$REPO/LICENSE" ] && grep -q 'Apache License' "$REPO/LICENSE" && grep -q 'Version 2.0' "$REPO/LICENSE"; then
		echo "License: Apache-2.0"
		echo " On Debian systems the full text of the Apache License 2.0 is in"
		echo " /usr/share/common-licenses/Apache-2.0."
	elif [ -f "$REPO/LICENSE" ]; then
		echo "License:"
		sed 's/^/ /; s/^ $/ ./' "$REPO/LICENSE"
	else
		echo "License: the source tree carries no license file; ask the authors."
	fi
	echo
	echo "The binary /usr/sbin/iser-attach links these Go modules in; their license texts follow."
	go version -m "$BIN" | awk '$1 == "dep" { print $2, $3 }' | while read -r mod ver; do
		dir=$(go env GOMODCACHE)/$(printf '%s' "$mod" | sed 's/[A-Z]/!&/g' | tr 'A-Z' 'a-z')@$ver
		lic=$(ls "$dir"/LICENSE* "$dir"/COPYING* 2>/dev/null | head -1)
		[ -n "$lic" ] || die "no license file for $mod $ver in $dir (go mod download)"
		echo
		echo "Module: $mod $ver"
		if grep -q 'Apache License' "$lic" && grep -q 'Version 2.0' "$lic"; then
			echo "License: Apache-2.0"
			echo " On Debian systems the full text of the Apache License 2.0 is in"
			echo " /usr/share/common-licenses/Apache-2.0."
		else
			echo "License:"
			sed 's/^/ /; s/^ $/ ./' "$lic"
		fi
	done
} >"$ROOT$DOC/copyright" || die "copyright"

mkdir -p "$ROOT/DEBIAN"
for s in postinst prerm postrm; do
	cp "$HERE/$s" "$ROOT/DEBIAN/$s"
	chmod 0755 "$ROOT/DEBIAN/$s"
done
mkdir -p "$ROOT/usr/share/lintian/overrides"
cp "$HERE/lintian-overrides" "$ROOT/usr/share/lintian/overrides/iser-attach"

# libc: the newest GLIBC symbol version the cgo binary uses.
glibc=$(objdump -T "$BIN" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
[ -n "$glibc" ] || die "no GLIBC symbol versions in $BIN (objdump from binutils; a static build?)"
cat >"$ROOT/DEBIAN/control" <<CONTROL
Package: iser-attach
Version: $DEBVERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
Depends: libc6 (>= $glibc)
Recommends: libibverbs1, librdmacm1, ibverbs-providers, kmod
Suggests: tgt, libnbd-bin
Section: admin
Priority: optional
Homepage: https://github.com/iser-attach/iser-attach
Description: userspace iSER/iSCSI initiator with ublk and NBD block devices
 iser-attach logs in to iSCSI targets over iSER (RFC 7145, RDMA) or iSCSI/TCP
 (RFC 7143) and exposes their LUNs as local block devices (ublk, kernel NBD)
 or as NBD exports, without the kernel's iSCSI stack. It keeps open-iscsi's
 administrative model: discover a portal, log in to a target, pick a LUN.
 .
 Volumes configured in /etc/iser-attach/volumes are attached at boot by
 iser-attach@NAME.service and appear as /dev/iser/NAME; iser-fstab keeps their
 /etc/fstab lines right. rdma-core's libraries are loaded at run time for iSER.
CONTROL

(cd "$ROOT" && find . -type f ! -path './DEBIAN/*' | sed 's|^\./||' | LC_ALL=C sort | xargs md5sum) >"$ROOT/DEBIAN/md5sums"
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
chmod -R go-w "$ROOT"
chmod 0755 "$ROOT"
DEB=$OUT/iser-attach_${DEBVERSION}_$ARCH.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null || die "dpkg-deb --build failed"
echo "$DEB"
