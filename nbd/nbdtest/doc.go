// Package nbdtest provides an in-memory blockdev.Backend (nbd.Backend) for tests: it counts the
// calls that reach it, records the largest concurrency and transfer sizes it
// saw, flags requests that a correct server should never pass on
// (out-of-range, misaligned, larger than MaxTransfer), and lets a test inject
// errors or block calls through a Hook.
//
// It does not import package nbd, so nbd's own tests can use it; the nbd
// tests assert that *Memory satisfies blockdev.Backend.
package nbdtest
