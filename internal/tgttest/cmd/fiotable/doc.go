// Command fiotable reads fio JSON results (--output-format=json) of two
// systems under test, a and b, and prints one table row per workload with
// a's and b's figure, their 99th-percentile completion latency and the
// ratio a/b. scripts/bench-tcp.sh uses it, so that the benchmark needs no
// jq or python.
//
//	fiotable -dir DIR -a iser-attach -b qemu-nbd
//
// reads DIR/a-W.json and DIR/b-W.json for each workload W: randread (4k
// random read, IOPS), randwrite (4k random write, IOPS) and seqread (1M
// sequential read, MB/s). A missing file shows as "-". It exits 1 when a
// file is unreadable or a fio job reports an error.
package main
