"""A picture of a search (``autoaug report NAME``): one PNG from the run's Optuna study.

Four panels, drawn with matplotlib from the study in the run directory (``optuna.db``, or the
storage ``search_config.json`` names):

1. **score per trial and best so far**: each finished trial's ``val_accuracy`` in the order it
   was proposed (pruned = stopped early by ASHA, marked apart) and the running maximum;
2. **learning curves**: every trial's validation accuracy per epoch (Optuna's intermediate
   values, the numbers ASHA compared);
3. **ops and magnitudes among the top trials**: how often each operation appears, with a
   non-zero probability, in the sub-policies of the best ``top`` trials, and the mean magnitude
   bin it was drawn with (space families ``randaugment`` / ``trivialaugment``: in how many of the
   best trials each operation is chosen, and the mean of their ``M`` / of the bins ``0..max_bin``
   drawn uniformly, i.e. ``max_bin / 2``);
4. **parameter importances**: ``optuna.importance.get_param_importances`` (fANOVA) of the
   study's parameters, summed per kind (op type / probability / magnitude of each sub-policy slot)
   when there are many (the other families: per parameter, ``Rotate in``, ``N``, ``M``,
   ``max bin``); skipped, saying why, with fewer than 2 finished trials.

:func:`top_trials` lists the best trials' points (``autoaug report --json``: ``top_trials``).

A method whose search has no Optuna study says instead, in one line, where its own record is
(``Method.report_note``).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import optuna

from autoaug.core.errors import UserInputError
from autoaug.policies.ops import REGISTRY
from autoaug.search.config import METHODS
from autoaug.search.run_dir import CONFIG_FILE, RESULT_FILE, STUDY_FILE, RunDir
from autoaug.search.score import METRIC
from autoaug.search.space import SearchSpace
from autoaug.search.tune.study import make_storage

__all__ = ["ReportData", "load_report_data", "write_report", "op_frequencies", "importances", "top_trials"]


@dataclass(frozen=True)
class ReportData:
    name: str
    run_dir: str
    trials: list  # optuna FrozenTrials, finished ones (COMPLETE or PRUNED), by number
    study: Any
    epochs: int | None
    space: SearchSpace = SearchSpace()  # the run's (search_config.json), for its family


def load_report_data(name: str, storage: str) -> ReportData:
    """The study and settings of search ``name`` in the runs root ``storage``."""
    run = RunDir(storage, name)
    if not run.exists(CONFIG_FILE):
        raise UserInputError(
            f"no search named {name!r} in {storage} (no {CONFIG_FILE} in {run.uri}); check NAME and --storage"
        )
    state = run.read_json(CONFIG_FILE)
    method = METHODS.get((state.get("config") or {}).get("method", ""))
    note = None if method is None else method.reporter.report_note(name, run.uri)
    if note is not None:  # a method without an Optuna study (PBA): where its own record is
        raise UserInputError(note)
    url = state.get("optuna", {}).get("storage")
    if not url:
        if run.local_path is None:
            raise UserInputError(f"{run.uri} names no Optuna storage")
        url = "sqlite:///" + os.path.join(run.local_path, STUDY_FILE)
    try:
        study = optuna.load_study(study_name=state.get("optuna", {}).get("study_name", name), storage=make_storage(url))
    except KeyError:  # optuna: no such study in the storage -- no trial ever started
        raise UserInputError(_no_study(name, run)) from None
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    trials = sorted((t for t in study.trials if t.state in finished and t.value is not None), key=lambda t: t.number)
    epochs = (state.get("config", {}).get("train") or {}).get("epochs")
    try:
        space = SearchSpace.from_dict((state.get("config") or {}).get("space") or {})
    except ValueError:  # written by another version: the report draws what the parameters say
        space = SearchSpace()
    return ReportData(name=name, run_dir=run.uri, trials=trials, study=study, epochs=epochs, space=space)


def _no_study(name: str, run: RunDir) -> str:
    """Why search ``name`` has no Optuna study to draw: it ran no trial (the time budget went to
    calibration: :func:`autoaug.search.driver._no_time_for_trials`), or none has started yet."""
    if run.exists(RESULT_FILE):
        result = run.read_json(RESULT_FILE)
        ended = ((result.get("provenance") or {}).get("budget") or {}).get("ended") or {}
        ref = (result.get("stored") or {}).get("ref", name)
        why = "the time budget went to calibration" if ended.get("stage") == "calibration" else "it stored no trial"
        return f"search {name!r} ran no trial ({why}): no Optuna study to draw; what it measured: autoaug policies show {ref}"
    return (
        f"search {name!r} has no Optuna study yet (no trial has started; was it stopped in calibration?): "
        f"resume it with autoaug search --resume {name}"
    )


def _slots(params: dict[str, Any], space: SearchSpace | None = None) -> list[tuple[str, float, float]]:
    """``[(op, probability, magnitude bin)]`` of every sub-policy slot (``spI_opJ_type/prob/mag``);
    in the ``randaugment`` / ``trivialaugment`` families, of every operation chosen (``use_{Op}``):
    probability 1 and ``M`` / the mean bin drawn, ``max_bin / 2``."""
    if space is not None and space.family != "aa":
        if space.family == "randaugment":
            mag = float(params.get("m", 0))
        else:
            mag = float(params.get("max_bin", 0)) / 2
        return [(op, 1.0, mag) for op in space.op_choices if params.get(space.use_name(op))]
    out = []
    for key, op in params.items():
        if key.endswith("_type"):
            stem = key[: -len("_type")]
            out.append((str(op), float(params.get(f"{stem}_prob", 0.0)), int(params.get(f"{stem}_mag", 0))))
    return out


def top_trials(trials: list, top: int, space: SearchSpace | None = None) -> list[dict[str, Any]]:
    """The best ``top`` trials: Optuna number, score and the point (:meth:`SearchSpace.describe_point`;
    in the ``randaugment`` / ``trivialaugment`` families also the operations in and ``n``/``m`` or
    ``max_bin``)."""
    space = space or SearchSpace()
    out = []
    for t in sorted(trials, key=lambda t: t.value, reverse=True)[:top]:
        row: dict[str, Any] = {"number": t.number, "value": t.value}
        try:
            row["point"] = space.describe_point(t.params)
        except ValueError:
            row["point"] = None  # parameters of another space (a study written by another version)
        if space.family != "aa":
            row["ops"] = [op for op in space.op_choices if t.params.get(space.use_name(op))]
            row.update({k: t.params[k] for k in ("n", "m", "max_bin") if k in t.params})
        out.append(row)
    return out


def op_frequencies(trials: list, top: int, space: SearchSpace | None = None) -> tuple[Counter, dict[str, float]]:
    """(count of each op with probability > 0 in the best ``top`` trials, its mean magnitude bin)."""
    best = sorted(trials, key=lambda t: t.value, reverse=True)[:top]
    counts: Counter = Counter()
    mags: dict[str, list[float]] = defaultdict(list)
    for t in best:
        for op, prob, mag in _slots(t.params, space):
            if prob > 0:
                counts[op] += 1
                mags[op].append(mag)
    return counts, {op: sum(v) / len(v) for op, v in mags.items()}


def importances(study: Any, trials: list) -> tuple[dict[str, float], str | None]:
    """Optuna's parameter importances grouped by kind (``op type``, ``probability``,
    ``magnitude``) and by sub-policy; ``({}, reason)`` when they cannot be computed."""
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(complete) < 2:
        return {}, f"only {len(complete)} completed trial(s): Optuna needs at least 2 for importances"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = optuna.importance.get_param_importances(study)
    except Exception as exc:  # noqa: BLE001 - one panel explains, the rest of the report stands
        return {}, f"Optuna could not compute importances: {exc}"
    grouped: dict[str, float] = defaultdict(float)
    kinds = {"type": "op", "prob": "probability", "mag": "magnitude"}
    family = {"n": "N (ops per image)", "m": "M (magnitude)", "max_bin": "max bin"}
    for key, value in raw.items():
        parts = key.split("_")  # sp0_op1_type
        if key.startswith("use_"):  # randaugment / trivialaugment: use_Rotate
            label = f"{key[len('use_') :]} in"
        elif key in family:
            label = family[key]
        else:
            label = f"{parts[0]} {kinds.get(parts[-1], parts[-1])}" if len(parts) == 3 else key
        grouped[label] += float(value)
    return dict(sorted(grouped.items(), key=lambda kv: kv[1], reverse=True)), None


def write_report(data: ReportData, out: str, *, top: int = 5) -> str:
    """Draw the four panels into the PNG ``out``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    if not data.trials:
        raise UserInputError(f"search {data.name!r} has no finished trial yet: nothing to plot")
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(f"search {data.name}: {len(data.trials)} finished trials ({data.run_dir})", fontsize=11)
    _score_panel(axes[0][0], data)
    _curves_panel(axes[0][1], data, top, matplotlib.ticker.MaxNLocator(integer=True))
    _ops_panel(axes[1][0], data, top)
    _importance_panel(axes[1][1], data)
    fig.tight_layout()
    path = os.path.abspath(os.path.expanduser(out))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _score_panel(ax: Any, data: ReportData) -> None:
    """Panel 1: each trial's score (completed, stopped early by ASHA) and the best so far."""
    numbers = [t.number for t in data.trials]
    values = [t.value for t in data.trials]
    pruned = [t.state == optuna.trial.TrialState.PRUNED for t in data.trials]
    ax.scatter(
        [n for n, p in zip(numbers, pruned) if not p],
        [v for v, p in zip(values, pruned) if not p],
        color="tab:blue",
        label="completed",
        zorder=3,
    )
    if any(pruned):
        ax.scatter(
            [n for n, p in zip(numbers, pruned) if p],
            [v for v, p in zip(values, pruned) if p],
            color="tab:gray",
            marker="x",
            label="stopped early (ASHA)",
            zorder=3,
        )
    best, running = float("-inf"), []
    for v in values:
        best = max(best, v)
        running.append(best)
    ax.step(numbers, running, where="post", color="tab:red", label="best so far")
    ax.set_xlabel("trial (Optuna number)")
    ax.set_ylabel(METRIC)
    ax.set_title("score per trial")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _curves_panel(ax: Any, data: ReportData, top: int, epochs_locator: Any) -> None:
    """Panel 2: every trial's score by epoch, the best ``top`` highlighted and labelled
    (``epochs_locator``: the x axis's ticks, whole epochs)."""
    top_ids = {t.number for t in sorted(data.trials, key=lambda t: t.value, reverse=True)[:top]}
    for t in data.trials:
        steps = sorted(t.intermediate_values)
        if not steps:
            continue
        highlight = t.number in top_ids
        ax.plot(
            steps,
            [t.intermediate_values[s] for s in steps],
            marker="o",
            markersize=3,
            alpha=0.9 if highlight else 0.35,
            linewidth=1.8 if highlight else 0.8,
            label=f"#{t.number} ({t.value:.3f})" if highlight else None,
        )
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(epochs_locator)
    ax.set_ylabel(METRIC)
    ax.set_title(f"learning curves (top {len(top_ids)} labelled)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _ops_panel(ax: Any, data: ReportData, top: int) -> None:
    """Panel 3: how often each operation appears among the best ``top`` trials, with its mean
    magnitude bin (:func:`op_frequencies`)."""
    counts, mean_mag = op_frequencies(data.trials, top, data.space)
    ops = [op for op, _ in counts.most_common()]
    ax.barh(ops[::-1], [counts[o] for o in ops[::-1]], color="tab:green")
    for i, op in enumerate(ops[::-1]):
        if op in REGISTRY and REGISTRY[op].has_magnitude:  # no label for AutoContrast, Equalize...
            ax.text(counts[op] + 0.05, i, f"mag {mean_mag[op]:.1f}", va="center", fontsize=7)
    if data.space.family == "aa":
        ax.set_xlabel(f"occurrences with p > 0 in the best {min(top, len(data.trials))} trials (mean magnitude bin)")
    else:
        ax.set_xlabel(
            f"best {min(top, len(data.trials))} trials choosing the op ({data.space.family} family; mean magnitude bin)"
        )
    ax.set_title("ops and magnitudes of the top trials")
    ax.grid(alpha=0.3, axis="x")


def _importance_panel(ax: Any, data: ReportData) -> None:
    """Panel 4: Optuna's parameter importances (:func:`importances`), or why there are none."""
    imp, reason = importances(data.study, data.trials)
    if imp:
        labels = list(imp)[:15]
        ax.barh(labels[::-1], [imp[k] for k in labels[::-1]], color="tab:purple")
        ax.set_xlabel("importance (Optuna fANOVA, summed per slot)")
    else:
        ax.text(0.5, 0.5, reason, ha="center", va="center", wrap=True, fontsize=9)
        ax.set_axis_off()
    ax.set_title("parameter importances")
