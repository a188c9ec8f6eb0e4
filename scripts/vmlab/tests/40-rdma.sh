#!/bin/sh
# rdma/ over soft-RoCE: the package's Go tests (bin/rdma.test, built on the host with
# `go test -c -o bin/rdma.test ./rdma/`) against rxe0 on the lab's dummy netdev: Listen/Dial
# with private data, SEND/RECV, RDMA WRITE/READ, reject, Close unblocking Poll, disconnect
# flush, soft-RoCE setup by netlink, and no leaked QP/CQ/MR/PD/cm_id (rdma resource counts).
# Fails, never skips, when rxe or the test binary is missing.
. "$VMLAB_LIB"
set -eu

step rxe-up rxe_up
step rdma-test-binary test -x "$VMLAB_BIN/rdma.test"
rdma resource show >"$VMLAB_RESULTS/resources-before.txt"
# ISER_RDMA_REQUIRE turns the tests' "no RDMA device" skip into a failure.
step rdma-go-tests env ISER_RDMA_REQUIRE=1 ISER_RDMA_ADDR="$VMLAB_ADDR" \
	"$VMLAB_BIN/rdma.test" -test.v -test.count=1 -test.timeout=240s
rdma resource show >"$VMLAB_RESULTS/resources-after.txt"
# Nothing the tests opened may outlive them.
step rdma-no-leaks cmp "$VMLAB_RESULTS/resources-before.txt" "$VMLAB_RESULTS/resources-after.txt"

# The CLI: list shows rxe0 on the lab netdev, bound to the lab address.
step cli-binary test -x "$VMLAB_BIN/iser-attach"
step cli-rdma-list sh -c "iser-attach rdma list | tee '$VMLAB_RESULTS/rdma-list.txt' | grep -E '^rxe0 +1 +ACTIVE +LINK_UP +rxe-net0 '"
step cli-rdma-list-json sh -c "iser-attach rdma list --json | tee '$VMLAB_RESULTS/rdma-list.json' | grep -q '\"netdev\": \"rxe-net0\"'"
# iSER needs a cgo build that loads rdma-core (vmlab.sh builds with CGO_ENABLED=1).
step cli-rdma-core-loaded grep -q '"rdma_core": "ok"' "$VMLAB_RESULTS/rdma-list.json"
# Setup is idempotent on the same netdev and refuses another one.
step cli-rdma-setup iser-attach rdma setup --netdev rxe-net0 --name rxe0
step cli-rdma-setup-conflict sh -c '! iser-attach rdma setup --netdev lo --name rxe0'
