package initiator

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// The LUN's volatile write cache can be turned on or off at the target
// while a volume is attached (an administrator changing the caching mode
// page, a target restarted with other settings). The LUN reads the caching
// page again on every session reinstatement and on UNIT ATTENTION 2A/01
// (MODE PARAMETERS CHANGED), and tells the frontend.
//
// Data safety: while the target's cache is write-back and the frontend
// still tells the kernel write-through, the kernel sends no flushes, so
// the LUN makes every write durable itself (FUA, or SYNCHRONIZE CACHE after
// it), and on noticing the change it sends one SYNCHRONIZE CACHE for what
// was written before.

// WriteCacheFunc is a frontend's reaction to a change of the LUN's volatile
// write cache: writeBack is the new state. It returns whether the kernel now
// treats the device as write-back (sends flushes and FUA as needed).
type WriteCacheFunc func(writeBack bool) (frontendWriteBack bool)

// reinstateNotifier is an Executor that reports session reinstatements (a
// Nexus): the LUN re-probes its write cache after each.
type reinstateNotifier interface {
	OnReinstated(f func())
}

// reprobeTimeout bounds one re-probe of the caching page.
const reprobeTimeout = 30 * time.Second

// writeCache is the LUN's write cache state and its re-probing.
type writeCache struct {
	target     atomic.Bool // the target's WCE, as last probed
	frontendWB atomic.Bool // the frontend sends flushes (write-back)

	mu       sync.Mutex
	onChange WriteCacheFunc
	probing  bool // a re-probe goroutine runs
	again    bool // another re-probe was asked for meanwhile
}

// OnWriteCacheChange registers f, called after a re-probe finds the
// target's write cache turned on or off; frontendWriteBack is what the
// frontend tells the kernel now. f is called from a goroutine of the LUN's,
// one call at a time, never from an I/O path: it may wait for I/O to drain.
// Without a registered frontend the LUN assumes flushes are sent (NBD
// always advertises FLUSH and FUA).
func (l *LUN) OnWriteCacheChange(frontendWriteBack bool, f WriteCacheFunc) {
	l.wc.mu.Lock()
	defer l.wc.mu.Unlock()
	l.wc.onChange = f
	l.wc.frontendWB.Store(frontendWriteBack)
}

// WriteCache reports the target's volatile write cache as last probed.
func (l *LUN) WriteCache() bool { return l.wc.target.Load() }

// mustMakeDurable says whether writes need FUA or a flush although the
// frontend did not ask: the target caches, the kernel does not know it.
func (l *LUN) mustMakeDurable() bool {
	return l.wc.target.Load() && !l.wc.frontendWB.Load()
}

// reprobeWriteCache asks for the caching page to be read again, in a
// goroutine of its own (the caller may be an I/O path the frontend's
// reaction waits for). Requests while one runs make it run once more.
func (l *LUN) reprobeWriteCache() {
	l.wc.mu.Lock()
	defer l.wc.mu.Unlock()
	if l.wc.probing {
		l.wc.again = true
		return
	}
	l.wc.probing = true
	go l.reprobeLoop()
}

func (l *LUN) reprobeLoop() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), reprobeTimeout)
		if mp, err := l.modeSense(ctx); err == nil {
			l.applyWriteCache(ctx, cachingWCE(mp))
		}
		cancel()
		l.wc.mu.Lock()
		if !l.wc.again {
			l.wc.probing = false
			l.wc.mu.Unlock()
			return
		}
		l.wc.again = false
		l.wc.mu.Unlock()
	}
}

// applyWriteCache records the target's new WCE and tells the frontend.
func (l *LUN) applyWriteCache(ctx context.Context, wce bool) {
	if l.wc.target.Swap(wce) == wce {
		return
	}
	if wce && !l.wc.frontendWB.Load() {
		// Writes the kernel took as durable may sit in the cache now.
		_ = l.Flush(ctx)
	}
	l.wc.mu.Lock()
	f := l.wc.onChange
	l.wc.mu.Unlock()
	if f != nil {
		l.wc.frontendWB.Store(f(wce))
	}
}

// noticeSense starts a re-probe when the target says its mode parameters
// changed (UNIT ATTENTION, ASC/ASCQ 2A/01), or a re-read of the capacity
// when it says that changed (2A/09).
func (l *LUN) noticeSense(se *scsi.SenseError) {
	if !se.UnitAttention() || se.ASC != 0x2a {
		return
	}
	switch se.ASCQ {
	case 0x01:
		l.reprobeWriteCache()
	case 0x09:
		l.rescanOnAttention()
	}
}
