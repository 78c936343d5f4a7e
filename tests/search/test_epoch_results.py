"""What a training trial reports (search/tune/epochs.py): its score after each epoch, at the epochs
it reports (every epoch, or every few, ASHA's rungs and its end: score.report_epochs)."""

from __future__ import annotations

from autoaug.search.score import METRIC, report_epochs
from autoaug.search.tune.epochs import EPOCHS_THIS_REPORT, EpochResults, result_epoch


def _epoch(e: int, acc: float | None) -> dict:
    return {"epoch": e, "val_accuracy": acc, "train_loss": 1.0 / e, "time_total_s": float(e), "checkpoint_dir": "/x"}


def test_report_epochs_are_every_nth_the_rungs_and_the_last():
    assert report_epochs(120, 10, (60,)) == tuple(range(10, 121, 10))  # the gpu preset's rung is a multiple
    assert report_epochs(120, 50, (20, 60)) == (20, 50, 60, 100, 120)
    assert report_epochs(6, 4, (3,)) == (3, 4, 6)
    assert report_epochs(5, 1) == (1, 2, 3, 4, 5)
    assert report_epochs(5, 10, (5, 7)) == (5,)  # rungs at or past the end add nothing


def test_a_trial_reporting_every_few_epochs_reports_the_score_every_epoch_would_give():
    accuracies = [0.1, 0.3, None, 0.5, 0.2, 0.6]
    every = EpochResults(2)
    few = EpochResults(2, report_at=(3, 4, 6))
    dense = [every(_epoch(e, a)) for e, a in enumerate(accuracies, 1)]
    sparse = {e: few(_epoch(e, a)) for e, a in enumerate(accuracies, 1)}
    assert [e for e, out in sparse.items() if out is not None] == [3, 4, 6]  # None: not reported
    for e in (3, 4, 6):
        assert sparse[e][METRIC] == dense[e - 1][METRIC]  # the window counts the epochs between reports
    assert sparse[6][METRIC] == (0.2 + 0.6) / 2
    assert [sparse[e][EPOCHS_THIS_REPORT] for e in (3, 4, 6)] == [3, 1, 2]
    assert [out[EPOCHS_THIS_REPORT] for out in dense] == [1] * 6
    assert "checkpoint_dir" not in sparse[6] and sparse[6]["train_time_s"] == 6.0  # (renamed: Tune's own)


def test_a_resumed_trial_reports_what_an_uninterrupted_one_does():
    history = [{"epoch": 1, "val_accuracy": 0.1}, {"epoch": 2, "val_accuracy": 0.3}, {"epoch": 3, "val_accuracy": None}]
    out = EpochResults(2, history, report_at=(3, 4, 6))(_epoch(4, 0.5))
    assert out[METRIC] == (0.3 + 0.5) / 2 and out[EPOCHS_THIS_REPORT] == 1  # since its checkpoint's epoch


def test_a_results_epoch_is_its_own_else_tunes_iteration():
    assert result_epoch({"epoch": 8, "training_iteration": 2}) == 8  # a trial reporting every 4 epochs
    assert result_epoch({"training_iteration": 3}) == 3
    assert result_epoch({}) == 0
