package textkey

import "fmt"

// Params are the operational values in force after a negotiation, with RFC
// defaults for every key that was not negotiated (or was answered Reject,
// Irrelevant or NotUnderstood).
type Params struct {
	HeaderDigest, DataDigest string // "None" or "CRC32C"

	// MaxRecvDataSegmentLength is declarative in each direction (RFC 7143
	// section 13.12). InitiatorMaxRecvDataSegmentLength is the value we
	// declared: the target sends us no larger data segment.
	// TargetMaxRecvDataSegmentLength is the value the target declared: we
	// send it no larger data segment. Both default to 8192.
	InitiatorMaxRecvDataSegmentLength uint32
	TargetMaxRecvDataSegmentLength    uint32

	MaxBurstLength uint32
	// FirstBurstLength bounds unsolicited data (immediate plus unsolicited
	// Data-Out) per command. When InitialR2T=Yes and ImmediateData=No it
	// is irrelevant and reported as min(default, MaxBurstLength).
	FirstBurstLength uint32
	// InitialR2T=Yes: no unsolicited Data-Out; the target's R2T (or, on
	// iSER, its RDMA Read) fetches data beyond the immediate data.
	InitialR2T bool
	// ImmediateData=Yes: write data may ride in the SCSI Command PDU.
	ImmediateData       bool
	MaxOutstandingR2T   uint32
	DataPDUInOrder      bool
	DataSequenceInOrder bool
	DefaultTime2Wait    uint32 // seconds
	DefaultTime2Retain  uint32 // seconds
	ErrorRecoveryLevel  uint32
	MaxConnections      uint32

	// iSER (RFC 7145 section 6).
	RDMAExtensions                 bool
	InitiatorRecvDataSegmentLength uint32
	TargetRecvDataSegmentLength    uint32

	// Declared by the target; empty / 0 when it did not.
	TargetAlias          string
	TargetPortalGroupTag uint16
}

// Results returns the values in force. It fails with the error that ended
// the negotiation, if any, or with a *ProtocolError when the negotiated
// FirstBurstLength exceeds MaxBurstLength while it is relevant (RFC 7143
// section 13.14: FirstBurstLength MUST NOT exceed MaxBurstLength; Linux
// LIO clamps its own answer, so a conforming target never gets here).
func (n *Negotiation) Results() (Params, error) {
	p := Params{
		HeaderDigest:                      n.str("HeaderDigest"),
		DataDigest:                        n.str("DataDigest"),
		InitiatorMaxRecvDataSegmentLength: 8192,
		TargetMaxRecvDataSegmentLength:    n.u32("MaxRecvDataSegmentLength"),
		MaxBurstLength:                    n.u32("MaxBurstLength"),
		FirstBurstLength:                  n.u32("FirstBurstLength"),
		InitialR2T:                        n.bool("InitialR2T"),
		ImmediateData:                     n.bool("ImmediateData"),
		MaxOutstandingR2T:                 n.u32("MaxOutstandingR2T"),
		DataPDUInOrder:                    n.bool("DataPDUInOrder"),
		DataSequenceInOrder:               n.bool("DataSequenceInOrder"),
		DefaultTime2Wait:                  n.u32("DefaultTime2Wait"),
		DefaultTime2Retain:                n.u32("DefaultTime2Retain"),
		ErrorRecoveryLevel:                n.u32("ErrorRecoveryLevel"),
		MaxConnections:                    n.u32("MaxConnections"),
		RDMAExtensions:                    n.bool("RDMAExtensions"),
		InitiatorRecvDataSegmentLength:    n.u32("InitiatorRecvDataSegmentLength"),
		TargetRecvDataSegmentLength:       n.u32("TargetRecvDataSegmentLength"),
		TargetAlias:                       n.str("TargetAlias"),
		TargetPortalGroupTag:              uint16(n.u32("TargetPortalGroupTag")),
	}
	if v, ok := n.Offered("MaxRecvDataSegmentLength"); ok {
		x, _ := ParseNumber(v) // checked by Offer
		p.InitiatorMaxRecvDataSegmentLength = uint32(x)
	}
	if n.err != nil {
		return p, n.err
	}
	if p.FirstBurstLength > p.MaxBurstLength {
		fbl, _ := n.Answer("FirstBurstLength")
		irrelevant := fbl == Irrelevant || p.InitialR2T && !p.ImmediateData
		if !irrelevant {
			return p, protoErr("FirstBurstLength", fmt.Sprint(p.FirstBurstLength),
				"exceeds the negotiated MaxBurstLength %d (RFC 7143 section 13.14)", p.MaxBurstLength)
		}
		p.FirstBurstLength = p.MaxBurstLength
	}
	return p, nil
}

func (n *Negotiation) str(key string) string {
	v, _ := n.Result(key)
	return v
}

// u32 reads a numeric result; every stored numeric result was range-checked
// against a table bound of at most 2**32-1.
func (n *Negotiation) u32(key string) uint32 {
	v, ok := n.Result(key)
	if !ok {
		return 0
	}
	x, _ := ParseNumber(v)
	return uint32(x)
}

func (n *Negotiation) bool(key string) bool {
	return n.str(key) == Yes
}
