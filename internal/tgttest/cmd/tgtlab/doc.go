// Command tgtlab runs a tgtd with one target on 127.0.0.1 for scripts and
// non-Go tests (scripts/demo.sh, scripts/bench-tcp.sh). Once the target is
// ready it prints, one per line on stdout:
//
//	PORTAL=127.0.0.1:PORT
//	TARGET=iqn...
//	CONTROL_PORT=N
//	TGTD_PID=N
//	LUN1=/path/to/backing/file
//	...
//	READY=1
//
// and then waits. SIGINT or SIGTERM stops tgtd and removes what tgtlab
// created; tgtlab exits 1 if tgtd dies on its own. It needs root and tgt.
//
//	tgtlab -luns 1 -size 1G -block-size 512 -thin -dir /tmp/lab
package main
