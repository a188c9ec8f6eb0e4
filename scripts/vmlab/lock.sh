# scripts/vmlab/lock.sh: one VM lab run at a time on a machine (bash, sourced by vmlab.sh).
#
# Two TCG guests on the host's cores each run at half speed, past the lab's time limits: a
# second run waits for the first instead. The lock is an flock(1) on $CACHE/lab.lock held
# through fd 7, which the guest's qemu inherits: a run holds it until its last qemu exits.

# lab_lock CACHE WHAT: take the lab's lock, waiting (and saying for whom) while another run
# holds it, at most ISER_VMLAB_LOCK_WAIT seconds (default 3600: a lab run that holds it longer
# is stuck, and a wait must not become a hang); then record this run in CACHE/lab.owner for the
# next one's message. Fails (status 1, one line naming the holder) when the wait runs out.
lab_lock() {
	local cache=$1 what=$2 owner wait=${ISER_VMLAB_LOCK_WAIT:-3600}
	mkdir -p "$cache"
	exec 7>>"$cache/lab.lock"
	if ! flock -n 7; then
		owner=$(cat "$cache/lab.owner" 2>/dev/null || true)
		echo "vmlab: another lab run holds $cache/lab.lock (${owner:-owner unknown}): waiting for it, at most $wait s" >&2
		if ! flock -w "$wait" 7; then
			echo "vmlab: FAIL step lab-lock: $cache/lab.lock still held after $wait s (${owner:-owner unknown}); stop that run or its qemu" >&2
			return 1
		fi
		echo "vmlab: lab lock taken after waiting" >&2
	fi
	echo "pid $$, $what, since $(date -u +%H:%M:%S)" >"$cache/lab.owner"
}
