#!/bin/bash
# deps-test.sh: host test of scripts/deps.sh (what `make test` and `make demo` run first) with
# stubbed dpkg-query, apt-get, id and go on PATH: which packages it installs, that it runs
# apt-get only when something is missing, refuses without root, notices a failed install,
# and downloads the Go modules only when the cache lacks them; and that README's install
# section names exactly the build packages and go.mod's Go version. Seconds. `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=lib/check.sh
. "$(dirname "$0")/lib/check.sh"

mkdir -p "$T/stub"
# dpkg-query -W -f='${Status}' PKG: from $T/status (lines "PKG STATUS..."); unknown: exit 1.
cat >"$T/stub/dpkg-query" <<'STUB'
#!/bin/sh
for p; do :; done
line=$(grep "^$p " "$STUB_DIR/status") || { echo "dpkg-query: no packages found matching $p" >&2; exit 1; }
printf '%s' "${line#* }"
STUB
# apt-get: logged; install marks its packages installed unless $STUB_DIR/broken exists.
cat >"$T/stub/apt-get" <<'STUB'
#!/bin/sh
echo "apt-get $*" >>"$STUB_DIR/apt.log"
[ "$1" = install ] || exit 0
[ ! -e "$STUB_DIR/broken" ] || exit 0
for p; do case $p in -*|install) ;; *) echo "$p install ok installed" >>"$STUB_DIR/status" ;; esac; done
STUB
cat >"$T/stub/id" <<'STUB'
#!/bin/sh
echo "$STUB_UID"
STUB
# go mod download: with GOPROXY=off it fails unless $STUB_DIR/modcache exists; otherwise fills it.
cat >"$T/stub/go" <<'STUB'
#!/bin/sh
echo "go $* GOPROXY=${GOPROXY:-}" >>"$STUB_DIR/go.log"
if [ "${GOPROXY:-}" = off ]; then [ -e "$STUB_DIR/modcache" ]; exit; fi
touch "$STUB_DIR/modcache"
STUB
chmod 0755 "$T"/stub/*
export STUB_DIR=$T STUB_UID=0

test_pkgs=$("$HERE/deps.sh" list test)
demo_pkgs=$("$HERE/deps.sh" list demo)
build_pkgs=$("$HERE/deps.sh" list build)
check "demo list: $demo_pkgs" test "$demo_pkgs" = "tgt libnbd-bin"
for p in lintian zsh man-db groff-base tgt libnbd-bin gcc qemu-system-x86 libibverbs-dev fio jq; do
	check "test list lacks $p" grep -qw -- "$p" <<<"$test_pkgs"
done
for p in gcc make libibverbs-dev librdmacm-dev ca-certificates binutils; do
	check "build list lacks $p" grep -qw -- "$p" <<<"$build_pkgs"
done
for p in $demo_pkgs $build_pkgs; do check "demo or build package $p not in the test list" grep -qw -- "$p" <<<"$test_pkgs"; done

# README's install section ("## Install") names the build packages in its apt-get line, exactly
# deps.sh's, and go.mod's Go version wherever it names a Go version.
section=$(awk '/^## /{ f = ($0 == "## Install") } f' "$HERE/../README.md")
check "README has no '## Install' section" test -n "$section"
readme_pkgs=$(grep -m1 'apt-get install --no-install-recommends' <<<"$section" |
	sed 's/.*--no-install-recommends//' | tr ' ' '\n' | grep . | sort | tr '\n' ' ')
want_pkgs=$(tr ' ' '\n' <<<"$build_pkgs" | grep . | sort | tr '\n' ' ')
check "README install packages '$readme_pkgs' are not deps.sh build's '$want_pkgs'" test "$readme_pkgs" = "$want_pkgs"
gomod=$(sed -n 's/^go //p' "$HERE/../go.mod")
readme_go=$(grep -oE 'Go [0-9]+\.[0-9]+(\.[0-9]+)?' <<<"$section" | sort -u | tr '\n' ' ')
check "README install names Go '$readme_go', go.mod says $gomod" test "$readme_go" = "Go $gomod "

# deps MODE: run deps.sh with the stubs first on PATH; sets out and rc.
deps() {
	out=$(PATH="$T/stub:$PATH" "$HERE/deps.sh" "$@" 2>&1)
	rc=$?
}
installed_all() { for p in $test_pkgs; do echo "$p install ok installed"; done >"$T/status"; }
reset() { rm -f "$T/apt.log" "$T/go.log" "$T/broken"; touch "$T/apt.log" "$T/go.log" "$T/modcache"; }

# Everything present: no apt-get at all.
installed_all
reset
deps test
check "all present: exit $rc: $out" test "$rc" = 0
check "all present: message: $out" grep -q "all $(wc -w <<<"$test_pkgs") packages for 'test' are installed" <<<"$out"
check "all present: apt-get ran: $(cat "$T/apt.log")" test ! -s "$T/apt.log"
check "all present: modules downloaded: $(cat "$T/go.log")" sh -c "! grep -q 'GOPROXY=\$' '$T/go.log'"
check "all present: no 'installing': $out" sh -c "! grep -q installing <<'X'
$out
X"

# Two missing (one removed, its configuration kept): update once, install exactly those.
installed_all
grep -v '^lintian \|^fio ' "$T/status" >"$T/status.new"
echo "fio deinstall ok config-files" >>"$T/status.new"
mv "$T/status.new" "$T/status"
reset
deps test
check "two missing: exit $rc: $out" test "$rc" = 0
check "two missing: says what it installs: $out" grep -q "installing: fio lintian" <<<"$out"
check "two missing: apt-get calls: $(cat "$T/apt.log")" test "$(cat "$T/apt.log")" = "apt-get update -qq
apt-get install -y -qq --no-install-recommends fio lintian"
deps test
check "second run installs nothing: $(cat "$T/apt.log")" test "$(wc -l <"$T/apt.log")" = 2

# demo needs only its two packages, whatever else is missing.
: >"$T/status"
echo "tgt install ok installed" >>"$T/status"
reset
deps demo
check "demo: exit $rc: $out" test "$rc" = 0
check "demo: installs only libnbd-bin: $(cat "$T/apt.log")" grep -qx 'apt-get install -y -qq --no-install-recommends libnbd-bin' "$T/apt.log"

# Not root: nothing runs, the command to run is printed.
: >"$T/status"
reset
STUB_UID=1000 deps demo
check "not root: exit $rc" test "$rc" = 1
check "not root: message: $out" grep -q "missing packages: tgt libnbd-bin; as root run: apt-get install --no-install-recommends tgt libnbd-bin" <<<"$out"
check "not root: apt-get ran" test ! -s "$T/apt.log"

# apt-get succeeding without installing is noticed.
: >"$T/status"
reset
touch "$T/broken"
deps demo
check "broken install: exit $rc" test "$rc" = 1
check "broken install: message: $out" grep -q "still not installed after apt-get install: tgt libnbd-bin" <<<"$out"

# Go modules: downloaded only when the cache lacks them.
installed_all
reset
rm "$T/modcache"
deps demo
check "no module cache: exit $rc: $out" test "$rc" = 0
check "no module cache: message: $out" grep -q "downloading the Go modules" <<<"$out"
check "no module cache: go mod download not run: $(cat "$T/go.log")" grep -qx "go mod download GOPROXY=" "$T/go.log"

# build installs only the build packages.
: >"$T/status"
for p in $build_pkgs; do [ "$p" = gcc ] || echo "$p install ok installed"; done >"$T/status"
echo "tgt deinstall ok config-files" >>"$T/status"
reset
deps build
check "build: exit $rc: $out" test "$rc" = 0
check "build: installs only gcc: $(cat "$T/apt.log")" grep -qx 'apt-get install -y -qq --no-install-recommends gcc' "$T/apt.log"

# Usage.
deps frob
check "unknown mode: exit $rc" test "$rc" = 1
check "unknown mode: usage: $out" grep -q "usage: deps.sh" <<<"$out"

report deps-test
