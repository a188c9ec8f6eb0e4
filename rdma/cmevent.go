package rdma

import "fmt"

// CMEvent is an RDMA connection manager event type (enum rdma_cm_event_type).
type CMEvent int

// The RDMA CM events, numbered as in rdma/rdma_cma.h.
const (
	CMEventAddrResolved CMEvent = iota
	CMEventAddrError
	CMEventRouteResolved
	CMEventRouteError
	CMEventConnectRequest
	CMEventConnectResponse
	CMEventConnectError
	CMEventUnreachable
	CMEventRejected
	CMEventEstablished
	CMEventDisconnected
	CMEventDeviceRemoval
	CMEventMulticastJoin
	CMEventMulticastError
	CMEventAddrChange
	CMEventTimewaitExit
)

var cmEventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED",
	"RDMA_CM_EVENT_ADDR_ERROR",
	"RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR",
	"RDMA_CM_EVENT_CONNECT_REQUEST",
	"RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR",
	"RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED",
	"RDMA_CM_EVENT_DISCONNECTED",
	"RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN",
	"RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

func (e CMEvent) String() string {
	if e >= 0 && int(e) < len(cmEventNames) {
		return cmEventNames[e]
	}
	return fmt.Sprintf("RDMA_CM_EVENT(%d)", int(e))
}
