//go:build !race

package initiator

// lockOrderChecks is false: without the race detector a rankedMutex is a
// plain sync.Mutex (lockorder.go).
const lockOrderChecks = false
