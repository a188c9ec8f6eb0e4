package ublk

import (
	"bytes"
	"testing"
)

// The expected numbers are the UBLK_U_* macros of include/uapi/linux/ublk_cmd.h
// (Linux 6.12) evaluated by a C compiler.
func TestCommandNumbers(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  uint32
		want uint32
	}{
		{"UBLK_U_CMD_GET_DEV_INFO", uCmdGetDevInfo, 0x80207502},
		{"UBLK_U_CMD_ADD_DEV", uCmdAddDev, 0xc0207504},
		{"UBLK_U_CMD_DEL_DEV", uCmdDelDev, 0xc0207505},
		{"UBLK_U_CMD_START_DEV", uCmdStartDev, 0xc0207506},
		{"UBLK_U_CMD_STOP_DEV", uCmdStopDev, 0xc0207507},
		{"UBLK_U_CMD_SET_PARAMS", uCmdSetParams, 0xc0207508},
		{"UBLK_U_CMD_GET_PARAMS", uCmdGetParams, 0x80207509},
		{"UBLK_U_CMD_START_USER_RECOVERY", uCmdStartUserRecovery, 0xc0207510},
		{"UBLK_U_CMD_END_USER_RECOVERY", uCmdEndUserRecovery, 0xc0207511},
		{"UBLK_U_CMD_GET_FEATURES", uCmdGetFeatures, 0x80207513},
		{"UBLK_U_IO_FETCH_REQ", uIOFetchReq, 0xc0107520},
		{"UBLK_U_IO_COMMIT_AND_FETCH_REQ", uIOCommitAndFetchReq, 0xc0107521},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
	if ioResAbort != -19 { // UBLK_IO_RES_ABORT is -ENODEV
		t.Errorf("UBLK_IO_RES_ABORT = %d", ioResAbort)
	}
}

func TestCtrlCmdLayout(t *testing.T) {
	b := make([]byte, sizeofCtrlCmd)
	for i := range b {
		b[i] = 0xee // marshal must clear dev_path_len, pad, reserved
	}
	(&ctrlCmd{DevID: 7, QueueID: noQueue, Len: 64, Addr: 0x1122334455667788, Data: 4242}).marshal(b)
	want := []byte{
		7, 0, 0, 0, 0xff, 0xff, 64, 0, // dev_id, queue_id, len
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // addr
		0x92, 0x10, 0, 0, 0, 0, 0, 0, // data[0]
		0, 0, 0, 0, 0, 0, 0, 0, // dev_path_len, pad, reserved
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("ctrl cmd\n got %x\nwant %x", b, want)
	}
}

func TestDevInfoLayout(t *testing.T) {
	in := DevInfo{NrHWQueues: 2, QueueDepth: 128, State: stateQuiesced, MaxIOBufBytes: 512 << 10,
		DevID: 3, ServerPID: 4567, Flags: deviceFlags, ServerFlags: 9, OwnerUID: 10, OwnerGID: 11}
	b := make([]byte, sizeofDevInfo)
	in.marshal(b)
	for _, f := range []struct {
		name string
		off  int
		want []byte
	}{
		{"nr_hw_queues", 0, []byte{2, 0}},
		{"queue_depth", 2, []byte{128, 0}},
		{"state", 4, []byte{2, 0}},
		{"max_io_buf_bytes", 8, []byte{0, 0, 8, 0}},
		{"dev_id", 12, []byte{3, 0, 0, 0}},
		{"ublksrv_pid", 16, []byte{0xd7, 0x11, 0, 0}},
		{"flags", 24, []byte{0x58, 0, 0, 0, 0, 0, 0, 0}}, // USER_RECOVERY|REISSUE|CMD_IOCTL_ENCODE
		{"ublksrv_flags", 32, []byte{9, 0, 0, 0, 0, 0, 0, 0}},
		{"owner_uid", 40, []byte{10, 0, 0, 0}},
		{"owner_gid", 44, []byte{11, 0, 0, 0}},
	} {
		if got := b[f.off : f.off+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at %d = %x, want %x", f.name, f.off, got, f.want)
		}
	}
	var out DevInfo
	out.unmarshal(b)
	if out != in {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
}

func TestIOCmdAndDescLayout(t *testing.T) {
	b := make([]byte, sizeofIOCmd)
	(&ioCmd{QID: 1, Tag: 0x203, Result: -5, Addr: 0xdeadbeef000}).marshal(b)
	want := []byte{1, 0, 3, 2, 0xfb, 0xff, 0xff, 0xff, 0x00, 0xf0, 0xee, 0xdb, 0xea, 0x0d, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("io cmd\n got %x\nwant %x", b, want)
	}
	raw := []byte{
		ioOpWrite, 0x20, 0, 0, // op WRITE, flags FUA (1<<13)
		0x00, 0x04, 0, 0, // nr_sectors 1024
		0x10, 0, 0, 0, 0, 0, 0, 0, // start_sector 16
		0, 0x10, 0, 0, 0, 0, 0, 0, // addr
	}
	var d ioDesc
	d.unmarshal(raw)
	if d.op() != ioOpWrite || d.flags() != ioFlagFUA || d.NrSectors != 1024 || d.StartSector != 16 || d.Addr != 0x1000 {
		t.Fatalf("desc %+v op %d flags %#x", d, d.op(), d.flags())
	}
}

func TestParamsLayout(t *testing.T) {
	p := params{Types: paramTypeBasic | paramTypeDiscard, Attrs: attrVolatileCache | attrFUA,
		LogicalBSShift: 9, PhysicalBSShift: 12, IOOptShift: 16, IOMinShift: 12,
		MaxSectors: 1024, DevSectors: 1 << 21,
		DiscardGranularity: 4096, MaxDiscardSectors: 1 << 21, MaxWriteZeroesSectors: 1 << 20, MaxDiscardSegments: 1}
	b := make([]byte, sizeofParams)
	p.marshal(b)
	for _, f := range []struct {
		name string
		off  int
		want []byte
	}{
		{"len", 0, []byte{paramsSetLength, 0, 0, 0}},
		{"types", 4, []byte{3, 0, 0, 0}},
		{"basic.attrs", 8, []byte{0x0c, 0, 0, 0}},
		{"basic shifts", 12, []byte{9, 12, 16, 12}},
		{"basic.max_sectors", 16, []byte{0, 4, 0, 0}},
		{"basic.dev_sectors", 24, []byte{0, 0, 0x20, 0, 0, 0, 0, 0}},
		{"discard.discard_granularity", 44, []byte{0, 0x10, 0, 0}},
		{"discard.max_discard_sectors", 48, []byte{0, 0, 0x20, 0}},
		{"discard.max_write_zeroes_sectors", 52, []byte{0, 0, 0x10, 0}},
		{"discard.max_discard_segments", 56, []byte{1, 0}},
	} {
		if got := b[f.off : f.off+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at %d = %x, want %x", f.name, f.off, got, f.want)
		}
	}
	// GET_PARAMS also fills devt (read-only) after discard.
	copy(b[paramsDevtOff:], []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0})
	var q params
	q.unmarshal(b)
	p.CharMajor, p.CharMinor, p.DiskMajor, p.DiskMinor = 1, 2, 3, 4
	if q != p {
		t.Fatalf("round trip\n got %+v\nwant %+v", q, p)
	}
}

func TestCmdBufGeometry(t *testing.T) {
	// ublk_max_cmd_buf_size: 4096 descriptors of 24 bytes, page aligned.
	if got := cmdBufMaxSize(4096); got != 98304 {
		t.Errorf("max cmd buf = %d", got)
	}
	if got := cmdBufSize(64, 4096); got != 4096 {
		t.Errorf("depth 64 = %d", got)
	}
	if got := cmdBufSize(200, 4096); got != 8192 {
		t.Errorf("depth 200 = %d", got)
	}
}
