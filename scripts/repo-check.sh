#!/bin/bash
# repo-check.sh [DIR]: fails when the git tree at DIR (default: this checkout) tracks a build
# output: an ELF file, or any file larger than 1 MiB. Build outputs belong in bin/ (ignored);
# test data that must be large is made by its test. `make test` runs it first.
set -uo pipefail
DIR=${1:-$(cd "$(dirname "$0")/.." && pwd)}
LIMIT=$((1024 * 1024))
cd "$DIR" || exit 2
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] && [ ! -L "$f" ] || continue
	if [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
		echo "repo-check: $f is tracked and is an ELF binary: git rm --cached it (build outputs go to bin/)" >&2
		bad=1
	fi
	size=$(stat -c %s "$f")
	if [ "$size" -gt "$LIMIT" ]; then
		echo "repo-check: $f is tracked and is $size bytes, over 1 MiB: keep large files out of git" >&2
		bad=1
	fi
done < <(git ls-files -z)
[ $bad = 0 ] && echo "repo-check: no tracked binaries or files over 1 MiB"
exit $bad
