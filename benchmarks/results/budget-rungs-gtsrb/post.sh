#!/bin/bash
# after run.sh: GTSRB's K=5 gain, CIFAR-10's eval-cpu of the better stored policy, then GTSRB's
cd /work/main
export PYTHONUNBUFFERED=1 PATH=/work/main/.venv/bin:$PATH
tail --pid=$1 -f /dev/null
G=(--data /work/shared/data/gtsrb-32-png --name gtsrb-rungs --trials 300 --samplers tpe,tpe-old
   --variant "old=--calibration-from g-cal" --report-only --work /work/runs68g --out /work/main/benchmarks/results/budget-rungs-gtsrb/gain)
date -u +"start gtsrb gain %FT%TZ" >> /work/runs68g/times.txt
python benchmarks/search_gain.py "${G[@]}" > /work/runs68g/gain.log 2>&1
date -u +"start cifar eval %FT%TZ" >> /work/runs68g/times.txt
python benchmarks/search_gain.py --data /work/shared/data/cifar10-jpeg --name cifar-rungs --trials 300 --samplers tpe,tpe-old \
  --variant "old=--calibration-from c10-cal" --report-only --eval --work /work/runs68/sg \
  --out /work/main/benchmarks/results/budget-rungs-cifar10/gain > /work/runs68/eval.log 2>&1
date -u +"start gtsrb eval %FT%TZ" >> /work/runs68g/times.txt
python benchmarks/search_gain.py "${G[@]}" --eval > /work/runs68g/eval.log 2>&1
date -u +"end post %FT%TZ" >> /work/runs68g/times.txt
