package initiator

// Params are the values a login negotiated that the session and the
// datamover act on (RFC 7143 section 13, RFC 7145 section 6).
type Params struct {
	HeaderDigest, DataDigest bool
	// MaxRecvDataSegmentLength we declared: the most the target sends us per PDU.
	InitiatorMaxRecvDataSegmentLength uint32
	// MaxRecvDataSegmentLength the target declared: the most we send per PDU.
	TargetMaxRecvDataSegmentLength uint32
	MaxBurstLength                 uint32
	FirstBurstLength               uint32
	InitialR2T                     bool
	ImmediateData                  bool
	MaxOutstandingR2T              uint32
	DataPDUInOrder                 bool
	DataSequenceInOrder            bool
	DefaultTime2Wait               uint32
	DefaultTime2Retain             uint32
	ErrorRecoveryLevel             uint32
	MaxConnections                 uint32
	// iSER (RFC 7145): RDMAExtensions and the receive data segment lengths.
	RDMAExtensions                 bool
	InitiatorRecvDataSegmentLength uint32
	TargetRecvDataSegmentLength    uint32
	// TargetAlias and TargetPortalGroupTag as declared by the target.
	TargetAlias          string
	TargetPortalGroupTag uint16
}

// DefaultParams are RFC 7143's defaults for keys a login did not negotiate.
func DefaultParams() Params {
	return Params{
		InitiatorMaxRecvDataSegmentLength: 8192,
		TargetMaxRecvDataSegmentLength:    8192,
		MaxBurstLength:                    262144,
		FirstBurstLength:                  65536,
		InitialR2T:                        true,
		ImmediateData:                     true,
		MaxOutstandingR2T:                 1,
		DataPDUInOrder:                    true,
		DataSequenceInOrder:               true,
		DefaultTime2Wait:                  2,
		DefaultTime2Retain:                20,
		MaxConnections:                    1,
		InitiatorRecvDataSegmentLength:    8192,
		TargetRecvDataSegmentLength:       8192,
	}
}

// ImmediateLimit is the most write data that may ride in a SCSI Command PDU.
func (p *Params) ImmediateLimit() uint32 {
	if !p.ImmediateData {
		return 0
	}
	return min(p.FirstBurstLength, p.TargetMaxRecvDataSegmentLength)
}

// UnsolicitedLimit is the most write data sent before the first R2T
// (immediate plus unsolicited Data-Out).
func (p *Params) UnsolicitedLimit() uint32 {
	if p.InitialR2T {
		return p.ImmediateLimit()
	}
	return p.FirstBurstLength
}
