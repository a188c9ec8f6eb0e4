package initiator

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// Limits on one UNMAP or WRITE SAME command when the target does not state
// its own (VPD 0xB0).
const (
	defaultUnmapBlocks     = 1 << 22
	maxUnmapDescriptors    = 64
	defaultWriteSameBlocks = 1 << 16
)

// Trim implements blockdev.Backend with UNMAP.
func (l *LUN) Trim(ctx context.Context, off, length int64) error {
	lba, blocks, err := l.checkRange(off, length)
	if err != nil {
		return err
	}
	if !l.info.Unmap {
		return &ioError{errors.New("trim: LUN does not support UNMAP"), 95 /* EOPNOTSUPP */}
	}
	perDesc := uint64(l.info.Limits.MaxUnmapLBACount)
	if perDesc == 0 || perDesc == 0xffffffff {
		perDesc = defaultUnmapBlocks
	}
	nDesc := int(l.info.Limits.MaxUnmapDescriptorCount)
	if nDesc == 0 || nDesc > maxUnmapDescriptors {
		nDesc = maxUnmapDescriptors
	}
	for blocks > 0 {
		var descs []scsi.UnmapDescriptor
		for len(descs) < nDesc && blocks > 0 {
			n := min(blocks, perDesc)
			descs = append(descs, scsi.UnmapDescriptor{LBA: lba, Blocks: uint32(n)})
			lba += n
			blocks -= n
		}
		param, err := scsi.UnmapParameterList(descs)
		if err != nil {
			return ioErr(err)
		}
		if _, err := l.exec(ctx, scsi.Unmap(uint16(len(param)), false), nil, param); err != nil {
			return ioErr(err)
		}
	}
	return nil
}

// writeSameBroken is set once the target refuses WRITE SAME(16).
type writeSameState struct{ broken atomic.Bool }

// WriteZeroes implements blockdev.Backend with WRITE SAME(16), with the UNMAP bit
// when mayUnmap and the LUN reads unmapped blocks as zeros. A target without
// WRITE SAME gets zero-filled writes.
func (l *LUN) WriteZeroes(ctx context.Context, off, length int64, mayUnmap, fua bool) error {
	lba, blocks, err := l.checkRange(off, length)
	if err != nil {
		return err
	}
	if l.ws.broken.Load() {
		return l.writeZeroBuffers(ctx, off, length, fua)
	}
	unmap := mayUnmap && l.info.WriteSameUnmap && l.info.ZeroesAfterUnmap
	per := l.info.Limits.MaxWriteSameLength
	if per == 0 || per > defaultWriteSameBlocks {
		per = defaultWriteSameBlocks
	}
	zero := make([]byte, l.info.BlockSize)
	for blocks > 0 {
		n := min(blocks, per)
		_, err := l.exec(ctx, scsi.WriteSame16(lba, uint32(n), unmap, false), nil, zero)
		if err != nil {
			var se *scsi.SenseError
			if errors.As(err, &se) && se.Key == scsi.KeyIllegalRequest && (se.ASC == 0x20 || se.ASC == 0x24) {
				l.ws.broken.Store(true)
				bs := int64(l.info.BlockSize)
				return l.writeZeroBuffers(ctx, int64(lba)*bs, int64(blocks)*bs, fua)
			}
			return ioErr(err)
		}
		lba += n
		blocks -= n
	}
	if fua {
		return l.Flush(ctx)
	}
	return nil
}

func (l *LUN) writeZeroBuffers(ctx context.Context, off, length int64, fua bool) error {
	zero := make([]byte, min(length, int64(l.MaxTransfer())))
	for length > 0 {
		n := min(length, int64(len(zero)))
		if err := l.WriteAt(ctx, zero[:n], off, fua); err != nil {
			return err
		}
		off += n
		length -= n
	}
	return nil
}
