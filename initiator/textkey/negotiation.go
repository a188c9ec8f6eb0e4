package textkey

import (
	"errors"
	"fmt"
	"slices"
)

// Negotiation is the initiator's side of one login's (or one Text
// exchange's) key negotiation, RFC 7143 section 6.2.
//
// Rules it applies to what the target sends (each violation is a
// *ProtocolError and ends the negotiation; later calls return it again):
//
//   - A key may arrive once per negotiation, as an answer or as an offer.
//   - An answer to a List offer is one of the values we offered; to a
//     NumMin offer a legal value not above ours; to NumMax not below ours;
//     to BoolAnd No, Yes only if we said Yes; to BoolOr Yes, No only if we
//     said No. Reject and Irrelevant leave the RFC default in force;
//     NotUnderstood does too, but is illegal for keys every RFC 7143
//     implementation must know (Def.Mandatory).
//   - A key the target offers is answered: List with the first of its
//     values we accept (our Prefer list, else the RFC default) or Reject;
//     NumMin/NumMax with the min/max of its value and ours, or Reject when
//     its value is out of range; BoolAnd/BoolOr with the AND/OR. Obsolete
//     keys (the RFC 3720 marker keys) are answered Reject (RFC 7143
//     section 13.25). Keys not in the table are answered NotUnderstood.
//     Malformed values and the special values Reject, Irrelevant or
//     NotUnderstood used as an offer are protocol errors.
//   - Declarative keys (MaxRecvDataSegmentLength, TargetAlias,
//     TargetPortalGroupTag, TargetAddress, ...) are recorded, never
//     answered; their values must be legal. Keys only an initiator sends
//     (InitiatorName, SessionType, ...) are protocol errors from a target.
//   - In a Text negotiation (NewTextNegotiation), login-only keys are
//     protocol errors.
//
// A Negotiation is not safe for concurrent use.
type Negotiation struct {
	text    bool
	entries map[string]*entry
	order   []*entry // entries in order of first use
	pending []KV     // offers not yet taken
	prefs   map[string]string
	err     error
}

type entry struct {
	key   string
	def   Def
	known bool

	offered bool   // Offer was called
	ours    string // the value we offered or declared
	sent    bool   // handed out by TakeOffers

	received bool   // the target sent the key
	theirs   string // what it sent

	result    string // the negotiated value
	hasResult bool
}

// NewNegotiation starts the negotiation of a login.
func NewNegotiation() *Negotiation {
	return &Negotiation{entries: map[string]*entry{}, prefs: map[string]string{}}
}

// NewTextNegotiation starts the negotiation of a Text exchange in full
// feature phase, where login-only keys are refused.
func NewTextNegotiation() *Negotiation {
	n := NewNegotiation()
	n.text = true
	return n
}

func (n *Negotiation) entry(key string) *entry {
	if e, ok := n.entries[key]; ok {
		return e
	}
	e := &entry{key: key}
	e.def, e.known = keyTable[key]
	n.entries[key] = e
	n.order = append(n.order, e)
	return e
}

// Offer queues key=value as our proposal (or, for a declarative key, our
// declaration). Offers go out in the order made. For a List key, value is
// the comma list of acceptable values, most preferred first. It fails if
// the key name or value is malformed, the key was already offered or
// received in this negotiation, only a target may send it, it is obsolete,
// or (in a Text negotiation) it is login-only. Keys not in the table (X-
// extension keys) may be offered; their answer is recorded as is.
func (n *Negotiation) Offer(key, value string) error {
	if err := ValidKey(key); err != nil {
		return fmt.Errorf("offer %s: %w", clip(key), err)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("offer %s: %w", key, err)
	}
	if isSpecial(value) {
		return fmt.Errorf("offer %s: %s is an answer, not an offer", key, value)
	}
	if e, ok := n.entries[key]; ok && (e.offered || e.received) {
		return fmt.Errorf("offer %s: already negotiated", key)
	}
	if d, ok := keyTable[key]; ok {
		switch {
		case d.Sender&SentByInitiator == 0:
			return fmt.Errorf("offer %s: only a target sends it", key)
		case d.Obsolete:
			return fmt.Errorf("offer %s: obsoleted by RFC 7143 section 13.25", key)
		case n.text && d.LoginOnly:
			return fmt.Errorf("offer %s: may be negotiated only during login", key)
		}
		if err := d.check(value); err != nil {
			return fmt.Errorf("offer %s=%s: %w", key, value, err)
		}
	}
	e := n.entry(key)
	e.offered, e.ours = true, value
	n.pending = append(n.pending, KV{Key: key, Value: value})
	return nil
}

// Prefer sets the value we answer with when the target offers key: for a
// List key the comma list of values we accept, for a numeric key our limit,
// for a boolean key our Yes or No. Without a preference the RFC default is
// used. An offer we made for the key (Offer) takes precedence.
func (n *Negotiation) Prefer(key, value string) error {
	d, ok := keyTable[key]
	switch {
	case !ok:
		return fmt.Errorf("prefer %s: unknown key", clip(key))
	case d.Kind == Declarative:
		return fmt.Errorf("prefer %s: declarative keys are not negotiated", key)
	case d.Obsolete:
		return fmt.Errorf("prefer %s: obsoleted by RFC 7143 section 13.25", key)
	case isSpecial(value):
		return fmt.Errorf("prefer %s: %s is not a preference", key, value)
	}
	if err := d.check(value); err != nil {
		return fmt.Errorf("prefer %s=%s: %w", key, value, err)
	}
	n.prefs[key] = value
	return nil
}

// TakeOffers returns the offers not yet taken, in the order they were made,
// and marks them sent: from now on the target's pairs for these keys are
// answers.
func (n *Negotiation) TakeOffers() []KV {
	kvs := n.pending
	n.pending = nil
	for _, kv := range kvs {
		n.entries[kv.Key].sent = true
	}
	return kvs
}

// Receive takes the target's pairs from one Login or Text Response (the
// whole C-bit sequence) and returns the pairs we owe it in the next
// request, in the order the target sent its offers. Keys it does not know
// it answers NotUnderstood. See the type's documentation for the rules.
func (n *Negotiation) Receive(kvs []KV) ([]KV, error) {
	if n.err != nil {
		return nil, n.err
	}
	var reply []KV
	for _, kv := range kvs {
		r, err := n.receive(kv.Key, kv.Value)
		if err != nil {
			n.err = err
			return nil, err
		}
		if r != "" {
			reply = append(reply, KV{Key: kv.Key, Value: r})
		}
	}
	return reply, nil
}

// Err is the protocol error that ended the negotiation, or nil.
func (n *Negotiation) Err() error { return n.err }

func (n *Negotiation) receive(key, v string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", protoErr(clip(key), v, "invalid key name: %v", err)
	}
	if err := checkValue(v); err != nil {
		return "", protoErr(key, "", "invalid value: %v", err)
	}
	e := n.entry(key)
	if e.received {
		return "", protoErr(key, v, "sent twice in one negotiation (first %q)", e.theirs)
	}
	e.received, e.theirs = true, v
	if e.offered && !e.sent {
		// The target offered first: our queued offer becomes our answer.
		n.pending = slices.DeleteFunc(n.pending, func(kv KV) bool { return kv.Key == key })
		if len(n.pending) == 0 {
			n.pending = nil
		}
	}

	if !e.known {
		if e.sent {
			e.result, e.hasResult = v, !isSpecial(v)
			return "", nil
		}
		if isSpecial(v) {
			return "", protoErr(key, v, "answer to a key we did not offer")
		}
		return NotUnderstood, nil
	}

	d := &e.def
	switch {
	case d.Kind == Declarative && e.sent && isSpecial(v):
		return "", nil // an answer to our own declaration; nothing changes
	case d.Sender&SentByTarget == 0:
		return "", protoErr(key, v, "only an initiator may send this key")
	case n.text && d.LoginOnly:
		return "", protoErr(key, v, "may be negotiated only during login")
	case d.Obsolete:
		if isSpecial(v) {
			return "", protoErr(key, v, "answer to a key we did not offer")
		}
		return Reject, nil // RFC 7143 section 13.25
	case d.Kind == Declarative:
		return "", n.declared(e, v)
	case e.sent:
		return "", n.answered(e, v)
	}
	return n.accept(e, v)
}

// declared records the target's declaration of a declarative key.
func (n *Negotiation) declared(e *entry, v string) error {
	if isSpecial(v) {
		return protoErr(e.key, v, "answer to a key we did not offer")
	}
	if err := e.def.check(v); err != nil {
		return protoErr(e.key, v, "%v", err)
	}
	e.result, e.hasResult = v, true
	return nil
}

// answered checks the target's answer to our offer.
func (n *Negotiation) answered(e *entry, v string) error {
	d := &e.def
	switch v {
	case NotUnderstood:
		if d.Mandatory {
			return protoErr(e.key, v, "every RFC 7143 implementation must understand this key")
		}
		return nil
	case Reject, Irrelevant:
		return nil
	}
	switch d.Kind {
	case List:
		if err := d.checkList(v); err != nil {
			return protoErr(e.key, v, "%v", err)
		}
		if len(SplitList(v)) != 1 {
			return protoErr(e.key, v, "answer must be a single value")
		}
		if !slices.Contains(SplitList(e.ours), v) {
			return protoErr(e.key, v, "not among the offered values %q", e.ours)
		}
	case NumMin, NumMax:
		a, err := d.number(v)
		if err != nil {
			return protoErr(e.key, v, "%v", err)
		}
		o, _ := d.number(e.ours) // checked by Offer
		if d.Kind == NumMin && d.less(o, a) {
			return protoErr(e.key, v, "answer above our offer %s (result function is minimum)", e.ours)
		}
		if d.Kind == NumMax && d.less(a, o) {
			return protoErr(e.key, v, "answer below our offer %s (result function is maximum)", e.ours)
		}
	case BoolAnd, BoolOr:
		if _, err := ParseBool(v); err != nil {
			return protoErr(e.key, v, "%v", err)
		}
		if d.Kind == BoolAnd && e.ours == No && v == Yes {
			return protoErr(e.key, v, "we offered No and the result function is AND")
		}
		if d.Kind == BoolOr && e.ours == Yes && v == No {
			return protoErr(e.key, v, "we offered Yes and the result function is OR")
		}
	}
	e.result, e.hasResult = v, true
	return nil
}

// accept answers a key the target offered.
func (n *Negotiation) accept(e *entry, v string) (string, error) {
	d := &e.def
	if isSpecial(v) {
		return "", protoErr(e.key, v, "answer to a key we did not offer")
	}
	ours := d.Default
	if p, ok := n.prefs[e.key]; ok {
		ours = p
	}
	if e.offered {
		ours = e.ours
	}
	var r string
	switch d.Kind {
	case List:
		if err := d.checkList(v); err != nil {
			return "", protoErr(e.key, v, "%v", err)
		}
		acceptable := SplitList(ours)
		for _, t := range SplitList(v) {
			if slices.Contains(acceptable, t) {
				r = t
				break
			}
		}
		if r == "" {
			return Reject, nil
		}
	case NumMin, NumMax:
		t, err := d.number(v)
		if errors.Is(err, errRange) {
			return Reject, nil
		}
		if err != nil {
			return "", protoErr(e.key, v, "%v", err)
		}
		o, _ := d.number(ours) // the default, or checked by Prefer/Offer
		pick := o
		if d.Kind == NumMin && d.less(t, o) || d.Kind == NumMax && d.less(o, t) {
			pick = t
		}
		r = FormatNumber(pick)
	case BoolAnd, BoolOr:
		t, err := ParseBool(v)
		if err != nil {
			return "", protoErr(e.key, v, "%v", err)
		}
		o := ours == Yes
		if d.Kind == BoolAnd {
			r = FormatBool(t && o)
		} else {
			r = FormatBool(t || o)
		}
	}
	e.result, e.hasResult = r, true
	return r, nil
}

// Result is the value in force for key: the negotiated value (for a
// declarative key, the value the target declared; for a sent BoolAnd No or
// BoolOr Yes offer, our value, answered or not), or the RFC default when
// the key was not negotiated or was answered Reject, Irrelevant or
// NotUnderstood. ok is false for keys with neither.
func (n *Negotiation) Result(key string) (string, bool) {
	if e, ok := n.entries[key]; ok {
		if e.hasResult {
			return e.result, true
		}
		if e.sent && !e.received && e.fixed() {
			return e.ours, true
		}
	}
	if d, ok := keyTable[key]; ok && d.Default != "" {
		return d.Default, true
	}
	return "", false
}

// Answer is what the target sent for key, raw (including Reject,
// Irrelevant and NotUnderstood).
func (n *Negotiation) Answer(key string) (string, bool) {
	if e, ok := n.entries[key]; ok && e.received {
		return e.theirs, true
	}
	return "", false
}

// Offered is the value we offered or declared for key.
func (n *Negotiation) Offered(key string) (string, bool) {
	if e, ok := n.entries[key]; ok && e.offered {
		return e.ours, true
	}
	return "", false
}

// Outstanding lists, in offer order, the keys we sent that still await an
// answer. Declarative keys are never awaited, nor are offers whose result
// is already fixed (BoolAnd No, BoolOr Yes), which targets may leave
// unanswered (RFC 7143 section 6.2; Linux LIO does).
func (n *Negotiation) Outstanding() []string {
	var keys []string
	for _, e := range n.order {
		if !e.sent || e.received {
			continue
		}
		if e.known && (e.def.Kind == Declarative || e.fixed()) {
			continue
		}
		keys = append(keys, e.key)
	}
	return keys
}

// fixed reports whether our offer alone decides the result: No for a
// BoolAnd key, Yes for a BoolOr key.
func (e *entry) fixed() bool {
	return e.known && e.offered &&
		(e.def.Kind == BoolAnd && e.ours == No || e.def.Kind == BoolOr && e.ours == Yes)
}
