"""What every search method maximises: the name of the score, its direction, and how a proxy
training's validation accuracies become it.

The bottom of ``search/``: it imports nothing of the package, so every module (the methods, the
Tune callbacks, the records, re-scoring) can name the score without importing the configuration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["METRIC", "MODE", "search_score", "asha_milestones", "score_epochs", "report_epochs"]

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
    last = seen[-max(1, int(window)) :]
    return sum(last) / len(last)


def asha_milestones(grace_period: int, reduction_factor: float, max_t: int) -> tuple[int, ...]:
    """The epochs at which Ray Tune's ASHA (one bracket, ``time_attr`` the epoch) compares a
    trial with its peers: ``grace_period * reduction_factor**k`` below ``max_t``, as Ray's
    ``_Bracket`` computes them (``tests/search`` holds the two together)."""
    if grace_period >= max_t:
        return ()
    rungs = int(math.log(max_t / grace_period) / math.log(reduction_factor) + 1)
    # ASHA reads a trial's first result at or past a milestone: the epoch ceil(milestone).
    return tuple(sorted({math.ceil(grace_period * reduction_factor**k - 1e-9) for k in range(rungs)} - {max_t}))


def score_epochs(epochs: int, window: int, milestones: Sequence[int] = ()) -> tuple[int, ...]:
    """The 1-based epochs a trial of ``epochs`` must validate for every score that is read: the
    ``window`` epochs up to each of ``milestones`` (where ASHA reads it) and up to the last. At
    other epochs the score (:func:`search_score`) is the last window's, unchanged, so a trial
    that validates only these reports at every milestone and at its end what it would report
    validating every epoch."""
    window = max(1, int(window))
    ends = sorted({int(m) for m in milestones if 1 <= int(m) < epochs} | {int(epochs)})
    return tuple(sorted({e for end in ends for e in range(max(1, end - window + 1), end + 1)}))


def report_epochs(epochs: int, every: int, milestones: Sequence[int] = ()) -> tuple[int, ...]:
    """The 1-based epochs at which a trial of ``epochs`` that reports every ``every`` epochs
    reports: the multiples of ``every``, each of ``milestones`` (where ASHA reads its score) and
    the last. ``every`` 1: every epoch."""
    every = max(1, int(every))
    marks = {int(m) for m in milestones if 1 <= int(m) < epochs}
    return tuple(sorted(set(range(every, int(epochs) + 1, every)) | marks | {int(epochs)}))
