#!/bin/bash
# After run.sh: GTSRB's K = 5 gain (search_gain --report-only on the two long searches), CIFAR-10's
# eval-cpu of the better stored policy, then GTSRB's. 2 cores, about 1h20m.
# Usage: post.sh GTSRB OUT CIFAR10 C10WORK   (OUT: run.sh's output folder; C10WORK: the CIFAR-10
# search_gain folder of ../budget-rungs-cifar10/README.md, its run folders linked under runs/)
set -eu
D=${1:?the GTSRB folder}; R=${2:?run.sh output folder}; C=${3:?the CIFAR-10 folder}; W=${4:?the CIFAR-10 search_gain folder}
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../../.." && pwd)
export PYTHONUNBUFFERED=1
G=(--data "$D" --name gtsrb-rungs --trials 300 --samplers tpe,tpe-old --variant "old=--calibration-from g-cal"
   --report-only --work "$R" --out "$HERE/gain")
python "$REPO/benchmarks/search_gain.py" "${G[@]}" > "$R/gain.log" 2>&1
python "$REPO/benchmarks/search_gain.py" --data "$C" --name cifar-rungs --trials 300 --samplers tpe,tpe-old \
  --variant "old=--calibration-from c10-cal" --report-only --eval --work "$W" \
  --out "$HERE/../budget-rungs-cifar10/gain" > "$W/eval.log" 2>&1
python "$REPO/benchmarks/search_gain.py" "${G[@]}" --eval > "$R/eval.log" 2>&1
