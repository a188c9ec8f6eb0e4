// Package rawwait lets event loops on the I/O path wait in raw system
// calls, keeping their P (the Go scheduler's processor), as long as the
// rest of the process keeps at least one.
//
// A blocking system call made the usual way lets the scheduler's monitor
// take the P back after a few microseconds, and every return then costs a
// round of futex wake-ups and thread switches on other threads before the
// loop runs again; twice per request at queue depth 1. Waiting raw, the
// loop looks busy to the monitor, which preempts it every 10 ms with a
// signal: the wait returns EINTR and the loop yields, so a stop-the-world
// and other goroutines still run. An idle loop should wait the usual way
// (those preemptions are a waste then); loops decide per wait.
//
// Slots keep the budget: GOMAXPROCS-1 raw waits, read again on every
// take, so that a GOMAXPROCS that shrinks at run time (the runtime
// follows the cgroup's CPU limit) takes slots back rather than leave a
// raw wait the last P; none while asynchronous preemption is off
// (GODEBUG asyncpreemptoff=1), since without its signal nothing, not even
// a stop-the-world, would get the P back before the wait's descriptor is
// ready. A loop that gets no slot waits the usual way.
package rawwait
