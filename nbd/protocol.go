package nbd

// Wire constants of the NBD protocol (NetworkBlockDevice/nbd doc/proto.md).
// Each Go name is the spec name without the NBD_ prefix, in Go case:
// NBD_OPT_GO is optGo, NBD_REP_ERR_UNSUP is repErrUnsup, NBD_CMD_FLAG_FUA is
// cmdFlagFUA. All integers are big-endian on the wire.

// Handshake magics.
const (
	nbdMagic       = uint64(0x4e42444d41474943) // "NBDMAGIC" (INIT_PASSWD)
	iHaveOpt       = uint64(0x49484156454F5054) // "IHAVEOPT", option magic
	optReplyMagic  = uint64(0x0003e889045565a9) // option reply magic
	requestMagic   = uint32(0x25609513)         // NBD_REQUEST_MAGIC
	simpleReplyMag = uint32(0x67446698)         // NBD_SIMPLE_REPLY_MAGIC
)

// Handshake flags (server, 16 bits) and client flags (32 bits).
const (
	flagFixedNewstyle  = uint16(1 << 0) // NBD_FLAG_FIXED_NEWSTYLE
	flagNoZeroes       = uint16(1 << 1) // NBD_FLAG_NO_ZEROES
	flagCFixedNewstyle = uint32(1 << 0) // NBD_FLAG_C_FIXED_NEWSTYLE
	flagCNoZeroes      = uint32(1 << 1) // NBD_FLAG_C_NO_ZEROES
)

// Transmission flags (16 bits), sent with NBD_INFO_EXPORT or after
// NBD_OPT_EXPORT_NAME.
const (
	flagHasFlags        = uint16(1 << 0)  // NBD_FLAG_HAS_FLAGS
	flagReadOnly        = uint16(1 << 1)  // NBD_FLAG_READ_ONLY
	flagSendFlush       = uint16(1 << 2)  // NBD_FLAG_SEND_FLUSH
	flagSendFUA         = uint16(1 << 3)  // NBD_FLAG_SEND_FUA
	flagRotational      = uint16(1 << 4)  // NBD_FLAG_ROTATIONAL
	flagSendTrim        = uint16(1 << 5)  // NBD_FLAG_SEND_TRIM
	flagSendWriteZeroes = uint16(1 << 6)  // NBD_FLAG_SEND_WRITE_ZEROES
	flagSendDF          = uint16(1 << 7)  // NBD_FLAG_SEND_DF
	flagCanMultiConn    = uint16(1 << 8)  // NBD_FLAG_CAN_MULTI_CONN
	flagSendResize      = uint16(1 << 9)  // NBD_FLAG_SEND_RESIZE
	flagSendCache       = uint16(1 << 10) // NBD_FLAG_SEND_CACHE
	flagSendFastZero    = uint16(1 << 11) // NBD_FLAG_SEND_FAST_ZERO
)

// Option types.
const (
	optExportName      = uint32(1)  // NBD_OPT_EXPORT_NAME
	optAbort           = uint32(2)  // NBD_OPT_ABORT
	optList            = uint32(3)  // NBD_OPT_LIST
	optStartTLS        = uint32(5)  // NBD_OPT_STARTTLS
	optInfo            = uint32(6)  // NBD_OPT_INFO
	optGo              = uint32(7)  // NBD_OPT_GO
	optStructuredReply = uint32(8)  // NBD_OPT_STRUCTURED_REPLY
	optListMetaContext = uint32(9)  // NBD_OPT_LIST_META_CONTEXT
	optSetMetaContext  = uint32(10) // NBD_OPT_SET_META_CONTEXT
	optExtendedHeaders = uint32(11) // NBD_OPT_EXTENDED_HEADERS
)

// Option reply types. Errors have bit 31 set.
const (
	repAck             = uint32(1)         // NBD_REP_ACK
	repServer          = uint32(2)         // NBD_REP_SERVER
	repInfo            = uint32(3)         // NBD_REP_INFO
	repErrUnsup        = uint32(1<<31 | 1) // NBD_REP_ERR_UNSUP
	repErrPolicy       = uint32(1<<31 | 2) // NBD_REP_ERR_POLICY
	repErrInvalid      = uint32(1<<31 | 3) // NBD_REP_ERR_INVALID
	repErrUnknown      = uint32(1<<31 | 6) // NBD_REP_ERR_UNKNOWN
	repErrShutdown     = uint32(1<<31 | 7) // NBD_REP_ERR_SHUTDOWN
	repErrTooBig       = uint32(1<<31 | 9) // NBD_REP_ERR_TOO_BIG
	repErrBlockSizeReq = uint32(1<<31 | 8) // NBD_REP_ERR_BLOCK_SIZE_REQD
	repFlagError       = uint32(1 << 31)   // bit set on every error reply
)

// Information types carried in NBD_REP_INFO replies to NBD_OPT_INFO/GO.
const (
	infoExport      = uint16(0) // NBD_INFO_EXPORT
	infoName        = uint16(1) // NBD_INFO_NAME
	infoDescription = uint16(2) // NBD_INFO_DESCRIPTION
	infoBlockSize   = uint16(3) // NBD_INFO_BLOCK_SIZE
)

// Request types.
const (
	cmdRead        = uint16(0) // NBD_CMD_READ
	cmdWrite       = uint16(1) // NBD_CMD_WRITE
	cmdDisc        = uint16(2) // NBD_CMD_DISC
	cmdFlush       = uint16(3) // NBD_CMD_FLUSH
	cmdTrim        = uint16(4) // NBD_CMD_TRIM
	cmdCache       = uint16(5) // NBD_CMD_CACHE
	cmdWriteZeroes = uint16(6) // NBD_CMD_WRITE_ZEROES
	cmdBlockStatus = uint16(7) // NBD_CMD_BLOCK_STATUS
	cmdResize      = uint16(8) // NBD_CMD_RESIZE
)

// Command flags.
const (
	cmdFlagFUA      = uint16(1 << 0) // NBD_CMD_FLAG_FUA
	cmdFlagNoHole   = uint16(1 << 1) // NBD_CMD_FLAG_NO_HOLE
	cmdFlagDF       = uint16(1 << 2) // NBD_CMD_FLAG_DF
	cmdFlagReqOne   = uint16(1 << 3) // NBD_CMD_FLAG_REQ_ONE
	cmdFlagFastZero = uint16(1 << 4) // NBD_CMD_FLAG_FAST_ZERO
)

// Error values in simple replies. They equal the Linux errno numbers, but
// the protocol fixes them, so they are spelled out rather than taken from
// syscall.
const (
	errPerm     = uint32(1)   // NBD_EPERM
	errIO       = uint32(5)   // NBD_EIO
	errNoMem    = uint32(12)  // NBD_ENOMEM
	errInval    = uint32(22)  // NBD_EINVAL
	errNoSpc    = uint32(28)  // NBD_ENOSPC
	errOverflow = uint32(75)  // NBD_EOVERFLOW
	errNotSup   = uint32(95)  // NBD_ENOTSUP
	errShutdown = uint32(108) // NBD_ESHUTDOWN
)

// Sizes and limits.
const (
	requestHeaderLen = 28 // magic, flags, type, handle, offset, length
	replyHeaderLen   = 16 // magic, error, handle
	optHeaderLen     = 16 // magic, option, length

	// maxPayload is the largest READ or WRITE the server accepts: the 32 MiB
	// every client assumes when no maximum block size is advertised. It is
	// also the advertised maximum block size.
	maxPayload = 32 << 20

	// maxOptionLen bounds option data the server reads into memory. Strings
	// are at most 4096 bytes (proto.md "Conventions"); NBD_OPT_GO carries one
	// name and a list of 16-bit info types.
	maxOptionLen = 16 << 10

	// maxBlockSize is the largest minimum block size the protocol allows.
	maxBlockSize = 64 << 10
)
