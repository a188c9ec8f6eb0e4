package initiator

import (
	"context"
	"errors"
	"fmt"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// probe fills l.info from INQUIRY, READ CAPACITY, the VPD pages and the
// caching mode page.
func (l *LUN) probe(ctx context.Context) error {
	if _, err := l.exec(ctx, scsi.TestUnitReady(), nil, nil); err != nil {
		return notFound(err)
	}
	inq, err := l.inquiry(ctx)
	if err != nil {
		return err
	}
	if !inq.Connected() {
		return fmt.Errorf("%w (peripheral qualifier %d)", ErrLUNNotFound, inq.PeripheralQualifier)
	}
	if inq.DeviceType != 0 {
		return fmt.Errorf("LUN %d is a %s, not a block device", l.info.Number, inq.DeviceType)
	}
	l.info.Vendor, l.info.Product, l.info.Revision = inq.Vendor, inq.Product, inq.Revision
	if err := l.readCapacity(ctx, &l.info); err != nil {
		return err
	}
	l.readVPD(ctx)
	l.readModeSense(ctx)
	return nil
}

// notFound maps "logical unit not supported" to ErrLUNNotFound.
func notFound(err error) error {
	var se *scsi.SenseError
	if errors.As(err, &se) && se.ASC == 0x25 {
		return fmt.Errorf("%w: %w", ErrLUNNotFound, err)
	}
	return err
}

// readCapacity fills info's capacity fields from READ CAPACITY(16), or
// (10) where that fails.
func (l *LUN) readCapacity(ctx context.Context, info *LUNInfo) error {
	buf := make([]byte, 32)
	if r, err := l.exec(ctx, scsi.ReadCapacity16(32), buf, nil); err == nil {
		c, err := scsi.ParseReadCapacity16(buf[:r.Transferred(len(buf))])
		if err != nil {
			return fmt.Errorf("READ CAPACITY(16): %w", err)
		}
		info.Blocks, info.BlockSize = c.Blocks(), c.BlockLength
		info.PhysicalBlockSize = uint32(c.PhysicalBlockLength())
		info.ThinProvisioned, info.ZeroesAfterUnmap = c.LBPME, c.LBPRZ
	} else {
		buf = buf[:8]
		r, err := l.exec(ctx, scsi.ReadCapacity10(), buf, nil)
		if err != nil {
			return err
		}
		c, err := scsi.ParseReadCapacity10(buf[:r.Transferred(len(buf))])
		if err != nil {
			return fmt.Errorf("READ CAPACITY(10): %w", err)
		}
		if c.LastLBA == 0xffffffff {
			return errors.New("READ CAPACITY(10) says the LUN needs READ CAPACITY(16), which failed")
		}
		info.Blocks, info.BlockSize = uint64(c.LastLBA)+1, c.BlockLength
		info.PhysicalBlockSize = c.BlockLength
	}
	switch bs := info.BlockSize; {
	case bs < 512 || bs > 65536 || bs&(bs-1) != 0:
		return fmt.Errorf("unsupported logical block size %d", bs)
	case info.Blocks == 0:
		return errors.New("LUN has no blocks")
	}
	return nil
}

// vpd reads one VPD page; nil when the target does not have it.
func (l *LUN) vpd(ctx context.Context, page uint8) []byte {
	buf := make([]byte, 1024)
	r, err := l.exec(ctx, scsi.InquiryVPD(page, uint16(len(buf))), buf, nil)
	if err != nil {
		return nil
	}
	return buf[:r.Transferred(len(buf))]
}

func (l *LUN) readVPD(ctx context.Context) {
	pages, err := scsi.ParseSupportedVPDPages(l.vpd(ctx, 0x00))
	if err != nil {
		return
	}
	has := map[uint8]bool{}
	for _, p := range pages {
		has[p] = true
	}
	if has[0x80] {
		l.info.Serial, _ = scsi.ParseUnitSerialNumber(l.vpd(ctx, 0x80))
	}
	if has[0x83] {
		if id, err := scsi.ParseDeviceIdentification(l.vpd(ctx, 0x83)); err == nil {
			l.info.WWN = id.WWID()
		}
	}
	// LIO lists no page in 0x00 until its LU has a unit serial number,
	// yet answers them: without the Block Limits an UNMAP past its
	// MAXIMUM UNMAP LBA COUNT (8192 blocks on fileio) is refused. So the
	// page is asked for when the list names no page but 0x00 itself; a
	// target without it answers CHECK CONDITION, and nothing is taken.
	if has[0xb0] || len(pages) <= 1 {
		if bl, err := scsi.ParseBlockLimits(l.vpd(ctx, 0xb0)); err == nil {
			l.info.Limits = bl
		}
	}
	if has[0xb2] && l.info.ThinProvisioned {
		if lbp, err := scsi.ParseLogicalBlockProvisioning(l.vpd(ctx, 0xb2)); err == nil {
			l.info.Unmap = lbp.LBPU
			l.info.WriteSameUnmap = lbp.LBPWS
			l.info.ZeroesAfterUnmap = l.info.ZeroesAfterUnmap || lbp.LBPRZ != 0
		}
	} else if l.info.ThinProvisioned {
		l.info.Unmap = true // LBPME without VPD 0xB2: as Linux, try UNMAP
	}
}

// readModeSense fills the write protection, DPOFUA and write cache fields
// from the caching mode page. Without an answer the LUN is taken to have a
// volatile cache: flushes are cheap, lost writes are not.
func (l *LUN) readModeSense(ctx context.Context) {
	mp, err := l.modeSense(ctx)
	if err != nil {
		l.info.WriteCache = true
		l.wc.target.Store(true)
		return
	}
	l.info.WriteProtected = mp.WriteProtected()
	l.info.FUA = mp.DPOFUA()
	l.info.WriteCache = cachingWCE(mp)
	l.wc.target.Store(l.info.WriteCache)
}

// modeSense reads the caching mode page: MODE SENSE(10), else (6).
func (l *LUN) modeSense(ctx context.Context) (scsi.ModeParameters, error) {
	buf := make([]byte, 255)
	r, err := l.exec(ctx, scsi.ModeSense10(true, false, 0, 0x08, 0, uint16(len(buf))), buf, nil)
	if err == nil {
		var mp scsi.ModeParameters
		if mp, err = scsi.ParseModeSense10(buf[:r.Transferred(len(buf))]); err == nil {
			return mp, nil
		}
	}
	r, err = l.exec(ctx, scsi.ModeSense6(true, 0, 0x08, 0, uint8(len(buf))), buf, nil)
	if err != nil {
		return scsi.ModeParameters{}, err
	}
	return scsi.ParseModeSense6(buf[:r.Transferred(len(buf))])
}

// cachingWCE is the caching page's WCE bit; without the page, true.
func cachingWCE(mp scsi.ModeParameters) bool {
	if p, ok := mp.Page(0x08, 0); ok {
		if c, err := scsi.ParseCachingPage(p); err == nil {
			return c.WCE
		}
	}
	return true
}
