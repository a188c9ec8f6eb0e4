package initiator

import "sync"

// The challenges this process sent recently, for the reflection check of
// RFC 7143 section 9.2.1: a rogue target may open two connections to us and
// offer, as its challenge on the second, the challenge we sent on the first,
// so that our answer on the second answers the first for it. The set is
// process-wide because the two connections may belong to different
// sessions, Nexus recoveries or commands.

// recentChallengeCount bounds the memory: a rogue target must reflect a
// challenge within this many later mutual CHAP logins of the process.
const recentChallengeCount = 4096

// sentChallenges holds the mutual CHAP challenges this process generated.
var sentChallenges = newChallengeLog(recentChallengeCount)

// challengeLog is a bounded set of challenges, the oldest forgotten first,
// safe for concurrent use.
type challengeLog struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string // insertion order; next is the slot to overwrite
	next int
}

func newChallengeLog(n int) *challengeLog {
	return &challengeLog{set: make(map[string]struct{}, n), ring: make([]string, 0, n)}
}

// add records c, forgetting the oldest challenge when full.
func (l *challengeLog) add(c []byte) {
	k := string(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.set[k]; ok {
		return
	}
	if len(l.ring) < cap(l.ring) {
		l.ring = append(l.ring, k)
	} else {
		delete(l.set, l.ring[l.next])
		l.ring[l.next] = k
		l.next = (l.next + 1) % len(l.ring)
	}
	l.set[k] = struct{}{}
}

// contains reports whether c was added and not yet forgotten.
func (l *challengeLog) contains(c []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.set[string(c)]
	return ok
}
