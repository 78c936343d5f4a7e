"""The density-matching method's settings (its own module: the fold models read them too)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from autoaug.core.values import is_int
from autoaug.search.methods.base import MethodSettings

__all__ = ["DENSITY_OBJECTIVES", "DensityConfig"]

#: What a density-matching trial maximises: the fold model's accuracy on the augmented held-out
#: fold, or minus its mean cross-entropy there (chosen by measurement: docs/search.md).
DENSITY_OBJECTIVES = ("accuracy", "loss")


@dataclass(frozen=True)
class DensityConfig(MethodSettings):
    """The density-matching method's own settings (``SearchConfig.method_config`` when
    ``SearchConfig.method == "density"``; a ``density`` section in files). Defaults are Fast AutoAugment's (Lim et al., 2019).

    Args:
        folds: ``K`` stratified folds of the reduced training split; fold model ``k`` trains on
            the other ``K-1`` and scores candidates on fold ``k``.
        rounds: ``T`` rounds of search per fold (each a fresh Optuna study).
        trials_per_round: ``B`` candidates scored per round.
        top_per_round: ``N`` best candidates of each round whose sub-policies join the final
            policy.
        objective: ``loss`` (default; minus the mean cross-entropy, which ranks candidates more
            repeatably than the accuracy: benchmarks/search_cost.py) or ``accuracy``.
        fold_seed: seed of the fold assignment.
    """

    WHAT: ClassVar[str] = "density"
    FIELD: ClassVar[str] = "density"
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        # 2 fold models of the trainer's smoke preset, one round of 4 candidates per fold: about a minute.
        "smoke": {"folds": 2, "rounds": 1, "trials_per_round": 4, "top_per_round": 2},
        # K=5 fold models of the proxy-cpu recipe on the 1,000-image search split, then T=2 rounds
        # of B=200 scoring trials per fold, the top 10 of each round merged (docs/search.md).
        "density-cpu": {"folds": 5, "rounds": 2, "trials_per_round": 200, "top_per_round": 10},
    }

    folds: int = 5
    rounds: int = 2
    trials_per_round: int = 200
    top_per_round: int = 10
    objective: str = "loss"
    fold_seed: int = 0

    def __post_init__(self) -> None:
        if not is_int(self.folds) or self.folds < 2:
            raise self.invalid("folds", "an integer >= 2")
        for name in ("rounds", "trials_per_round", "top_per_round"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise self.invalid(name, "an integer >= 1")
        if self.top_per_round > self.trials_per_round:
            raise self.invalid("top_per_round", f"at most trials_per_round ({self.trials_per_round})")
        if self.objective not in DENSITY_OBJECTIVES:
            raise self.invalid("objective", f"one of {list(DENSITY_OBJECTIVES)}")
        if not is_int(self.fold_seed) or not 0 <= self.fold_seed < 2**32:
            raise self.invalid("fold_seed", "an integer in [0, 2**32)")

    @property
    def num_trials(self) -> int:
        """Scoring trials of the whole search: ``folds * rounds * trials_per_round``."""
        return self.folds * self.rounds * self.trials_per_round
