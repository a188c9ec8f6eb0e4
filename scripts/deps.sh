#!/bin/sh
# deps.sh: install what `make test` or `make demo` needs on a Debian 12 machine, and nothing
# when all of it is there. `make test` and `make demo` run it first.
#
#   scripts/deps.sh build   # what `make build` and `make deb` need besides Go: gcc, make, git,
#                           # ca-certificates (go mod download), binutils (objdump), rdma-core
#                           # headers; README's install section names exactly these
#   scripts/deps.sh test    # everything `make test` uses: build tools, tgt and the NBD/iSCSI
#                           # clients, rdma-core headers, the VM lab's qemu and debootstrap,
#                           # lintian, zsh, man-db and groff-base (make deb-check, the
#                           # completion and manual tests)
#   scripts/deps.sh demo    # what `make demo` uses: tgt, libnbd-bin
#   scripts/deps.sh list build|test|demo   # print the package list
#
# Packages are checked with dpkg-query; apt-get update and install run only when some are
# missing (as root; otherwise it prints the apt-get command and fails). The Go modules are
# downloaded when the module cache lacks them. Go itself (go.mod's version, e.g. from
# https://go.dev/dl into /usr/local/go) is not a Debian 12 package and must be on PATH.
set -eu
cd "$(dirname "$0")/.."

DEMO_PKGS="tgt libnbd-bin"
BUILD_PKGS="gcc make git ca-certificates binutils libibverbs-dev librdmacm-dev"
TEST_PKGS="$BUILD_PKGS jq tgt libnbd-bin fio qemu-utils qemu-block-extra libiscsi-bin
qemu-system-x86 debootstrap e2fsprogs xfsprogs cpio xz-utils zstd kmod busybox-static lintian zsh man-db
groff-base"

say() { echo "deps: $*"; }
die() {
	echo "deps: $*" >&2
	exit 1
}

# missing PKG...: the packages dpkg does not report installed.
missing() {
	for p in "$@"; do
		case $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) in
		*" installed") ;;
		*) echo "$p" ;;
		esac
	done
}

case ${1:-} in
build) pkgs=$BUILD_PKGS ;;
test) pkgs=$TEST_PKGS ;;
demo) pkgs=$DEMO_PKGS ;;
list)
	case ${2:-} in
	build) echo $BUILD_PKGS ;;
	test) echo $TEST_PKGS ;;
	demo) echo $DEMO_PKGS ;;
	*) die "usage: deps.sh build|test|demo|list build|test|demo" ;;
	esac
	exit 0
	;;
*) die "usage: deps.sh build|test|demo|list build|test|demo" ;;
esac

command -v dpkg-query >/dev/null || die "dpkg-query not found: this script knows Debian (12) only"
# shellcheck disable=SC2086 # word splitting wanted
need=$(missing $pkgs | tr '\n' ' ' | sed 's/ $//')
if [ -z "$need" ]; then
	say "all $(echo $pkgs | wc -w) packages for '$1' are installed"
else
	[ "$(id -u)" = 0 ] || die "missing packages: $need; as root run: apt-get install --no-install-recommends $need"
	say "installing: $need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || die "apt-get update failed"
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >/dev/null || die "apt-get install $need failed"
	left=$(missing $need | tr '\n' ' ')
	[ -z "$left" ] || die "still not installed after apt-get install: $left"
	say "installed: $need"
fi

command -v go >/dev/null || die "go not found on PATH: install Go (go.mod: $(sed -n 's/^go //p' go.mod) or newer) from https://go.dev/dl into /usr/local/go and add /usr/local/go/bin to PATH"
# GOPROXY=off: succeeds only when every module is in the cache already.
if GOPROXY=off GOFLAGS=-mod=mod go mod download >/dev/null 2>&1; then
	say "Go modules are in the module cache"
else
	say "downloading the Go modules (go mod download)"
	go mod download || die "go mod download failed"
fi
