package initiator

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/textkey"
)

// LoginConfig says who logs in to what (RFC 7143 section 6).
type LoginConfig struct {
	InitiatorName  string
	InitiatorAlias string
	// TargetName is empty for a discovery session.
	TargetName string
	// Discovery selects SessionType=Discovery.
	Discovery bool
	// ISID and TSIH identify the session; TSIH 0 asks for a new session (or
	// reinstates the one with the same ISID).
	ISID pdu.ISID
	TSIH uint16
	CID  uint16
	// CHAP, when set, requires CHAP authentication; a discovery session
	// with one-way credentials offers CHAP,None instead, so a portal that
	// does not authenticate discovery still answers (see offerAuth).
	CHAP *CHAPCredentials
	// Want holds the operational values to offer.
	Want Params
}

// loginResult is what a successful login leaves for the session.
type loginResult struct {
	params     Params
	tsih       uint16
	cmdSN      uint32
	expStatSN  uint32
	expCmdSN   uint32
	maxCmdSN   uint32
	targetAddr []string // TargetAddress keys (redirection)
}

// LoginError is a Login Response with a non-zero status class (RFC 7143
// section 11.13.5).
type LoginError struct {
	Class, Detail uint8
	// Redirect holds the TargetAddress of a redirection (class 1).
	Redirect string
	// Initiator is the InitiatorName the login offered; the message names
	// it when the target refused that initiator (detail 1, 2 or 3 of
	// class 2).
	Initiator string
	// Target is the TargetName of a normal session's login ("" for
	// discovery); with it a refusal as not authorized (detail 2) or target
	// not found (detail 3) points at the target's ACL.
	Target string
}

var loginStatus = map[uint16]string{
	0x0101: "target moved temporarily", 0x0102: "target moved permanently",
	0x0200: "initiator error", 0x0201: "authentication failed",
	0x0202: "authorization failure (initiator not allowed to access this target)",
	0x0203: "target not found", 0x0204: "target removed", 0x0205: "unsupported iSCSI version",
	0x0206: "too many connections", 0x0207: "missing parameter",
	0x0208: "cannot include connection in session", 0x0209: "session type not supported",
	0x020a: "session does not exist", 0x020b: "invalid request during login",
	0x0300: "target error", 0x0301: "service unavailable", 0x0302: "out of resources",
}

func (e *LoginError) Error() string {
	s, ok := loginStatus[uint16(e.Class)<<8|uint16(e.Detail)]
	if !ok {
		switch e.Class {
		case 1:
			s = "redirection"
		case 2:
			s = "initiator error"
		case 3:
			s = "target error"
		default:
			s = "unknown status"
		}
	}
	msg := fmt.Sprintf("login rejected: %s (status class 0x%02x detail 0x%02x)", s, e.Class, e.Detail)
	if e.Redirect != "" {
		msg += " to " + e.Redirect
	}
	switch {
	case e.Class != 2 || e.Initiator == "":
	case e.Detail == 2 && e.Target != "":
		msg += ": the target's ACL does not admit initiator " + e.Initiator + "; add it there (" + aclHint(e.Target, e.Initiator) + ")"
	case e.Detail == 3 && e.Target != "":
		// tgt answers so for an initiator its ACL does not admit, too.
		msg += ": no target " + e.Target + " for initiator " + e.Initiator +
			" here: check the name (iser-attach discover PORTAL) and that the target's ACL admits the initiator (" + aclHint(e.Target, e.Initiator) + ")"
	case e.Detail == 1 || e.Detail == 2 || e.Detail == 3:
		msg += "; initiator name " + e.Initiator
	}
	return msg
}

// aclHint says how LIO and tgt admit initiator to target.
func aclHint(target, initiator string) string {
	return "LIO: targetcli /iscsi/" + target + "/tpg1/acls create " + initiator +
		"; tgt: tgtadm --lld iscsi --mode target --op bind --tid TID --initiator-name " + initiator
}

// ErrAuthFailed is wrapped by login errors caused by authentication.
var ErrAuthFailed = errors.New("authentication failed")

// authRefusedError is ErrAuthFailed decided by the exchange itself, not a
// guess from a lost connection (chapUnansweredError): the target asked
// for CHAP and none was given, refused CHAP, sent no challenge, or failed
// mutual authentication. The same login fails the same way again
// (LoginRefused). Its message is ErrAuthFailed's.
type authRefusedError struct{}

func (authRefusedError) Error() string { return ErrAuthFailed.Error() }
func (authRefusedError) Unwrap() error { return ErrAuthFailed }

var errAuthRefused error = authRefusedError{}

// ErrCHAPAlgorithmsRefused matches a CHAPAlgorithmError.
var ErrCHAPAlgorithmsRefused = errors.New("CHAP algorithm list refused")

// CHAPAlgorithmError is a login refused because of the CHAP algorithm:
// the CHAP_A offer itself (Chosen 0), or a response under an algorithm
// number targets disagree on. Connect retries without it.
type CHAPAlgorithmError struct {
	Offered string
	Chosen  CHAPAlgorithm
	Err     error
}

func (e *CHAPAlgorithmError) Error() string {
	if e.Chosen == 0 {
		return fmt.Sprintf("login: target refused CHAP_A=%s: %v", e.Offered, e.Err)
	}
	return fmt.Sprintf("login: CHAP with algorithm %d (%s) refused: %v", int(e.Chosen), e.Chosen, e.Err)
}

func (e *CHAPAlgorithmError) Unwrap() []error { return []error{ErrCHAPAlgorithmsRefused, e.Err} }

// Is lets errors.Is(err, ErrAuthFailed) match status 0x0201.
func (e *LoginError) Is(target error) bool {
	return target == ErrAuthFailed && e.Class == 2 && e.Detail == 1
}

// Permanent reports whether logging in again cannot help: status class 2
// (initiator error: authentication or authorization failed, no such
// target, target removed, unsupported version, a request the target does
// not take), which RFC 7143 section 11.13.5 says not to retry as it was.
// Two details of class 2 are state on the target that changes, and are
// not permanent: too many connections (0x06; an old one may go) and
// session does not exist (0x0a). Redirections (class 1) and target errors
// (class 3: service unavailable, out of resources) are not permanent.
func (e *LoginError) Permanent() bool {
	return e.Class == 2 && e.Detail != 0x06 && e.Detail != 0x0a
}

// LoginRefused reports whether err is a login the target refused for a
// reason that retrying the same login cannot fix: a Login Response whose
// status is Permanent, or an authentication failure decided in the
// exchange (the target wants CHAP and no credentials were given, or it
// failed mutual CHAP). A failure that may pass (a refused or timed-out
// connection, a target error of class 3, a connection lost right after
// the CHAP response) is not. When every portal of a Nexus was tried, err
// is refused only if each portal refused it.
func LoginRefused(err error) bool {
	var pe portalErrors
	if errors.As(err, &pe) {
		for _, e := range pe {
			if !loginRefused(e) {
				return false
			}
		}
		return len(pe) > 0
	}
	return loginRefused(err)
}

func loginRefused(err error) bool {
	var le *LoginError
	if errors.As(err, &le) {
		return le.Permanent()
	}
	return errors.Is(err, errAuthRefused)
}

// login runs the login phase over dm (RFC 7143 section 6.3). It reads the
// responses itself: the session's reader starts only afterwards.
func login(ctx context.Context, dm Datamover, cfg *LoginConfig) (*loginResult, error) {
	if cfg.InitiatorName == "" {
		return nil, errors.New("login: initiator name is empty")
	}
	if !cfg.Discovery && cfg.TargetName == "" {
		return nil, errors.New("login: target name is empty")
	}
	if cfg.CHAP != nil {
		if err := cfg.CHAP.Validate(); err != nil {
			return nil, fmt.Errorf("login: %w", err)
		}
	}
	stop := context.AfterFunc(ctx, func() { dm.Close() })
	defer stop()
	res, err := runLogin(dm, cfg)
	if err != nil && ctx.Err() != nil {
		var cu *chapUnansweredError
		if errors.As(err, &cu) {
			return nil, fmt.Errorf("login: %w: %w", errCHAPUnanswered, ctx.Err())
		}
		return nil, fmt.Errorf("login: %w", ctx.Err())
	}
	return res, err
}

// errCHAPUnanswered marks a login whose time ran out while it waited for
// the answer to its CHAP response. LIO over iSER refuses a wrong secret
// by tearing the connection down, and its reject, even the teardown
// itself, may never reach us: the likeliest cause is refused credentials.
var errCHAPUnanswered = errors.New("no answer to the CHAP response")

// chapUnansweredError is a connection lost right after the CHAP response:
// a refused secret (see errCHAPUnanswered).
type chapUnansweredError struct{ err error }

func (e *chapUnansweredError) Error() string {
	return fmt.Sprintf("login: %v: the target closed the connection after the CHAP response (%v)", ErrAuthFailed, e.err)
}

func (e *chapUnansweredError) Unwrap() []error { return []error{ErrAuthFailed, e.err} }

type loginState struct {
	dm        Datamover
	cfg       *LoginConfig
	itt       uint32
	cmdSN     uint32
	expStatSN uint32
	first     bool
	inFFP     bool
	res       loginResult
}

func runLogin(dm Datamover, cfg *LoginConfig) (*loginResult, error) {
	st := &loginState{dm: dm, cfg: cfg, itt: 0, cmdSN: 1, first: true}
	st.res.params = DefaultParams()
	st.res.tsih = cfg.TSIH

	// Security negotiation stage.
	if err := st.security(); err != nil {
		return nil, err
	}
	// Operational negotiation stage.
	if err := st.operational(); err != nil {
		return nil, err
	}
	st.res.cmdSN = st.cmdSN
	st.res.expStatSN = st.expStatSN
	return &st.res, nil
}

// exchange sends one Login Request and returns the target's complete
// response keys (following C-bit continuation).
func (st *loginState) exchange(csg, nsg uint8, transit bool, kvs []textkey.KV) (*pdu.LoginResponse, []textkey.KV, error) {
	data := textkey.Encode(kvs)
	if len(data) > 8192 {
		return nil, nil, fmt.Errorf("login: request keys of %d bytes exceed 8192", len(data))
	}
	var all []byte
	for {
		req := pdu.LoginRequest{Transit: transit, CSG: csg, NSG: nsg, ISID: st.cfg.ISID,
			TSIH: st.res.tsih, ITT: st.itt, CID: st.cfg.CID, CmdSN: st.cmdSN, ExpStatSN: st.expStatSN}
		if !transit {
			req.NSG = 0
		}
		if err := st.dm.SendPDU(pdu.NewPDU(&req, data)); err != nil {
			return nil, nil, fmt.Errorf("login: send request: %w", err)
		}
		p, err := st.dm.Recv()
		if err != nil {
			return nil, nil, fmt.Errorf("login: receive response: %w", err)
		}
		if p.BHS.Opcode() == pdu.OpReject {
			var r pdu.Reject
			_ = r.Unmarshal(&p.BHS)
			return nil, nil, fmt.Errorf("login: target rejected the login request: %s", rejectReason(r.Reason))
		}
		var resp pdu.LoginResponse
		if err := resp.Unmarshal(&p.BHS); err != nil {
			return nil, nil, fmt.Errorf("login: %w", err)
		}
		if resp.StatusClass != 0 {
			le := &LoginError{Class: resp.StatusClass, Detail: resp.StatusDetail, Initiator: st.cfg.InitiatorName}
			if !st.cfg.Discovery {
				le.Target = st.cfg.TargetName
			}
			if kv, err := textkey.Parse(p.Data); err == nil {
				le.Redirect, _ = textkey.Get(kv, "TargetAddress")
			}
			return nil, nil, le
		}
		if resp.ITT != st.itt || resp.ISID != st.cfg.ISID {
			return nil, nil, fmt.Errorf("login: %w", pdu.ProtocolErrorf(pdu.OpLoginResp, "ITT or ISID does not match the request"))
		}
		if resp.VersionActive != 0 {
			return nil, nil, fmt.Errorf("login: %w", pdu.ProtocolErrorf(pdu.OpLoginResp, "unsupported version %d", resp.VersionActive))
		}
		if resp.CSG != csg {
			return nil, nil, fmt.Errorf("login: %w", pdu.ProtocolErrorf(pdu.OpLoginResp, "CSG %d, request was in stage %d", resp.CSG, csg))
		}
		if resp.Transit && (!transit || resp.NSG > nsg) {
			return nil, nil, fmt.Errorf("login: %w", pdu.ProtocolErrorf(pdu.OpLoginResp, "target moved to stage %d without being asked", resp.NSG))
		}
		if st.first || resp.StatSN == st.expStatSN {
			st.expStatSN = resp.StatSN + 1
			st.first = false
		} else if resp.StatSN+1 != st.expStatSN {
			return nil, nil, fmt.Errorf("login: %w", pdu.ProtocolErrorf(pdu.OpLoginResp, "StatSN %d, expected %d", resp.StatSN, st.expStatSN))
		}
		st.res.expCmdSN, st.res.maxCmdSN = resp.ExpCmdSN, resp.MaxCmdSN
		if resp.TSIH != 0 {
			st.res.tsih = resp.TSIH
		}
		all = append(all, p.Data...)
		if len(all) > 64<<10 {
			return nil, nil, fmt.Errorf("login: %w", pdu.ProtocolErrorf(pdu.OpLoginResp, "response keys exceed 64 KiB"))
		}
		if !resp.Continue {
			kv, err := textkey.Parse(all)
			if err != nil {
				return nil, nil, fmt.Errorf("login: response keys: %w", err)
			}
			return &resp, kv, nil
		}
		// C bit: ask for the rest with an empty request (RFC 7143 section 6.2).
		data, transit = nil, false
	}
}

func (st *loginState) leadingKeys() []textkey.KV {
	kv := []textkey.KV{{Key: "InitiatorName", Value: st.cfg.InitiatorName}}
	if st.cfg.InitiatorAlias != "" {
		kv = append(kv, textkey.KV{Key: "InitiatorAlias", Value: st.cfg.InitiatorAlias})
	}
	if st.cfg.Discovery {
		kv = append(kv, textkey.KV{Key: "SessionType", Value: "Discovery"})
	} else {
		kv = append(kv, textkey.KV{Key: "SessionType", Value: "Normal"},
			textkey.KV{Key: "TargetName", Value: st.cfg.TargetName})
	}
	return kv
}

// declared records keys the target declares in any stage.
func (st *loginState) declared(kvs []textkey.KV) {
	for _, kv := range kvs {
		switch kv.Key {
		case "TargetAlias":
			st.res.params.TargetAlias = kv.Value
		case "TargetPortalGroupTag":
			if n, err := strconv.ParseUint(kv.Value, 0, 16); err == nil {
				st.res.params.TargetPortalGroupTag = uint16(n)
			}
		case "TargetAddress":
			st.res.targetAddr = append(st.res.targetAddr, kv.Value)
		}
	}
}

func (st *loginState) security() error {
	keys := st.leadingKeys()
	if st.cfg.CHAP == nil {
		keys = append(keys, textkey.KV{Key: "AuthMethod", Value: "None"})
		resp, kv, err := st.exchange(pdu.StageSecurity, pdu.StageOperational, true, keys)
		if err != nil {
			return err
		}
		st.declared(kv)
		am, _ := textkey.Get(kv, "AuthMethod")
		if am != "" && am != "None" {
			return fmt.Errorf("login: target requires authentication (AuthMethod=%s): %w; give --chap-user and a CHAP secret", am, errAuthRefused)
		}
		return st.finishSecurity(resp, kv)
	}
	offer := st.offerAuth()
	keys = append(keys, textkey.KV{Key: "AuthMethod", Value: offer})
	resp, kv, err := st.exchange(pdu.StageSecurity, pdu.StageOperational, false, keys)
	if err != nil {
		return err
	}
	st.declared(kv)
	am, _ := textkey.Get(kv, "AuthMethod")
	if am == "None" && offer != "CHAP" {
		// A discovery portal that does not authenticate.
		return st.finishSecurity(resp, kv)
	}
	if am != "CHAP" {
		return fmt.Errorf("login: target refused CHAP (AuthMethod=%q): %w", am, errAuthRefused)
	}
	x := &chapExchange{creds: st.cfg.CHAP}
	_, kv, err = st.exchange(pdu.StageSecurity, pdu.StageOperational, false, []textkey.KV{{Key: "CHAP_A", Value: x.creds.offerA()}})
	var le *LoginError
	if errors.As(err, &le) && le.Class == 2 && le.Detail == 0 && len(x.creds.algorithms()) > 1 {
		return &CHAPAlgorithmError{Offered: x.creds.offerA(), Err: err}
	}
	if err != nil {
		return err
	}
	a, _ := textkey.Get(kv, "CHAP_A")
	i, _ := textkey.Get(kv, "CHAP_I")
	c, _ := textkey.Get(kv, "CHAP_C")
	if a == "" || i == "" || c == "" {
		return fmt.Errorf("login: target sent no CHAP challenge (CHAP_A=%q): %w", a, errAuthRefused)
	}
	ans, err := x.answer(a, i, c)
	if err != nil {
		return fmt.Errorf("login: %w: %w", errAuthRefused, err)
	}
	var out []textkey.KV
	for _, p := range ans {
		out = append(out, textkey.KV{Key: p[0], Value: p[1]})
	}
	resp, kv, err = st.exchange(pdu.StageSecurity, pdu.StageOperational, true, out)
	if errors.As(err, &le) && le.Class == 2 && x.alg == CHAPSHA256 && len(x.creds.algorithms()) > 1 {
		// tgt (through 1.0.97) means SHA-1 by CHAP_A=7, which IANA and
		// LIO give to SHA-256: a response refused under 7 is ambiguous.
		return &CHAPAlgorithmError{Offered: x.creds.offerA(), Chosen: x.alg, Err: err}
	}
	if err != nil && !errors.As(err, &le) {
		// LIO over iSER may drop the connection before its reject reaches
		// us: a connection lost right after CHAP_R is a refused secret.
		return &chapUnansweredError{err: err}
	}
	if err != nil {
		return err
	}
	if len(x.creds.MutualSecret) > 0 {
		n, _ := textkey.Get(kv, "CHAP_N")
		r, _ := textkey.Get(kv, "CHAP_R")
		if r == "" {
			return fmt.Errorf("login: target did not answer the mutual CHAP challenge: %w", errAuthRefused)
		}
		if err := x.verifyTarget(n, r); err != nil {
			return fmt.Errorf("login: %w: %w", errAuthRefused, err)
		}
	}
	return st.finishSecurity(resp, kv)
}

// offerAuth is the AuthMethod offer of a login with credentials. A normal
// session offers CHAP only: the target must authenticate us, never
// downgraded to None. A discovery session offers CHAP,None (as open-iscsi
// does), so one set of credentials discovers on portals that authenticate
// discovery and on those that do not; with mutual CHAP it still offers CHAP
// only, as the target must prove itself.
func (st *loginState) offerAuth() string {
	if st.cfg.Discovery && len(st.cfg.CHAP.MutualSecret) == 0 {
		return "CHAP,None"
	}
	return "CHAP"
}

// finishSecurity waits, if needed, for the target to leave the security stage.
func (st *loginState) finishSecurity(resp *pdu.LoginResponse, kv []textkey.KV) error {
	for i := 0; !resp.Transit; i++ {
		if i > 4 {
			return fmt.Errorf("login: target stays in the security stage")
		}
		var err error
		resp, kv, err = st.exchange(pdu.StageSecurity, pdu.StageOperational, true, nil)
		if err != nil {
			return err
		}
		st.declared(kv)
	}
	return nil
}

func (st *loginState) operational() error {
	if st.inFFP {
		return nil
	}
	n := textkey.NewNegotiation()
	want := st.cfg.Want
	if !st.cfg.Discovery {
		offerOperational(n, want)
	}
	st.dm.OperationalKeys(n, want)
	keys := n.TakeOffers()
	if err := st.dm.AllocateConnectionResources(want); err != nil {
		return fmt.Errorf("login: allocate connection resources: %w", err)
	}
	for i := 0; ; i++ {
		if i > 16 {
			return errors.New("login: operational negotiation does not converge")
		}
		resp, kv, err := st.exchange(pdu.StageOperational, pdu.StageFullFeature, true, keys)
		if err != nil {
			return err
		}
		st.declared(kv)
		reply, err := n.Receive(stripDeclared(kv))
		if err != nil {
			return fmt.Errorf("login: negotiation: %w", err)
		}
		keys = append(reply, n.TakeOffers()...)
		if resp.Transit && resp.NSG == pdu.StageFullFeature {
			if len(keys) > 0 {
				return fmt.Errorf("login: target ended negotiation with keys unanswered")
			}
			return st.enterFFP(n)
		}
	}
}

// stripDeclared drops the keys handled by declared().
func stripDeclared(kvs []textkey.KV) []textkey.KV {
	out := kvs[:0:0]
	for _, kv := range kvs {
		switch kv.Key {
		case "TargetAlias", "TargetPortalGroupTag", "TargetAddress":
			continue
		}
		out = append(out, kv)
	}
	return out
}

func boolKey(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// offerOperational offers the RFC 7143 session keys for a normal session.
func offerOperational(n *textkey.Negotiation, w Params) {
	n.Offer("InitialR2T", boolKey(w.InitialR2T))
	n.Offer("ImmediateData", boolKey(w.ImmediateData))
	n.Offer("MaxBurstLength", fmt.Sprint(w.MaxBurstLength))
	n.Offer("FirstBurstLength", fmt.Sprint(w.FirstBurstLength))
	n.Offer("MaxOutstandingR2T", fmt.Sprint(w.MaxOutstandingR2T))
	n.Offer("DataPDUInOrder", "Yes")
	n.Offer("DataSequenceInOrder", "Yes")
	n.Offer("DefaultTime2Wait", fmt.Sprint(w.DefaultTime2Wait))
	n.Offer("DefaultTime2Retain", fmt.Sprint(w.DefaultTime2Retain))
	n.Offer("ErrorRecoveryLevel", "0")
	n.Offer("MaxConnections", "1")
}

func (st *loginState) enterFFP(n *textkey.Negotiation) error {
	p, err := paramsFrom(n, st.cfg.Want, st.res.params)
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	st.res.params = p
	st.inFFP = true
	if err := st.dm.NoticeKeyValues(p); err != nil {
		return fmt.Errorf("login: enable datamover: %w", err)
	}
	return nil
}

func rejectReason(r uint8) string {
	if s, ok := pdu.RejectReasonName(r); ok {
		return fmt.Sprintf("%s (reason 0x%02x)", s, r)
	}
	return fmt.Sprintf("reason 0x%02x", r)
}
