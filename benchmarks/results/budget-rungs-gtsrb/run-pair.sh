#!/bin/bash
# The long search of run.sh again with the race's reserve as a wave a round for the leader and its
# nearest challengers (the code of cf80e2c, imported first through PYTHONPATH as run.sh's OLD is),
# same seed and calibration (g-cal, in OUT from run.sh). 2 cores, 45 minutes.
# Usage: run-pair.sh DATA OUT NEW   (NEW: a folder whose autoaug/ links cf80e2c's core, launch,
# policies, proxy_models and search)
set -eu
D=${1:?the GTSRB folder}; R=${2:?run.sh output folder}; NEW=${3:?a folder holding autoaug/ -> the checkout}
export PYTHONUNBUFFERED=1
G="source_path:Images/(\d+)/(\d+)_"
date -u +"start long (pair reserve) %FT%TZ" >> "$R/times.txt"
PYTHONPATH="$NEW" autoaug search --preset cpu --data "$D" --group-by "$G" --name sg-n300-tpe-pair --seed 1 \
  --calibration-from g-cal --time-budget 45m --num-trials 300 --storage "$R/runs" --store "$R/store" \
  > "$R/long-pair.out" 2> "$R/long-pair.err"
date -u +"end (pair) %FT%TZ" >> "$R/times.txt"
