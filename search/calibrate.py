"""Before a search: measure on the user's data which base and which published policy to start from.

A search's defaults were CIFAR-10's: every candidate on the ``standard`` base (crop + horizontal
flip) and the first trials AutoAugment's CIFAR-10 sub-policies. On data where a flip changes the
label (traffic signs, text, digits) or where another published policy suits better, both cost
more than the search finds (docs/search.md, "Searching your own dataset"). So, when asked
(``SearchConfig.base == "auto"``, ``SearchConfig.warm_start == "auto"``; the ``cpu``, ``paper``
and ``density-cpu`` presets), the search first trains the proxy -- the trials' own training
configuration, seeds ``train.seed + CALIBRATION_SEED_OFFSET + i`` -- and scores each run as a trial
is scored (:data:`~autoaug.search.score.METRIC`):

1. **Bases** (``base: auto``): each base alone (``none``, ``crop``, ``standard``:
   :mod:`autoaug.policies.bases`), ``calibration_seeds`` runs each. The bases whose mean is within
   the noise of the best mean (difference under twice its standard error; one proxy run's
   seed-to-seed standard deviation is :data:`RUN_NOISE`, or the pooled spread of the runs when it
   is larger) get ``base_extra_seeds`` more runs each, and the choice is made again on all their
   runs. Of the best base and those still within the noise of it, the one that augments most
   (:data:`BASE_STRENGTH`: ``standard``, then ``crop``, then ``none``) is kept: an augmentation
   that changes labels shows as a gap far beyond the noise (a flip on traffic signs: 6 points
   under the proxy), while one the proxy cannot tell from a weaker one still pays in the longer
   final training (CIFAR-10: the flip within the noise under the proxy with one run each, +1.5
   points in ``eval-cpu``).
2. **Transfer** (``warm_start: auto``): each published policy of :data:`TRANSFER_REFS` moved onto
   that base. The search warm-starts from the sub-policies of the best-scoring one that fits the
   search space (AutoAugment's three policies do; RandAugment's and TrivialAugment's uniform
   operations at one magnitude of 31 bins do not: when one of them transfers best, the summary
   says so and the best AutoAugment policy is the warm start).

With re-scoring on, the published policy that transferred best (on the chosen base) is also a
final candidate (``transfer``, :func:`transfer_candidate`): a search stores it when none of its
own candidates re-scores higher, and its summary says so.

Every run is a Ray task with the trials' resources, saved as it finishes in the run directory
(``calibration.json``), so a resumed search trains only the runs it lacks and makes the same
choice. The scores, the choice and why are in the stored policy's provenance (``calibration``),
printed by the search's summary and by ``autoaug policies show``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from autoaug.core import failpoints
from autoaug.search.score import METRIC

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.run_dir import RunDir

__all__ = [
    "AUTO",
    "CALIBRATION_FILE",
    "CALIBRATION_SEED_OFFSET",
    "TRANSFER_REFS",
    "RUN_NOISE",
    "BASE_STRENGTH",
    "Calibration",
    "needs_calibration",
    "calibration_train_config",
    "calibrate",
    "choose_base",
    "rank_transfer",
    "transfer_candidate",
    "describe_calibration",
]

AUTO = "auto"
CALIBRATION_FILE = "calibration.json"
#: Calibration run ``i`` uses seed ``train.seed + CALIBRATION_SEED_OFFSET + i``: seeds no trial and
#: no re-scoring run uses.
CALIBRATION_SEED_OFFSET = 2_000
#: The published policies a transfer warm start scores, in this order (ties go to the earlier).
TRANSFER_REFS = ("autoaugment-cifar10", "autoaugment-svhn", "autoaugment-imagenet", "randaugment", "trivialaugment")
#: One proxy run's seed-to-seed standard deviation of the search score, when the calibration's runs
#: cannot measure a larger one: ``proxy-cpu`` on CIFAR-10, the sd of the paired differences between
#: two seeds over 10 policies (1.85 points) over sqrt(2) (benchmarks/results/trial-throughput;
#: earlier runs of one policy spread 0.5-0.7 points, fewer policies, a float32 proxy).
RUN_NOISE = 0.013


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What the calibration chose: ``base`` (None: not calibrated, the configuration's own),
    ``warm_start`` (None: not calibrated), and ``record`` (the provenance: every run's score,
    the choice and why)."""

    base: str | None
    warm_start: tuple[str, ...] | None
    record: dict[str, Any]

    def apply(self, config: Any) -> Any:
        """``config`` with its ``base`` and ``warm_start`` as chosen (a configuration with
        nothing automatic left)."""
        changes: dict[str, Any] = {}
        if self.base is not None:
            changes["base"] = self.base
        if self.warm_start is not None:
            changes["warm_start"] = self.warm_start
        return config.replace(**changes) if changes else config


def needs_calibration(config: Any) -> bool:
    return config.base == AUTO or config.warm_start == AUTO


def calibration_train_config(config: Any, seed_index: int = 0) -> Any:
    """The training configuration of calibration run ``seed_index``: the trials' own, with seed
    ``train.seed + CALIBRATION_SEED_OFFSET + seed_index``, validated only over the last
    ``score_window`` epochs (all the score reads)."""
    return dataclasses.replace(
        config.train,
        seed=(config.train.seed + CALIBRATION_SEED_OFFSET + seed_index) % 2**31,
        eval_from=max(1, config.train.epochs - config.score_window + 1),
    )


def _key(stage: str, label: str, cfg: Any) -> str:
    return f"{stage}:{label}/seed={cfg.seed}"


def _scores(stage: str, labels: Sequence[str], cfgs: Sequence[Any], runs: Mapping[str, Any]) -> dict[str, list[float]]:
    return {label: [float(runs[_key(stage, label, c)][METRIC]) for c in cfgs] for label in labels}


def _noise(scores: Mapping[str, Sequence[float]]) -> tuple[float, str]:
    """The standard deviation of one run's score and where it comes from: the spread pooled over
    the labels with several runs, or :data:`RUN_NOISE` when there are none or it is larger (a few
    runs can show a spread far below the real one, and would then tell apart bases that are not)."""
    groups = [list(v) for v in scores.values() if len(v) > 1]
    known = f"a proxy run's seed-to-seed spread is about {RUN_NOISE * 100:.1f} points"
    if not groups:
        return RUN_NOISE, f"one run each; {known}"
    pooled = math.sqrt(
        math.fsum(statistics.variance(g) * (len(g) - 1) for g in groups) / sum(len(g) - 1 for g in groups)
    )
    runs = " or ".join(str(n) for n in sorted({len(v) for v in scores.values()}, reverse=True))
    if pooled < RUN_NOISE:
        return RUN_NOISE, (
            f"{runs} runs each; pooled spread {pooled * 100:.2f} points, taken as no less than "
            f"{RUN_NOISE * 100:.1f}, a proxy run's known seed-to-seed spread"
        )
    return pooled, f"{runs} runs each; pooled seed-to-seed spread {pooled * 100:.2f} points"


def _ranked(scores: Mapping[str, Sequence[float]], order: Sequence[str]) -> list[tuple[str, float]]:
    means = {label: math.fsum(v) / len(v) for label, v in scores.items()}
    rank = {label: i for i, label in enumerate(order)}
    return sorted(means.items(), key=lambda kv: (-kv[1], rank.get(kv[0], len(rank))))


#: The bases from the one that augments most to the one that augments least: of the bases within
#: the noise of the best, the first is kept (and an exact tie of means goes to it).
BASE_STRENGTH = ("standard", "crop", "none")


def choose_base(scores: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """The base to search on and the record of why: every base's runs and mean; ``best``, the
    highest mean; ``within_noise``, the bases whose mean is less than twice the standard error of
    the difference below it (``threshold``, for the same number of runs as the best); ``chosen``,
    of the best and those within the noise, the one that augments most (:data:`BASE_STRENGTH`)."""
    ranked = _ranked(scores, BASE_STRENGTH)
    best, top = ranked[0]
    sigma, source = _noise(scores)
    n_best = len(scores[best])

    def threshold(label: str) -> float:
        return 2 * sigma * math.sqrt(1 / n_best + 1 / len(scores[label]))

    within = [label for label, mean in ranked[1:] if top - mean < threshold(label)]
    strength = {b: i for i, b in enumerate(BASE_STRENGTH)}
    chosen = min([best, *within], key=lambda b: strength.get(b, len(strength)))
    return {
        "chosen": chosen,
        "best": best,
        "scores": {label: {"mean": mean, "runs": list(scores[label])} for label, mean in ranked},
        "noise": {"sd": sigma, "threshold": threshold(best), "source": source},
        "within_noise": within,
    }


def rank_transfer(scores: Mapping[str, Sequence[float]], fits: Mapping[str, str | None]) -> dict[str, Any]:
    """The published policies ranked by mean score (ties: :data:`TRANSFER_REFS` order), and the
    warm start: the best one whose sub-policies fit the search space (``fits[ref]`` is None when
    it fits, else why not)."""
    ranked = _ranked(scores, TRANSFER_REFS)
    best, top = ranked[0]
    warm = next((ref for ref, _ in ranked if fits.get(ref) is None), None)
    return {
        "best": best,
        "warm_start": [] if warm is None else [warm],
        "scores": {
            ref: {
                "mean": mean,
                "runs": list(scores[ref]),
                "margin": top - mean,
                **({"unfit": fits[ref]} if fits.get(ref) else {}),
            }
            for ref, mean in ranked
        },
    }


def calibrate(config: Any, run: RunDir, display: Progress) -> Calibration | None:
    """Run what ``config`` leaves to measurement (``base``, ``warm_start`` ``"auto"``) inside the
    search's Ray session, resuming from ``calibration.json`` in the run directory ``run``; None
    when nothing is automatic."""
    if not needs_calibration(config):
        return None
    from autoaug.policies import presets
    from autoaug.search.rescore import train_runs
    from autoaug.search.warm_start import warm_start_policies

    cached = run.read_json(CALIBRATION_FILE) if run.exists(CALIBRATION_FILE) else {}
    runs: dict[str, Any] = dict(cached.get("runs", {}))
    cfgs = [calibration_train_config(config, i) for i in range(config.calibration_seeds)]
    record: dict[str, Any] = {
        "seeds": [c.seed for c in cfgs],
        "epochs": config.train.epochs,
        "train_size": config.train.train_size,
        "val_size": config.train.val_size,
    }

    def train(
        stage: str, policies: Mapping[str, Any], what: str, seeds: Sequence[Any] = tuple(cfgs)
    ) -> dict[str, list[float]]:
        todo = [(_key(stage, label, c), policy, c) for label, policy in policies.items() for c in seeds]
        missing = sum(1 for key, _, _ in todo if key not in runs)
        if missing:
            display.log(
                f"calibration: {what}: {missing} proxy run(s) of {config.train.epochs} epochs "
                f"({len(seeds)} seed{'s' if len(seeds) > 1 else ''} each)"
            )

        def save(results: Mapping[str, Any]) -> None:
            for key in [k for k in results if k not in runs]:
                r = results[key]
                display.log(f"calibration: {key}: {METRIC} {r[METRIC]:.4f} ({r.get('train_time_s') or 0:.0f} s)")
            runs.update(results)
            run.write_json(CALIBRATION_FILE, {"runs": runs})
            failpoints.hit("calibrate.after_run_saved")

        runs.update(train_runs(todo, config, cached=runs, save=save, task_name="autoaug-calibrate"))
        return _scores(stage, list(policies), seeds, runs)

    # A calibration that ended keeps its choice when the search resumes, even under a later version
    # whose rule would choose otherwise: the trials already ran on that base, from that warm start.
    made: Mapping[str, Any] = cached.get("record") or {}
    base = None
    if config.base == AUTO and made.get("base"):
        record["base"] = made["base"]
        if "base_extra_seeds" in made:
            record["base_extra_seeds"] = made["base_extra_seeds"]
        base = record["base"]["chosen"]
    elif config.base == AUTO:
        from autoaug.policies.bases import NAMES

        bases = {b: presets.resolve(b) for b in NAMES}
        scores = train("base", bases, "each base alone")
        record["base"] = first = choose_base(scores)
        tied = [first["best"], *first["within_noise"]]
        if len(tied) > 1 and config.base_extra_seeds:
            # Bases within the noise of each other: more runs for those alone, then choose again.
            extra = [
                calibration_train_config(config, i)
                for i in range(config.calibration_seeds, config.calibration_seeds + config.base_extra_seeds)
            ]
            record["base_extra_seeds"] = [c.seed for c in extra]
            more = train("base", {b: bases[b] for b in tied}, f"{', '.join(tied)} within the noise, more runs", extra)
            record["base"] = {
                **choose_base({b: scores[b] + more.get(b, []) for b in scores}),
                "first_round": {
                    "within_noise": first["within_noise"],
                    "best": first["best"],
                    "threshold": first["noise"]["threshold"],
                },
            }
        base = record["base"]["chosen"]
    chosen_base = base if base is not None else config.space.base
    warm = None
    if config.warm_start == AUTO and (made.get("transfer") or {}).get("base") == chosen_base:
        record["transfer"] = made["transfer"]
        warm = tuple(record["transfer"]["warm_start"])
    elif config.warm_start == AUTO:
        space = dataclasses.replace(config.space, base=chosen_base)
        policies = {ref: presets.resolve(ref).with_base(chosen_base) for ref in TRANSFER_REFS}
        fits: dict[str, str | None] = {}
        for ref in TRANSFER_REFS:
            try:
                warm_start_policies([ref], space)
                fits[ref] = None
            except ValueError as exc:
                fits[ref] = str(exc).split(": ", 1)[-1]
        record["transfer"] = {
            "base": chosen_base,
            **rank_transfer(train("transfer", policies, f"the published policies on base {chosen_base}"), fits),
        }
        warm = tuple(record["transfer"]["warm_start"])
    run.write_json(CALIBRATION_FILE, {"runs": runs, "record": record})
    for line in describe_calibration(record):
        display.log(line)
    return Calibration(base=base, warm_start=warm, record=record)


def transfer_candidate(record: Mapping[str, Any] | None, name: str) -> Any:
    """The published policy that transferred best, on the base it was measured on and named
    ``name``, as a final candidate of re-scoring (kind ``"transfer"``): so a search never stores
    a policy that re-scores below the best published one, and says so when none of its own does
    better. None when the calibration scored no published policy."""
    transfer = (record or {}).get("transfer")
    if not transfer:
        return None
    from autoaug.policies import Policy, presets
    from autoaug.search.rescore import Candidate

    published = presets.resolve(transfer["best"]).with_base(transfer["base"])
    policy = Policy(name, published.num_magnitude_bins, published.sub_policies, published.base, published.ranges)
    return Candidate("transfer", policy, (), None)


def _pts(value: float) -> str:
    return f"{value * 100:.2f}"


def _by_mean(scores: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    rank = {label: i for i, label in enumerate(order)}
    return sorted(scores.items(), key=lambda kv: (-kv[1]["mean"], rank.get(kv[0], len(rank))))


def describe_calibration(record: Mapping[str, Any] | None) -> list[str]:
    """Lines a person reads: which base was chosen and why, which published policy transferred
    best and by how much (the search's summary, ``autoaug policies show``)."""
    if not record:
        return []
    lines: list[str] = []
    base = record.get("base")
    if base:
        ordered = _by_mean(base["scores"], BASE_STRENGTH)  # stored JSON may have sorted the keys
        scores = ", ".join(f"{b} {_pts(s['mean'])}" for b, s in ordered)
        runs = sorted({len(s["runs"]) for _, s in ordered})
        each = "each base alone" if runs == [1] else "each base alone, mean of " + " or ".join(map(str, runs)) + " runs"
        noise = base["noise"]
        best = base.get("best", base["chosen"])  # records before the strongest-within-noise rule
        if not base["within_noise"]:
            why = f"ahead of the others beyond the noise ({_pts(noise['threshold'])} points; {noise['source']})"
        elif best == base["chosen"]:
            why = (
                f"the best mean; within the noise of it ({_pts(noise['threshold'])} points; {noise['source']}): "
                + ", ".join(base["within_noise"])
                + (", which augments less" if len(base["within_noise"]) == 1 else ", which augment less")
            )
        else:
            why = (
                f"within the noise of the best mean, {best} ({_pts(noise['threshold'])} points; {noise['source']}), "
                f"and augments more: a weaker base wins only beyond the noise"
            )
        first = base.get("first_round")
        if first:
            why += (
                f" (first round: {', '.join(first['within_noise'])} within "
                f"{_pts(first['threshold'])} points of {first['best']}, so they ran again)"
            )
        lines.append(f"base: {base['chosen']} (proxy score %, {each}: {scores}); {why}")
    transfer = record.get("transfer")
    if transfer:
        scores = transfer["scores"]
        best = transfer["best"]
        ordered = _by_mean(scores, TRANSFER_REFS)
        ranked = ", ".join(f"{ref} {_pts(s['mean'])}" for ref, s in ordered)
        lines.append(f"transfer (published policies on base {transfer['base']}, proxy score %): {ranked}")
        runner_up = [s for ref, s in ordered if ref != best]
        margin = f" by {_pts(runner_up[0]['margin'])} points over the next" if runner_up else ""
        lines.append(f"transferred best: {best}{margin}")
        warm = transfer["warm_start"]
        if warm and warm[0] != best:
            lines.append(
                f"warm start: {warm[0]} ({best}: {scores[best].get('unfit', 'does not fit the search space')})"
            )
        elif warm:
            lines.append(f"warm start: {warm[0]}")
        else:
            lines.append("warm start: none (no published policy fits the search space)")
    return lines
