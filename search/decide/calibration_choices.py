"""The choices calibration makes on measured runs, and the lines that say them.

:mod:`autoaug.search.decide.calibrate` trains the runs (the bases alone, then the published policies
on the chosen base, each a race); this module decides on their scores: :func:`choose_base` (the
base that augments most among the best and those within the noise of it, :data:`BASE_STRENGTH`),
:func:`rank_transfer` (the published policies of :data:`TRANSFER_REFS` ranked, the warm start
the best that fits the search space), :func:`incumbent_margin` (the noise as a margin, for the
``local`` sampler) and :func:`describe_calibration` (what the search's summary and ``autoaug
policies show`` print). Pure functions of the runs' scores and the stored record.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from autoaug.search.decide.noise import Noise, as_runs, difference_se, measure, score_of

__all__ = [
    "BASE_STRENGTH",
    "TRANSFER_FAMILY",
    "TRANSFER_REFS",
    "Runs",
    "choose_base",
    "describe_calibration",
    "incumbent_margin",
    "rank_transfer",
]

#: The published policies a transfer warm start scores, in this order (ties go to the earlier).
TRANSFER_REFS = ("autoaugment-cifar10", "autoaugment-svhn", "autoaugment-imagenet", "randaugment", "trivialaugment")
#: The space family each published policy is a point of (``SearchConfig.family: auto`` searches
#: the family of the one that transfers best, warm-started from it).
TRANSFER_FAMILY = {
    "autoaugment-cifar10": "aa",
    "autoaugment-svhn": "aa",
    "autoaugment-imagenet": "aa",
    "randaugment": "randaugment",
    "trivialaugment": "trivialaugment",
}


Runs = Mapping[str, Sequence[Any]]  # {label: [run result (a dict with METRIC) or a bare score, ...]}


def _ranked(runs: Mapping[str, Sequence[Mapping[str, Any]]], order: Sequence[str]) -> list[tuple[str, float]]:
    means = {label: math.fsum(score_of(r) for r in v) / len(v) for label, v in runs.items()}
    rank = {label: i for i, label in enumerate(order)}
    return sorted(means.items(), key=lambda kv: (-kv[1], rank.get(kv[0], len(rank))))


def _within(runs: Runs, order: Sequence[str]) -> tuple[list[tuple[str, float]], Noise, list[str], Any]:
    """The labels ranked by mean, the measured noise (:func:`autoaug.search.decide.noise.measure`), the
    labels whose mean is within the noise of the best (less than twice the standard error of the
    difference below it) and that threshold as a function of a label."""
    runs = as_runs(runs)
    ranked = _ranked(runs, order)
    best, top = ranked[0]
    noise = measure(runs)

    def threshold(label: str) -> float:
        return 2 * difference_se(noise, len(runs[best]), len(runs[label]))

    within = [label for label, mean in ranked[1:] if top - mean < threshold(label)]
    return ranked, noise, within, threshold


def _noise_record(noise: Noise, threshold: float) -> dict[str, Any]:
    return {**noise.to_dict(), "threshold": threshold, "source": noise.source()}


#: The bases from the one that augments most to the one that augments least: of the bases within
#: the noise of the best, the first is kept (and an exact tie of means goes to it).
BASE_STRENGTH = ("standard", "crop", "none")


def choose_base(runs: Runs) -> dict[str, Any]:
    """The base to search on and the record of why: every base's runs and mean; ``best``, the
    highest mean; ``within_noise``, the bases whose mean is less than twice the standard error of
    the difference below it (``threshold``, for the same number of runs as the best; the noise as
    measured on these runs, :mod:`autoaug.search.decide.noise`); ``chosen``, of the best and those
    within the noise, the one that augments most (:data:`BASE_STRENGTH`). ``runs``: ``{base:
    [run result, ...]}`` (or bare scores)."""
    ranked, noise, within, threshold = _within(runs, BASE_STRENGTH)
    best = ranked[0][0]
    strength = {b: i for i, b in enumerate(BASE_STRENGTH)}
    chosen = min([best, *within], key=lambda b: strength.get(b, len(strength)))
    runs = as_runs(runs)
    return {
        "chosen": chosen,
        "best": best,
        "scores": {label: {"mean": mean, "runs": [score_of(r) for r in runs[label]]} for label, mean in ranked},
        "noise": _noise_record(noise, threshold(best)),
        "within_noise": within,
    }


def rank_transfer(runs: Runs, fits: Mapping[str, str | None]) -> dict[str, Any]:
    """The published policies ranked by mean score (ties: :data:`TRANSFER_REFS` order), those
    within the noise of the best (as :func:`choose_base`), and the warm start: the best one whose
    sub-policies fit the search space (``fits[ref]`` is None when it fits, else why not)."""
    ranked, noise, within, threshold = _within(runs, TRANSFER_REFS)
    best, top = ranked[0]
    warm = next((ref for ref, _ in ranked if fits.get(ref) is None), None)
    runs = as_runs(runs)
    return {
        "best": best,
        "warm_start": [] if warm is None else [warm],
        "noise": _noise_record(noise, threshold(best)),
        "within_noise": within,
        "scores": {
            ref: {
                "mean": mean,
                "runs": [score_of(r) for r in runs[ref]],
                "margin": top - mean,
                **({"unfit": fits[ref]} if fits.get(ref) else {}),
            }
            for ref, mean in ranked
        },
    }


def incumbent_margin(record: Mapping[str, Any] | None) -> tuple[float, str] | None:
    """How far one trial's score must beat another's to be told apart, as the calibration
    measured the noise (the published policies' race, else the bases'): twice the standard error
    of the difference of two single runs, and what measured it -- the margin by which the
    ``local`` sampler replaces its incumbent (:mod:`autoaug.search.tune.local_sampler`). None: no
    calibration, or one that measured no noise. (A calibration of shorter runs than the trials'
    measured the spread of those runs: the nearest measurement the search has.)"""
    for stage in ("transfer", "base"):
        noise = ((record or {}).get(stage) or {}).get("noise")
        if noise and noise.get("sd") is not None:
            measured = Noise(**{f.name: noise[f.name] for f in dataclasses.fields(Noise)})
            return 2 * difference_se(measured, 1, 1), measured.source()
    return None


def _pts(value: float) -> str:
    return f"{value * 100:.2f}"


def _by_mean(scores: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    rank = {label: i for i, label in enumerate(order)}
    return sorted(scores.items(), key=lambda kv: (-kv[1]["mean"], rank.get(kv[0], len(rank))))


def _rounds_text(stage: Mapping[str, Any]) -> str:
    """Why some ran again: the rounds of a race (records before races: ``first_round``)."""
    rounds = stage.get("rounds") or ([stage["first_round"]] if stage.get("first_round") else [])
    parts = [f"{', '.join(r['within_noise'])} within {_pts(r['threshold'])} points of {r['best']}" for r in rounds]
    if not parts:
        return ""
    if len(parts) == 1 and "first_round" in stage:
        return f" (first round: {parts[0]}, so they ran again)"
    if rounds[-1].get("stopped") == "time":
        last = parts.pop()
        cut = f"{last}, but another round did not fit in the calibration's share of the time budget"
        return " (" + "; then ".join(["ran again: " + p for p in parts[:1]] + parts[1:] + [cut]) + ")"
    return " (ran again: " + "; then ".join(parts) + ")"


def describe_calibration(record: Mapping[str, Any] | None) -> list[str]:
    """Lines a person reads: which base was chosen and why, which published policy transferred
    best and by how much (the search's summary, ``autoaug policies show``)."""
    if not record:
        return []
    lines: list[str] = []
    reused = record.get("reused")
    if reused:
        lines.append(
            f"calibration: measured by search {reused['search']!r} ({reused['runs']} proxy runs on the same data, "
            "split and proxy, reused); the choices below made again on them"
        )
    base = record.get("base")
    if base:
        ordered = _by_mean(base["scores"], BASE_STRENGTH)  # stored JSON may have sorted the keys
        scores = ", ".join(f"{b} {_pts(s['mean'])}" for b, s in ordered)
        runs = sorted({len(s["runs"]) for _, s in ordered})
        each = "each base alone" if runs == [1] else "each base alone, mean of " + " or ".join(map(str, runs)) + " runs"
        noise = base["noise"]
        best = base.get("best", base["chosen"])  # records before the strongest-within-noise rule
        if not base["within_noise"]:
            why = f"ahead of the others beyond the noise ({_pts(noise['threshold'])} points; {noise['source']})"
        elif best == base["chosen"]:
            why = (
                f"the best mean; within the noise of it ({_pts(noise['threshold'])} points; {noise['source']}): "
                + ", ".join(base["within_noise"])
                + (", which augments less" if len(base["within_noise"]) == 1 else ", which augment less")
            )
        else:
            why = (
                f"within the noise ({_pts(noise['threshold'])} points; {noise['source']}) of the best mean, {best}'s, "
                f"and augments more: a base that augments less wins only beyond the noise"
            )
        why += _rounds_text(base)
        lines.append(f"base: {base['chosen']} (proxy score %, {each}: {scores}); {why}")
    transfer = record.get("transfer")
    if transfer:
        scores = transfer["scores"]
        best = transfer["best"]
        ordered = _by_mean(scores, TRANSFER_REFS)
        ranked = ", ".join(f"{ref} {_pts(s['mean'])}" for ref, s in ordered)
        lines.append(f"transfer (published policies on base {transfer['base']}, proxy score %): {ranked}")
        runner_up = [s for ref, s in ordered if ref != best]
        margin = f" by {_pts(runner_up[0]['margin'])} points over the next" if runner_up else ""
        noise = transfer.get("noise")
        if noise and transfer.get("within_noise"):
            margin += f"; within the noise of it ({_pts(noise['threshold'])} points; {noise['source']}): " + ", ".join(
                transfer["within_noise"]
            )
        elif noise and runner_up:
            margin += f", beyond the noise ({_pts(noise['threshold'])} points; {noise['source']})"
        lines.append(f"transferred best: {best}{margin}{_rounds_text(transfer)}")
        warm = transfer["warm_start"]
        if warm and warm[0] != best:
            lines.append(
                f"warm start: {warm[0]} ({best}: {scores[best].get('unfit', 'does not fit the search space')})"
            )
        elif warm:
            lines.append(f"warm start: {warm[0]}")
        else:
            lines.append("warm start: none (no published policy fits the search space)")
        if transfer.get("family"):
            lines.append(
                f"space family: {transfer['family']} (--space auto: the family of the warm start, searched around it)"
            )
    return lines
