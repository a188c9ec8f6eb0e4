#!/bin/sh
# Soft-RoCE loopback: rxe0 on a dummy netdev, port ACTIVE, RDMA CM connection with rping.
. "$VMLAB_LIB"
set -eu

step rxe-up rxe_up
step rxe-port-active sh -c 'ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE'
rping -s -a "$VMLAB_ADDR" -C 3 >rping-server.log 2>&1 &
srv=$!
# The client connects once: start it when the server's cm_id listens, not after a guess.
step rping-listen wait_for 30 rping_listening
if ! timeout 60 rping -c -a "$VMLAB_ADDR" -C 3 -v; then
	echo "rping server log:" >&2
	cat rping-server.log >&2
	rdma res show cm_id >&2
	fail "step rping: the client did not complete 3 pings to $VMLAB_ADDR"
fi
step rping-server wait $srv
