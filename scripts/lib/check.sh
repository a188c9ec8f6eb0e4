# scripts/lib/check.sh: check counting shared by the host tests of the shell tools
# (deps-test.sh, install-test.sh, iser-fstab-test.sh, deb/check.sh) (bash).

fails=0
n=0

# ok: one check passed.
ok() { n=$((n + 1)); }

# bad MESSAGE...: one check failed; MESSAGE goes to stderr.
bad() {
	n=$((n + 1))
	fails=$((fails + 1))
	echo "FAIL: $*" >&2
}

# check DESCRIPTION CMD...: one check, passed when CMD succeeds.
check() {
	local d=$1
	shift
	if "$@"; then ok; else bad "$d"; fi
}

# report NAME [SUFFIX]: print "NAME: PASS (N checks)" or "NAME: FAIL (F of N checks
# failed)", SUFFIX appended when given; exit 1 when any check failed.
report() {
	local suffix=${2:+ $2}
	if [ $fails = 0 ]; then
		echo "$1: PASS ($n checks)$suffix"
	else
		echo "$1: FAIL ($fails of $n checks failed)$suffix"
		exit 1
	fi
}
