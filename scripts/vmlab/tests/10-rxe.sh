#!/bin/sh
# Soft-RoCE loopback: rxe0 on a dummy netdev, port ACTIVE, RDMA CM connection with rping.
. "$VMLAB_LIB"
set -eu

step rxe-up rxe_up
step rxe-port-active sh -c 'ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE'
rping -s -a "$VMLAB_ADDR" -C 3 >rping-server.log 2>&1 &
srv=$!
sleep 1
step rping timeout 60 rping -c -a "$VMLAB_ADDR" -C 3 -v
step rping-server wait $srv
