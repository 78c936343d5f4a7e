"""What a person sees of a density-matching search (:class:`DensityReporter`): the folds, rounds
and candidates before it starts, and its studies (one per fold and round)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoaug.search.methods.base import MethodReporter

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["DensityReporter"]


class DensityReporter(MethodReporter):
    def describe(self, config: SearchConfig) -> list[str]:
        d, t = self.method.settings_in(config), config.train
        return [
            f"  method: density matching, {d.folds} folds x {d.rounds} rounds x {d.trials_per_round} candidates "
            f"({d.num_trials} trials), top {d.top_per_round} per round, objective {d.objective}",
            f"  fold models: {t.model} on {t.data} (reduced split: {t.describe_train()}, split seed "
            f"{t.split_seed}), {t.describe_recipe()}",
        ]

    def optuna_studies(self, config: SearchConfig) -> str | None:
        return f"studies: {config.name}.f*-r*"  # one per fold and round (the method's stage_name)
