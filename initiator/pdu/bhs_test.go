package pdu

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"
)

// header is any typed BHS.
type header interface {
	Marshal(*BHS)
	Unmarshal(*BHS) error
}

func TestBHSRoundTrip(t *testing.T) {
	lun := [8]byte{0, 1}
	cases := []struct {
		name string
		h    header
		zero func() header
		op   Opcode
	}{
		{"scsi command", &SCSICommand{Final: true, Write: true, Attr: AttrSimple, LUN: lun, ITT: 7,
			ExpectedDataTransferLength: 4096, CmdSN: 9, ExpStatSN: 3, CDB: [16]byte{0x2a, 0, 0, 0, 0, 8, 0, 0, 8}},
			func() header { return &SCSICommand{} }, OpSCSICommand},
		{"scsi response", &SCSIResponse{Underflow: true, Status: 2, ITT: 7, TargetSNs: TargetSNs{1, 2, 3},
			ExpDataSN: 4, ResidualCount: 512}, func() header { return &SCSIResponse{} }, OpSCSIResponse},
		{"data-in", &DataIn{Final: true, HasStatus: true, Status: 0, LUN: lun, ITT: 5, TTT: ReservedTag,
			TargetSNs: TargetSNs{4, 5, 6}, DataSN: 2, BufferOffset: 8192}, func() header { return &DataIn{} }, OpDataIn},
		{"data-out", &DataOut{Final: true, LUN: lun, ITT: 5, TTT: 99, ExpStatSN: 3, DataSN: 1, BufferOffset: 8192},
			func() header { return &DataOut{} }, OpDataOut},
		{"r2t", &R2T{LUN: lun, ITT: 5, TTT: 12, TargetSNs: TargetSNs{1, 2, 3}, R2TSN: 1, BufferOffset: 65536,
			DesiredDataTransferLength: 65536}, func() header { return &R2T{} }, OpR2T},
		{"login request", &LoginRequest{Transit: true, CSG: 1, NSG: 3, ISID: ISID{0x80, 1, 2, 3, 4, 5},
			TSIH: 0, ITT: 0, CID: 1, CmdSN: 1, ExpStatSN: 2}, func() header { return &LoginRequest{} }, OpLoginReq},
		{"login response", &LoginResponse{Transit: true, CSG: 1, NSG: 3, ISID: ISID{0x80, 1, 2, 3, 4, 5},
			TSIH: 0x100, TargetSNs: TargetSNs{1, 1, 64}}, func() header { return &LoginResponse{} }, OpLoginResp},
		{"text request", &TextRequest{Final: true, ITT: 3, TTT: ReservedTag, CmdSN: 4, ExpStatSN: 5},
			func() header { return &TextRequest{} }, OpTextReq},
		{"text response", &TextResponse{Continue: true, ITT: 3, TTT: 77, TargetSNs: TargetSNs{5, 5, 6}},
			func() header { return &TextResponse{} }, OpTextResp},
		{"nop-out", &NOPOut{Immediate: true, ITT: 8, TTT: ReservedTag, CmdSN: 4, ExpStatSN: 5},
			func() header { return &NOPOut{} }, OpNOPOut},
		{"nop-in", &NOPIn{ITT: ReservedTag, TTT: 3, TargetSNs: TargetSNs{5, 5, 6}},
			func() header { return &NOPIn{} }, OpNOPIn},
		{"tmf request", &TaskMgmtRequest{Immediate: true, Function: TMFAbortTask, LUN: lun, ITT: 9, RTT: 7,
			CmdSN: 4, ExpStatSN: 5, RefCmdSN: 3}, func() header { return &TaskMgmtRequest{} }, OpTaskMgmtReq},
		{"tmf response", &TaskMgmtResponse{Response: 1, ITT: 9, TargetSNs: TargetSNs{5, 5, 6}},
			func() header { return &TaskMgmtResponse{} }, OpTaskMgmtResp},
		{"logout request", &LogoutRequest{Reason: LogoutCloseSession, ITT: 10, CID: 1, CmdSN: 4, ExpStatSN: 5},
			func() header { return &LogoutRequest{} }, OpLogoutReq},
		{"logout response", &LogoutResponse{ITT: 10, TargetSNs: TargetSNs{5, 5, 6}, Time2Wait: 2, Time2Retain: 20},
			func() header { return &LogoutResponse{} }, OpLogoutResp},
		{"reject", &Reject{Reason: 0x04, TargetSNs: TargetSNs{5, 5, 6}}, func() header { return &Reject{} }, OpReject},
		{"async", &AsyncMessage{LUN: lun, TargetSNs: TargetSNs{5, 5, 6}, AsyncEvent: AsyncLogoutRequest, Parameter3: 2},
			func() header { return &AsyncMessage{} }, OpAsyncMessage},
		{"snack", &SNACKRequest{Type: 1, ITT: 3, BegRun: 1, RunLength: 2}, func() header { return &SNACKRequest{} }, OpSNACKReq},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b BHS
			c.h.Marshal(&b)
			if b.Opcode() != c.op {
				t.Fatalf("opcode %s, want %s", b.Opcode(), c.op)
			}
			got := c.zero()
			if err := got.Unmarshal(&b); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, c.h) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, c.h)
			}
			var b2 BHS
			got.Marshal(&b2)
			if b != b2 {
				t.Fatalf("re-marshal differs:\n%s\n%s", hex.Dump(b[:]), hex.Dump(b2[:]))
			}
		})
	}
}

// TestSCSICommandBytes pins the wire layout against RFC 7143 section 11.3.
func TestSCSICommandBytes(t *testing.T) {
	c := SCSICommand{Final: true, Read: true, Attr: AttrSimple, LUN: [8]byte{0, 2},
		ITT: 0x01020304, ExpectedDataTransferLength: 0x1000, CmdSN: 0x0a0b0c0d, ExpStatSN: 0x11121314,
		CDB: [16]byte{0x28, 0, 0, 0, 0, 0x10, 0, 0, 8}}
	var b BHS
	c.Marshal(&b)
	b.SetDataSegmentLength(0x010203)
	want, _ := hex.DecodeString("01c10000" + "00010203" + "0002000000000000" + "01020304" + "00001000" +
		"0a0b0c0d" + "11121314" + "28000000001000000800000000000000")
	if !bytes.Equal(b[:], want) {
		t.Fatalf("got\n%s\nwant\n%s", hex.Dump(b[:]), hex.Dump(want))
	}
	if b.DataSegmentLength() != 0x010203 {
		t.Fatalf("DataSegmentLength %x", b.DataSegmentLength())
	}
}

func TestUnmarshalRejectsBadHeaders(t *testing.T) {
	bad := []struct {
		name string
		b    func() BHS
		h    header
	}{
		{"wrong opcode", func() BHS { var b BHS; b[0] = byte(OpNOPIn); return b }, &SCSIResponse{}},
		{"response without F", func() BHS { var b BHS; b[0] = byte(OpSCSIResponse); return b }, &SCSIResponse{}},
		{"response O and U", func() BHS { var b BHS; b[0] = byte(OpSCSIResponse); b[1] = 0x86; return b }, &SCSIResponse{}},
		{"data-in S without F", func() BHS { var b BHS; b[0] = byte(OpDataIn); b[1] = 0x01; return b }, &DataIn{}},
		{"r2t reserved TTT", func() BHS {
			var b BHS
			(&R2T{TTT: ReservedTag, DesiredDataTransferLength: 1}).Marshal(&b)
			return b
		}, &R2T{}},
		{"r2t zero length", func() BHS { var b BHS; (&R2T{TTT: 1}).Marshal(&b); return b }, &R2T{}},
		{"login T and C", func() BHS { var b BHS; b[0] = byte(OpLoginResp); b[1] = 0xc0; return b }, &LoginResponse{}},
		{"login stage 2", func() BHS { var b BHS; b[0] = byte(OpLoginResp); b[1] = 0x08; return b }, &LoginResponse{}},
		{"text F and C", func() BHS { var b BHS; b[0] = byte(OpTextResp); b[1] = 0xc0; return b }, &TextResponse{}},
	}
	for _, c := range bad {
		b := c.b()
		if err := c.h.Unmarshal(&b); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func TestAHS(t *testing.T) {
	cdb := make([]byte, 32)
	for i := range cdb {
		cdb[i] = byte(i)
	}
	raw := append(ExtendedCDBAHS(cdb), BidiReadLengthAHS(4096)...)
	segs, err := ParseAHS(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 2 || segs[0].Type != AHSExtendedCDB || segs[1].Type != AHSBidiReadDataLen {
		t.Fatalf("segments %+v", segs)
	}
	if !bytes.Equal(segs[0].Specific[1:], cdb[16:]) {
		t.Fatalf("extended CDB %x", segs[0].Specific)
	}
	for _, bad := range [][]byte{{0, 0, 1, 0}, {0, 9, 1, 0, 1, 2, 3, 4}, {0, 1, 1}} {
		if _, err := ParseAHS(bad); err == nil {
			t.Errorf("ParseAHS(%x) accepted", bad)
		}
	}
}

// FuzzBHS decodes arbitrary headers with every typed decoder; whatever
// decodes must re-encode to a header that decodes to the same value.
func FuzzBHS(f *testing.F) {
	var b BHS
	(&SCSIResponse{Status: 2, ITT: 1, TargetSNs: TargetSNs{1, 2, 3}}).Marshal(&b)
	f.Add(b[:])
	(&LoginResponse{Transit: true, CSG: 1, NSG: 3, TSIH: 1}).Marshal(&b)
	f.Add(b[:])
	(&DataIn{Final: true, HasStatus: true, ITT: 3, DataSN: 1}).Marshal(&b)
	f.Add(b[:])
	(&R2T{TTT: 1, DesiredDataTransferLength: 4096}).Marshal(&b)
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		var in BHS
		copy(in[:], data)
		decoders := map[Opcode]func() header{
			OpSCSICommand: func() header { return &SCSICommand{} }, OpSCSIResponse: func() header { return &SCSIResponse{} },
			OpDataIn: func() header { return &DataIn{} }, OpDataOut: func() header { return &DataOut{} },
			OpR2T: func() header { return &R2T{} }, OpLoginReq: func() header { return &LoginRequest{} },
			OpLoginResp: func() header { return &LoginResponse{} }, OpTextReq: func() header { return &TextRequest{} },
			OpTextResp: func() header { return &TextResponse{} }, OpNOPOut: func() header { return &NOPOut{} },
			OpNOPIn: func() header { return &NOPIn{} }, OpTaskMgmtReq: func() header { return &TaskMgmtRequest{} },
			OpTaskMgmtResp: func() header { return &TaskMgmtResponse{} }, OpLogoutReq: func() header { return &LogoutRequest{} },
			OpLogoutResp: func() header { return &LogoutResponse{} }, OpReject: func() header { return &Reject{} },
			OpAsyncMessage: func() header { return &AsyncMessage{} }, OpSNACKReq: func() header { return &SNACKRequest{} },
		}
		mk, ok := decoders[in.Opcode()]
		if !ok {
			return
		}
		h := mk()
		if err := h.Unmarshal(&in); err != nil {
			return
		}
		var out BHS
		h.Marshal(&out)
		h2 := mk()
		if err := h2.Unmarshal(&out); err != nil {
			t.Fatalf("re-encoded header does not decode: %v", err)
		}
		if !reflect.DeepEqual(h, h2) {
			t.Fatalf("round trip changed the header:\n%+v\n%+v", h, h2)
		}
	})
}
