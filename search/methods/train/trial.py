"""What one trial of the training method runs: decode the candidate policy, train the proxy model, report.

Kept in its own small module so that Ray workers import only this, the search space and the
trainer (Tune pickles :func:`run_trial` by reference). What it reports after an epoch is
:class:`~autoaug.search.tune.epochs.EpochResults`, shared with PBA's members.
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any

from ray import tune

from autoaug.proxy_models.train import TrainConfig, load_checkpoint
from autoaug.search.space import SearchSpace
from autoaug.search.tune.epochs import EpochResults, trial_policy
from autoaug.search.tune.pack import train_trial

__all__ = ["run_trial"]


def run_trial(
    config: dict,
    *,
    train_config: dict,
    space: dict,
    policy_prefix: str,
    score_window: int = 1,
    report_at: tuple[int, ...] | None = None,
    pack_servers: tuple[str, ...] = (),
) -> None:
    """Ray Tune function trainable: one candidate policy, one proxy training run.

    Every trial of a search gets the same ``train_config`` -- the same split, model-init seed and
    data order (common random numbers) -- so scores differ only through the policy. After each
    epoch the trainer writes ``checkpoint.pt`` into a scratch folder, which is handed to
    ``ray.tune.report`` with the epoch's metrics and the search score (:func:`~autoaug.search.score.search_score` over
    ``score_window`` epochs, reported as :data:`autoaug.search.score.METRIC`). With ``report_at``
    (:func:`~autoaug.search.score.report_epochs`) it reports, with its checkpoint, at those epochs
    only (each report the latest epoch's metrics; the others count for the score); a trial restarted
    by Tune (after a failure or a driver restart) resumes from its latest checkpoint (whose
    history also restores the score's window) and ends with the metrics of an uninterrupted run.
    With ``pack_servers`` the epochs are trained by one of those pack servers, beside other
    trials (:func:`autoaug.search.tune.pack.train_trial`), up to each report at a time; the
    trial reports them as its own.
    """
    search_space = SearchSpace.from_dict(space)
    cfg = TrainConfig.from_dict(train_config)
    trial_id = tune.get_context().get_trial_id() or "local"
    policy = trial_policy(config, search_space, f"{policy_prefix}-{trial_id}")

    checkpoint = tune.get_checkpoint()
    with (
        tempfile.TemporaryDirectory(prefix="autoaug-trial-") as scratch,
        checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext() as resume_from,
    ):
        history = load_checkpoint(resume_from)["history"] if resume_from else ()
        results = EpochResults(score_window, history, report_at)

        def report(metrics: dict[str, Any]) -> None:
            out = results(metrics)
            if out is not None:
                tune.report(out, checkpoint=tune.Checkpoint.from_directory(scratch))

        train_trial(
            cfg,
            policy,
            servers=pack_servers,
            key=trial_id,
            report=report,
            checkpoint_dir=scratch,
            resume_from=resume_from,
            report_at=report_at,
        )
