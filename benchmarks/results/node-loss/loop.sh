#!/bin/bash
# The three node-loss tests, 10 separate pytest invocations in a row (each brings up its own
# two-node cluster), beside the search_gain benchmark study (a CPU hog on both cores).
cd /work/main
export AUTOAUG_CIFAR10=/work/shared/data/cifar10-jpeg AUTOAUG_REQUIRE_DATA=1
echo "commit $(git rev-parse --short HEAD); $(lscpu | grep 'Model name')"
for i in $(seq 1 10); do
  echo "== run $i start $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/pytest -q -p no:cacheprovider tests/launch/test_cluster_ray.py -k survives_losing -rA 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed|Error" | tail -8
  echo "== run $i exit ${PIPESTATUS[0]} end $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
