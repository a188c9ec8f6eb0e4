package nbdtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
)

// Op names a Backend call, for Hook.
type Op int

const (
	OpRead Op = iota
	OpWrite
	OpFlush
	OpTrim
	OpWriteZeroes
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpTrim:
		return "trim"
	case OpWriteZeroes:
		return "write-zeroes"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Hook runs at the start of every Backend call, with the call's context. A
// non-nil error fails the call with that error (fault injection); a hook
// may also block (concurrency tests) and should then honour ctx.
type Hook func(ctx context.Context, op Op, off, length int64) error

// Config describes the device a Memory emulates.
type Config struct {
	Size               int64
	BlockSize          uint32 // default 512
	PreferredBlockSize uint32 // default 4096
	MaxTransfer        uint32 // default 0: unlimited
	ReadOnly           bool
	NoTrim             bool
	NoWriteZeroes      bool
}

// Stats counts what reached the backend.
type Stats struct {
	Reads, Writes, FUAWrites int64
	Flushes, Trims           int64
	WriteZeroes              int64 // all WriteZeroes calls
	WriteZeroesNoUnmap       int64 // those with mayUnmap=false (NO_HOLE)
	FUAWriteZeroes           int64
	MaxInFlight              int64 // most calls running at once
	MaxReadLen, MaxWriteLen  int64
	BytesRead, BytesWritten  int64
	Violations               int64 // calls a correct server must not make
	LastViolation            string
}

// Memory is a RAM-backed device, safe for concurrent use.
type Memory struct {
	cfg  Config
	mu   sync.RWMutex
	data []byte

	hook atomic.Pointer[Hook]

	statsMu  sync.Mutex
	stats    Stats
	inFlight int64
}

// NewMemory returns a zero-filled device.
func NewMemory(cfg Config) *Memory {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 512
	}
	if cfg.PreferredBlockSize == 0 {
		cfg.PreferredBlockSize = 4096
	}
	return &Memory{cfg: cfg, data: make([]byte, cfg.Size)}
}

// SetHook installs h (nil removes it). Safe while the device is in use.
func (m *Memory) SetHook(h Hook) {
	if h == nil {
		m.hook.Store(nil)
		return
	}
	m.hook.Store(&h)
}

// Stats returns a snapshot of the counters.
func (m *Memory) Stats() Stats {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	return m.stats
}

// Bytes returns a copy of the contents.
func (m *Memory) Bytes() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]byte(nil), m.data...)
}

// Poke overwrites contents directly, bypassing counters and hooks.
func (m *Memory) Poke(off int64, p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.data[off:], p)
}

func (m *Memory) Size() int64                { return m.cfg.Size }
func (m *Memory) BlockSize() uint32          { return m.cfg.BlockSize }
func (m *Memory) PreferredBlockSize() uint32 { return m.cfg.PreferredBlockSize }
func (m *Memory) MaxTransfer() uint32        { return m.cfg.MaxTransfer }
func (m *Memory) ReadOnly() bool             { return m.cfg.ReadOnly }
func (m *Memory) CanTrim() bool              { return !m.cfg.NoTrim }
func (m *Memory) CanWriteZeroes() bool       { return !m.cfg.NoWriteZeroes }

// begin runs the bookkeeping and the hook common to every call.
func (m *Memory) begin(ctx context.Context, op Op, off, length int64) (func(), error) {
	m.statsMu.Lock()
	m.inFlight++
	m.stats.MaxInFlight = max(m.stats.MaxInFlight, m.inFlight)
	if v := m.violation(op, off, length); v != "" {
		m.stats.Violations++
		m.stats.LastViolation = v
		m.inFlight--
		m.statsMu.Unlock()
		return nil, fmt.Errorf("nbdtest: %s: %w", v, syscall.EINVAL)
	}
	m.statsMu.Unlock()
	end := func() {
		m.statsMu.Lock()
		m.inFlight--
		m.statsMu.Unlock()
	}
	if h := m.hook.Load(); h != nil {
		if err := (*h)(ctx, op, off, length); err != nil {
			end()
			return nil, err
		}
	}
	return end, nil
}

func (m *Memory) violation(op Op, off, length int64) string {
	if op == OpFlush {
		return ""
	}
	bs := int64(m.cfg.BlockSize)
	switch {
	case length <= 0 || off < 0 || off > m.cfg.Size || length > m.cfg.Size-off:
		return fmt.Sprintf("%s out of range: off=%d len=%d size=%d", op, off, length, m.cfg.Size)
	case off%bs != 0 || length%bs != 0:
		return fmt.Sprintf("%s misaligned: off=%d len=%d block=%d", op, off, length, bs)
	case (op == OpRead || op == OpWrite) && m.cfg.MaxTransfer != 0 && length > int64(m.cfg.MaxTransfer):
		return fmt.Sprintf("%s of %d bytes exceeds MaxTransfer %d", op, length, m.cfg.MaxTransfer)
	case op != OpRead && m.cfg.ReadOnly:
		return fmt.Sprintf("%s on a read-only device", op)
	case op == OpTrim && m.cfg.NoTrim, op == OpWriteZeroes && m.cfg.NoWriteZeroes:
		return fmt.Sprintf("%s not supported", op)
	}
	return ""
}

func (m *Memory) ReadAt(ctx context.Context, p []byte, off int64) error {
	end, err := m.begin(ctx, OpRead, off, int64(len(p)))
	if err != nil {
		return err
	}
	defer end()
	m.mu.RLock()
	copy(p, m.data[off:])
	m.mu.RUnlock()
	m.count(func(s *Stats) {
		s.Reads++
		s.BytesRead += int64(len(p))
		s.MaxReadLen = max(s.MaxReadLen, int64(len(p)))
	})
	return nil
}

func (m *Memory) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	end, err := m.begin(ctx, OpWrite, off, int64(len(p)))
	if err != nil {
		return err
	}
	defer end()
	m.mu.Lock()
	copy(m.data[off:], p)
	m.mu.Unlock()
	m.count(func(s *Stats) {
		s.Writes++
		s.BytesWritten += int64(len(p))
		s.MaxWriteLen = max(s.MaxWriteLen, int64(len(p)))
		if fua {
			s.FUAWrites++
		}
	})
	return nil
}

func (m *Memory) Flush(ctx context.Context) error {
	end, err := m.begin(ctx, OpFlush, 0, 0)
	if err != nil {
		return err
	}
	defer end()
	m.count(func(s *Stats) { s.Flushes++ })
	return nil
}

func (m *Memory) Trim(ctx context.Context, off, length int64) error {
	end, err := m.begin(ctx, OpTrim, off, length)
	if err != nil {
		return err
	}
	defer end()
	m.zero(off, length)
	m.count(func(s *Stats) { s.Trims++ })
	return nil
}

func (m *Memory) WriteZeroes(ctx context.Context, off, length int64, mayUnmap, fua bool) error {
	end, err := m.begin(ctx, OpWriteZeroes, off, length)
	if err != nil {
		return err
	}
	defer end()
	m.zero(off, length)
	m.count(func(s *Stats) {
		s.WriteZeroes++
		if !mayUnmap {
			s.WriteZeroesNoUnmap++
		}
		if fua {
			s.FUAWriteZeroes++
		}
	})
	return nil
}

func (m *Memory) zero(off, length int64) {
	m.mu.Lock()
	clear(m.data[off : off+length])
	m.mu.Unlock()
}

func (m *Memory) count(f func(*Stats)) {
	m.statsMu.Lock()
	f(&m.stats)
	m.statsMu.Unlock()
}
