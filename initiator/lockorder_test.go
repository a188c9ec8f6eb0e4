package initiator

import (
	"strings"
	"sync"
	"testing"
)

// lockOrderPanic runs f and returns what it panicked with, or "".
func lockOrderPanic(f func()) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg, _ = v.(string)
			if msg == "" {
				msg = "a panic without a message"
			}
		}
	}()
	f()
	return ""
}

// TestLockOrderCheck: under the race detector, taking a ranked mutex while
// holding one of the same or a later rank panics before it blocks, naming
// both; the order itself, and locks held by other goroutines, do not.
func TestLockOrderCheck(t *testing.T) {
	if !lockOrderChecks {
		t.Skip("the lock order is checked only with -race")
	}
	var (
		reap    rankedMutex[reapRank]
		session rankedMutex[sessionRank]
		dm      rankedMutex[datamoverRank]
		task    rankedMutex[taskRank]
		task2   rankedMutex[taskRank]
	)
	// In order, all four nested; then again after a release.
	if msg := lockOrderPanic(func() {
		reap.Lock()
		session.Lock()
		dm.Lock()
		task.Lock()
		task.Unlock()
		dm.Unlock()
		dm.Lock()
		task.Lock()
		task.Unlock()
		dm.Unlock()
		session.Unlock()
		reap.Unlock()
	}); msg != "" {
		t.Fatalf("the lock order itself panicked: %s", msg)
	}
	for _, tc := range []struct {
		name       string
		outer      sync.Locker
		inner      sync.Locker
		innerName  string
		holdingSub string
	}{
		{"session under datamover", &dm, &session, "session's mu", "datamover's mu"},
		{"reap under session", &session, &reap, "datamover's reapMu", "session's mu"},
		{"datamover under task", &task, &dm, "datamover's mu", "task's mu"},
		{"two tasks", &task, &task2, "task's mu", "task's mu"},
	} {
		msg := lockOrderPanic(func() {
			tc.outer.Lock()
			defer tc.outer.Unlock()
			tc.inner.Lock() // panics before it blocks
			tc.inner.Unlock()
		})
		if !strings.Contains(msg, "lock order") || !strings.Contains(msg, "takes the "+tc.innerName) ||
			!strings.Contains(msg, "holds the "+tc.holdingSub) {
			t.Errorf("%s: panic %q", tc.name, msg)
		}
		// The panic left nothing held: the order holds again.
		if msg := lockOrderPanic(func() { reap.Lock(); task.Lock(); task.Unlock(); reap.Unlock() }); msg != "" {
			t.Fatalf("%s: after the panic: %s", tc.name, msg)
		}
	}
	// Another goroutine's locks are its own: holding the task's mu here
	// does not stop another goroutine from taking the session's.
	task.Lock()
	ch := make(chan string)
	go func() { ch <- lockOrderPanic(func() { session.Lock(); session.Unlock() }) }()
	if msg := <-ch; msg != "" {
		t.Errorf("another goroutine's lock counted: %s", msg)
	}
	// Unlocked by another goroutine (sync.Mutex allows it): forgotten.
	go func() { task.Unlock(); ch <- "" }()
	<-ch
	if msg := lockOrderPanic(func() { dm.Lock(); dm.Unlock() }); msg != "" {
		t.Errorf("a mutex unlocked by another goroutine still counts as held: %s", msg)
	}
}
