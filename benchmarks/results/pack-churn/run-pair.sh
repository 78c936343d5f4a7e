#!/bin/bash
# The same --pack 4 smoke search (16 trials, 8 epochs, ASHA's rung at epoch 2) without and with the
# driver telling the pack servers when Tune ends a trial. WITHOUT: a package path (PYTHONPATH) whose
# search/tune/pack.py has the callbacks line of `packed` removed; with: this checkout.
# usage: run-pair.sh DATA OUT WITHOUT_PYTHONPATH
set -u
data=$1 out=$2 without=$3
args="--preset smoke --data $data --base crop --no-warm-start --pack 4 --num-trials 16 \
 --set train.epochs=8 --set train.train_size=256 --set train.val_size=128 --set grace_period=2 \
 --storage $out/runs --store $out/store"
for variant in without with; do
  if [ $variant = without ]; then pp=$without; else pp=; fi
  start=$(date +%s)
  PYTHONPATH=$pp python -m autoaug.launch.cli search --name churn-$variant $args > $out/search-$variant-departures.log 2>&1
  echo "$variant: exit $? in $(( $(date +%s) - start )) s"
done
