package initiator

import (
	"fmt"

	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// paramsFrom turns a finished negotiation into Params. base carries what
// the login recorded outside the negotiation (TargetAlias, portal group tag).
func paramsFrom(n *textkey.Negotiation, want, base Params) (Params, error) {
	r, err := n.Results()
	if err != nil {
		return Params{}, fmt.Errorf("negotiated values: %w", err)
	}
	p := Params{
		HeaderDigest:                      r.HeaderDigest == "CRC32C",
		DataDigest:                        r.DataDigest == "CRC32C",
		InitiatorMaxRecvDataSegmentLength: r.InitiatorMaxRecvDataSegmentLength,
		TargetMaxRecvDataSegmentLength:    r.TargetMaxRecvDataSegmentLength,
		MaxBurstLength:                    r.MaxBurstLength,
		FirstBurstLength:                  r.FirstBurstLength,
		InitialR2T:                        r.InitialR2T,
		ImmediateData:                     r.ImmediateData,
		MaxOutstandingR2T:                 r.MaxOutstandingR2T,
		DataPDUInOrder:                    r.DataPDUInOrder,
		DataSequenceInOrder:               r.DataSequenceInOrder,
		DefaultTime2Wait:                  r.DefaultTime2Wait,
		DefaultTime2Retain:                r.DefaultTime2Retain,
		ErrorRecoveryLevel:                r.ErrorRecoveryLevel,
		MaxConnections:                    r.MaxConnections,
		RDMAExtensions:                    r.RDMAExtensions,
		InitiatorRecvDataSegmentLength:    r.InitiatorRecvDataSegmentLength,
		TargetRecvDataSegmentLength:       r.TargetRecvDataSegmentLength,
		TargetAlias:                       base.TargetAlias,
		TargetPortalGroupTag:              base.TargetPortalGroupTag,
	}
	if p.ErrorRecoveryLevel != 0 {
		return p, fmt.Errorf("negotiated ErrorRecoveryLevel=%d; only 0 is supported", p.ErrorRecoveryLevel)
	}
	if (r.HeaderDigest == "CRC32C" && !want.HeaderDigest) || (r.DataDigest == "CRC32C" && !want.DataDigest) {
		return p, fmt.Errorf("target chose a digest that was not offered")
	}
	return p, nil
}
