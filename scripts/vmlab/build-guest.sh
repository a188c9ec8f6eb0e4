#!/bin/bash
# build-guest.sh: build the vmlab guest (kernel, initramfs, ext4 root) from Debian packages
# and cache it under $ISER_VMLAB_CACHE/guest-<hash>. The kernel is a line of kernels.conf
# (ISER_VMLAB_KERNEL picks it; default its first line). The hash covers this script, the
# package list, the two baked-in init scripts and that kernel's line, so a change to any of
# them builds a new guest; otherwise the cached one is reused; each kernel has its own guest.
# Prints the guest directory on stdout.
#
# Usage: build-guest.sh [--force]
#        build-guest.sh --available [NAME]   the kernel packages NAME's source offers now
# Needs (host, root): apt-get, dpkg-deb, mkfs.ext4 (e2fsprogs >= 1.43 for -d), cpio, xz,
# sha256sum, flock; debootstrap is used from PATH or unpacked from its .deb.
set -euo pipefail
# The braces make bash read the whole script before running it: editing the file while a
# run is in progress cannot change that run.
{

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${ISER_VMLAB_CACHE:-/var/cache/iser-attach-vmlab}
SUITE=bookworm
FORCE=0 AVAILABLE=0
case ${1:-} in
--force) FORCE=1 ;;
--available)
	AVAILABLE=1
	[ -n "${2:-}" ] && ISER_VMLAB_KERNEL=$2
	;;
esac

log() { echo "vmlab build: $*" >&2; }
die() { echo "vmlab build: FAIL $*" >&2; exit 1; }

# The kernel's line of kernels.conf: NAME SOURCE PACKAGES INITRAMFS-MODULES, by NAME or by its
# first part ("7" picks "7.2"); the first line without ISER_VMLAB_KERNEL.
KLINE=$(awk -v want="${ISER_VMLAB_KERNEL:-}" '
	/^[ \t]*(#|$)/ { next }
	want == "" || $1 == want || index($1, want ".") == 1 { print $1, $2, $3, $4; exit }' "$HERE/kernels.conf")
[ -n "$KLINE" ] || die "step kernel: no line for '${ISER_VMLAB_KERNEL:-}' in $HERE/kernels.conf (names: $(awk '!/^[ \t]*(#|$)/ { printf "%s ", $1 }' "$HERE/kernels.conf"))"
read -r KNAME KSRC KPKGS KMODS <<<"$KLINE"
[ -n "$KMODS" ] || die "step kernel: the line of $KNAME in kernels.conf needs four fields"
KPKG=$(echo "$KPKGS" | tr , ' ')

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, mkfs -d ownership)"
for t in apt-get dpkg-deb mkfs.ext4 cpio xz gzip sha256sum flock chroot; do
	command -v "$t" >/dev/null || die "host tool $t missing (apt-get install qemu-system-x86 e2fsprogs cpio xz-utils)"
done

PKGS=$(sed -e 's/#.*//' "$HERE/guest-packages.txt" | tr -s ' \t\n' '\n' | grep -v '^$' | sort -u | paste -sd, -)
HASH=$( { cat "$HERE/build-guest.sh" "$HERE/guest-packages.txt" "$HERE/guest/initramfs-init" \
	"$HERE/guest/rootfs-init"; echo "$KLINE $SUITE"; } | sha256sum | cut -c1-16)
OUT="$CACHE/guest-$HASH"

mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9

if [ "$FORCE" = 0 ] && [ "$AVAILABLE" = 0 ] && [ -f "$OUT/stamp" ]; then
	log "cached guest $OUT"
	echo "$OUT"
	exit 0
fi

# The host apt's own Debian mirror: the source that serves "$SUITE" (not -updates/-security),
# from deb822 .sources files or one-line sources.list entries.
mirror() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$SUITE" '
			function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uri != "") { print uri; found=1; exit } types=""; suites=""; uri="" }
			/^[ \t]*$/ { flush(); next }
			/^Types:/ { sub(/^Types:[ \t]*/, ""); types=$0 }
			/^URIs:/ { sub(/^URIs:[ \t]*/, ""); split($0, u, " "); uri=u[1] }
			/^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites=$0 }
			END { if (!found) flush() }' "$f"
	done
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk -v suite="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == suite) print $i }'
}
MIRROR=${ISER_VMLAB_MIRROR:-$(mirror | grep -m1 .)} || true
[ -n "$MIRROR" ] || die "no $SUITE mirror found in /etc/apt/sources.list*; set ISER_VMLAB_MIRROR"

# A kernel from another suite comes through an apt of its own: its sources list and package
# lists in $CACHE/apt-SUITE, the host's apt configuration otherwise (proxies), its sources
# untouched. KAPT holds the options ("" for the host's own sources).
KAPT=()
if [ "$KSRC" != host ]; then
	A="$CACHE/apt-$KSRC"
	mkdir -p "$A/lists/partial" "$A/cache/archives/partial"
	echo "deb $MIRROR $KSRC main" >"$A/sources.list"
	KAPT=(-o "Dir::Etc::sourcelist=$A/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$A/lists"
		-o "Dir::Cache=$A/cache" -o Acquire::Languages=none)
fi
kapt_update() { # the suite's package lists (the host's own are left alone)
	[ ${#KAPT[@]} = 0 ] && return 0
	apt-get -q "${KAPT[@]}" update >"$CACHE/apt-$KSRC/update.log" 2>&1 || {
		tail -5 "$CACHE/apt-$KSRC/update.log" >&2
		die "step kernel-apt-update: apt-get update of '$KSRC' from $MIRROR"
	}
}

if [ "$AVAILABLE" = 1 ]; then
	# --available: what the kernel's source offers now, to move the pin in kernels.conf.
	kapt_update
	echo "$KNAME ($KSRC) is pinned to: $KPKG"
	echo "available now (apt-cache search):"
	apt-cache "${KAPT[@]}" search --names-only '^linux-(image-[0-9.]+\+deb[0-9]+-amd64-unsigned|binary-[0-9.]+\+deb[0-9]+-amd64|modules-[0-9.]+\+deb[0-9]+-amd64|base-[0-9.]+\+deb[0-9]+-amd64)$' | sort -V
	exit 0
fi
log "mirror $MIRROR, kernel $KNAME ($KSRC: $KPKG), output $OUT"

WORK=$(mktemp -d "$CACHE/build.XXXXXX")
cleanup() {
	# debootstrap mounts proc/sys in the root; never let rm walk into them.
	awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r -n1 umount -l
	rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
DL="$CACHE/dl"
mkdir -p "$DL" "$CACHE/debs"
chmod 755 "$CACHE"
# apt-get download drops privileges to _apt and wants to write where it runs.
id _apt >/dev/null 2>&1 && chown _apt "$DL"

# cached PKG: the path of PKG's .deb in $DL, or nothing.
cached() { ls "$DL/${1//+/%2b}"_*.deb "$DL/${1}"_*.deb 2>/dev/null | head -1 || true; }
# download PKG [APT-OPTIONS...]: fetch one .deb through apt into $DL, print its path.
download() {
	local p=$1 f
	shift
	f=$(cached "$p")
	if [ -z "$f" ]; then
		(cd "$DL" && apt-get download -q "$@" "$p" >&2) ||
			die "step download-$p: apt-get download $p (gone from $KSRC? move the pin: build-guest.sh --available $KNAME)"
		f=$(cached "$p")
	fi
	[ -n "$f" ] || die "step download-$p: no .deb after apt-get download"
	echo "$f"
}

# Kernel: 6.12's linux-image puts vmlinuz in /boot and the modules in /lib/modules; 7.x's
# linux-binary, linux-modules and linux-base put everything in /usr/lib/modules/KVER.
t0=$SECONDS
for p in $KPKG; do
	[ -n "$(cached "$p")" ] && continue
	kapt_update
	break
done
for p in $KPKG; do
	deb=$(download "$p" "${KAPT[@]}")
	dpkg-deb -x "$deb" "$WORK/kernel" || die "step kernel-unpack: $p"
	KDEBS="${KDEBS:-}${KDEBS:+ }$(basename "$deb")"
done
KMODDIR=$WORK/kernel/lib/modules
[ -d "$KMODDIR" ] || KMODDIR=$WORK/kernel/usr/lib/modules
KVER=$(ls "$KMODDIR" 2>/dev/null || true)
VMLINUZ=$WORK/kernel/boot/vmlinuz-$KVER
[ -f "$VMLINUZ" ] || VMLINUZ=$KMODDIR/$KVER/vmlinuz
[ -n "$KVER" ] && [ "$(echo "$KVER" | wc -l)" = 1 ] && [ -f "$VMLINUZ" ] ||
	die "step kernel-unpack: no single kernel with a vmlinuz in $KPKG (found '$KVER')"
[ -f "$KMODDIR/$KVER/modules.builtin" ] || die "step kernel-unpack: no modules.builtin in $KPKG"
log "kernel $KVER unpacked ($((SECONDS - t0)) s)"

# Root file system.
t0=$SECONDS
if command -v debootstrap >/dev/null; then
	DEBOOTSTRAP=debootstrap
else
	dpkg-deb -x "$(download debootstrap)" "$WORK/debootstrap" || die "step debootstrap-unpack"
	export DEBOOTSTRAP_DIR="$WORK/debootstrap/usr/share/debootstrap"
	DEBOOTSTRAP="$WORK/debootstrap/usr/sbin/debootstrap"
fi
ROOT="$WORK/root"
if ! "$DEBOOTSTRAP" --variant=minbase --include="$PKGS" --cache-dir="$CACHE/debs" \
	"$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
	tail -30 "$WORK/debootstrap.log" >&2
	[ -f "$ROOT/debootstrap/debootstrap.log" ] && tail -30 "$ROOT/debootstrap/debootstrap.log" >&2
	die "step debootstrap ($SUITE from $MIRROR)"
fi
log "debootstrap done ($((SECONDS - t0)) s)"

# Kernel modules into the root, minus hardware trees a TCG guest never loads.
t0=$SECONDS
# (bookworm's root is merged-/usr: /lib/modules is /usr/lib/modules)
mkdir -p "$ROOT/lib/modules"
cp -a "$KMODDIR/$KVER" "$ROOT/lib/modules/"
rm -f "$ROOT/lib/modules/$KVER/vmlinuz"
M="$ROOT/lib/modules/$KVER/kernel"
rm -rf "$M"/drivers/{gpu,media,staging,net/wireless,net/ethernet,bluetooth,iio,hwmon,isdn,input,hid,usb,mmc,video,platform,thunderbolt,edac,mtd,comedi,infiniband/hw} \
	"$M"/{sound,net/wireless,net/mac80211,net/bluetooth}
# Decompressed modules load much faster under TCG than .ko.xz (the guest kernel would inflate
# them on every modprobe in emulated code). Debian's 6.12 and 7.2 both ship .ko.xz; .ko.zst
# (other builds) needs zstd on the host.
find "$M" -name '*.ko.xz' -print0 | xargs -0 -r -n 64 -P "$(nproc)" xz -d || die "step modules-decompress"
if [ -n "$(find "$M" -name '*.ko.zst' -print -quit)" ]; then
	command -v zstd >/dev/null || die "step modules-decompress: .ko.zst modules and no zstd on the host"
	find "$M" -name '*.ko.zst' -print0 | xargs -0 -r -n 64 -P "$(nproc)" zstd -q -d --rm || die "step modules-decompress"
fi
[ -z "$(find "$M" -name '*.ko.*' -print -quit)" ] || die "step modules-decompress: compressed modules left: $(find "$M" -name '*.ko.*' | head -3)"
chroot "$ROOT" /sbin/depmod -a "$KVER" || die "step depmod (in the guest root)"
cp "$VMLINUZ" "$WORK/vmlinuz"

# Trim and configure.
rm -rf "$ROOT"/usr/share/{doc,man,info,locale,lintian,linda} "$ROOT"/var/cache/apt/*.bin \
	"$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/debconf/*-old
echo vmlab >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 vmlab\n' >"$ROOT/etc/hosts"
echo "InitiatorName=iqn.2004-10.org.debian:vmlab" >"$ROOT/etc/iscsi/initiatorname.iscsi"
install -m 755 "$HERE/guest/rootfs-init" "$ROOT/sbin/vmlab-init"
mkdir -p "$ROOT"/mnt/host "$ROOT"/mnt/out
echo "$KVER" >"$ROOT/etc/vmlab-kernel"

# Initramfs: busybox-static from the guest root, the kernel line's modules (virtio_blk, ext4,
# what ext4 needs; decompressed), in dependency order from modules.dep.
IR="$WORK/initramfs"
mkdir -p "$IR"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$ROOT/bin/busybox" "$IR/bin/busybox" || die "step initramfs: busybox-static not in guest root"
for a in sh mount umount mkdir sleep insmod switch_root cat echo ls; do ln -s busybox "$IR/bin/$a"; done
install -m 755 "$HERE/guest/initramfs-init" "$IR/init"
DEP="$ROOT/lib/modules/$KVER/modules.dep"
declare -A SEEN=()
ORDER=()
add_mod() { # add_mod PATH-relative-to-modules-dir: deps first
	local rel=$1 d
	[ -n "${SEEN[$rel]:-}" ] && return 0
	SEEN[$rel]=1
	for d in $(awk -F': *' -v m="$rel" '$1 == m { print $2 }' "$DEP"); do add_mod "$d"; done
	ORDER+=("$rel")
}
for m in ${KMODS//,/ }; do
	rel=$(awk -F: -v m="$m" '{ n = $1; sub(/.*\//, "", n); sub(/\.ko(\.xz|\.zst|\.gz)?$/, "", n); gsub(/-/, "_", n) } n == m { print $1; exit }' "$DEP")
	if [ -z "$rel" ]; then
		grep -qw "$m" "$ROOT/lib/modules/$KVER/modules.builtin" || die "step initramfs: module $m neither built-in nor found"
		continue
	fi
	add_mod "$rel"
done
: >"$IR/lib/modules/order"
for rel in "${ORDER[@]}"; do
	base=$(basename "$rel")
	case $base in
	*.xz) xz -dc "$ROOT/lib/modules/$KVER/$rel" >"$IR/lib/modules/${base%.xz}"; base=${base%.xz} ;;
	*.zst) zstd -qdc "$ROOT/lib/modules/$KVER/$rel" >"$IR/lib/modules/${base%.zst}"; base=${base%.zst} ;;
	*) cp "$ROOT/lib/modules/$KVER/$rel" "$IR/lib/modules/$base" ;;
	esac
	echo "$base" >>"$IR/lib/modules/order"
done
(cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.img" || die "step initramfs-pack"

# Root image: the tree plus 1.5 GiB free for fileio LUNs and logs (sparse on the host;
# qemu runs it with snapshot=on, so the image itself never changes).
USED=$(du -sm "$ROOT" | cut -f1)
SIZE=$((USED * 12 / 10 + 1536))
mkfs.ext4 -q -F -L vmlab-root -d "$ROOT" -E root_owner=0:0 "$WORK/root.ext4" "${SIZE}M" >/dev/null ||
	die "step mkfs (mkfs.ext4 -d, root ${USED} MiB)"
log "modules, initramfs, image ${SIZE} MiB done ($((SECONDS - t0)) s)"

rm -rf "$OUT"
mkdir -p "$OUT"
mv "$WORK/vmlinuz" "$WORK/initrd.img" "$WORK/root.ext4" "$OUT/"
{
	echo "name=$KNAME"
	echo "kernel=$KVER"
	echo "kpkg=$KPKG"
	echo "kdebs=$KDEBS"
	echo "initramfs=$(tr '\n' ' ' <"$IR/lib/modules/order")"
	echo "mirror=$MIRROR"
	echo "packages=$PKGS"
	date -u +built=%FT%TZ
} >"$OUT/stamp.tmp"
mv "$OUT/stamp.tmp" "$OUT/stamp"
ln -sfn "guest-$HASH" "$CACHE/current-$KNAME"
# Older guests of this kernel NAME are dead weight (each is ~1-2 GiB sparse); so are guests of a
# NAME kernels.conf no longer has. A stamp without name= is from before there were two kernels:
# its name is its kernel's major.minor. vmlab.sh holds a shared lock on a guest's stamp while
# its VM runs; skip guests in use.
NAMES=" $(awk '!/^[ \t]*(#|$)/ { printf "%s ", $1 }' "$HERE/kernels.conf")"
for d in "$CACHE"/guest-*; do
	[ "$d" = "$OUT" ] && continue
	n=
	if [ -f "$d/stamp" ]; then
		n=$(sed -n 's/^name=//p' "$d/stamp")
		[ -n "$n" ] || n=$(sed -n 's/^kernel=\([0-9]*\.[0-9]*\).*/\1/p' "$d/stamp")
		[ "$n" = "$KNAME" ] || [ "${NAMES/ $n /}" = "$NAMES" ] || continue
	fi
	if [ ! -f "$d/stamp" ] || flock -n -x "$d/stamp" true; then rm -rf "$d"; fi
done
log "guest ready: $OUT"
echo "$OUT"
exit
}
