"""What every search method maximises: the name of the score, its direction, and how a proxy
training's validation accuracies become it.

The bottom of ``search/``: it imports nothing of the package, so every module (the methods, the
Tune callbacks, the records, re-scoring) can name the score without importing the configuration.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["METRIC", "MODE", "search_score"]

#: The score every trial reports and the search maximizes. Training method (and re-scoring): the
#: mean validation accuracy over the trial's last ``SearchConfig.score_window`` epochs (with a
#: window of 1, the epoch's own validation accuracy, which every trial also reports as
#: ``val_accuracy``). Density method: the objective on the augmented held-out fold.
METRIC = "search_score"
MODE = "max"


def search_score(val_accuracies: Sequence[float | None], window: int) -> float | None:
    """The search's score after an epoch: the mean of the last ``window`` validation accuracies
    (epochs without validation are skipped); None before the first validation."""
    seen = [float(v) for v in val_accuracies if v is not None]
    if not seen:
        return None
    last = seen[-max(1, int(window)):]
    return sum(last) / len(last)
