"""What one Ray Tune trial runs: decode the candidate policy, train the proxy model, report.

Kept in its own small module so that Ray workers import only this, the search space and the
trainer (Tune pickles :func:`run_trial` by reference). :class:`EpochResults` is what every trial
that trains the proxy reports after each epoch (this module's and PBA's members,
:mod:`autoaug.search.methods.pba.trial`).
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any, Iterable, Mapping

from autoaug.search.score import METRIC, search_score
from autoaug.search.space import SearchSpace

__all__ = ["run_trial", "trial_policy", "search_score", "REPORT_RENAMES", "EpochResults"]

#: Trainer metric names that would collide with Ray Tune's automatic ones.
REPORT_RENAMES = {"time_total_s": "train_time_s"}
#: Trainer metrics that mean nothing outside the trial process.
_DROPPED = ("checkpoint_dir",)


class EpochResults:
    """The result a trial reports after each epoch of the trainer: the trainer's metrics (renamed
    where they would collide with Tune's own, without those that mean nothing outside the trial)
    and the search score, :data:`~autoaug.search.score.METRIC` (:func:`search_score` over the last
    ``score_window`` epochs). ``history``: the epochs a resumed trial already trained (its
    checkpoint's), so that its scores are those of an uninterrupted run."""

    def __init__(self, score_window: int, history: Iterable[Mapping[str, Any]] = ()) -> None:
        self.score_window = score_window
        self.val_accuracies: list[float | None] = [row.get("val_accuracy") for row in history]

    def __call__(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        out = {REPORT_RENAMES.get(k, k): v for k, v in metrics.items() if k not in _DROPPED}
        self.val_accuracies.append(metrics.get("val_accuracy"))
        out[METRIC] = search_score(self.val_accuracies, self.score_window)
        return out


def trial_policy(config: Mapping[str, Any], space: SearchSpace, name: str):
    """The :class:`policies.Policy` a trial trains with (its Tune ``config`` decoded)."""
    return space.to_policy(config, name=name)


def with_trial_threads(cfg: Any) -> Any:
    """``cfg`` with ``num_threads`` set to the CPUs Ray assigned to this trial (at least 1) when it
    is unset: torch's threads and DALI's then fit the trial's CPUs whatever ``OMP_NUM_THREADS``
    the environment gives (Ray sets it to the assigned CPUs only when it is not set already).
    Unchanged outside a Ray worker or when ``num_threads`` is given."""
    if cfg.num_threads is not None:
        return cfg
    try:
        import ray

        if not ray.is_initialized():
            return cfg
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # not in a Ray worker: leave the config as it is
        return cfg
    if cpus is None:
        return cfg
    import dataclasses

    return dataclasses.replace(cfg, num_threads=max(1, int(cpus)))


def run_trial(config: dict, *, train_config: dict, space: dict, policy_prefix: str, score_window: int = 1) -> None:
    """Ray Tune function trainable: one candidate policy, one proxy training run.

    Every trial of a search gets the same ``train_config`` -- the same split, model-init seed and
    data order (common random numbers) -- so scores differ only through the policy. After each
    epoch the trainer writes ``checkpoint.pt`` into a scratch folder, which is handed to
    ``ray.tune.report`` with the epoch's metrics and the search score (:func:`search_score` over
    ``score_window`` epochs, reported as :data:`autoaug.search.score.METRIC`); a trial restarted
    by Tune (after a failure or a driver restart) resumes from its latest checkpoint (whose
    history also restores the score's window) and ends with the metrics of an uninterrupted run.
    """
    from ray import tune

    from autoaug.proxy_models.train import TrainConfig, load_checkpoint, train

    search_space = SearchSpace.from_dict(space)
    cfg = with_trial_threads(TrainConfig.from_dict(train_config))  # torch + DALI on the trial's CPUs
    trial_id = tune.get_context().get_trial_id() or "local"
    policy = trial_policy(config, search_space, f"{policy_prefix}-{trial_id}")

    checkpoint = tune.get_checkpoint()
    with (
        tempfile.TemporaryDirectory(prefix="autoaug-trial-") as scratch,
        checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext() as resume_from,
    ):
        results = EpochResults(score_window, load_checkpoint(resume_from)["history"] if resume_from else ())

        def report(metrics: dict[str, Any]) -> None:
            tune.report(results(metrics), checkpoint=tune.Checkpoint.from_directory(scratch))

        train(cfg, policy, report=report, checkpoint_dir=scratch, resume_from=resume_from)
