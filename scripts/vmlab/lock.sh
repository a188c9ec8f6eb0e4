# scripts/vmlab/lock.sh: one VM lab run at a time on a machine (bash, sourced by vmlab.sh).
#
# Two TCG guests on the host's cores each run at half speed, past the lab's time limits: a
# second run waits for the first instead. The lock is an flock(1) on $CACHE/lab.lock held
# through fd 7, which the guest's qemu inherits: a run holds it until its last qemu exits.

# lab_lock CACHE WHAT: take the lab's lock, waiting (and saying for whom) while another run
# holds it; then record this run in CACHE/lab.owner for the next one's message.
lab_lock() {
	local cache=$1 what=$2 owner
	mkdir -p "$cache"
	exec 7>>"$cache/lab.lock"
	if ! flock -n 7; then
		owner=$(cat "$cache/lab.owner" 2>/dev/null || true)
		echo "vmlab: another lab run holds $cache/lab.lock (${owner:-owner unknown}): waiting for it" >&2
		flock 7
		echo "vmlab: lab lock taken after waiting" >&2
	fi
	echo "pid $$, $what, since $(date -u +%H:%M:%S)" >"$cache/lab.owner"
}
