#!/bin/sh
# install.sh: install or remove iser-attach, its systemd units, udev rule, fstab helper,
# manual pages, documents and shell completions.
# `make install` / `make uninstall` run it; the VM lab runs it in the guest to install the
# host-built binary exactly the same way.
#
#   scripts/install.sh install BINARY   # BINARY: the built iser-attach (make: bin/iser-attach)
#   scripts/install.sh uninstall
#
# Environment (make passes DESTDIR and PREFIX):
#   DESTDIR        staging root prepended to every path (default empty: the live system)
#   PREFIX         /usr/local
#   SBINDIR        $PREFIX/sbin                  iser-attach, iser-fstab
#   UNITDIR        $PREFIX/lib/systemd/system    iser-attach@.service, iser-attach.target
#                  (systemd reads /usr/local/lib/systemd/system as well as /usr/lib/...)
#   UDEVRULESDIR   $PREFIX/lib/udev/rules.d      60-iser-attach.rules
#   DOCDIR         $PREFIX/share/doc/iser-attach README.md, operations.md, iscsiadm.md
#   MANDIR         $PREFIX/share/man             man8/iser-attach.8, man5/iser-attach.conf.5
#                                                (from man/), man8/iser-fstab.8
#   BASHCOMPDIR    $PREFIX/share/bash-completion/completions   iser-attach
#   ZSHCOMPDIR     $PREFIX/share/zsh/site-functions            _iser-attach
#                  (both from BINARY gen-completion bash|zsh)
#   SYSCONFDIR     /etc                          iser-attach/volumes/ (created, never removed
#                                                while it holds a configuration)
# With DESTDIR empty it also runs `systemctl daemon-reload` (when systemd runs), enables
# iser-attach.target (volumes you enable start at boot) and reloads udev's rules (when udevd
# runs); uninstall disables the target again.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
SBINDIR=${SBINDIR:-$PREFIX/sbin}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
UDEVRULESDIR=${UDEVRULESDIR:-$PREFIX/lib/udev/rules.d}
DOCDIR=${DOCDIR:-$PREFIX/share/doc/iser-attach}
MANDIR=${MANDIR:-$PREFIX/share/man}
BASHCOMPDIR=${BASHCOMPDIR:-$PREFIX/share/bash-completion/completions}
ZSHCOMPDIR=${ZSHCOMPDIR:-$PREFIX/share/zsh/site-functions}
SYSCONFDIR=${SYSCONFDIR:-/etc}
VOLDIR=$SYSCONFDIR/iser-attach/volumes

say() { echo "install: $*"; }
die() {
	echo "install: FAIL $*" >&2
	exit 1
}

for d in "$PREFIX" "$SBINDIR" "$UNITDIR" "$UDEVRULESDIR" "$DOCDIR" "$MANDIR" "$BASHCOMPDIR" "$ZSHCOMPDIR" "$SYSCONFDIR"; do
	case $d in /*) ;; *) die "'$d' is not an absolute path (PREFIX, SBINDIR, UNITDIR, UDEVRULESDIR, DOCDIR, MANDIR, BASHCOMPDIR, ZSHCOMPDIR, SYSCONFDIR)" ;; esac
done

UNITS="iser-attach@.service iser-attach.target"
RULES=60-iser-attach.rules

systemd_running() { [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }

# put MODE SRC DEST: install one file, substituting @SBINDIR@ and @DOCDIR@.
put() {
	_mode=$1 _src=$2 _dst=$DESTDIR$3
	[ -f "$_src" ] || die "$_src missing"
	mkdir -p "$(dirname "$_dst")" || die "mkdir $(dirname "$_dst")"
	case $_src in
	*.service | *.target | *.rules)
		# sed's replacement: escape its specials in the paths.
		_s=$(printf '%s' "$SBINDIR" | sed 's/[\\&|]/\\&/g')
		_d=$(printf '%s' "$DOCDIR" | sed 's/[\\&|]/\\&/g')
		sed -e "s|@SBINDIR@|$_s|g" -e "s|@DOCDIR@|$_d|g" "$_src" >"$_dst.tmp" || die "write $_dst"
		if grep -n '@[A-Z]*@' "$_dst.tmp" >&2; then
			rm -f "$_dst.tmp"
			die "$_src: placeholders left after substitution (above)"
		fi
		chmod "$_mode" "$_dst.tmp" && mv -f "$_dst.tmp" "$_dst" || die "install $_dst"
		;;
	*)
		# Through a temporary name: a running daemon keeps its old binary.
		cp "$_src" "$_dst.tmp" && chmod "$_mode" "$_dst.tmp" && mv -f "$_dst.tmp" "$_dst" || die "install $_dst"
		;;
	esac
	say "$_dst"
}

do_install() {
	[ $# = 1 ] || die "usage: install.sh install BINARY"
	bin=$1
	[ -f "$bin" ] && [ -x "$bin" ] || die "binary '$bin' missing or not executable (make build)"
	put 0755 "$bin" "$SBINDIR/iser-attach"
	put 0755 "$REPO/scripts/iser-fstab" "$SBINDIR/iser-fstab"
	for u in $UNITS; do put 0644 "$REPO/scripts/systemd/$u" "$UNITDIR/$u"; done
	put 0644 "$REPO/scripts/systemd/$RULES" "$UDEVRULESDIR/$RULES"
	put 0644 "$REPO/README.md" "$DOCDIR/README.md"
	put 0644 "$REPO/docs/operations.md" "$DOCDIR/operations.md"
	put 0644 "$REPO/docs/iscsiadm.md" "$DOCDIR/iscsiadm.md"
	put 0644 "$REPO/man/iser-attach.8" "$MANDIR/man8/iser-attach.8"
	put 0644 "$REPO/man/iser-attach.conf.5" "$MANDIR/man5/iser-attach.conf.5"
	put 0644 "$REPO/scripts/iser-fstab.8" "$MANDIR/man8/iser-fstab.8"
	# The completions come from the binary's own definitions.
	gen=$(mktemp -d) || die "mktemp"
	"$bin" gen-completion bash >"$gen/iser-attach.bash" || { rm -rf "$gen"; die "$bin gen-completion bash failed"; }
	"$bin" gen-completion zsh >"$gen/_iser-attach" || { rm -rf "$gen"; die "$bin gen-completion zsh failed"; }
	put 0644 "$gen/iser-attach.bash" "$BASHCOMPDIR/iser-attach"
	put 0644 "$gen/_iser-attach" "$ZSHCOMPDIR/_iser-attach"
	rm -rf "$gen"
	mkdir -p "$DESTDIR$VOLDIR" && chmod 0755 "$DESTDIR$SYSCONFDIR/iser-attach" "$DESTDIR$VOLDIR" ||
		die "mkdir $DESTDIR$VOLDIR"
	say "$DESTDIR$VOLDIR/ (one NAME.conf per volume)"
	if [ -n "$DESTDIR" ]; then
		say "DESTDIR set: on the installed system run 'systemctl daemon-reload; systemctl enable iser-attach.target'"
		return 0
	fi
	if systemd_running; then
		systemctl daemon-reload || die "systemctl daemon-reload"
		say "systemctl daemon-reload"
	fi
	if command -v systemctl >/dev/null; then
		# Works without a running systemd too (it only creates the symbolic link).
		systemctl enable iser-attach.target 2>&1 | sed 's/^/install: /' || true
		systemctl is-enabled -q iser-attach.target || die "systemctl enable iser-attach.target failed"
		say "iser-attach.target enabled: enabled volumes start at boot"
	else
		say "no systemctl: the units are installed but nothing is enabled"
	fi
	if [ -S /run/udev/control ] && command -v udevadm >/dev/null; then
		udevadm control --reload || die "udevadm control --reload"
		say "udev rules reloaded"
	fi
	say "next: write $VOLDIR/NAME.conf, then 'systemctl enable --now iser-attach@NAME' (docs/operations.md)"
}

do_uninstall() {
	[ $# = 0 ] || die "usage: install.sh uninstall"
	if [ -z "$DESTDIR" ] && command -v systemctl >/dev/null; then
		if systemd_running; then
			active=$(systemctl list-units --no-legend --plain --state=active 'iser-attach@*.service' 2>/dev/null | awk '{ print $1 }')
			[ -z "$active" ] || say "note: still running (stop them to detach): $(echo $active)"
		fi
		if [ -f "$UNITDIR/iser-attach.target" ] && systemctl -q is-enabled iser-attach.target 2>/dev/null; then
			systemctl disable iser-attach.target 2>&1 | sed 's/^/install: /' || true
		fi
		enabled=$(ls "$SYSCONFDIR/systemd/system/iser-attach.target.wants" 2>/dev/null || true)
		[ -z "$enabled" ] || say "note: volumes still enabled (systemctl disable them): $(echo $enabled)"
	fi
	for f in "$SBINDIR/iser-attach" "$SBINDIR/iser-fstab" "$UNITDIR/iser-attach@.service" \
		"$UNITDIR/iser-attach.target" "$UDEVRULESDIR/$RULES" "$DOCDIR/README.md" \
		"$DOCDIR/operations.md" "$DOCDIR/iscsiadm.md" "$MANDIR/man8/iser-attach.8" \
		"$MANDIR/man5/iser-attach.conf.5" "$MANDIR/man8/iser-fstab.8" "$BASHCOMPDIR/iser-attach" \
		"$ZSHCOMPDIR/_iser-attach"; do
		if [ -e "$DESTDIR$f" ] || [ -L "$DESTDIR$f" ]; then
			rm -f "$DESTDIR$f" || die "rm $DESTDIR$f"
			say "removed $DESTDIR$f"
		fi
	done
	rmdir "$DESTDIR$DOCDIR" 2>/dev/null || true
	# The configurations are the administrator's: the directories go only when empty.
	if rmdir "$DESTDIR$VOLDIR" 2>/dev/null; then
		rmdir "$DESTDIR$SYSCONFDIR/iser-attach" 2>/dev/null || true
		say "removed $DESTDIR$VOLDIR/ (it was empty)"
	elif [ -d "$DESTDIR$VOLDIR" ]; then
		say "kept $DESTDIR$VOLDIR/ (it holds configurations)"
	fi
	if systemd_running; then
		systemctl daemon-reload || die "systemctl daemon-reload"
		say "systemctl daemon-reload"
	fi
	if [ -z "$DESTDIR" ] && [ -S /run/udev/control ] && command -v udevadm >/dev/null; then
		udevadm control --reload || true
	fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
install) do_install "$@" ;;
uninstall) do_uninstall "$@" ;;
*) die "usage: install.sh install BINARY | install.sh uninstall" ;;
esac
