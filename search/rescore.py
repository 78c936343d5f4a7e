"""Choosing the final policy: re-score the final candidates under the proxy.

AutoAugment concatenates the sub-policies of the best ``N`` candidates. Whether that union is
better than the best candidate alone is an empirical question, and the best trial's own score is
optimistic (it is the maximum over many noisy trials). A search warm-started from published
policies has a third candidate: those policies extended by the sub-policies the search found
(:func:`autoaug.search.tuner._final_candidates`), and a search with early stopping a fourth: every
trial that ran the full budget, assembled (``survivors``). With ``SearchConfig.rescore`` on, every candidate is
trained once more under the proxy -- the same training configuration as every trial, but a fresh
seed (another initialisation, data order and augmentation draws), so none enjoys the luck of
the trial that selected it -- and the highest search score (the mean validation accuracy over the
last ``score_window`` epochs, as the trials were scored) becomes the stored policy (ties go to the
earlier candidate: assembled, best trial, extended warm start, survivors). Every candidate's re-score is recorded in the provenance
(``selection``).

The re-scoring runs are Ray tasks with the trials' resources, run in parallel, and their results
are saved in the run directory (``rescore.json``), so a resumed search does not train them again.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from autoaug.policies import Policy

__all__ = ["RESCORE_FILE", "RESCORE_SEED_OFFSET", "Candidate", "rescore_candidates", "choose"]

RESCORE_FILE = "rescore.json"
#: The re-scoring runs use ``train.seed + RESCORE_SEED_OFFSET``: a seed no trial used.
RESCORE_SEED_OFFSET = 1_000


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A policy that may become the search's result."""

    kind: str  # "assembled", "best_trial", "warm_start+found" or "survivors"
    policy: Policy
    trial_ids: tuple[str, ...]
    search_score: float | None  # the trial's own score (best_trial) or None

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.policy.content_hash[:16]}"


def _train_val_accuracy(train_config: dict[str, Any], policy: dict[str, Any], score_window: int = 1) -> dict[str, Any]:
    """Body of one re-scoring run (a Ray task): the proxy training, its validation accuracy and
    search score."""
    from autoaug.proxy_models.train import TrainConfig, train
    from autoaug.search.config import METRIC
    from autoaug.search.trial import search_score

    result = train(TrainConfig.from_dict(train_config), Policy.from_dict(policy))
    score = search_score([row.get("val_accuracy") for row in result.history], score_window)
    return {METRIC: score, "val_accuracy": result.val_accuracy, "train_time_s": result.train_time_s,
            "epochs": len(result.history)}


def rescore_candidates(
    candidates: Sequence[Candidate],
    train_config: Any,
    *,
    cpus: float,
    gpus: float,
    cached: Mapping[str, Any] | None = None,
    save: Any = None,
    score_window: int = 1,
) -> dict[str, dict[str, Any]]:
    """Train every candidate under ``train_config`` with the re-scoring seed, in parallel on Ray.

    ``cached``: ``{candidate key: result}`` of earlier sessions (not trained again); ``save``: a
    callable receiving the updated mapping after every finished run (e.g. to write
    ``rescore.json``). Returns ``{candidate key: {METRIC, "val_accuracy", "train_time_s",
    "epochs", "seed"}}``.
    """
    import ray

    seed = (train_config.seed + RESCORE_SEED_OFFSET) % 2**31
    cfg = dataclasses.replace(train_config, seed=seed, num_threads=max(1, int(cpus)))
    results: dict[str, dict[str, Any]] = dict(cached or {})
    todo = [c for c in candidates if c.key not in results]
    if not todo:
        return results
    task = ray.remote(_train_val_accuracy)
    pending = {
        task.options(num_cpus=cpus, num_gpus=gpus, name=f"autoaug-rescore:{c.key}").remote(
            cfg.to_dict(), c.policy.to_dict(), score_window
        ): c
        for c in todo
    }
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                c = pending.pop(ref)
                results[c.key] = {**ray.get(ref), "seed": seed}
                if save is not None:
                    save(results)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return results


def choose(candidates: Sequence[Candidate], scores: Mapping[str, Mapping[str, Any]]) -> tuple[Candidate, dict]:
    """The candidate with the highest re-scored search score (ties: the earlier one in
    ``candidates``, i.e. the assembled policy), and the ``selection`` record for the provenance.
    (Scores saved before the search score existed hold only ``val_accuracy``: the same value
    with a window of 1.)"""
    from autoaug.search.config import METRIC

    def value(c: Candidate) -> float:
        s = scores.get(c.key, {})
        v = s.get(METRIC, s.get("val_accuracy"))
        return float("-inf") if v is None else float(v)

    best = max(candidates, key=lambda c: (value(c), -candidates.index(c)))
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
                **dict(scores.get(c.key, {})),
            }
            for c in candidates
        ],
    }
    return best, record
