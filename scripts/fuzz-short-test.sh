#!/bin/bash
# fuzz-short-test.sh: host test of scripts/fuzz-short.sh's budget: a malformed one is a
# one-line error (exit 2) before any target runs. Seconds. `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=lib/check.sh
. "$HERE/lib/check.sh"

for budget in bogus 4 x 100000 4sx; do
	"$HERE/fuzz-short.sh" "$budget" >"$T/out" 2>&1
	rc=$?
	check "budget '$budget' exits 2" test "$rc" = 2
	check "budget '$budget' is one line naming it" bash -c \
		'[ "$(wc -l <"$0")" = 1 ] && grep -q "fuzz-short: budget $1: want a count" "$0"' "$T/out" "$budget"
	check "budget '$budget' runs no target" bash -c '! grep -q "^== fuzz" "$0"' "$T/out"
done
report fuzz-short-test
