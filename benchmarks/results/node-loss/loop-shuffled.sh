#!/bin/bash
# The two-node cluster tests (tests/launch/test_cluster_ray.py: the three node-loss tests among the
# others), 10 separate pytest invocations, each running every test of the file in a shuffled order
# (Python's random.Random(run number) over the file's test functions), beside a CPU hog.
# ONLY=REGEX keeps the tests whose names match (ONLY=survives_losing: the three node-loss tests).
# Run from the repository root: benchmarks/results/node-loss/loop-shuffled.sh > loop.txt
# Each run's whole output: run-N.log in the working directory.
export AUTOAUG_CIFAR10=${AUTOAUG_CIFAR10:-$(cd .. && pwd)/shared/data/cifar10-jpeg} AUTOAUG_REQUIRE_DATA=1
echo "commit $(git rev-parse --short HEAD); $(lscpu | grep 'Model name')"
python3 -c "while True: pass" &
HOG=$!
trap 'kill $HOG' EXIT
for i in $(seq 1 "${RUNS:-10}"); do
  ORDER=$(.venv/bin/python - "$i" "${ONLY:-.}" <<'PY'
import random, re, sys
names = re.findall(r"^def (test_\w+)", open("tests/launch/test_cluster_ray.py").read(), re.M)
names = [n for n in names if re.search(sys.argv[2], n)]
random.Random(int(sys.argv[1])).shuffle(names)
print(" ".join("tests/launch/test_cluster_ray.py::" + n for n in names))
PY
)
  echo "== run $i start $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "order: $(echo $ORDER | sed 's#tests/launch/test_cluster_ray.py::##g')"
  .venv/bin/pytest -q -p no:cacheprovider $ORDER -rA > "run-$i.log" 2>&1
  RC=$?
  grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "run-$i.log" | tail -14
  echo "== run $i exit $RC end $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
