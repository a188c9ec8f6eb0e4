// Package textkey encodes, decodes and negotiates iSCSI text keys: the
// key=value pairs carried in the data segment of Login and Text PDUs
// (RFC 7143 sections 6 and 13, RFC 7145 section 6 for the iSER keys).
//
// # Wire format
//
// A logical text data segment is a sequence of key=value pairs, each followed
// by one NUL byte. Parse and Decoder read such a segment into ordered [KV]
// pairs; they never build a map, because order matters and SendTargets
// responses repeat TargetName and TargetAddress. A pair split across PDUs by
// the C (continue) bit is the caller's business: concatenate the data
// segments of the whole sequence first, then parse. Encode and Encoder write
// pairs back.
//
// # Negotiation
//
// [Negotiation] runs the operational (and, if asked, security) key
// negotiation of one login or one Text exchange from the initiator's side.
// Offer queues what we propose, TakeOffers hands them to the PDU writer,
// Receive checks every key=value pair the target sends against the rules of
// RFC 7143 section 6.2 and the key table of section 13 (see [Lookup]) and
// returns the answers we owe the target, and Results reports the negotiated
// values with RFC defaults filled in. Every violation by the target is a
// *[ProtocolError] naming the key and the value.
//
// Receive answers keys it does not know with NotUnderstood (RFC 7143 section
// 6.2). Security keys of the CHAP exchange (CHAP_A, CHAP_I, CHAP_C, CHAP_N,
// CHAP_R) are not in the table: the login code must take them out of the
// target's pairs before calling Receive, or they are answered NotUnderstood.
//
// # Concurrency
//
// Nothing in this package starts goroutines. Parse, Encode, Get and Lookup
// are safe for concurrent use. A Decoder, an Encoder and a Negotiation are
// not: each belongs to the one goroutine driving its login or Text exchange.
package textkey
