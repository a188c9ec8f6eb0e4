package nbdkernel

// Values from the Linux uapi headers include/uapi/linux/nbd-netlink.h and
// include/uapi/linux/nbd.h (Linux 6.12). Each Go name is the C name in Go
// case without the NBD_ prefix.

// Generic netlink family.
const (
	genlFamilyName = "nbd" // NBD_GENL_FAMILY_NAME
	genlVersion    = 1     // NBD_GENL_VERSION
)

// Commands (enum NBD_CMD_*; not the NBD wire commands of nbd.h).
const (
	cmdConnect     = 1 // NBD_CMD_CONNECT
	cmdDisconnect  = 2 // NBD_CMD_DISCONNECT
	cmdReconfigure = 3 // NBD_CMD_RECONFIGURE
	cmdLinkDead    = 4 // NBD_CMD_LINK_DEAD (multicast)
	cmdStatus      = 5 // NBD_CMD_STATUS
)

// Attributes of the configuration policy (enum NBD_ATTR_*).
const (
	attrIndex             = 1  // NBD_ATTR_INDEX, u32
	attrSizeBytes         = 2  // NBD_ATTR_SIZE_BYTES, u64
	attrBlockSizeBytes    = 3  // NBD_ATTR_BLOCK_SIZE_BYTES, u64
	attrTimeout           = 4  // NBD_ATTR_TIMEOUT, u64 seconds
	attrServerFlags       = 5  // NBD_ATTR_SERVER_FLAGS, u64
	attrClientFlags       = 6  // NBD_ATTR_CLIENT_FLAGS, u64
	attrSockets           = 7  // NBD_ATTR_SOCKETS, nested
	attrDeadConnTimeout   = 8  // NBD_ATTR_DEAD_CONN_TIMEOUT, u64 seconds
	attrDeviceList        = 9  // NBD_ATTR_DEVICE_LIST, nested (STATUS reply)
	attrBackendIdentifier = 10 // NBD_ATTR_BACKEND_IDENTIFIER, string
)

// Inside NBD_ATTR_SOCKETS: NBD_SOCK_ITEM nests, each holding one NBD_SOCK_FD.
const (
	sockItem = 1 // NBD_SOCK_ITEM
	sockFD   = 1 // NBD_SOCK_FD, u32
)

// Inside NBD_ATTR_DEVICE_LIST: NBD_DEVICE_ITEM nests.
const (
	deviceItem      = 1 // NBD_DEVICE_ITEM
	deviceIndex     = 1 // NBD_DEVICE_INDEX, u32
	deviceConnected = 2 // NBD_DEVICE_CONNECTED, u8
)

// Server (transmission) flags the driver understands, for
// NBD_ATTR_SERVER_FLAGS (nbd.h NBD_FLAG_*; the same bits as the NBD
// protocol's transmission flags).
const (
	flagHasFlags        = 1 << 0 // NBD_FLAG_HAS_FLAGS
	flagReadOnly        = 1 << 1 // NBD_FLAG_READ_ONLY
	flagSendFlush       = 1 << 2 // NBD_FLAG_SEND_FLUSH
	flagSendFUA         = 1 << 3 // NBD_FLAG_SEND_FUA
	flagRotational      = 1 << 4 // NBD_FLAG_ROTATIONAL
	flagSendTrim        = 1 << 5 // NBD_FLAG_SEND_TRIM
	flagSendWriteZeroes = 1 << 6 // NBD_FLAG_SEND_WRITE_ZEROES
	flagCanMultiConn    = 1 << 8 // NBD_FLAG_CAN_MULTI_CONN

	kernelFlags = flagHasFlags | flagReadOnly | flagSendFlush | flagSendFUA | flagRotational |
		flagSendTrim | flagSendWriteZeroes | flagCanMultiConn
)

// Client flags for NBD_ATTR_CLIENT_FLAGS (nbd.h NBD_CFLAG_*).
const (
	cflagDestroyOnDisconnect = 1 << 0 // NBD_CFLAG_DESTROY_ON_DISCONNECT
	cflagDisconnectOnClose   = 1 << 1 // NBD_CFLAG_DISCONNECT_ON_CLOSE
)

// NBD_MAJOR (linux/major.h): the block major of /dev/nbdN.
const nbdMajor = 43

// The driver's smallest block size (nbd_is_valid_blksize; the largest is
// the page size).
const minBlockSize = 512
