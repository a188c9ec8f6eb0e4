package ublk

import (
	"encoding/binary"
	"syscall"
)

// The ublk user ABI, from include/uapi/linux/ublk_cmd.h (Linux 6.12; the
// later UBLK_F_* flags and UPDATE_SIZE from 7.x's). Only
// the ioctl-encoded command numbers (UBLK_U_*) are used: the legacy plain
// numbers need CONFIG_BLKDEV_UBLK_LEGACY_OPCODES.

// ioctl number encoding (include/uapi/asm-generic/ioctl.h).
const (
	iocWrite = 1
	iocRead  = 2
)

func ioc(dir, typ, nr, size uint32) uint32 {
	return dir<<30 | size<<16 | typ<<8 | nr
}
func ior(typ, nr, size uint32) uint32  { return ioc(iocRead, typ, nr, size) }
func iowr(typ, nr, size uint32) uint32 { return ioc(iocRead|iocWrite, typ, nr, size) }

// Structure sizes of the ABI.
const (
	sizeofCtrlCmd   = 32 // struct ublksrv_ctrl_cmd
	sizeofDevInfo   = 64 // struct ublksrv_ctrl_dev_info
	sizeofIOCmd     = 16 // struct ublksrv_io_cmd
	sizeofIODesc    = 24 // struct ublksrv_io_desc
	sizeofParams    = 112
	featuresLen     = 8 // UBLK_FEATURES_LEN
	maxQueueDepth   = 4096
	maxNrQueues     = 4096
	ublkIOCType     = 'u'
	paramsBasicOff  = 8
	paramsDiscOff   = 40
	paramsDevtOff   = 60
	paramsSetLength = 60 // header, basic and discard: what SET_PARAMS sends
)

// Legacy command numbers; the _IOC_NR of the encoded ones.
const (
	cmdGetQueueAffinity  = 0x01
	cmdGetDevInfo        = 0x02
	cmdAddDev            = 0x04
	cmdDelDev            = 0x05
	cmdStartDev          = 0x06
	cmdStopDev           = 0x07
	cmdSetParams         = 0x08
	cmdGetParams         = 0x09
	cmdStartUserRecovery = 0x10
	cmdEndUserRecovery   = 0x11
	cmdGetDevInfo2       = 0x12
	cmdGetFeatures       = 0x13
	cmdUpdateSize        = 0x15
	cmdTryStopDev        = 0x17
	ioFetchReq           = 0x20
	ioCommitAndFetchReq  = 0x21
	ioNeedGetData        = 0x22
)

// Control commands (UBLK_U_CMD_*), sent on /dev/ublk-control.
var (
	uCmdGetDevInfo        = ior(ublkIOCType, cmdGetDevInfo, sizeofCtrlCmd)
	uCmdAddDev            = iowr(ublkIOCType, cmdAddDev, sizeofCtrlCmd)
	uCmdDelDev            = iowr(ublkIOCType, cmdDelDev, sizeofCtrlCmd)
	uCmdStartDev          = iowr(ublkIOCType, cmdStartDev, sizeofCtrlCmd)
	uCmdStopDev           = iowr(ublkIOCType, cmdStopDev, sizeofCtrlCmd)
	uCmdSetParams         = iowr(ublkIOCType, cmdSetParams, sizeofCtrlCmd)
	uCmdGetParams         = ior(ublkIOCType, cmdGetParams, sizeofCtrlCmd)
	uCmdStartUserRecovery = iowr(ublkIOCType, cmdStartUserRecovery, sizeofCtrlCmd)
	uCmdEndUserRecovery   = iowr(ublkIOCType, cmdEndUserRecovery, sizeofCtrlCmd)
	uCmdGetFeatures       = ior(ublkIOCType, cmdGetFeatures, sizeofCtrlCmd)
	uCmdUpdateSize        = iowr(ublkIOCType, cmdUpdateSize, sizeofCtrlCmd)
	uCmdTryStopDev        = iowr(ublkIOCType, cmdTryStopDev, sizeofCtrlCmd)
)

// I/O commands (UBLK_U_IO_*), sent on /dev/ublkcN.
var (
	uIOFetchReq          = iowr(ublkIOCType, ioFetchReq, sizeofIOCmd)
	uIOCommitAndFetchReq = iowr(ublkIOCType, ioCommitAndFetchReq, sizeofIOCmd)
)

// Results of FETCH_REQ / COMMIT_AND_FETCH_REQ completions.
const (
	ioResOK    = 0
	ioResAbort = -int32(syscall.ENODEV) // UBLK_IO_RES_ABORT: no re-fetch
)

// UBLKSRV_CMD_BUF_OFFSET: the mmap offset of queue 0's descriptor array;
// queue q's is at q * cmdBufMaxSize.
const cmdBufOffset = 0

// Device feature flags (UBLK_F_*).
const (
	FlagSupportZeroCopy     = 1 << 0
	FlagURingCmdCompInTask  = 1 << 1
	FlagNeedGetData         = 1 << 2
	FlagUserRecovery        = 1 << 3
	FlagUserRecoveryReissue = 1 << 4
	FlagUnprivilegedDev     = 1 << 5
	FlagCmdIoctlEncode      = 1 << 6
	FlagUserCopy            = 1 << 7
	FlagZoned               = 1 << 8
	FlagUserRecoveryFailIO  = 1 << 9
	FlagUpdateSize          = 1 << 10
	FlagAutoBufReg          = 1 << 11
	FlagQuiesce             = 1 << 12
	FlagPerIODaemon         = 1 << 13
	FlagBufRegOffDaemon     = 1 << 14
	FlagBatchIO             = 1 << 15
	FlagIntegrity           = 1 << 16
	FlagSafeStopDev         = 1 << 17
	FlagNoAutoPartScan      = 1 << 18
	FlagShmemZC             = 1 << 19

	// deviceFlags is what ADD_DEV asks for: recovery with reissue of the
	// requests in flight when the server died, ioctl-encoded commands.
	deviceFlags = FlagUserRecovery | FlagUserRecoveryReissue | FlagCmdIoctlEncode
)

// Device states (UBLK_S_DEV_*).
const (
	stateDead     = 0
	stateLive     = 1
	stateQuiesced = 2
)

// I/O operations and flags in ublksrv_io_desc.op_flags.
const (
	ioOpRead        = 0
	ioOpWrite       = 1
	ioOpFlush       = 2
	ioOpDiscard     = 3
	ioOpWriteSame   = 4
	ioOpWriteZeroes = 5

	ioFlagFailfastDev       = 1 << 8
	ioFlagFailfastTransport = 1 << 9
	ioFlagFailfastDriver    = 1 << 10
	ioFlagMeta              = 1 << 11
	ioFlagFUA               = 1 << 13
	ioFlagNoUnmap           = 1 << 15
	ioFlagSwap              = 1 << 16
)

// ublk_param_basic.attrs and ublk_params.types.
const (
	attrReadOnly      = 1 << 0
	attrRotational    = 1 << 1
	attrVolatileCache = 1 << 2
	attrFUA           = 1 << 3

	paramTypeBasic   = 1 << 0
	paramTypeDiscard = 1 << 1
	paramTypeDevt    = 1 << 2
	paramTypeZoned   = 1 << 3
)

var le = binary.LittleEndian

// ctrlCmd is struct ublksrv_ctrl_cmd, carried in the SQE128 command area.
type ctrlCmd struct {
	DevID   uint32
	QueueID uint16 // 0xffff when not for a queue
	Len     uint16
	Addr    uint64
	Data    uint64
	// dev_path_len, pad and reserved are zero (privileged devices only).
}

func (c *ctrlCmd) marshal(b []byte) {
	_ = b[sizeofCtrlCmd-1]
	clear(b[:sizeofCtrlCmd])
	le.PutUint32(b[0:], c.DevID)
	le.PutUint16(b[4:], c.QueueID)
	le.PutUint16(b[6:], c.Len)
	le.PutUint64(b[8:], c.Addr)
	le.PutUint64(b[16:], c.Data)
}

// DevInfo is struct ublksrv_ctrl_dev_info: what ADD_DEV asks for and what
// GET_DEV_INFO reports.
type DevInfo struct {
	NrHWQueues    uint16
	QueueDepth    uint16
	State         uint16
	MaxIOBufBytes uint32
	DevID         uint32
	ServerPID     int32
	Flags         uint64
	ServerFlags   uint64 // ublksrv_flags: for the server, the driver keeps it
	OwnerUID      uint32
	OwnerGID      uint32
}

func (d *DevInfo) marshal(b []byte) {
	_ = b[sizeofDevInfo-1]
	clear(b[:sizeofDevInfo])
	le.PutUint16(b[0:], d.NrHWQueues)
	le.PutUint16(b[2:], d.QueueDepth)
	le.PutUint16(b[4:], d.State)
	le.PutUint32(b[8:], d.MaxIOBufBytes)
	le.PutUint32(b[12:], d.DevID)
	le.PutUint32(b[16:], uint32(d.ServerPID))
	le.PutUint64(b[24:], d.Flags)
	le.PutUint64(b[32:], d.ServerFlags)
	le.PutUint32(b[40:], d.OwnerUID)
	le.PutUint32(b[44:], d.OwnerGID)
}

func (d *DevInfo) unmarshal(b []byte) {
	_ = b[sizeofDevInfo-1]
	d.NrHWQueues = le.Uint16(b[0:])
	d.QueueDepth = le.Uint16(b[2:])
	d.State = le.Uint16(b[4:])
	d.MaxIOBufBytes = le.Uint32(b[8:])
	d.DevID = le.Uint32(b[12:])
	d.ServerPID = int32(le.Uint32(b[16:]))
	d.Flags = le.Uint64(b[24:])
	d.ServerFlags = le.Uint64(b[32:])
	d.OwnerUID = le.Uint32(b[40:])
	d.OwnerGID = le.Uint32(b[44:])
}

// ioCmd is struct ublksrv_io_cmd, carried in the SQE command area.
type ioCmd struct {
	QID    uint16
	Tag    uint16
	Result int32
	Addr   uint64
}

func (c *ioCmd) marshal(b []byte) {
	_ = b[sizeofIOCmd-1]
	le.PutUint16(b[0:], c.QID)
	le.PutUint16(b[2:], c.Tag)
	le.PutUint32(b[4:], uint32(c.Result))
	le.PutUint64(b[8:], c.Addr)
}

// ioDesc is struct ublksrv_io_desc, which the driver writes into the shared
// descriptor array before it completes a FETCH for that tag.
type ioDesc struct {
	OpFlags     uint32
	NrSectors   uint32
	StartSector uint64
	Addr        uint64
}

func (d *ioDesc) op() uint8     { return uint8(d.OpFlags) }
func (d *ioDesc) flags() uint32 { return d.OpFlags &^ 0xff }

func (d *ioDesc) unmarshal(b []byte) {
	_ = b[sizeofIODesc-1]
	d.OpFlags = le.Uint32(b[0:])
	d.NrSectors = le.Uint32(b[4:])
	d.StartSector = le.Uint64(b[8:])
	d.Addr = le.Uint64(b[16:])
}

// params is struct ublk_params with the basic and discard parts (devt is
// read-only and zoned is not used).
type params struct {
	Types uint32

	// ublk_param_basic
	Attrs            uint32
	LogicalBSShift   uint8
	PhysicalBSShift  uint8
	IOOptShift       uint8
	IOMinShift       uint8
	MaxSectors       uint32
	ChunkSectors     uint32
	DevSectors       uint64
	VirtBoundaryMask uint64

	// ublk_param_discard
	DiscardAlignment      uint32
	DiscardGranularity    uint32
	MaxDiscardSectors     uint32
	MaxWriteZeroesSectors uint32
	MaxDiscardSegments    uint16

	// ublk_param_devt (GET_PARAMS only)
	CharMajor, CharMinor, DiskMajor, DiskMinor uint32
}

// marshal writes the SET_PARAMS form: len = paramsSetLength, basic and
// discard.
func (p *params) marshal(b []byte) {
	_ = b[sizeofParams-1]
	clear(b[:sizeofParams])
	le.PutUint32(b[0:], paramsSetLength)
	le.PutUint32(b[4:], p.Types)
	x := b[paramsBasicOff:]
	le.PutUint32(x[0:], p.Attrs)
	x[4] = p.LogicalBSShift
	x[5] = p.PhysicalBSShift
	x[6] = p.IOOptShift
	x[7] = p.IOMinShift
	le.PutUint32(x[8:], p.MaxSectors)
	le.PutUint32(x[12:], p.ChunkSectors)
	le.PutUint64(x[16:], p.DevSectors)
	le.PutUint64(x[24:], p.VirtBoundaryMask)
	x = b[paramsDiscOff:]
	le.PutUint32(x[0:], p.DiscardAlignment)
	le.PutUint32(x[4:], p.DiscardGranularity)
	le.PutUint32(x[8:], p.MaxDiscardSectors)
	le.PutUint32(x[12:], p.MaxWriteZeroesSectors)
	le.PutUint16(x[16:], p.MaxDiscardSegments)
}

func (p *params) unmarshal(b []byte) {
	_ = b[paramsDevtOff+16-1]
	p.Types = le.Uint32(b[4:])
	x := b[paramsBasicOff:]
	p.Attrs = le.Uint32(x[0:])
	p.LogicalBSShift, p.PhysicalBSShift, p.IOOptShift, p.IOMinShift = x[4], x[5], x[6], x[7]
	p.MaxSectors = le.Uint32(x[8:])
	p.ChunkSectors = le.Uint32(x[12:])
	p.DevSectors = le.Uint64(x[16:])
	p.VirtBoundaryMask = le.Uint64(x[24:])
	x = b[paramsDiscOff:]
	p.DiscardAlignment = le.Uint32(x[0:])
	p.DiscardGranularity = le.Uint32(x[4:])
	p.MaxDiscardSectors = le.Uint32(x[8:])
	p.MaxWriteZeroesSectors = le.Uint32(x[12:])
	p.MaxDiscardSegments = le.Uint16(x[16:])
	x = b[paramsDevtOff:]
	p.CharMajor, p.CharMinor = le.Uint32(x[0:]), le.Uint32(x[4:])
	p.DiskMajor, p.DiskMinor = le.Uint32(x[8:]), le.Uint32(x[12:])
}

// cmdBufSize is the size of queue's descriptor array mapping
// (ublk_queue_cmd_buf_size) and cmdBufMaxSize the stride between queues
// (ublk_max_cmd_buf_size).
func cmdBufSize(depth, pageSize int) int { return roundUp(depth*sizeofIODesc, pageSize) }
func cmdBufMaxSize(pageSize int) int     { return roundUp(maxQueueDepth*sizeofIODesc, pageSize) }

func roundUp(n, to int) int { return (n + to - 1) / to * to }
