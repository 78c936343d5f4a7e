#!/bin/bash
# The long search of run.sh with the rungs and reserve of before issue 68's change: the code of
# 6ce702b (the parent of 700a8f5), imported first through PYTHONPATH; the same data, seed and
# calibration (c10-cal of run.sh). 2 cores, 45 minutes.
# Usage: run-old.sh DATA OUT   (OUT: run.sh's output folder; run from the repository root)
set -eu
D=${1:?the CIFAR-10 folder}; R=${2:?run.sh's output folder}
OLD=$(mktemp -d)
git worktree add --detach "$OLD/checkout" 6ce702b
mkdir "$OLD/shim" "$OLD/shim/autoaug"   # autoaug.* -> the old checkout's folders (the package-dir mapping)
for d in core search proxy_models policies launch; do ln -s "$OLD/checkout/$d" "$OLD/shim/autoaug/$d"; done
export PYTHONUNBUFFERED=1
PYTHONPATH="$OLD/shim" autoaug search --preset cpu --data "$D" --name sg-n300-tpe-old --seed 1 --calibration-from c10-cal \
  --time-budget 45m --num-trials 300 --storage "$R/runs" --store "$R/store" > "$R/long-old.out"
