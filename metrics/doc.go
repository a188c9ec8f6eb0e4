// Package metrics counts a volume's I/O without locks or allocation and
// exposes it two ways: Prometheus metrics served over HTTP (Collector,
// Serve) and a JSON Snapshot that the control socket hands to
// `iser-attach stats`.
//
// IO holds, per operation (Op), atomic counters of completed I/Os, bytes,
// errors and latency: the latency histogram is a fixed array of atomic
// bucket counters (LatencyBounds) plus a sum, so recording an I/O is a few
// atomic adds and two clock reads. Nothing is converted until a scrape or a
// snapshot asks: Collector builds constant Prometheus metrics
// (MustNewConstMetric, MustNewConstHistogram) from the counters each time
// it is collected. Quantile estimates a percentile from bucket deltas.
//
// Metric names (labels volume, target and lun on every series):
//
//	iser_attach_io_total{op}                 completed I/Os
//	iser_attach_io_bytes_total{op}           bytes read or written
//	iser_attach_io_errors_total{op}          I/Os that failed
//	iser_attach_io_latency_seconds{op}       histogram of I/O latency
//	iser_attach_inflight                     I/Os started, not completed
//	iser_attach_session_state{state}         1 for the current state, 0 for the others
//	iser_attach_session_recoveries_total     sessions reinstated after a fault
//	iser_attach_command_timeouts_total       SCSI commands that timed out
//	iser_attach_path_up{portal}              multipath: 1 while the path carries I/O
//	iser_attach_path_commands_total{portal}  multipath: commands issued on the path
//	iser_attach_path_failovers_total{portal} multipath: commands moved from it to another path
//
// op is read, write, flush, discard or write_zeroes; state is attached,
// recovering, failed or closed (SessionStates).
//
// Goroutines: a Server owns one goroutine serving HTTP; Close shuts it down
// and waits for it. IO and Collector start none.
package metrics
