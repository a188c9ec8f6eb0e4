// Package counting holds the I/O counters around a volume's block backend:
// Backend, a blockdev.Wrapper that counts what passes through in a
// metrics.IO (per-op counts, bytes, errors, latency histogram) and keeps
// the current IOPS for list and status (Counters). Its blocking calls and
// its blockdev.Async count each request once, when it ends; the fast
// path's capabilities behind it (Batcher, Reaping, BufferProvider) are
// found with blockdev.As.
//
// Goroutines: a Backend owns one sampler goroutine for the current IOPS,
// stopped by Close (idempotent).
package counting
