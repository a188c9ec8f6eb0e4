#!/bin/bash
# install-test.sh: host test of scripts/install.sh (what `make install`/`make uninstall` run)
# into scratch DESTDIRs: the files, their modes, the @SBINDIR@/@DOCDIR@ substitution, the
# units checked by `systemd-analyze verify` (when the host has it), uninstall removing
# everything but a volume directory that holds configurations. Seconds; no root needed.
# `make script-tests`. The VM lab installs the same way into a live system and boots it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=lib/check.sh
. "$(dirname "$0")/lib/check.sh"
mode() { stat -c %a "$1" 2>/dev/null; }

cat >"$T/iser-attach" <<'EOF'
#!/bin/sh
case $1 in
gen-completion) echo "# fake $2 completion" ;;
*) echo fake iser-attach "$@" ;;
esac
EOF
chmod 0700 "$T/iser-attach"

# Default prefix.
D=$T/root
out=$(DESTDIR=$D "$HERE/install.sh" install "$T/iser-attach" 2>&1) || bad "install exited $?: $out"
for f in usr/local/sbin/iser-attach:755 usr/local/sbin/iser-fstab:755 \
	usr/local/lib/systemd/system/iser-attach@.service:644 usr/local/lib/systemd/system/iser-attach.target:644 \
	usr/local/lib/udev/rules.d/60-iser-attach.rules:644 usr/local/share/doc/iser-attach/operations.md:644 \
	usr/local/share/doc/iser-attach/README.md:644 usr/local/share/doc/iser-attach/iscsiadm.md:644 \
	usr/local/share/man/man8/iser-attach.8:644 usr/local/share/man/man5/iser-attach.conf.5:644 \
	usr/local/share/man/man8/iser-fstab.8:644 \
	usr/local/share/bash-completion/completions/iser-attach:644 \
	usr/local/share/zsh/site-functions/_iser-attach:644 \
	etc/iser-attach/volumes:755; do
	p=$D/${f%:*}
	check "$p missing" test -e "$p"
	check "$p mode $(mode "$p"), want ${f#*:}" test "$(mode "$p")" = "${f#*:}"
done
check "binary not copied" cmp -s "$T/iser-attach" "$D/usr/local/sbin/iser-attach"
check "iser-fstab not copied" cmp -s "$HERE/iser-fstab" "$D/usr/local/sbin/iser-fstab"
for f in man/iser-attach.8:share/man/man8/iser-attach.8 man/iser-attach.conf.5:share/man/man5/iser-attach.conf.5 \
	README.md:share/doc/iser-attach/README.md docs/iscsiadm.md:share/doc/iser-attach/iscsiadm.md; do
	check "${f%%:*} not installed as ${f#*:}" cmp -s "$HERE/../${f%%:*}" "$D/usr/local/${f#*:}"
done
check "bash completion not from gen-completion bash" grep -qx '# fake bash completion' \
	"$D/usr/local/share/bash-completion/completions/iser-attach"
check "zsh completion not from gen-completion zsh" grep -qx '# fake zsh completion' \
	"$D/usr/local/share/zsh/site-functions/_iser-attach"
U=$D/usr/local/lib/systemd/system/iser-attach@.service
check "ExecStart not substituted: $(grep ExecStart= "$U")" \
	grep -qx 'ExecStart=/usr/local/sbin/iser-attach --log-format=json attach --volume %i' "$U"
check "Documentation not substituted" grep -qx 'Documentation=file:///usr/local/share/doc/iser-attach/operations.md' "$U"
check "placeholders left: $(grep -rn '@[A-Z]*@' "$D" | head -3)" sh -c "! grep -rq '@[A-Z]*@' '$D/usr/local/lib'"
for k in Type=notify 'After=network-online.target' 'Wants=network-online.target' \
	'Before=remote-fs-pre.target' 'Wants=remote-fs-pre.target' DefaultDependencies=no \
	Conflicts=shutdown.target Before=shutdown.target LimitMEMLOCK=infinity Restart=on-failure \
	RestartSec=2 TimeoutStartSec=120 TimeoutStopSec=90 KillMode=mixed WantedBy=iser-attach.target; do
	case $k in After=* | Wants=*) re="^${k%%=*}=.*\b${k#*=}\b" ;; *) re="^$k\$" ;; esac
	check "iser-attach@.service lacks $k" grep -qE "$re" "$U"
done
check "iser-attach.target not WantedBy=remote-fs.target" grep -qx 'WantedBy=remote-fs.target' \
	"$D/usr/local/lib/systemd/system/iser-attach.target"
check "install mentioned the DESTDIR note" grep -q 'DESTDIR set' <<<"$out"
check "install enabled something in a DESTDIR" test ! -e "$D/etc/systemd"

if command -v systemd-analyze >/dev/null; then
	v=$(systemd-analyze verify --man=no --root="$D" iser-attach@vol1.service iser-attach.target 2>&1)
	rc=$?
	check "systemd-analyze verify: exit $rc: $v" test "$rc" = 0 -a -z "$v"
else
	echo "install-test: note: no systemd-analyze on this host; the VM lab (90-systemd-fstab) loads the units for real"
fi

# Reinstall over a running binary's file: replaced, not written into.
ln "$D/usr/local/sbin/iser-attach" "$T/old-link"
DESTDIR=$D "$HERE/install.sh" install "$T/iser-attach" >/dev/null 2>&1 || bad "second install failed"
check "reinstall wrote into the old binary's inode" test "$(stat -c %i "$T/old-link")" != "$(stat -c %i "$D/usr/local/sbin/iser-attach")"

# Uninstall keeps a volume directory with configurations, removes the rest.
echo "portal = 10.0.0.1" >"$D/etc/iser-attach/volumes/keep.conf"
out=$(DESTDIR=$D "$HERE/install.sh" uninstall 2>&1) || bad "uninstall exited $?: $out"
check "uninstall did not keep the configuration" test -f "$D/etc/iser-attach/volumes/keep.conf"
check "uninstall did not say it kept the configurations: $out" grep -q 'kept .*holds configurations' <<<"$out"
left=$(cd "$D" && find . -type f ! -path ./etc/iser-attach/volumes/keep.conf)
check "uninstall left files: $left" test -z "$left"
rm "$D/etc/iser-attach/volumes/keep.conf"
DESTDIR=$D "$HERE/install.sh" uninstall >/dev/null 2>&1 || bad "second uninstall failed"
check "an empty volume directory survived uninstall" test ! -e "$D/etc/iser-attach"

# PREFIX=/usr and explicit directories.
D=$T/usr
out=$(DESTDIR=$D PREFIX=/usr SBINDIR=/usr/sbin "$HERE/install.sh" install "$T/iser-attach" 2>&1) || bad "PREFIX=/usr install: $out"
check "PREFIX=/usr: unit not in /usr/lib/systemd/system" test -f "$D/usr/lib/systemd/system/iser-attach@.service"
check "PREFIX=/usr: ExecStart wrong" grep -q '^ExecStart=/usr/sbin/iser-attach ' "$D/usr/lib/systemd/system/iser-attach@.service"
check "PREFIX=/usr: rule not in /usr/lib/udev/rules.d" test -f "$D/usr/lib/udev/rules.d/60-iser-attach.rules"

# PREFIX=/usr with Debian's zsh completion directory (make deb).
D=$T/deb
out=$(DESTDIR=$D PREFIX=/usr ZSHCOMPDIR=/usr/share/zsh/vendor-completions \
	"$HERE/install.sh" install "$T/iser-attach" 2>&1) || bad "ZSHCOMPDIR install: $out"
check "ZSHCOMPDIR ignored" test -f "$D/usr/share/zsh/vendor-completions/_iser-attach"
check "PREFIX=/usr: bash completion not in /usr/share/bash-completion/completions" \
	test -f "$D/usr/share/bash-completion/completions/iser-attach"
check "PREFIX=/usr: man page not in /usr/share/man/man8" test -f "$D/usr/share/man/man8/iser-attach.8"

# Errors.
out=$(DESTDIR=$T/x "$HERE/install.sh" install "$T/nonexistent" 2>&1)
check "missing binary not refused: $out" test $? = 1
check "missing binary message: $out" grep -q "binary '$T/nonexistent' missing" <<<"$out"
printf '#!/bin/sh\n[ "$1" != gen-completion ] || exit 3\n' >"$T/no-comp"
chmod 0755 "$T/no-comp"
out=$(DESTDIR=$T/nc "$HERE/install.sh" install "$T/no-comp" 2>&1)
check "failing gen-completion not refused: $out" test $? = 1
check "failing gen-completion message: $out" grep -q "gen-completion bash failed" <<<"$out"
check "failing gen-completion left a completion" test ! -e "$T/nc/usr/local/share/bash-completion/completions/iser-attach"
out=$(DESTDIR=$T/x PREFIX=relative "$HERE/install.sh" install "$T/iser-attach" 2>&1)
check "relative PREFIX not refused: $out" test $? = 1
out=$(DESTDIR=$T/x "$HERE/install.sh" frob 2>&1)
check "unknown command not refused: $out" test $? = 1
check "unknown command: no usage: $out" grep -q usage <<<"$out"

report install-test
