#!/bin/bash
# Issue 68's row on GTSRB, grouped by track: a `cpu`-preset search (its calibration), then the long
# budget with that calibration reused (--calibration-from), with today's code and with the rungs and
# reserve of before (the code of 6ce702b, imported first through PYTHONPATH), same seed. 2 cores, ~2 h.
# Usage: run.sh DATA OUT OLD   (DATA: the gtsrb-32-png folder; OLD: a folder whose autoaug/ links the
# old checkout's core, launch, policies, proxy_models and search: see ../budget-rungs-cifar10/README.md)
set -eu
D=${1:?the GTSRB folder}; R=${2:?an output folder}; OLD=${3:?a folder holding autoaug/ -> the old checkout}
mkdir -p "$R"
export PYTHONUNBUFFERED=1
G="source_path:Images/(\d+)/(\d+)_"
stamp() { date -u +"$1 %FT%TZ" >> "$R/times.txt"; }
stamp "start cal"
autoaug search --preset cpu --data "$D" --group-by "$G" --name g-cal --seed 0 \
  --storage "$R/runs" --store "$R/store" > "$R/cal.out" 2> "$R/cal.err"
stamp "start long (after)"
autoaug search --preset cpu --data "$D" --group-by "$G" --name sg-n300-tpe --seed 1 --calibration-from g-cal \
  --time-budget 45m --num-trials 300 --storage "$R/runs" --store "$R/store" > "$R/long.out" 2> "$R/long.err"
stamp "start long (before)"
PYTHONPATH="$OLD" autoaug search --preset cpu --data "$D" --group-by "$G" --name sg-n300-tpe-old --seed 1 --calibration-from g-cal \
  --time-budget 45m --num-trials 300 --storage "$R/runs" --store "$R/store" > "$R/long-old.out" 2> "$R/long-old.err"
stamp "end"
