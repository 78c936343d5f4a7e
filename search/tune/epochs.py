"""What every Ray Tune trial that trains the proxy model shares, whatever its method: the result it
reports after an epoch (:class:`EpochResults`) and the epoch a result is of (:func:`result_epoch`),
its threads fitted to the CPUs Ray gave it (:func:`with_trial_threads`) and the policy its Tune
``config`` decodes to (:func:`trial_policy`).

Small on purpose: Ray workers import it (the training method's trial,
:mod:`autoaug.search.methods.train.trial`; PBA's members, :mod:`autoaug.search.methods.pba.trial`;
density's scoring trial, :mod:`autoaug.search.methods.density.trial`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import ray

from autoaug.search.score import METRIC, search_score
from autoaug.search.space import SearchSpace

__all__ = ["EPOCHS_THIS_REPORT", "EpochResults", "REPORT_RENAMES", "result_epoch", "trial_policy", "with_trial_threads"]

#: Trainer metric names that would collide with Ray Tune's automatic ones.
REPORT_RENAMES = {"time_total_s": "train_time_s"}
#: Trainer metrics that mean nothing outside the trial process.
_DROPPED = ("checkpoint_dir",)


#: The epochs a result covers (since the trial's previous report, or its start), beside Tune's
#: ``time_this_iter_s``, their time.
EPOCHS_THIS_REPORT = "epochs_this_report"


class EpochResults:
    """The result a trial reports after an epoch: the trainer's metrics (renamed where they would
    collide with Tune's own, without those that mean nothing outside the trial), the search score,
    :data:`~autoaug.search.score.METRIC` (:func:`search_score` over the last ``score_window``
    epochs), and :data:`EPOCHS_THIS_REPORT`. ``history``: the epochs a resumed trial already
    trained (its checkpoint's), so that its scores are those of an uninterrupted run.
    ``report_at``: the epochs the trial reports (:func:`~autoaug.search.score.report_epochs`); at
    the others the call returns None (the epoch still counts for the score). None: every epoch."""

    def __init__(
        self,
        score_window: int,
        history: Iterable[Mapping[str, Any]] = (),
        report_at: Collection[int] | None = None,
    ) -> None:
        self.score_window = score_window
        self.val_accuracies: list[float | None] = [row.get("val_accuracy") for row in history]
        self.report_at = None if report_at is None else frozenset(int(e) for e in report_at)
        self._reported = len(self.val_accuracies)  # the epoch of the last report (or the resumed checkpoint's)

    def __call__(self, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
        self.val_accuracies.append(metrics.get("val_accuracy"))
        epoch = int(metrics.get("epoch") or len(self.val_accuracies))
        if self.report_at is not None and epoch not in self.report_at:
            return None
        out = {REPORT_RENAMES.get(k, k): v for k, v in metrics.items() if k not in _DROPPED}
        out[METRIC] = search_score(self.val_accuracies, self.score_window)
        out[EPOCHS_THIS_REPORT] = max(1, epoch - self._reported)
        self._reported = epoch
        return out


def result_epoch(result: Mapping[str, Any]) -> int:
    """The epoch a Tune result reports: its ``epoch`` (what a training trial reports), else Tune's
    ``training_iteration`` (the same for a trial that reports every epoch); 0 for neither."""
    epoch = result.get("epoch")
    if epoch is None:
        epoch = result.get("training_iteration")
    return int(epoch or 0)


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
        if not ray.is_initialized():
            return cfg
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # not in a Ray worker: leave the config as it is
        return cfg
    if cpus is None:
        return cfg
    return dataclasses.replace(cfg, num_threads=max(1, int(cpus)))
