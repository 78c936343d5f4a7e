"""The stored policies' gain over the warm start, K = 5 paired, for the two long searches of this
folder (after: ``c10-long`` of run.sh; before: ``sg-n300-tpe-old`` of run-old.sh): the runs of
``benchmarks/search_gain.py``'s re-scoring stage (its plan, seeds ``train.seed + 3000 + i``, the
search's re-scoring configuration), read from its ``rescore.json``.

    mkdir -p OUT/sg/runs
    ln -s OUT/runs/c10-long OUT/sg/runs/sg-n300-tpe; ln -s OUT/runs/sg-n300-tpe-old OUT/sg/runs/sg-n300-tpe-old
    python benchmarks/search_gain.py --data DATA --trials 300 --samplers tpe,tpe-old \\
        --variant "old=--calibration-from c10-cal" --report-only --work OUT/sg   # trains the 15 runs
    python benchmarks/results/budget-rungs-cifar10/gain.py OUT/sg

(``--variant`` only names the column; with ``--report-only`` no search runs. search_gain's own
report then stops at ``c10-long``'s Optuna study, which is named for that search and not for the
link: this script reports the runs instead.)"""

import json
import sys
from pathlib import Path

from autoaug.launch.compare.stats import paired_difference

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import search_gain as sg  # noqa: E402
from search_gain_stats import result_path  # noqa: E402

work = Path(sys.argv[1])
results = {(300, s): json.loads(result_path(work, f"sg-n300-{s}").read_text()) for s in ("tpe", "tpe-old")}
_, per_search, _ = sg.rescore_plan(results, 5)
done = json.loads((work / "rescore.json").read_text())
for (_, column), ps in per_search.items():
    keys = ps["keys"]
    what = "before (6ce702b)" if column.endswith("-old") else "after"
    print(f"{what}: stored {ps['stored_hash'][:12]}, warm start {ps['warm_start']} ({ps['warm_hash'][:12]})")
    for role in ("stored", "challenger"):
        if not keys[role]:
            continue
        seeds = sorted(keys[role])
        own = {seed: 100 * done[keys[role][seed]]["search_score"] for seed in seeds}
        warm = {seed: 100 * done[keys["warm"][seed]]["search_score"] for seed in seeds}
        d = paired_difference(own, warm)
        label = "stored" if role == "stored" else f"its best own candidate ({ps['challenger']})"
        print(
            f"  {label}: {[round(own[s] / 100, 4) for s in seeds]} against {[round(warm[s] / 100, 4) for s in seeds]} (seeds {seeds})"
        )
        print(f"    gain {d.mean:+.2f} [{d.ci95_low:+.2f}, {d.ci95_high:+.2f}] points (95% t interval, K = {d.n})")
    print(f"  machine: {sorted({done[v]['machine'] for v in keys['warm'].values()})}")
