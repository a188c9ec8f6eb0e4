package nbd

import (
	"fmt"
	"math/bits"
)

// geometry is what one connection knows about its export: the values sent in
// NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE, taken from the Backend when the
// client picks the export, and used to check every request.
type geometry struct {
	size           int64
	minBlock       uint32 // NBD minimum block size = logical block size
	prefBlock      uint32 // NBD preferred block size
	maxBlock       uint32 // NBD maximum block size (largest READ/WRITE payload)
	chunk          uint32 // largest single Backend ReadAt/WriteAt
	flags          uint16 // transmission flags
	readOnly       bool
	canTrim        bool
	canWriteZeroes bool
}

// geometry is the geometry of e's Backend, read-only when e is.
func (e *Export) geometry() (geometry, error) {
	g, err := geometryOf(e.Backend)
	if err == nil && e.ReadOnly && !g.readOnly {
		g.readOnly = true
		g.flags |= flagReadOnly
		g.flags &^= flagSendTrim | flagSendWriteZeroes
	}
	return g, err
}

// geometryOf reads b's properties and derives the advertised values.
//
//   - minimum: BlockSize, which must be a power of two up to 64 KiB, and must
//     divide Size;
//   - preferred: PreferredBlockSize rounded down to a power of two, raised
//     to at least max(minimum, 512) and capped at 32 MiB, the range clients
//     such as libnbd and nbdkit accept;
//   - maximum: 32 MiB. The server splits requests larger than MaxTransfer
//     itself, so the client need not know the backend's limit.
func geometryOf(b Backend) (geometry, error) {
	minBlock := b.BlockSize()
	if minBlock == 0 || minBlock > maxBlockSize || minBlock&(minBlock-1) != 0 {
		return geometry{}, fmt.Errorf("export geometry: block size %d is not a power of two between 1 and %d", minBlock, maxBlockSize)
	}
	size := b.Size()
	if size < 0 || size%int64(minBlock) != 0 {
		return geometry{}, fmt.Errorf("export geometry: size %d is not a multiple of block size %d", size, minBlock)
	}
	pref := b.PreferredBlockSize()
	if pref != 0 {
		pref = 1 << (bits.Len32(pref) - 1) // round down to a power of two
	}
	pref = max(pref, minBlock, 512)
	pref = min(pref, maxPayload)

	chunk := b.MaxTransfer()
	if chunk == 0 || chunk > maxPayload {
		chunk = maxPayload
	}
	chunk -= chunk % minBlock
	if chunk == 0 {
		chunk = minBlock
	}

	g := geometry{
		size:           size,
		minBlock:       minBlock,
		prefBlock:      pref,
		maxBlock:       maxPayload,
		chunk:          chunk,
		readOnly:       b.ReadOnly(),
		canTrim:        b.CanTrim(),
		canWriteZeroes: b.CanWriteZeroes(),
	}
	// The server keeps no cache of its own and FLUSH/FUA go to the one
	// backend every connection shares, so multi-conn is safe.
	g.flags = flagHasFlags | flagSendFlush | flagSendFUA | flagCanMultiConn
	if g.readOnly {
		g.flags |= flagReadOnly
	} else {
		if g.canTrim {
			g.flags |= flagSendTrim
		}
		if g.canWriteZeroes {
			g.flags |= flagSendWriteZeroes
		}
	}
	return g, nil
}
