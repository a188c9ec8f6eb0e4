package initiator

import (
	"context"
	"fmt"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// maxTextResponse bounds the keys gathered from continued Text Responses.
const maxTextResponse = 1 << 20

// Text runs a Text Request/Response exchange (RFC 7143 section 11.10),
// following C-bit continuations, and returns the target's keys in order.
func (s *Session) Text(ctx context.Context, kvs []textkey.KV) ([]textkey.KV, error) {
	data := textkey.Encode(kvs)
	ttt := pdu.ReservedTag
	var all []byte
	for {
		p, err := s.issue(ctx, false, nil, func(itt, cmdSN, expStatSN uint32) error {
			t := pdu.TextRequest{Final: true, ITT: itt, TTT: ttt, CmdSN: cmdSN, ExpStatSN: expStatSN}
			return s.dm.SendPDU(pdu.NewPDU(&t, data))
		})
		if err != nil {
			return nil, fmt.Errorf("text request: %w", err)
		}
		resp, err := s.wait(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("text request: %w", err)
		}
		var r pdu.TextResponse
		if err := r.Unmarshal(&resp.BHS); err != nil {
			return nil, fmt.Errorf("text request: %w", err)
		}
		all = append(all, resp.Data...)
		if len(all) > maxTextResponse {
			return nil, fmt.Errorf("text request: %w", pdu.ProtocolErrorf(pdu.OpTextResp, "response exceeds %d bytes", maxTextResponse))
		}
		if r.Final {
			kv, err := textkey.Parse(all)
			if err != nil {
				return nil, fmt.Errorf("text response: %w", err)
			}
			return kv, nil
		}
		if !r.Continue {
			// F=0, C=0: the target expects us to go on negotiating, which
			// a SendTargets-only initiator does not; ask for the end.
			return nil, fmt.Errorf("text request: %w", pdu.ProtocolErrorf(pdu.OpTextResp, "target left the exchange open without continuation"))
		}
		if r.TTT == pdu.ReservedTag {
			return nil, fmt.Errorf("text request: %w", pdu.ProtocolErrorf(pdu.OpTextResp, "continuation without a target transfer tag"))
		}
		ttt, data = r.TTT, nil
	}
}
