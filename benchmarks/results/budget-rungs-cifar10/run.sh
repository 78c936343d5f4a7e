#!/bin/bash
# The two searches of README.md: a `cpu`-preset search of CIFAR-10 (its calibration), then the
# long budget with that calibration reused, as a user would (issue 68's scenario). 2 cores, ~75 min.
# Usage: benchmarks/results/budget-rungs-cifar10/run.sh DATA OUT   (DATA: the cifar10-jpeg folder)
set -eu
D=${1:?the CIFAR-10 folder}; R=${2:?an output folder}
mkdir -p "$R"
export PYTHONUNBUFFERED=1
autoaug search --preset cpu --data "$D" --name c10-cal --seed 0 --storage "$R/runs" --store "$R/store" > "$R/cal.out"
autoaug search --preset cpu --data "$D" --name c10-long --seed 1 --calibration-from c10-cal \
  --time-budget 45m --num-trials 300 --storage "$R/runs" --store "$R/store" > "$R/long.out"
