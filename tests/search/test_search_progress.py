"""The search's progress callback: what the display shows as Tune reports trials."""

from __future__ import annotations

import io
import pickle
from types import SimpleNamespace

from autoaug.core.progress import Progress
from autoaug.search.config import METRIC
from autoaug.search.tune.progress import ProgressCallback


def _trial(tid, status="RUNNING", **result):
    return SimpleNamespace(trial_id=tid, status=status, last_result=dict(result))


def _display():
    from rich.console import Console

    console = Console(file=io.StringIO(), record=True, width=160, force_terminal=True)
    return Progress(console=console), console


def test_status_counts_running_stopped_and_best():
    display, console = _display()
    cb = ProgressCallback(num_trials=4, epochs=3, display=display)
    a, b = _trial("aaa"), _trial("bbb")
    with display:
        cb.setup()
        cb.on_trial_start(0, [a, b], a)
        cb.on_trial_start(0, [a, b], b)
        cb.on_trial_result(0, [a, b], a, {"training_iteration": 1, METRIC: 0.30})
        assert display.has("trial:aaa") and display.has("search")
        # b stopped early by ASHA after 1 epoch, a completes 3 epochs
        b.status, b.last_result = "TERMINATED", {"epoch": 1, "training_iteration": 1, METRIC: 0.2}
        cb.on_trial_complete(0, [a, b], b)
        a.status, a.last_result = "TERMINATED", {"epoch": 3, "training_iteration": 3, METRIC: 0.5}
        cb.on_trial_complete(0, [a, b], a)
        assert not display.has("trial:aaa")
        status = cb._status()
        display._rich.refresh()
    assert status == "2/4 trials (1 stopped early), 0 running | best 0.5000 (aaa)"
    text = console.export_text()
    assert f"[1/4] trial bbb {METRIC} 0.2000 after 1/3 epochs (stopped early)" in text
    assert f"[2/4] trial aaa {METRIC} 0.5000 after 3/3 epochs" in text and "| best 0.5000 (aaa)" in text


def test_overall_bar_counts_a_stopped_trial_as_all_its_epochs():
    display, _ = _display()
    cb = ProgressCallback(num_trials=2, epochs=4, display=display)
    t = _trial("x")
    with display:
        cb.on_trial_start(0, [t], t)
        t.status, t.last_result = "TERMINATED", {"epoch": 1, "training_iteration": 1, METRIC: 0.1}
        cb.on_trial_complete(0, [t], t)
        task = display._rich.tasks[0]
        assert (task.completed, task.total) == (4, 8)  # ETA follows the work really left


def test_plain_lines_without_a_terminal():
    out = io.StringIO()
    cb = ProgressCallback(num_trials=1, epochs=1, display=Progress("plain", stream=out))
    t = _trial("x", "TERMINATED", epoch=1, training_iteration=1, **{METRIC: 0.25}, time_total_s=3.0)
    cb.on_trial_start(0, [t], t)
    cb.on_trial_result(0, [t], t, {"training_iteration": 1, METRIC: 0.25})
    cb.on_trial_complete(0, [t], t)
    assert out.getvalue() == f"[1/1] trial x {METRIC} 0.2500 after 1/1 epochs, 3 s | best 0.2500 (x)\n"


def test_pickled_with_tune_state_without_the_display():
    cb = ProgressCallback(num_trials=1, epochs=1, display=Progress("plain", stream=io.StringIO()))
    clone = pickle.loads(pickle.dumps(cb))
    assert clone.display is None and clone.num_trials == 1


def test_a_restored_tuner_gets_this_drivers_display():
    """Tune's restore unpickles the callback without its display: while this driver runs the
    tuner, the callback prints on this driver's (the session attach_session gave the tuner)."""
    from autoaug.search.tune.session import DriverSession, attach_session, running

    out = io.StringIO()
    display = Progress("plain", stream=out)
    restored = pickle.loads(pickle.dumps(ProgressCallback(1, 1, display=Progress("quiet"))))

    class Tuner:
        pass

    tuner = Tuner()
    attach_session(tuner, DriverSession("exp", display=display))
    assert restored.display is None
    t = _trial("x", "TERMINATED", epoch=1, training_iteration=1, **{METRIC: 0.25}, time_total_s=3.0)
    with running(tuner):
        assert restored.display is display
        restored.on_trial_complete(0, [t], t)
    assert restored.display is None
    assert out.getvalue() == f"[1/1] trial x {METRIC} 0.2500 after 1/1 epochs, 3 s | best 0.2500 (x)\n"


class _Trial:
    """What Tune's per-trial output reads of a trial: its name and last result."""

    def __init__(self, name: str, last_result: dict) -> None:
        self.name, self.last_result = name, last_result

    def __str__(self) -> str:
        return self.name


def test_tunes_own_trial_lines_say_nothing_of_a_trial_that_never_reported(monkeypatch):
    from ray.tune.progress_reporter import TrialProgressCallback

    from autoaug.search.tune.progress import TuneTrialLines

    # what Tune would print for a finished trial (its line depends on Tune's global verbosity,
    # which any search run before sets): recorded instead
    told = []
    monkeypatch.setattr(
        TrialProgressCallback, "on_trial_complete", lambda self, i, ts, trial, **kw: told.append(str(trial))
    )
    lines = TuneTrialLines(metric=METRIC)
    # stopped by the time budget before it started: nothing, or only what Tune fills in by itself
    # (seen on a GPU: its process had started, so Tune had its id, date and pid)
    lines.on_trial_complete(0, [], _Trial("trial_never", {}))
    lines.on_trial_complete(0, [], _Trial("trial_started", {"trial_id": "started", "date": "x", "pid": 7}))
    # a trial that reported keeps Tune's line
    lines.on_trial_complete(0, [], _Trial("trial_ran", {"trial_id": "ran", "training_iteration": 3, METRIC: 0.5}))
    assert told == ["trial_ran"]
