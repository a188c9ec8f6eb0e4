# table.jq: print vmlab bench rows (JSON Lines, slurped with jq -s) side by side.
# Rows: workload x initiator (every initiator seen in the file, "-" when it has no figure);
# the last column is the IOPS ratio against kernel-iser for the same workload.
def pad($n): tostring | if length >= $n then . else . + (" " * ($n - length)) end;
def lpad($n): tostring | if length >= $n then . else (" " * ($n - length)) + . end;
def firsts: reduce .[] as $x ([]; if index([$x]) then . else . + [$x] end);
def fix2: (. * 100 | round) as $c | "\($c / 100 | floor).\($c % 100 | tostring | if length < 2 then "0" + . else . end)";
def num: if . == null then "-" elif . >= 100 then (round | tostring) else ((. * 10 | round) / 10 | tostring) end;
. as $rows
| ([$rows[] | .workload] | firsts) as $wls
| ([$rows[] | .initiator] | firsts) as $inis
| (["workload" | pad(20)] + ["initiator" | pad(22)] + (["IOPS", "MB/s", "lat_us", "p99_us", "vs_kiser"] | map(lpad(9))) | join(" ")),
  ($wls[] as $w
   | ($rows | map(select(.workload == $w and .initiator == "kernel-iser")) | first // null) as $base
   | $inis[] as $i
   | ($rows | map(select(.workload == $w and .initiator == $i))) as $mine
   | if ($mine | length) == 0 then [{initiator: $i}] else $mine end
   | .[]
   | [($w | pad(20)), ($i | pad(22)),
      (.iops | num | lpad(9)), (.mbps | num | lpad(9)), (.lat_us | num | lpad(9)), (.p99_us | num | lpad(9)),
      ((if $base != null and $base.iops > 0 and .iops != null then (.iops / $base.iops | fix2) + "x" else "-" end) | lpad(9))]
   | join(" "))
