"""How far a PBA search's population could tell its members apart (docs/results.md, "What limits
PBA here"): from a run directory's ``trial_*/result.json`` and ``pba_events.json``, the score gap
each exploit acted on (the cloned member's score minus the cloner's, at the checkpoint's epoch) and
the population's spread at a few epochs, in points of the search score, and how far apart in epochs
its members trained (``--step``: at each report, the latest epoch of the member furthest on, finished or not, minus
that of the one furthest behind still training).

::

    python benchmarks/pba_population.py runs/search-quality/pba-cpu-eval-cpu/runs/sq-pba-cpu-eval-cpu
    python benchmarks/pba_population.py RUNS/pba-pack --step 120 --outcome   # in step? its result
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def member_scores(run: Path) -> dict[str, dict[int, float]]:
    """Each member's first reported score at each epoch (before it cloned another at that epoch)."""
    scores: dict[str, dict[int, float]] = {}
    for trial in sorted(run.glob("trial_*")):
        by_epoch = scores.setdefault(trial.name.split("trial_", 1)[1], {})
        for line in (trial / "result.json").read_text().splitlines():
            row = json.loads(line)
            if row.get("search_score") is not None:
                by_epoch.setdefault(int(row["epoch"]), float(row["search_score"]))
    return scores


def epoch_lags(run: Path, epochs: int) -> list[int]:
    """At each report of the search (in the order of Tune's timestamps) while a member still
    trains, the latest epoch reported by the member furthest on (finished or not) minus that of
    the member furthest behind among those still training. Tune's log of a member that exploited another
    may lack its rows before the exploit: a member counts from its first row in the log."""
    rows = []
    for trial in sorted(run.glob("trial_*")):
        for line in (trial / "result.json").read_text().splitlines():
            row = json.loads(line)
            rows.append((float(row["timestamp"]), int(row["epoch"]), trial.name))
    latest: dict[str, int] = {}
    lags = []
    for _, epoch, member in sorted(rows):
        latest[member] = epoch
        training = [e for e in latest.values() if e < epochs]  # (the furthest on may have finished)
        if training:
            lags.append(max(latest.values()) - min(training))
    return lags


def outcome(run: Path) -> dict:
    """What a finished PBA search's ``result.json`` records of its population: its wall time,
    events, the pack servers' figures (None without packs), each member's final score, the best."""
    prov = json.loads((run / "result.json").read_text())["provenance"]
    method, spent = prov["method"], prov["time"]
    scores = [m.get("score") for m in method["members"]]
    known = [s for s in scores if s is not None]
    return {
        "search_s": round(spent["elapsed_s"], 1),
        "population_wall_s": round(spent["population_wall_s"], 1),
        "events": len(method["events"]),
        "packs": method.get("packs"),
        "member_scores": scores,
        "mean_member": statistics.mean(known),
        "best_member": method["best_member"],
        "best": max(known),
        "stages": len(method["stage_starts"]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the PBA search's run directory")
    p.add_argument("--epochs", default="20,40,60,80,100,120", help="epochs at which to give the spread")
    p.add_argument("--step", type=int, metavar="EPOCHS", help="say how far apart the members trained (runs of EPOCHS)")
    p.add_argument(
        "--outcome", action="store_true", help="first say what the search's result.json records of its population"
    )
    a = p.parse_args(argv)
    scores = member_scores(a.run)
    if a.outcome:
        print(json.dumps(outcome(a.run), indent=1))
    if a.step:
        lags = sorted(epoch_lags(a.run, a.step))
        print(
            f"epochs between the member furthest on and the one furthest behind, over {len(lags)} reports: "
            f"median {statistics.median(lags):g}, 90th percentile {lags[int(0.9 * (len(lags) - 1))]}, most {lags[-1]}"
        )
    events = json.loads((a.run / "pba_events.json").read_text())
    gaps = [
        100 * (scores[e["cloned"]][e["epoch"]] - scores[e["member"]][e["epoch"]])
        for e in events
        if e["epoch"] in scores.get(e["member"], {}) and e["epoch"] in scores.get(e["cloned"], {})
    ]
    print(f"{len(events)} exploit/explore events, {len(gaps)} with both scores at the epoch")
    if gaps:
        print(
            f"gap acted on (cloned minus cloner), points: median {statistics.median(gaps):.2f}, "
            f"range {min(gaps):.2f} to {max(gaps):.2f}"
        )
    for epoch in (int(x) for x in a.epochs.split(",")):
        values = [100 * s[epoch] for s in scores.values() if epoch in s]
        if len(values) >= 2:
            print(
                f"epoch {epoch}: {len(values)} members, mean {statistics.mean(values):.2f}, "
                f"sd {statistics.stdev(values):.2f}, range {max(values) - min(values):.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
