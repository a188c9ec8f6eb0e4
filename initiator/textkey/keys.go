package textkey

import (
	"fmt"
	"slices"
)

// Kind is how a key's result is reached (RFC 7143 section 6.2).
type Kind int

const (
	// List: the offer is a comma list in order of preference; the answer is
	// the first offered value the responder supports (or Reject).
	List Kind = iota + 1
	// NumMin: the result is the smaller of offer and answer.
	NumMin
	// NumMax: the result is the larger of offer and answer.
	NumMax
	// BoolAnd: the result is Yes only if both sides say Yes.
	BoolAnd
	// BoolOr: the result is Yes if either side says Yes.
	BoolOr
	// Declarative: each side states its own value; nothing is answered.
	Declarative
)

func (k Kind) String() string {
	switch k {
	case List:
		return "list"
	case NumMin:
		return "numerical-min"
	case NumMax:
		return "numerical-max"
	case BoolAnd:
		return "boolean-and"
	case BoolOr:
		return "boolean-or"
	case Declarative:
		return "declarative"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Sender says who may send a key.
type Sender uint8

const (
	SentByInitiator Sender = 1 << iota
	SentByTarget
	SentByBoth = SentByInitiator | SentByTarget
)

// Use says when a key may be negotiated (the "Use:" line of RFC 7143
// section 13).
type Use uint8

const (
	UseSecurity Use = iota + 1 // security negotiation stage of a login
	UseIO                      // login of every connection ("Initialize Only")
	UseLO                      // leading login of a session only
	UseAll                     // login and full feature phase (Text requests)
	UseFFPO                    // full feature phase only
)

// Special values an acceptor may answer with (RFC 7143 section 6.2).
const (
	Irrelevant    = "Irrelevant"
	Reject        = "Reject"
	NotUnderstood = "NotUnderstood"
	Yes           = "Yes"
	No            = "No"
	None          = "None"
)

// Def describes one key of RFC 7143 section 13, RFC 7144 or RFC 7145
// section 6.
type Def struct {
	Name string
	Kind Kind
	// Default is the value in force when the key is not negotiated; empty
	// for keys without one (names, aliases, addresses).
	Default string
	// Numeric keys take a numerical-value between Min and Max.
	Numeric  bool
	Min, Max uint64
	// ZeroUnlimited: 0 is legal besides Min..Max and means "no limit",
	// larger than any other value for the result function.
	ZeroUnlimited bool
	// Values are the values defined for a List key (or an enumerated
	// declarative key); others may be offered but are never chosen.
	Values []string
	// MaxLen is the longest legal value in bytes.
	MaxLen int
	Sender Sender
	Use    Use
	// LoginOnly keys may not be sent in a Text request.
	LoginOnly bool
	// Mandatory keys must be understood by every RFC 7143 implementation,
	// so NotUnderstood is not a legal answer to them.
	Mandatory bool
	// Obsolete keys (RFC 7143 section 13.25: the marker keys) are answered
	// Reject and may not be offered.
	Obsolete bool
	// RFC names the document and section defining the key.
	RFC string
}

func num(name string, kind Kind, def string, lo, hi uint64, use Use, rfc string) Def {
	return Def{Name: name, Kind: kind, Default: def, Numeric: true, Min: lo, Max: hi,
		Sender: SentByBoth, Use: use, Mandatory: true, RFC: rfc}
}

func boolean(name string, kind Kind, def string, use Use, rfc string) Def {
	return Def{Name: name, Kind: kind, Default: def, Values: []string{Yes, No},
		Sender: SentByBoth, Use: use, Mandatory: true, RFC: rfc}
}

func list(name, def string, use Use, rfc string, values ...string) Def {
	return Def{Name: name, Kind: List, Default: def, Values: values,
		Sender: SentByBoth, Use: use, Mandatory: true, RFC: rfc}
}

func decl(name string, sender Sender, use Use, maxLen int, rfc string) Def {
	return Def{Name: name, Kind: Declarative, MaxLen: maxLen,
		Sender: sender, Use: use, Mandatory: true, RFC: rfc}
}

const maxSegment = 1<<24 - 1 // 16777215, the upper bound of the length keys

var keyTable = func() map[string]Def {
	defs := []Def{
		list("AuthMethod", None, UseSecurity, "RFC 7143 12.1",
			"KRB5", "SPKM1", "SPKM2", "SRP", "CHAP", None),
		list("HeaderDigest", None, UseIO, "RFC 7143 13.1", "CRC32C", None),
		list("DataDigest", None, UseIO, "RFC 7143 13.1", "CRC32C", None),
		num("MaxConnections", NumMin, "1", 1, 65535, UseLO, "RFC 7143 13.2"),
		decl("SendTargets", SentByInitiator, UseFFPO, MaxValueLen, "RFC 7143 13.3"),
		decl("TargetName", SentByBoth, UseAll, 223, "RFC 7143 13.4"),
		decl("InitiatorName", SentByInitiator, UseIO, 223, "RFC 7143 13.5"),
		decl("TargetAlias", SentByTarget, UseAll, MaxValueLen, "RFC 7143 13.6"),
		decl("InitiatorAlias", SentByInitiator, UseAll, MaxValueLen, "RFC 7143 13.7"),
		decl("TargetAddress", SentByTarget, UseAll, MaxValueLen, "RFC 7143 13.8"),
		func() Def {
			d := decl("TargetPortalGroupTag", SentByTarget, UseIO, 5, "RFC 7143 13.9")
			d.Numeric, d.Min, d.Max = true, 0, 65535
			return d
		}(),
		boolean("InitialR2T", BoolOr, Yes, UseLO, "RFC 7143 13.10"),
		boolean("ImmediateData", BoolAnd, Yes, UseLO, "RFC 7143 13.11"),
		func() Def {
			d := num("MaxRecvDataSegmentLength", Declarative, "8192", 512, maxSegment, UseAll, "RFC 7143 13.12")
			return d
		}(),
		num("MaxBurstLength", NumMin, "262144", 512, maxSegment, UseLO, "RFC 7143 13.13"),
		num("FirstBurstLength", NumMin, "65536", 512, maxSegment, UseLO, "RFC 7143 13.14"),
		num("DefaultTime2Wait", NumMax, "2", 0, 3600, UseLO, "RFC 7143 13.15"),
		num("DefaultTime2Retain", NumMin, "20", 0, 3600, UseLO, "RFC 7143 13.16"),
		num("MaxOutstandingR2T", NumMin, "1", 1, 65535, UseLO, "RFC 7143 13.17"),
		boolean("DataPDUInOrder", BoolOr, Yes, UseLO, "RFC 7143 13.18"),
		boolean("DataSequenceInOrder", BoolOr, Yes, UseLO, "RFC 7143 13.19"),
		num("ErrorRecoveryLevel", NumMin, "0", 0, 2, UseLO, "RFC 7143 13.20"),
		func() Def {
			d := decl("SessionType", SentByInitiator, UseLO, 9, "RFC 7143 13.21")
			d.Default, d.Values = "Normal", []string{"Discovery", "Normal"}
			return d
		}(),
		list("TaskReporting", "RFC3720", UseLO, "RFC 7143 13.23", "RFC3720", "ResponseFence", "FastAbort"),
		func() Def {
			d := num("iSCSIProtocolLevel", NumMin, "0", 0, 31, UseLO, "RFC 7144 2")
			d.Mandatory = false
			return d
		}(),

		// Obsoleted by RFC 7143 section 13.25 (defined in RFC 3720 A.3).
		obsolete(boolean("IFMarker", BoolAnd, No, UseIO, "RFC 3720 A.3.1")),
		obsolete(boolean("OFMarker", BoolAnd, No, UseIO, "RFC 3720 A.3.1")),
		obsolete(decl("IFMarkInt", SentByBoth, UseIO, MaxValueLen, "RFC 3720 A.3.2")),
		obsolete(decl("OFMarkInt", SentByBoth, UseIO, MaxValueLen, "RFC 3720 A.3.2")),

		// iSER, RFC 7145 section 6. Targets without iSER may answer
		// NotUnderstood (LIO does for the last four).
		iser(boolean("RDMAExtensions", BoolAnd, No, UseLO, "RFC 7145 6")),
		iser(num("TargetRecvDataSegmentLength", NumMin, "8192", 512, maxSegment, UseIO, "RFC 7145 6")),
		iser(num("InitiatorRecvDataSegmentLength", NumMin, "8192", 512, maxSegment, UseIO, "RFC 7145 6")),
		func() Def {
			d := iser(num("MaxOutstandingUnexpectedPDUs", NumMin, "0", 2, 1<<32-1, UseLO, "RFC 7145 6"))
			d.ZeroUnlimited = true
			return d
		}(),
		iser(num("MaxAHSLength", NumMin, "256", 2, 65535, UseLO, "RFC 7145 6")),
		iser(boolean("TaggedBufferForSolicitedDataOnly", BoolOr, No, UseLO, "RFC 7145 6")),
		iser(boolean("iSERHelloRequired", BoolOr, No, UseLO, "RFC 7145 6")),
	}
	m := make(map[string]Def, len(defs))
	for _, d := range defs {
		if d.MaxLen == 0 {
			d.MaxLen = MaxValueLen
		}
		d.LoginOnly = d.Use != UseAll && d.Use != UseFFPO
		if _, dup := m[d.Name]; dup {
			panic("textkey: duplicate key definition " + d.Name)
		}
		m[d.Name] = d
	}
	return m
}()

func obsolete(d Def) Def {
	d.Obsolete, d.Mandatory = true, false
	return d
}

func iser(d Def) Def {
	d.Mandatory = false
	return d
}

// Lookup returns the definition of a key of RFC 7143 section 13 (plus the
// obsoleted marker keys), RFC 7144 or RFC 7145 section 6. Security keys of
// the authentication methods (CHAP_*, SRP_*) are not in the table.
func Lookup(name string) (Def, bool) {
	d, ok := keyTable[name]
	d.Values = slices.Clone(d.Values)
	return d, ok
}

// Keys lists the names of all defined keys, sorted.
func Keys() []string {
	names := make([]string, 0, len(keyTable))
	for n := range keyTable {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
