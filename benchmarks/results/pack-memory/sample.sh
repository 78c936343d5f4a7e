#!/bin/bash
# sample RSS, PSS, USS (Private) of ray trial/server processes every 2 s until the search ends
while [ ! -f /tmp/memrun2/finished ]; do
  for pid in $(pgrep -f "ray::"); do
    name=$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-40)
    r=$(awk '/^Rss:/{r=$2} /^Pss:/{p=$2} /^Private_Clean:/{c=$2} /^Private_Dirty:/{d=$2} END{print r, p, c+d}' /proc/$pid/smaps_rollup 2>/dev/null)
    echo "$pid $r $name"
  done >> /tmp/memrun2/ps.txt
  echo --- >> /tmp/memrun2/ps.txt
  sleep 2
done
