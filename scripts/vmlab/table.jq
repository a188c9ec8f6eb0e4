# table.jq: print vmlab bench rows (JSON Lines, slurped with jq -s) side by side.
# 1. workload x initiator (every initiator seen in the file, "-" where it has no figure; a
#    failed workload shows its error), a blank line between workloads; cpu_us/io is the
#    serving process's CPU time per I/O (iser-attach rows), sys_us/io the whole machine's
#    busy CPU time per I/O and busy% its busy share of all CPUs (fio rows: application,
#    initiator, rxe and target together), vs_kiser the IOPS ratio against kernel-iser for
#    the same workload ("floor" for the floor-* rows of bench/15-floors.sh: no network behind
#    them, not an initiator).
# 2. for each QD1 workload (name ending in "qd1"): every initiator's mean latency and its ratio
#    to kernel-iser's (lower is better).
# 3. the daemons after their runs (rows of kind "memory"): memory in KiB, CPU share when idle.
# 4. system calls per I/O (rows of kind "syscalls"): io_uring_enter and all calls of the
#    daemon, counted by strace over a fio run.
# 5. paired runs (rows of kind "paired", bench/70-paired.sh): one initiator against another in
#    the same boot, the two in turn round by round; the IOPS ratio of each round and the median.
def pad($n): tostring | if length >= $n then . else . + (" " * ($n - length)) end;
def lpad($n): tostring | if length >= $n then . else (" " * ($n - length)) + . end;
def firsts: reduce .[] as $x ([]; if index([$x]) then . else . + [$x] end);
def fix2: (. * 100 | round) as $c | "\($c / 100 | floor).\($c % 100 | tostring | if length < 2 then "0" + . else . end)";
def num: if . == null then "-" elif . >= 100 then (round | tostring) else ((. * 10 | round) / 10 | tostring) end;
def ratio($a; $b): if $a != null and $b != null and $b > 0 then ($a / $b | fix2) + "x" else "-" end;
def row($w): map(select(.workload == $w));
# line(CELLS; WIDTHS): the cells padded to their widths (negative: left-aligned), space-separated.
def line($cells; $widths): [range($cells | length) as $k | $cells[$k] | if $widths[$k] < 0 then pad(-$widths[$k]) else lpad($widths[$k]) end] | join(" ") | sub(" +$"; "");
[-22, -30, 8, 7, 8, 8, 9, 9, 6, 8] as $wd
| [.[] | select(.kind != "memory" and .kind != "syscalls" and .kind != "paired")] as $rows
| [.[] | select(.kind == "paired")] as $pair
| [.[] | select(.kind == "memory")] as $mem
| [.[] | select(.kind == "syscalls")] as $sys
| ([$rows[] | .workload] | firsts) as $wls
| ([$rows[] | .initiator] | firsts) as $inis
| line(["workload", "initiator", "IOPS", "MB/s", "lat_us", "p99_us", "cpu_us/io", "sys_us/io", "busy%", "vs_kiser"]; $wd),
  (range($wls | length) as $k | $wls[$k] as $w
   | ($rows | row($w) | map(select(.initiator == "kernel-iser" and .error == null)) | first // null) as $base
   | (if $k > 0 then "" else empty end),
     ($inis[] as $i
      | ($rows | row($w) | map(select(.initiator == $i))) as $mine
      | (if ($mine | length) == 0 then [{initiator: $i}] else $mine end)[]
      | if .error != null then line([$w, $i, "failed: \(.error)"]; [-22, -30, 0])
        else line([$w, $i, (.iops | num), (.mbps | num), (.lat_us | num), (.p99_us | num), (.cpu_us_per_io | num),
                   (.sys_us_per_io | num), (.sys_busy_pct | num),
                   if .initiator | startswith("floor-") then "floor" else ratio(.iops; $base.iops) end]; $wd)
        end)),
  ($wls[] | select(test("qd1$")) as $w
   | ($rows | row($w) | map(select(.error == null and .lat_us != null and (.initiator | startswith("floor-") | not)))) as $lr
   | ($lr | map(select(.initiator == "kernel-iser")) | first // null) as $base
   | select($lr | length > 0)
   | "", "\($w): mean latency (lat_us), against kernel-iser (lower is better)",
     ($lr[] | "  " + line([.initiator, (.lat_us | num), ratio(.lat_us; $base.lat_us)]; [-30, 8, 8]))),
  (select($mem | length > 0)
   | "", "daemons after their runs: memory in KiB (VmPin: pinned, RDMA-registered), CPU share when idle",
     line(["initiator", "queue_depth", "VmLck", "VmPin", "VmRSS", "VmHWM", "idle_cpu%"]; [-30, 11, 8, 8, 8, 8, 9]),
     ($mem[] | line([.initiator, (.queue_depth // "-"), (.locked_kib // "-"), (.pinned_kib // "-"),
                     (.rss_kib // "-"), (.hwm_kib // "-"), (.idle_cpu_pct | num)]; [-30, 11, 8, 8, 8, 8, 9]))),
  (select($sys | length > 0)
   | "", "system calls of the daemon per I/O, counted by strace (which slows it: the counts are the figure)",
     line(["workload", "initiator", "ios", "enter/io", "calls/io"]; [-22, -30, 8, 9, 9]),
     ($sys[] | line([.workload, .initiator, .ios, (.enter_per_io | tostring), (.syscalls_per_io | tostring)]; [-22, -30, 8, 9, 9]))),
  (select($pair | length > 0)
   | "", "paired runs in one boot, in turn round by round: IOPS ratio of initiator to against",
     line(["workload", "initiator", "against", "median", "rounds"]; [-22, -30, -30, 7, 0]),
     ($pair[] | line([.workload, .initiator, .against, (if .median_ratio == null then "-" else (.median_ratio | fix2) + "x" end),
                      (.ratios | map(if . == null then "-" else fix2 end) | join(" "))]; [-22, -30, -30, 7, 0])))
