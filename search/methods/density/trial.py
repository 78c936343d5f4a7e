"""What one scoring trial of the density method runs (:class:`DensityTrial`, a Ray Tune class
trainable). Kept in its own module, like :mod:`autoaug.search.methods.train.trial`, so that Ray workers import
only this, the fold models and the space."""

from __future__ import annotations

import time

from ray import tune

from autoaug.proxy_models.train_config import TrainConfig
from autoaug.search.methods.density.fold_models import FoldScorer, objective_value
from autoaug.search.score import METRIC
from autoaug.search.space import SearchSpace
from autoaug.search.tune.epochs import trial_policy

__all__ = ["DensityTrial"]


class DensityTrial(tune.Trainable):
    """A density-matching trial: one candidate, one scoring pass (one result, then done). Tune
    reuses the actor for the round's next candidate (``reuse_actors``) through
    :meth:`reset_config`, which keeps the fold's :class:`FoldScorer`: the pipeline and the fold
    model are built once per trial process."""

    def setup(self, config: dict, *, train_config: dict, space: dict, policy_prefix: str, fold: dict) -> None:
        self._started = time.perf_counter()
        self.space = SearchSpace.from_dict(space)
        self.policy_prefix = policy_prefix
        self.fold = {k: v for k, v in fold.items() if k != "weights"}
        self.scorer = FoldScorer(
            TrainConfig.from_dict(train_config), self.space, fold["weights"], fold["heldout"], seed=fold["seed"]
        )
        self.candidate = dict(config)

    def reset_config(self, new_config: dict) -> bool:
        self._started = time.perf_counter()
        self.candidate = dict(new_config)
        return True

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Nothing to keep: a scoring trial is one pass (Tune saves it when it pauses or ends it)."""
        return None

    def load_checkpoint(self, checkpoint: object) -> None:
        return None

    def step(self) -> dict:
        policy = trial_policy(self.candidate, self.space, f"{self.policy_prefix}-{self.trial_id}")
        t1 = time.perf_counter()
        accuracy, loss = self.scorer.score(policy)
        t2 = time.perf_counter()
        return {
            METRIC: objective_value(self.fold["objective"], accuracy, loss),
            "fold_accuracy": accuracy,
            "fold_loss": loss,
            "epoch": 1,
            "fold": self.fold["index"],
            "score_time_s": t2 - t1,
            "setup_time_s": t1 - self._started,
            "train_time_s": t2 - self._started,
            "done": True,
        }
