"""Choosing the final policy: re-score the final candidates under the proxy.

AutoAugment concatenates the sub-policies of the best ``N`` candidates. Whether that union is
better than the best candidate alone is an empirical question, and the best trial's own score is
optimistic (it is the maximum over many noisy trials). A search warm-started from published
policies has a third candidate: those policies extended by the sub-policies the search found
(:func:`autoaug.search.methods.train.method.final_candidates`), and a search with early stopping a fourth: every
trial that ran the full budget, assembled (``survivors``). With ``SearchConfig.rescore`` on, every
candidate is trained ``SearchConfig.rescore_seeds`` more times under the proxy -- the trials'
training configuration with fresh seeds (another initialisation, data order and augmentation
draws), so none enjoys the luck of the trial that selected it, and validated on
``rescore_val_size`` images over the last ``score_window`` epochs
(:meth:`autoaug.search.config.SearchConfig.rescore_train_config`). The highest mean search
score over those runs becomes the stored policy (ties go to the earlier candidate: assembled,
best trial, extended warm start, survivors). Every candidate's runs and mean are recorded in the
provenance (``selection``).

Why several seeds and a large validation set are offered: the strong candidates of a search lie
within about one point of each other, and one model's accuracy on 1,000 validation images
differs from the same model's on 10,000 by up to 1.4 points (measured: docs/results.md, "A sharper
re-scoring, measured"). Measured on the `cpu` search, though, the candidates re-scored with 2 seeds on
10,000 images lay within 0.2 points of each other, and the one chosen did worse in the
evaluation regime than the one the single 1,000-image run had chosen: a sharper proxy score does
not fix the gap between the proxy and the evaluation regime, so the `cpu` preset keeps one run.

The re-scoring runs are Ray tasks with the trials' resources, run in parallel (with
``SearchConfig.pack`` above 1, in packs as the trials are: :mod:`autoaug.search.decide.proxy_runs`), and each finished
run is saved in the run directory (``rescore.json``, keyed by candidate, seed and validation
size), so a resumed search trains only the runs it lacks. A candidate measured already under the
same protocol -- the published policy that transferred best, by its calibration runs
(:func:`autoaug.search.decide.calibrate.transfer_candidate`) -- brings its runs (``Candidate.runs``) and
is not trained again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from autoaug.core import failpoints
from autoaug.policies import Policy
from autoaug.search.decide import proxy_runs
from autoaug.search.decide.noise import IMAGE_SCORES, difference_se, measure
from autoaug.search.score import METRIC

__all__ = [
    "RESCORE_FILE",
    "RESCORE_SEED_OFFSET",
    "RACE_RESERVED_SEEDS",
    "Candidate",
    "run_key",
    "rescore_candidates",
    "first_count",
    "contenders",
    "race",
    "missing_runs",
    "candidate_scores",
    "choose",
    "describe_selection",
    "gain_text",
]

RESCORE_FILE = "rescore.json"
#: Re-scoring run ``i`` uses seed ``train.seed + RESCORE_SEED_OFFSET + i``: seeds no trial used.
RESCORE_SEED_OFFSET = 1_000
#: Under a time budget, the race's rounds the trials give way to: up to this many runs per
#: contender (the budget keeps their time from the trials, :func:`autoaug.search.driver._plan_rescore`).
#: Rounds beyond it (``rescore_max_seeds`` above it) run only on the time the trials leave -- a
#: search that finishes its trials early, or has no budget, races to ``rescore_max_seeds`` -- so
#: a longer race never takes trials away (on CIFAR-10, 16 trials found the candidate a 10-run race
#: stored and a 3-run race rejected: benchmarks/results/search-gain-cifar10-jpeg/race10).
RACE_RESERVED_SEEDS = 3


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A policy that may become the search's result."""

    # "assembled", "best_trial", "warm_start+found", "survivors", "runner_up", "warm_start" (space
    # families) or "transfer" (search.decide.calibrate)
    kind: str
    policy: Policy
    trial_ids: tuple[str, ...]
    search_score: float | None  # the trial's own score (best_trial) or None
    #: Runs already measured under the re-scoring's training configuration, with other seeds (the
    #: calibration's runs of the published policy that transferred best): re-scoring does not train
    #: it again, and it competes whatever the time budget leaves.
    runs: tuple[Mapping[str, Any], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.policy.content_hash[:16]}"


def run_key(candidate: Candidate, train_config: Any) -> str:
    """Key of one re-scoring run in ``rescore.json``: candidate, seed and validation size."""
    return f"{candidate.key}/seed={train_config.seed}/val={train_config.val_size}"


def first_count(candidate: Candidate, config: Any) -> int:
    """The runs a candidate has before any race round: ``rescore_seeds``, or its measured runs."""
    return len(candidate.runs) if candidate.runs else config.rescore_seeds


def _runs(
    candidates: Sequence[Candidate], config: Any, counts: Mapping[str, int] | None = None
) -> list[tuple[Candidate, Any]]:
    """The runs re-scoring trains: for each candidate, its runs up to ``counts[key]`` in all
    (default :func:`first_count`), beyond the runs it was measured with already (``Candidate.runs``):
    re-scoring seeds 0, 1, ... of :meth:`SearchConfig.rescore_train_config`."""
    counts = counts or {}
    return [
        (c, config.rescore_train_config(i))
        for c in candidates
        for i in range(counts.get(c.key, first_count(c, config)) - len(c.runs))
    ]


def _upgraded(cached: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """``cached`` with entries of the first format (keyed by candidate only: one run at the
    proxy's validation size, validated every epoch, which gives the same score) keyed by run."""
    out: dict[str, Any] = {}
    for key, value in (cached or {}).items():
        if "/" not in key and isinstance(value, Mapping) and "seed" in value:
            key = f"{key}/seed={value['seed']}/val={config.train.val_size}"
        out[key] = value
    return out


def missing_runs(
    candidates: Sequence[Candidate],
    config: Any,
    cached: Mapping[str, Any] | None,
    counts: Mapping[str, int] | None = None,
) -> int:
    """Re-scoring runs of ``candidates`` (``counts`` runs each, see :func:`_runs`) not yet in
    ``cached`` (``rescore.json``)."""
    done = _upgraded(cached or {}, config)
    return sum(1 for c, cfg in _runs(candidates, config, counts) if run_key(c, cfg) not in done)


def rescore_candidates(
    candidates: Sequence[Candidate],
    config: Any,
    *,
    cached: Mapping[str, Any] | None = None,
    save: Any = None,
    deadline: float | None = None,
    counts: Mapping[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Train every candidate under ``config.rescore_train_config(i)`` for each of the
    ``config.rescore_seeds`` seeds (:func:`~autoaug.search.decide.proxy_runs.train_runs`); ``counts``: a candidate's runs in all
    instead (a race round, :func:`race`).

    ``cached``: ``rescore.json`` of earlier sessions (runs found there are not trained again);
    ``save``: a callable receiving the updated mapping after every finished run (e.g. to write
    ``rescore.json``); ``deadline``: see :func:`~autoaug.search.decide.proxy_runs.train_runs`. Returns ``{run key: {METRIC,
    "val_accuracy", "train_time_s", "epochs", "seed", "val_size"}}`` (:func:`run_key`);
    :func:`candidate_scores` averages them.
    """
    runs = [(run_key(c, cfg), c.policy, cfg) for c, cfg in _runs(candidates, config, counts)]

    def saved(results: dict[str, dict[str, Any]]) -> None:
        save(results)
        failpoints.hit("rescore.after_run_saved")

    return proxy_runs.train_runs(
        runs,
        config,
        cached=_upgraded(cached or {}, config),
        save=saved if save is not None else None,
        task_name="autoaug-rescore",
        deadline=deadline,
    )


def _mean(runs: list[dict[str, Any]], name: str) -> float | None:
    """The mean of ``name`` over ``runs``; None when a run lacks it."""
    values = [r.get(name) for r in runs]
    return None if any(v is None for v in values) else sum(values) / len(values)


def candidate_scores(
    candidates: Sequence[Candidate],
    config: Any,
    runs: Mapping[str, Any] | None,
    counts: Mapping[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{candidate key: score}`` from the saved re-scoring runs: ``METRIC`` and
    ``val_accuracy`` are the means over the candidate's runs, ``runs`` lists each run. A
    candidate is left out until all its runs are there (``counts[key]`` of them, its measured
    runs included; default :func:`first_count`)."""

    runs = _upgraded(runs or {}, config)
    out: dict[str, dict[str, Any]] = {}
    for c in candidates:
        mine = list(c.runs) + [runs.get(run_key(c, cfg)) for _, cfg in _runs([c], config, counts)]
        if any(r is None for r in mine):
            continue

        out[c.key] = {
            METRIC: _mean(mine, METRIC) if all(METRIC in r for r in mine) else _mean(mine, "val_accuracy"),
            "val_accuracy": _mean(mine, "val_accuracy"),
            "train_time_s": sum(float(r.get("train_time_s") or 0.0) for r in mine),
            "val_size": mine[0].get("val_size", config.train.val_size),
            "runs": [
                {
                    "seed": r.get("seed"),
                    METRIC: r.get(METRIC, r.get("val_accuracy")),
                    "val_accuracy": r.get("val_accuracy"),
                    **({"val_size": r["val_size"]} if r.get("val_size") else {}),
                    # per image, for the comparison's noise (:func:`choose`; not in the record)
                    **({IMAGE_SCORES: r[IMAGE_SCORES]} if r.get(IMAGE_SCORES) else {}),
                }
                for r in mine
            ],
        }
    return out


def choose(
    candidates: Sequence[Candidate],
    scores: Mapping[str, Mapping[str, Any]],
    calibration: Mapping[str, Any] | None = None,
    race: Mapping[str, Any] | None = None,
) -> tuple[Candidate, dict]:
    """The candidate with the highest re-scored search score (ties: the earlier one in
    ``candidates``, i.e. the assembled policy), and the ``selection`` record for the provenance.
    ``scores``: :func:`candidate_scores` (or any ``{candidate key: {METRIC: value}}``).
    (Scores saved before the search score existed hold only ``val_accuracy``: the same value
    with a window of 1.) ``calibration``: the search's calibration record, whose repeated runs
    measured the per-run noise the margin over the transfer winner is judged with."""

    def value(c: Candidate) -> float:
        s = scores.get(c.key, {})
        v = s.get(METRIC, s.get("val_accuracy"))
        return float("-inf") if v is None else float(v)

    best = max(candidates, key=lambda c: (value(c), -candidates.index(c)))

    def stripped(score: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(score)
        if "runs" in out:
            out["runs"] = [{k: v for k, v in r.items() if k != IMAGE_SCORES} for r in out["runs"]]
        return out

    record = {
        "method": "rescore",
        "seed_offset": RESCORE_SEED_OFFSET,
        "chosen": best.kind,
        "candidates": [
            {
                "kind": c.kind,
                "policy_hash": c.policy.content_hash,
                "num_sub_policies": len(c.policy.sub_policies),
                "trial_ids": list(c.trial_ids),
                "trial_score": c.search_score,  # the trial's own (optimistic) score; METRIC below is the re-score
                **({"runs_from": "calibration"} if c.runs else {}),
                **stripped(scores.get(c.key, {})),
            }
            for c in candidates
        ],
    }
    if race is not None:  # the re-scoring race's rounds (:func:`race`)
        record["race"] = dict(race)
    versus = _versus_transfer(candidates, scores, value, calibration)
    if versus is not None:
        record["versus_transfer"] = versus
    return best, record


def _versus_transfer(
    candidates: Sequence[Candidate],
    scores: Mapping[str, Mapping[str, Any]],
    value: Any,
    calibration: Mapping[str, Any] | None = None,
) -> Any:
    """The best of the search's own candidates against the published policy that transferred
    best (the ``transfer`` candidate): the difference of their re-scores, twice its standard
    error as measured on their runs (:mod:`autoaug.search.decide.noise`, paired per image) and whether
    the difference is beyond it. None without a transfer candidate or an own one re-scored."""
    transfer = next((c for c in candidates if c.kind == "transfer" and c.key in scores), None)
    own = [c for c in candidates if c.kind != "transfer" and c.key in scores and value(c) != float("-inf")]
    if transfer is None or not own:
        return None
    best = max(own, key=lambda c: (value(c), -candidates.index(c)))
    runs = {c.key: scores[c.key].get("runs") or [{METRIC: value(c)}] for c in (best, transfer)}
    noise = _noise(runs, calibration)
    threshold = 2 * difference_se(noise, len(runs[best.key]), len(runs[transfer.key]))
    margin = value(best) - value(transfer)
    return {
        "own": best.kind,
        "margin": margin,
        "threshold": threshold,
        "beyond": abs(margin) >= threshold,
        "noise": {**noise.to_dict(), "source": noise.source()},
    }


def _noise(runs: Mapping[str, Sequence[Mapping[str, Any]]], calibration: Mapping[str, Any] | None) -> Any:
    """The noise of one run's score measured on the candidates' ``runs`` ({key: runs}) and, when
    they ran the same schedule, the calibration's repeated runs (same data, same proxy; a shorter
    calibration run's seed-to-seed spread is its own): :func:`autoaug.search.decide.noise.measure`."""
    epochs = {r.get("epochs") for rs in runs.values() for r in rs}
    same = calibration is not None and epochs == {calibration.get("epochs")}
    stages = [calibration.get(stage) or {} for stage in ("base", "transfer")] if same else []
    repeats = [(n["measured_training"], n["df"]) for n in (st.get("noise") or {} for st in stages) if n.get("df")]
    return measure(runs, repeats)


def contenders(
    candidates: Sequence[Candidate],
    scores: Mapping[str, Mapping[str, Any]],
    calibration: Mapping[str, Any] | None = None,
) -> tuple[list[Candidate], Any]:
    """The re-scored candidates still in the race -- the leader (the highest mean; ties: the
    earlier one) first, then every one whose mean is within twice the standard error of its
    difference from the leader's (the noise measured on their runs: :func:`_noise`) -- and
    that noise (None with fewer than two re-scored)."""
    scored = [c for c in candidates if c.key in scores and scores[c.key].get(METRIC) is not None]
    if len(scored) < 2:
        return scored, None
    value = {c.key: float(scores[c.key][METRIC]) for c in scored}
    runs = {c.key: list(scores[c.key].get("runs") or [{METRIC: value[c.key]}]) for c in scored}
    leader = max(scored, key=lambda c: (value[c.key], -scored.index(c)))
    noise = _noise(runs, calibration)
    near = [
        c
        for c in scored
        if c is not leader
        and value[leader.key] - value[c.key] < 2 * difference_se(noise, len(runs[leader.key]), len(runs[c.key]))
    ]
    return [leader, *near], noise


def race(
    candidates: Sequence[Candidate],
    config: Any,
    runs: Mapping[str, Any],
    *,
    train: Any,
    calibration: Mapping[str, Any] | None = None,
    fits: Any = None,
    say: Any = None,
) -> tuple[dict[str, int], dict[str, Any], dict[str, Any]]:
    """The re-scoring race: while two or more candidates are within the noise of the leader
    (:func:`contenders`), each of them below ``config.race_seeds`` runs gets one more (the next
    re-scoring seed, the same for all: the race's rounds pair them by seed), and the means are
    compared again. A leader beyond the noise of every other on its one run gets one round to
    confirm it: a second run, beside its nearest challenger's (as many of the two as fit). It
    ends when one leads beyond the noise (``decided``; confirmed where it led on one run), when no contender
    may run more (``max_seeds``), or when ``fits(n)`` says ``n`` more runs do not fit in the
    time left even for the leader and its nearest challenger (``budget``; also when a round's
    runs did not all finish): a round whose runs do not all fit runs for the leader and its
    nearest challengers, as many as fit (the time budget keeps a wave of runs for each round it
    promises, :func:`autoaug.search.driver._plan_rescore`). The candidates
    stay as they are otherwise: the stored one is still the highest mean (:func:`choose`).

    ``runs``: the saved runs (``rescore.json``) after the first round; ``train(candidates,
    counts, runs)``: trains the runs ``counts`` adds for ``candidates`` to the saved ``runs`` and
    returns every saved run
    (:func:`rescore_candidates`; a run saved already is not trained again, so a resumed search
    replays the rounds it finished and trains only what they lack); ``say``: one line per round.
    Returns ``(counts, runs, record)``: each candidate's runs in all, the saved runs, and the
    race as recorded in the provenance (``selection["race"]``: ``max_seeds``, its ``rounds``,
    how it ``ended``, and the ``contenders`` left within the noise of the leader then, with
    their runs)."""
    counts = {c.key: first_count(c, config) for c in candidates}
    record: dict[str, Any] = {"max_seeds": config.race_seeds, "rounds": [], "ended": "max_seeds"}
    while True:
        scores = candidate_scores(candidates, config, runs, counts)
        ahead, noise = contenders(candidates, scores, calibration)
        # where the race ends: the candidates still within the noise of the leader, and their runs
        record["contenders"] = [{"kind": c.kind, "runs": counts[c.key]} for c in ahead]
        more = [c for c in ahead if counts[c.key] < config.race_seeds]
        confirm = len(ahead) == 1 and noise is not None and counts[ahead[0].key] == 1
        if len(ahead) < 2:
            # A lead measured on the leader's one run is confirmed on a second, beside its nearest
            # challenger's (the best of several single runs owes part of its lead to luck).
            more = _confirmation(ahead[0], candidates, scores, counts, config, fits) if confirm else []
            if not more:
                record["ended"] = "decided"
                break
        if not more:
            break
        left_out = 0
        if not confirm and fits is not None and not fits(len(more)):
            by_mean = sorted(more, key=lambda c: (c is not ahead[0], -float(scores[c.key][METRIC])))
            nearest = _nearest_that_fit(by_mean, ahead[0], fits)
            if not nearest:
                record["ended"] = "budget"
                break
            more, left_out = nearest, len(more) - len(nearest)
        wanted = {**counts, **{c.key: counts[c.key] + 1 for c in more}}
        if say is not None and confirm:
            near = ", ".join(f"{c.kind} {scores[c.key][METRIC]:.4f} ({counts[c.key]})" for c in more)
            say(
                f"re-scoring race, round {len(record['rounds']) + 1}: {ahead[0].kind} leads beyond the noise "
                f"on one run (a run's spread {noise.sd * 100:.2f} points): {near}; one more run for "
                + ", ".join(c.kind for c in more)
                + ": a lead measured on one run is confirmed on a second"
            )
        elif say is not None:
            near = ", ".join(f"{c.kind} {scores[c.key][METRIC]:.4f} ({counts[c.key]})" for c in ahead)
            say(
                f"re-scoring race, round {len(record['rounds']) + 1}: within the noise of {ahead[0].kind} "
                f"(a run's spread {noise.sd * 100:.2f} points): {near}; one more run for "
                + ", ".join(c.kind for c in more)
                + (
                    f" (the time left fits {len(more)} of the {len(more) + left_out} runs: the leader's "
                    "nearest challengers first)"
                    if left_out
                    else ""
                )
            )
        runs = train(more, wanted, runs)
        if len(candidate_scores(more, config, runs, wanted)) < len(more):
            record["ended"] = "budget"  # (the deadline cancelled runs of the round)
            break
        counts = wanted
        record["rounds"].append(
            {"trained": [c.kind for c in more], "leader": ahead[0].kind, **({"confirm": True} if confirm else {})}
        )
    return counts, dict(runs), record


def _confirmation(
    leader: Candidate,
    candidates: Sequence[Candidate],
    scores: Mapping[str, Mapping[str, Any]],
    counts: Mapping[str, int],
    config: Any,
    fits: Any,
) -> list[Candidate]:
    """The round that confirms ``leader``'s lead, measured on its one run: a run for it and for
    its nearest challenger by mean (that may run more), as many of the two as fit (``fits``); none
    where the race runs no more than one run a candidate."""
    if config.race_seeds < 2:
        return []
    others = [c for c in candidates if c is not leader and c.key in scores and counts[c.key] < config.race_seeds]
    nearest = max(others, key=lambda c: float(scores[c.key][METRIC]), default=None)
    more = [leader] + ([nearest] if nearest is not None else [])
    while more and fits is not None and not fits(len(more)):
        more.pop()
    return more


def _nearest_that_fit(more: Sequence[Candidate], leader: Candidate, fits: Any) -> list[Candidate]:
    """A round for the leader and its nearest challengers, when ``fits`` says the round's runs for
    every contender in ``more`` (the leader first, then by mean) do not fit in the time left: the
    most of them, in that order, whose runs fit; none when they would not include a challenger."""
    fewest = 2 if more[0] is leader else 1
    return next((list(more[:n]) for n in range(len(more) - 1, fewest - 1, -1) if fits(n)), [])


def gain_text(versus: Mapping[str, Any]) -> str:
    """The stored candidate's margin over the best published policy as readers expect it:
    ``+0.09 [-0.55, +0.73] points``, the 95% interval being the margin plus or minus twice its
    standard error (the threshold "beyond the noise" is judged by, so the verdict and the interval
    agree: beyond the noise exactly when the interval excludes 0)."""
    margin = versus["margin"] * 100
    half = versus.get("threshold")
    if not isinstance(half, (int, float)):
        return f"{margin:+.2f} points"
    half *= 100
    return f"{margin:+.2f} [{margin - half:+.2f}, {margin + half:+.2f}] points"


def describe_selection(selection: Mapping[str, Any] | None, ran: str | None = None) -> list[str]:
    """What re-scoring says of the stored policy against the best published policy on the chosen
    base (the search's summary, ``autoaug policies show``, ``autoaug report``): its measured
    margin with its 95% interval and whether it is beyond the noise, or that none of the search's
    own candidates beat it; ``ran``: what the search ran, said with the margin ("28 trials")."""
    versus = (selection or {}).get("versus_transfer")
    if not versus:
        if (selection or {}).get("chosen") == "transfer":  # none of its own re-scored (the budget)
            return [
                "none of the search's own candidates was re-scored: stored the best published policy, "
                "as measured in calibration"
            ]
        return []
    after = f" after {ran}" if ran else ""
    pts = f"{gain_text(versus)}{after} (95% interval, twice the standard error; {versus['noise']['source']})"
    if selection.get("chosen") == "transfer":
        verdict = "beyond the noise" if versus["beyond"] else "within the noise"
        return [
            f"none of the search's own candidates beat the best published policy{'' if versus['beyond'] else ' beyond the noise'}: "
            f"stored it; the best of them ({versus['own']}) re-scored {pts}, {verdict}",
            *_race_cut(selection),
        ]
    if versus["beyond"] and versus["margin"] > 0:
        return [f"stored policy vs the best published policy: {pts}, beyond the noise"]
    return [
        f"stored policy vs the best published policy: {pts}, within the noise: "
        "the search found nothing measurably better than the published policy",
        *_race_cut(selection),
    ]


def _race_cut(selection: Mapping[str, Any]) -> list[str]:
    """A line when the time budget ended the re-scoring race with candidates still within the
    noise of each other (the decision between them was not made): who, with how many runs, and
    what would let the race decide."""
    race = selection.get("race") or {}
    left = race.get("contenders") or []
    if race.get("ended") != "budget" or len(left) < 2:
        return []
    who = ", ".join(f"{c['kind']} ({c['runs']} run{'s' if c['runs'] != 1 else ''})" for c in left)
    return [
        f"the time budget ended the re-scoring race after {len(race.get('rounds') or [])} round(s) with {who} "
        f"within the noise of each other: stored the higher mean; a longer --time-budget (or none) lets "
        f"the race run up to {race.get('max_seeds')} runs each to tell them apart"
    ]
