package main

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ioErrorLog logs the I/O errors a frontend is given (counting.Backend's
// OnError): each names the operation, range and cause, so an operator
// who sees "I/O error, dev ublkb0" in the kernel log finds why here. At
// most burst lines per second; the rest are counted and summed up in the
// next line that is written.
type ioErrorLog struct {
	log   zerolog.Logger
	burst int

	mu         sync.Mutex
	window     time.Time
	inWindow   int
	suppressed int
}

func newIOErrorLog(log zerolog.Logger) *ioErrorLog { return &ioErrorLog{log: log, burst: 10} }

// report is a counting.Backend OnError.
func (l *ioErrorLog) report(op string, off, n int64, err error) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.window) >= time.Second {
		l.window, l.inWindow = now, 0
	}
	if l.inWindow >= l.burst {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.inWindow++
	suppressed := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	ev := l.log.Warn().Err(err).Str("op", op).Int64("offset", off).Int64("length", n)
	if suppressed > 0 {
		ev = ev.Int("suppressed", suppressed)
	}
	ev.Msg("I/O error returned to the frontend")
}
