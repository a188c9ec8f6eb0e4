#!/usr/bin/env bash
# Runs every `go test -fuzz` target in the module for a short time each
# (default 4s), starting from its seed corpus. Fails on the first crash.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-4s}
count=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "== fuzz $pkg $target ($fuzztime)"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" >/tmp/fuzz-$$.log 2>&1 || {
			cat /tmp/fuzz-$$.log
			echo "fuzz target $target in $pkg failed"
			exit 1
		}
		tail -1 /tmp/fuzz-$$.log
		count=$((count + 1))
	done
done
rm -f /tmp/fuzz-$$.log
[ "$count" -gt 0 ] || { echo "no fuzz targets found"; exit 1; }
echo "fuzz: $count targets passed"
