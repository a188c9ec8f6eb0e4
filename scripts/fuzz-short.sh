#!/usr/bin/env bash
# Runs every `go test -fuzz` target in the module for a short time each
# (default 4s), starting from its seed corpus. Fails on the first crash.
#
# Go's fuzz coordinator sometimes ends a short run with "context deadline
# exceeded" and no failing input when it stops its workers late; such a run
# is repeated once. A real failure writes a failing input and fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-4s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
count=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "== fuzz $pkg $target ($fuzztime)"
		for attempt in 1 2; do
			if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -parallel=1 "$pkg" >"$log" 2>&1; then
				break
			fi
			if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' "$log" &&
				! grep -q 'Failing input written' "$log"; then
				echo "   (fuzz coordinator timed out stopping its worker; running once more)"
				continue
			fi
			cat "$log"
			echo "fuzz target $target in $pkg failed"
			exit 1
		done
		tail -1 "$log"
		count=$((count + 1))
	done
done
[ "$count" -gt 0 ] || { echo "no fuzz targets found"; exit 1; }
echo "fuzz: $count targets passed"
