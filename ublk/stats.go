package ublk

import "sync/atomic"

// Stats are a device's counters since Create or Recover.
type Stats struct {
	Reads, Writes             uint64 // completed READ and WRITE requests
	BytesRead, BytesWritten   uint64
	Flushes, Discards, Zeroes uint64 // completed FLUSH, DISCARD, WRITE_ZEROES
	Errors                    uint64 // requests completed with an error
}

type stats struct {
	reads, writes, bytesRead, bytesWritten atomic.Uint64
	flushes, discards, writeZeroes, errors atomic.Uint64
}

func (s *stats) done(write bool, n int64) {
	if write {
		s.writes.Add(1)
		s.bytesWritten.Add(uint64(n))
	} else {
		s.reads.Add(1)
		s.bytesRead.Add(uint64(n))
	}
}

func (s *stats) snapshot() Stats {
	return Stats{
		Reads: s.reads.Load(), Writes: s.writes.Load(),
		BytesRead: s.bytesRead.Load(), BytesWritten: s.bytesWritten.Load(),
		Flushes: s.flushes.Load(), Discards: s.discards.Load(), Zeroes: s.writeZeroes.Load(),
		Errors: s.errors.Load(),
	}
}
