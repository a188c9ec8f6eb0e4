// Package pdu is the iSCSI PDU codec of iser-attach: the wire formats of
// RFC 7143 section 11, the CRC32C digests of section 13.1 and the iSER
// header of RFC 7145, and nothing else. It holds no connection or session
// state and does no I/O, so the datamovers, the session and the fake
// targets in tests share one encoding.
//
// BHS is the 48-byte Basic Header Segment with its common fields (opcode,
// I and F bits, AHS and data segment lengths, ITT). Each PDU type has a
// header struct named after RFC 7143 (SCSICommand, SCSIResponse, DataIn,
// DataOut, R2T, NOPOut, NOPIn, TaskMgmtRequest, TaskMgmtResponse,
// LoginRequest, LoginResponse, TextRequest, TextResponse, LogoutRequest,
// LogoutResponse, Reject, AsyncMessage, SNACKRequest) whose Marshal writes
// a whole BHS and whose Unmarshal checks the opcode and the field
// combinations RFC 7143 forbids, failing with a *ProtocolError. PDU bundles
// a BHS with its raw AHS and its data segment; ExtendedCDBAHS,
// BidiReadLengthAHS and ParseAHS encode and split Additional Header
// Segments (section 11.2.2).
//
// CRC32C, PutDigest and ParseDigest compute and place the header and data
// digests (little-endian on the wire, as Linux and tgt send them).
// ISERHeader is the 28-byte iSER header (RFC 7145 section 9.2) that precedes
// the BHS in every RDMA SEND, and ISERPrivateData the iSER CM REQ private
// data (section 9.1).
//
// A *ProtocolError means the peer broke the protocol and the connection
// that carried the PDU cannot be trusted any more; callers find it with
// errors.As.
package pdu
