#!/bin/bash
# PBA in packs (in step) against one member per process, seeds 1 and 2 (seed 0: benchmarks/results/pba-packs/2026-11-30)
cd /work/main && source .venv/bin/activate
for seed in 1 2; do
  for kind in solo pack; do
    extra=""; [ $kind = pack ] && extra="--pack 2"
    echo "# $(date -u +%FT%TZ) seed $seed $kind" 
    ( time autoaug search --data /work/shared/data/cifar10-jpeg --preset pba-cpu --name pba-s$seed-$kind $extra \
        --concurrency 4 --time-budget 40m --seed $seed --storage /tmp/pbarun/runs --store /tmp/pbarun/store \
        --calibration-from pba-pack ) > /tmp/pbaseeds/search-s$seed-$kind.log 2>&1
  done
done
echo "# $(date -u +%FT%TZ) done"
