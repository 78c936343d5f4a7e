"""Do ASHA's rungs rank? Measured on a search's own trials.

ASHA stops a trial at a rung when its score there is below the rung's quantile: that only helps
when the score at the rung predicts the score the trial would reach later. For each pair of
consecutive epochs at which trials ended (the rungs and the last epoch), :func:`rung_ranking`
takes the trials that reached the later one and correlates (Spearman) their scores at the two
epochs. Those are the trials the rung kept (its top fraction), so a rho near 0 says its choices
among close trials were close to random; it cannot say whether the trials it stopped, which
scored lower there, were worse later (they have no later score), and the narrower range of the
kept trials' scores makes rho smaller than over all trials. The interval (Fisher's z) says how
much the trials can tell: with 9 or 15 trials, little. Measured so far
(``benchmarks/results/search-gain-*``): on CIFAR-10's 284 trials with rungs at 20 and 60, epoch
20 -> 60 rho +0.25 [+0.05, +0.42] (98 trials), 60 -> 120 +0.38 [+0.09, +0.61] (43); on GTSRB's
56, -0.01 and +0.07.

The scores are those the trials reported at every epoch (Optuna's intermediate values, the step
being the training iteration), so any search whose trials report every epoch has them, wherever its
study is kept. Where a recorded search's rungs are is its method's to say
(:meth:`autoaug.search.methods.base.Method.rungs`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["rung_epochs", "rung_ranking", "rung_text", "describe_rungs", "ended_trials", "from_study"]

#: Trials below which a pair of epochs gets no rho.
MIN_TRIALS = 3


def rung_epochs(
    grace_period: int, reduction_factor: float, epochs: int, early_stopping: bool = True
) -> tuple[int, ...]:
    """Where :func:`rung_ranking` compares a search's trials: ASHA's milestones (none without early
    stopping) and the last epoch."""
    from autoaug.search.score import asha_milestones

    rungs = asha_milestones(int(grace_period), float(reduction_factor), int(epochs)) if early_stopping else ()
    return (*rungs, int(epochs))


def rung_ranking(trials: Sequence[Mapping[int, float]], at: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """How well a trial's score at one rung predicts its score at the next: for each pair of
    consecutive rungs, Spearman's rho between the two scores of the trials that reached the later
    one, its p-value (scipy) and its 95% interval (Fisher's z, ``1.96 / sqrt(n - 3)``; None below 4
    trials). ``trials``: each trial's score by epoch. ``at``: the rungs (ASHA's milestones and the
    last epoch); None: the epochs where trials ended (a trial cut elsewhere -- a search stopped and
    resumed cuts one at its first report after the resume -- then adds an epoch that is no rung). A
    pair with fewer than :data:`MIN_TRIALS` trials, or constant scores, has ``rho`` None."""
    from scipy.stats import spearmanr

    ends = sorted(set(at) if at is not None else {max(t) for t in trials if t})
    out = []
    for a, b in zip(ends, ends[1:]):
        pairs = [(t[a], t[b]) for t in trials if a in t and b in t]
        rho = p = low = high = None
        if len(pairs) >= MIN_TRIALS:
            r = spearmanr([x for x, _ in pairs], [y for _, y in pairs])
            if not math.isnan(r.correlation):
                rho, p = float(r.correlation), float(r.pvalue)
                if len(pairs) > 3:
                    z, half = math.atanh(max(-0.999999, min(0.999999, rho))), 1.96 / math.sqrt(len(pairs) - 3)
                    low, high = math.tanh(z - half), math.tanh(z + half)
        out.append({"from": a, "to": b, "n": len(pairs), "rho": rho, "p_value": p, "low": low, "high": high})
    return out


def ended_at(trials: Sequence[Mapping[int, float]]) -> dict[int, int]:
    """How many trials ended at each epoch (their last reported one)."""
    ends: dict[int, int] = {}
    for t in trials:
        if t:
            ends[max(t)] = ends.get(max(t), 0) + 1
    return dict(sorted(ends.items()))


def rung_text(rows: Sequence[Mapping[str, Any]], stopped: Mapping[int, int]) -> str:
    """``epoch 20 -> 60: rho +0.15 [-0.39, +0.61] (15 trials, p 0.59); ...``, and how many trials
    ended where."""
    parts = []
    for r in rows:
        rho = "–" if r["rho"] is None else f"{r['rho']:+.2f}"
        if r.get("low") is not None:
            rho += f" [{r['low']:+.2f}, {r['high']:+.2f}]"
        p = "" if r["p_value"] is None else f", p {r['p_value']:.2f}"
        parts.append(f"epoch {r['from']} -> {r['to']}: rho {rho} ({r['n']} trials{p})")
    ended = ", ".join(f"{n} at epoch {e}" for e, n in sorted(stopped.items()))
    return "; ".join(parts) + (f" (trials ended: {ended})" if ended else "")


def ended_trials(study: Any) -> list[dict[int, float]]:
    """Each ended trial's reported scores by step (``intermediate_values``) in an Optuna study:
    trials that completed or that ASHA pruned; not a trial a driver restart orphaned, whose
    epochs its new Optuna trial carries on."""
    import optuna

    ended = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [
        dict(t.intermediate_values) for t in study.get_trials(deepcopy=False, states=ended) if t.intermediate_values
    ]


def from_study(study: Any, at: Sequence[int] | None = None) -> dict[str, Any] | None:
    """The rung record of a search from its Optuna study: :func:`rung_ranking` over its
    :func:`ended_trials` at the rungs ``at`` (:func:`rung_epochs`; None: where trials ended), and
    where trials ended. None when fewer than two epochs ended trials (no early stopping, or none stopped)."""
    trials = ended_trials(study)
    if len(ended_at(trials)) < 2:
        return None
    rows = rung_ranking(trials, at)
    if not rows:
        return None
    return {"pairs": rows, "ended": {str(e): n for e, n in ended_at(trials).items()}}


def describe_rungs(record: Mapping[str, Any] | None) -> list[str]:
    """The summary's line on whether ASHA's rungs ranked this search's trials; nothing without a
    record. A rung whose interval lies below +0.5 is said not to rank well; one whose interval
    spans 0 to above +0.5 is said to be undecided at this number of trials."""
    if not record or not record.get("pairs"):
        return []
    rows = record["pairs"]
    stopped = {int(e): n for e, n in (record.get("ended") or {}).items()}
    first = rows[0]
    line = f"early stopping: do ASHA's rungs rank these trials? {rung_text(rows, stopped)}"
    if first.get("high") is not None and first["high"] < 0.5:
        line += (
            f"; the rung at epoch {first['from']} ranked them poorly (rho below +0.5 at 95%), the trials it kept: "
            "among close trials its choices were close to random (the trials it stopped have no later score to "
            "check it by; a later first rung: --grace-period; none: --no-early-stopping; docs/search.md)"
        )
    elif first.get("low") is not None and first["low"] < 0 < first["high"]:
        line += f"; too few trials to tell whether the rung at epoch {first['from']} ranks"
    return [line]
