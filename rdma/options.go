package rdma

import (
	"fmt"
	"time"
)

// Defaults used when a DialOptions field is zero.
const (
	DefaultSendDepth  = 128
	DefaultRecvDepth  = 128
	DefaultMaxSendSGE = 4
	DefaultMaxRecvSGE = 1
	// DefaultInitiatorDepth is the number of RDMA READs this side may have
	// outstanding, as ib_iser offers (an initiator never issues RDMA READ).
	DefaultInitiatorDepth = 1

	// ResolveTimeout bounds address and route resolution, as ib_iser.
	ResolveTimeout = 1000 * time.Millisecond

	retryCount    = 7
	rnrRetryCount = 6

	// maxReqPrivateData is the private data an RDMA_PS_TCP REQ carries on
	// InfiniBand and RoCE (92 bytes of IB CM REQ less the 36-byte CMA header).
	maxReqPrivateData = 56
	// maxRepPrivateData is the private data an IB CM REP (accept) carries.
	maxRepPrivateData = 196
	// maxRejPrivateData is the private data an IB CM REJ carries.
	maxRejPrivateData = 148
)

// DialOptions configure a connection (Dial) or the connections a Listener
// accepts (Listen). Zero fields take the defaults above.
type DialOptions struct {
	// PrivateData goes with the connect request (Dial, at most 56 bytes) or
	// with the accept (Listen, at most 196 bytes).
	PrivateData []byte

	// SendDepth and RecvDepth size the send and receive queues: the
	// number of work requests that may be outstanding on each.
	SendDepth, RecvDepth int
	// MaxSendSGE and MaxRecvSGE bound the SGEs of one work request.
	MaxSendSGE, MaxRecvSGE int

	// ResponderResources is the number of RDMA READs the peer may have
	// outstanding against this side; 0 means min(255, the device's
	// max_qp_rd_atom). It must end up > 0 for Dial: an iSER target reads
	// write data with RDMA READ.
	ResponderResources int
	// InitiatorDepth is the number of RDMA READs this side may have
	// outstanding; 0 means DefaultInitiatorDepth for Dial and the
	// device's max_qp_init_rd_atom for Listen.
	InitiatorDepth int

	// SourceAddr optionally binds Dial to a local IP address.
	SourceAddr string
}

func (o DialOptions) withDefaults() DialOptions {
	if o.SendDepth == 0 {
		o.SendDepth = DefaultSendDepth
	}
	if o.RecvDepth == 0 {
		o.RecvDepth = DefaultRecvDepth
	}
	if o.MaxSendSGE == 0 {
		o.MaxSendSGE = DefaultMaxSendSGE
	}
	if o.MaxRecvSGE == 0 {
		o.MaxRecvSGE = DefaultMaxRecvSGE
	}
	return o
}

func (o DialOptions) validate(maxPrivateData int) error {
	switch {
	case o.SendDepth < 0 || o.RecvDepth < 0 || o.MaxSendSGE < 0 || o.MaxRecvSGE < 0:
		return fmt.Errorf("negative queue depth or SGE count")
	case o.ResponderResources < 0 || o.ResponderResources > 255:
		return fmt.Errorf("responder resources %d out of range 0..255", o.ResponderResources)
	case o.InitiatorDepth < 0 || o.InitiatorDepth > 255:
		return fmt.Errorf("initiator depth %d out of range 0..255", o.InitiatorDepth)
	case len(o.PrivateData) > maxPrivateData:
		return fmt.Errorf("private data of %d bytes exceeds %d", len(o.PrivateData), maxPrivateData)
	}
	return nil
}
