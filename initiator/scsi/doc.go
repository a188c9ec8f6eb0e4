// Package scsi builds SCSI command descriptor blocks (CDBs) and parses the
// data, status and sense that targets return. It is a pure codec: it performs
// no I/O, starts no goroutines and keeps no state, so every function is safe
// for concurrent use.
//
// Field names and layouts follow SPC-4 (primary commands, sense data, VPD
// pages), SBC-4 (block commands, READ CAPACITY, block limits, logical block
// provisioning) and SAM-5 (status codes, LUN encoding). Where targets or the
// Linux SCSI midlayer differ from the standards in a way that matters to an
// initiator, the code says so.
//
// # Building commands
//
// Every builder returns a [CDB], a small value type that holds up to 16 bytes
// and never allocates; copy CDB.Bytes() into the iSCSI BHS. [Read] and
// [Write] pick the 10- or 16-byte form from the LBA and block count.
//
// # Parsing responses
//
// Parsers take the Data-In bytes as received (possibly fewer than the
// allocation length, possibly more than the target meant to send), check
// every length field against the buffer, and return an error wrapping
// [ErrShortData] or [ErrMalformed] instead of panicking. Parsed values never
// alias the input: byte slices they return are copies, so the caller may
// reuse its receive buffer at once.
//
// Marshal methods on the parsed types produce the target side of the same
// formats; they exist for fake targets in tests and for round-trip fuzzing.
//
// # Status and sense
//
// [CheckStatus] turns the SCSI status byte and the sense data from a SCSI
// Response PDU (see [ParseSenseSegment]) into nil, a [*SenseError] or a
// [*StatusError]. Both error types report whether a retry can help and
// which errno the Linux block layer would report for the same failure.
//
// # Asymmetric access (ALUA)
//
// [ReportTargetPortGroups] and [ParseReportTargetPortGroups] read a LU's
// target port groups and their [AccessState]s (SPC-4 5.16, 6.36), in the
// extended or the length-only format; [Sense.ALUA] classifies the senses that
// ALUA defines (NOT READY 04/0A-0C, UNIT ATTENTION 2A/06-07). They are the
// codec a path selector needs; this package decides nothing about paths.
package scsi
