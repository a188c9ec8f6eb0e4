// Package initiator is the iSCSI layer of iser-attach (RFC 7143): login
// with CHAP, the full feature phase with its CmdSN window, SCSI commands
// with sense, NOP keepalives, task management and logout, and LUN, a
// logical unit as a block backend. The PDU codec it speaks (BHS, typed
// headers, AHS, digests, the iSER header) is package pdu.
//
// Data moves through a Datamover (RFC 5047). TCPDatamover is iSCSI/TCP;
// the iSER datamover (RFC 7145) sits on package rdma. Session never asks
// which one it runs on: it hands SCSI Commands and their buffers to the
// datamover and gets back status PDUs.
//
// A Session lives as long as its connection. A Nexus outlives sessions:
// when one fails it logs in again with the same ISID (session
// reinstatement), through the next portal if need be, reissues the
// commands that were in flight, and holds new ones back for up to the
// replacement timeout, after which they fail with EIO while recovery goes
// on. A LUN runs on either (the Executor interface).
//
// Concurrency: Session, Nexus and LUN are safe for concurrent use. A
// Session owns two goroutines (reader, keepalive), started by NewSession
// and ended by Close or by a connection failure; a Nexus owns its monitor,
// ended by Close. See each type for the order.
//
// Subpackages: pdu (the PDU codec; pure), scsi (CDBs, sense, VPD parsing;
// pure) and textkey (ordered text keys and their negotiation; pure).
package initiator
