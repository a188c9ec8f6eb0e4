package initiator

import "sync"

// The lock order of the data path, outermost first:
//
//	ISERDatamover.reapMu    (a loop or the poller reaps the CQ)
//	Session.mu              (the completions it runs reach the session)
//	ISERDatamover.mu, tcpDatamover.mu  (the session queues a send)
//	Task.mu                 (the datamover places a task's data)
//
// A goroutine may take a lock only while it holds none of the same or a
// later rank. Each of these mutexes is a rankedMutex; in a build with the
// race detector (go test -race, make test) taking one out of order
// panics, naming both locks (lockorder_race.go). In other builds a
// rankedMutex is a plain sync.Mutex: its Lock and Unlock are sync.Mutex's,
// promoted, at no cost.

// lockRank is a mutex's place in the lock order.
type lockRank uint8

const (
	rankReap lockRank = 1 + iota
	rankSession
	rankDatamover
	rankTask
)

func (r lockRank) String() string {
	switch r {
	case rankReap:
		return "datamover's reapMu"
	case rankSession:
		return "session's mu"
	case rankDatamover:
		return "datamover's mu"
	case rankTask:
		return "task's mu"
	}
	return "unranked lock"
}

// ranker names a rank as a type, so that a rankedMutex carries its rank in
// its type and not in a field.
type ranker interface{ rank() lockRank }

type (
	reapRank      struct{}
	sessionRank   struct{}
	datamoverRank struct{}
	taskRank      struct{}
)

func (reapRank) rank() lockRank      { return rankReap }
func (sessionRank) rank() lockRank   { return rankSession }
func (datamoverRank) rank() lockRank { return rankDatamover }
func (taskRank) rank() lockRank      { return rankTask }

// rankedMutex is a sync.Mutex at rank R of the lock order. Its zero value
// is an unlocked mutex; it must not be copied.
type rankedMutex[R ranker] struct {
	sync.Mutex
}
