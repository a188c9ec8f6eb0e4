// Package proctest makes processes in the states tests of "alive" ask
// about: a zombie (exited, not reaped) and a process gone altogether.
package proctest
