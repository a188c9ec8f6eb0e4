package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// This file holds what a Multipath learns from the target about each
// path: the logical unit it leads to (VPD 0x83, which must be the same
// for every path), its target port group and that group's asymmetric
// access state (REPORT TARGET PORT GROUPS), read at login, after every
// new session of the path and again when a sense says the states changed.

// lunBinder is an Executor that must know the logical unit before the LUN
// probes it (a Multipath checks every path's identity).
type lunBinder interface {
	bindLUN(ctx context.Context, lun scsi.LUN) error
}

// IdentityError is a path that leads to another logical unit than the
// volume's first path.
type IdentityError struct {
	Portal, Got, Want string
}

func (e *IdentityError) Error() string {
	return fmt.Sprintf("path %s refused: it leads to logical unit %q, the first path to %q", e.Portal, e.Got, e.Want)
}

// bindLUN sets the logical unit every command goes to and checks every
// path that is logged in, in order: the first one's LU name is the
// volume's. It fails when no path passes.
func (m *Multipath) bindLUN(ctx context.Context, lun scsi.LUN) error {
	m.lun = lun
	m.bound.Store(true)
	go m.probeLoop()
	var errs []error
	ok := 0
	for _, p := range m.paths {
		if p.session() == nil {
			continue
		}
		if err := p.check(ctx); err != nil {
			errs = append(errs, err)
			p.setErr(err)
			continue
		}
		ok++
	}
	if ok == 0 {
		return fmt.Errorf("multipath: no path to the logical unit: %w", errors.Join(errs...))
	}
	return nil
}

// pathExec runs one command on p's own Nexus, retrying unit attentions
// and ALUA transitions a few times.
func (p *mpath) pathExec(ctx context.Context, cdb scsi.CDB, buf []byte) ([]byte, error) {
	return p.pathDo(ctx, cdb, buf, nil)
}

// pathDo is pathExec with Data-Out (write) as well.
func (p *mpath) pathDo(ctx context.Context, cdb scsi.CDB, buf, write []byte) ([]byte, error) {
	nx := p.nx.Load()
	var last error
	for range 8 {
		r, err := nx.Do(ctx, &Command{LUN: p.m.lun, CDB: cdb.Bytes(), Read: buf, Write: write})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cdb.Opcode(), err)
		}
		err = scsi.CheckStatus(scsi.Status(r.Status), r.Sense)
		if err == nil {
			return buf[:r.Transferred(len(buf))], nil
		}
		last = fmt.Errorf("%s: %w", cdb.Opcode(), err)
		var se scsi.Error
		if !errors.As(err, &se) || !se.Retryable() {
			return nil, last
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, last
}

// check reads p's logical unit name, target port group and access state
// on its current session and, when the name is the volume's, lets the
// path carry I/O. A path that leads elsewhere is refused for good and
// closed.
func (p *mpath) check(ctx context.Context) error {
	m := p.m
	s := p.session()
	if s == nil {
		return fmt.Errorf("path %s: check: no session", p.portal)
	}
	inqBuf, err := p.pathExec(ctx, scsi.Inquiry(96), make([]byte, 96))
	if err != nil {
		return fmt.Errorf("path %s: %w", p.portal, err)
	}
	inq, err := scsi.ParseInquiry(inqBuf)
	if err != nil {
		return fmt.Errorf("path %s: INQUIRY: %w", p.portal, err)
	}
	var name string
	group, rtp := -1, -1
	if b, err := p.pathExec(ctx, scsi.InquiryVPD(0x83, 1024), make([]byte, 1024)); err == nil {
		if id, err := scsi.ParseDeviceIdentification(b); err == nil {
			name = id.WWID()
			for _, d := range id.Designators {
				if d.Association != scsi.AssocTargetPort || len(d.Value) < 4 {
					continue
				}
				v := int(d.Value[2])<<8 | int(d.Value[3])
				switch d.Type {
				case scsi.DesignatorTargetPortGroup:
					group = v
				case scsi.DesignatorRelativeTargetPort:
					rtp = v
				}
			}
		}
	}
	m.mu.Lock()
	first := !m.hasIdentityLocked()
	if first {
		m.identity = name
		m.identitySet = true
		m.hasALUA = inq.TPGS != scsi.TPGSNone
	}
	want := m.identity
	m.mu.Unlock()
	if !first && name != want {
		err := &IdentityError{Portal: p.portal, Got: name, Want: want}
		p.refused.Store(true)
		p.setErr(err)
		p.log.Error().Msg(err.Error())
		if nx := p.nx.Load(); nx != nil {
			_ = nx.Close()
		}
		return err
	}
	p.mu.Lock()
	p.group, p.rtp = group, rtp
	p.mu.Unlock()
	if inq.TPGS != scsi.TPGSNone {
		if err := p.readALUA(ctx); err != nil {
			return fmt.Errorf("path %s: %w", p.portal, err)
		}
	} else {
		p.access.Store(accessUnknown)
	}
	if k := m.prKey.Load(); k != 0 {
		// A path's I_T nexus registers the volume's key before it carries
		// I/O: under Write Exclusive, Registrants Only, an unregistered
		// path's writes would get RESERVATION CONFLICT.
		if err := p.registerKey(ctx, k); err != nil {
			return err
		}
	}
	p.checked.Store(s)
	p.mu.Lock()
	p.wasDown = false
	p.mu.Unlock()
	ev := p.log.Info().Str("lu", name)
	if a := p.access.Load(); a != accessUnknown {
		ev = ev.Int("group", group).Str("alua", scsi.AccessState(a).String())
	}
	ev.Msg("path up")
	m.notify()
	return nil
}

// hasIdentityLocked reports whether a path set the volume's LU name.
func (m *Multipath) hasIdentityLocked() bool { return m.identitySet }

// readALUA reads p's group's access state with REPORT TARGET PORT GROUPS.
func (p *mpath) readALUA(ctx context.Context) error {
	alloc := scsi.ReportTargetPortGroupsLength
	for range 2 {
		// The length-only format: LIO counts the extended one's length 4
		// bytes short and cuts its answer there (iscsitest.SharedLU does
		// the same), and nothing here needs the implicit transition time.
		b, err := p.pathExec(ctx, scsi.ReportTargetPortGroups(false, alloc), make([]byte, alloc))
		if err != nil {
			return err
		}
		tpgs, err := scsi.ParseReportTargetPortGroups(b, false)
		if err != nil {
			return fmt.Errorf("REPORT TARGET PORT GROUPS: %w", err)
		}
		if tpgs.Truncated {
			alloc = tpgs.AllocationLength()
			continue
		}
		p.mu.Lock()
		group, rtp := p.group, p.rtp
		p.mu.Unlock()
		var g scsi.TargetPortGroup
		ok := false
		for _, c := range tpgs.Groups {
			if (group >= 0 && int(c.ID) == group) || (group < 0 && rtp >= 0 && c.HasPort(uint16(rtp))) {
				g, ok = c, true
				break
			}
		}
		if !ok {
			if len(tpgs.Groups) != 1 {
				return fmt.Errorf("REPORT TARGET PORT GROUPS: no group holds the path's port (group %d, port %d)", group, rtp)
			}
			g = tpgs.Groups[0]
		}
		p.setAccess(g.State, "REPORT TARGET PORT GROUPS")
		p.mu.Lock()
		p.group, p.preferred = int(g.ID), g.Preferred
		p.mu.Unlock()
		return nil
	}
	return errors.New("REPORT TARGET PORT GROUPS: answer keeps growing")
}

// setAccess records p's access state, logging a change.
func (p *mpath) setAccess(a scsi.AccessState, why string) {
	old := p.access.Swap(uint32(a))
	if old != uint32(a) {
		oldName := "unknown"
		if old != accessUnknown {
			oldName = scsi.AccessState(old).String()
		}
		p.log.Warn().Str("from", oldName).Str("to", a.String()).Str("reason", why).Msg("path ALUA state changed")
		p.m.notify()
	}
}

// aluaRetry looks at a command's status on p for an ALUA condition. A
// NOT READY for standby, unavailable or transitioning marks the path so
// and asks for the command again (wait: after a pause, when it was a
// transition), elsewhere if another path serves; a UNIT ATTENTION for
// changed states re-reads them (the LUN retries the attention itself). A
// command refused so for longer than the no-path timeout ends with its
// sense.
func (m *Multipath) aluaRetry(p *mpath, r *Result, since *time.Time) (wait, again bool) {
	if r.Status != uint8(scsi.StatusCheckCondition) || len(r.Sense) == 0 {
		return false, false
	}
	sn, err := scsi.ParseSense(r.Sense)
	if err != nil {
		return false, false
	}
	switch c := sn.ALUA(); c {
	case scsi.ALUAStandby, scsi.ALUAUnavailable, scsi.ALUATransitioning:
		state := map[scsi.ALUACondition]scsi.AccessState{scsi.ALUAStandby: scsi.AccessStandby,
			scsi.ALUAUnavailable: scsi.AccessUnavailable, scsi.ALUATransitioning: scsi.AccessTransitioning}[c]
		p.setAccess(state, fmt.Sprintf("sense NOT READY %02X/%02X", sn.ASC, sn.ASCQ))
		m.refresh()
		if since.IsZero() {
			*since = time.Now()
		} else if time.Since(*since) > m.cfg.NoPathTimeout {
			return false, false
		}
		return c == scsi.ALUATransitioning && m.pick() == nil, true
	case scsi.ALUAStateChanged, scsi.ALUATransitionFailed:
		m.refresh()
	}
	return false, false
}

// probeLoop re-reads the ALUA states every probe interval while a path
// is logged in but kept from I/O by its state (standby, unavailable,
// transitioning), until Close.
func (m *Multipath) probeLoop() {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-m.closed:
			return
		}
		for _, p := range m.paths {
			if st := p.state(); st == PathStandby || st == PathUnavailable || st == PathTransitioning {
				m.refresh()
				break
			}
		}
	}
}

// refresh re-reads every path's access state on a goroutine; a path in
// transition is read again until it leaves it. Calls while one runs are
// folded into it.
func (m *Multipath) refresh() {
	if !m.bound.Load() || !m.refreshing.CompareAndSwap(false, true) {
		m.refreshAgain.Store(true)
		return
	}
	go func() {
		defer m.refreshing.Store(false)
		for {
			m.refreshAgain.Store(false)
			transitioning := false
			for _, p := range m.paths {
				if p.refused.Load() || p.session() == nil || p.checked.Load() == nil {
					continue
				}
				ctx, cancel := context.WithTimeout(m.base, 10*time.Second)
				err := p.readALUA(ctx)
				cancel()
				if err != nil {
					p.setErr(err)
					continue
				}
				if p.access.Load() == uint32(scsi.AccessTransitioning) {
					transitioning = true
				}
			}
			if m.isClosed() {
				return
			}
			if !transitioning && !m.refreshAgain.Load() {
				return
			}
			if sleepCtx(m.base, transitionPause) != nil {
				return
			}
		}
	}()
}
