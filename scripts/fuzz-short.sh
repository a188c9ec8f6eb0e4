#!/usr/bin/env bash
# Runs every `go test -fuzz` target in the module briefly, starting from its
# seed corpus. Fails on the first crash.
#
# The budget is a count of executions per target (default 100000x: 3-12 s
# each here, the targets run 8-49 thousand inputs a second), not a duration:
# with a duration, Go's fuzz coordinator (go1.26, golang/go#75804) may end a
# run with "context deadline exceeded" and no failing input when its deadline
# races a worker's last input; CI met it twice in a row on one target. A count
# sets no deadline. A duration (e.g. 4s) is still taken, and such a run is
# repeated once; a real failure writes a failing input and fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-100000x}
case $fuzztime in
*[0-9]x | *[0-9]s | *[0-9]m) ;;
*)
	echo "fuzz-short: budget $fuzztime: want a count (100000x) or a duration (4s)" >&2
	exit 2
	;;
esac
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
