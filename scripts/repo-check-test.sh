#!/bin/bash
# repo-check-test.sh: host test of scripts/repo-check.sh on throwaway git trees: a clean tree
# passes; a tracked ELF file, a tracked file over 1 MiB fail; an ignored or untracked binary
# does not count. Seconds. `make script-tests`.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# shellcheck source=lib/check.sh
. "$HERE/lib/check.sh"

repo() {
	rm -rf "$T/r"
	mkdir -p "$T/r"
	git -C "$T/r" init -q
	echo 'package main' >"$T/r/main.go"
	git -C "$T/r" add main.go
}
run() { "$HERE/repo-check.sh" "$T/r" >"$T/out" 2>&1; }

repo
check "a clean tree passes" run

repo
printf '\177ELF\002\001\001' >"$T/r/tool"
git -C "$T/r" add tool
check "a tracked ELF file fails" bash -c '! "$0" "$1" >/dev/null 2>&1' "$HERE/repo-check.sh" "$T/r"
run
check "the error names the file" grep -q 'tool is tracked and is an ELF binary' "$T/out"

repo
head -c $((1024 * 1024 + 1)) /dev/zero >"$T/r/big.img"
git -C "$T/r" add big.img
check "a tracked file over 1 MiB fails" bash -c '! "$0" "$1" >/dev/null 2>&1' "$HERE/repo-check.sh" "$T/r"

repo
head -c $((1024 * 1024)) /dev/zero >"$T/r/exact.img"
git -C "$T/r" add exact.img
check "a file of exactly 1 MiB passes" run

repo
printf '\177ELF\002\001\001' >"$T/r/untracked"
check "an untracked binary does not count" run

check "this checkout passes" "$HERE/repo-check.sh"
report repo-check-test
