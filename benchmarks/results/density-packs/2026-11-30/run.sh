#!/bin/bash
# density-cpu's fold models: one per process against packs of 2 (CIFAR-10), one round of 4 candidates after them
cd /work/main && source .venv/bin/activate
for kind in solo pack; do
  extra=""; [ $kind = pack ] && extra="--pack 2"
  echo "# $(date -u +%FT%TZ) $kind"
  ( time autoaug search --data /work/shared/data/cifar10-jpeg --preset density-cpu --name dens-$kind $extra \
      --rounds 1 --trials-per-round 4 --top-per-round 2 --base standard \
      --storage /tmp/pbarun/runs --store /tmp/pbarun/store ) > /tmp/densrun/search-$kind.log 2>&1
done
echo "# $(date -u +%FT%TZ) done"
