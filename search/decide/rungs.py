"""Do ASHA's rungs rank? Measured on a search's own trials.

ASHA stops a trial at a rung when its score there is below the rung's quantile: that only helps
when the score at the rung predicts the score the trial would reach later. For each pair of
consecutive epochs at which trials ended (the rungs and the last epoch), :func:`rung_ranking`
takes the trials that reached the later one and correlates (Spearman) their scores at the two
epochs. Those are the trials the rung kept (its top fraction), so a rho near 0 says its choices
among close trials were close to random; it cannot say whether the trials it stopped, which
scored lower there, were worse later (they have no later score), and the narrower range of the
kept trials' scores makes rho smaller than over all trials. The interval (Fisher's z) says how
much the trials can tell: with 9 or 15 trials, little. Measured so far
(``benchmarks/results/search-gain-*``): on CIFAR-10's 284 trials with rungs at 20 and 60, epoch
20 -> 60 rho +0.25 [+0.05, +0.42] (98 trials), 60 -> 120 +0.38 [+0.09, +0.61] (43); on GTSRB's
56, -0.01 and +0.07.

The scores are those the trials reported at every epoch (Optuna's intermediate values, the step
being the training iteration), so any search whose trials report every epoch has them, wherever its
study is kept. Where a recorded search's rungs are is its method's to say
(:meth:`autoaug.search.methods.base.Method.rungs`).

**A rung cuts only while it is measured to rank** (:class:`RungGate`, applied inside Tune by
:class:`autoaug.search.tune.schedulers.RankedRungs`). Before any trial, calibration's full-length
runs of the published policies on the search's base measure each rung: a run's score at the rung
against its final score (:func:`calibration_scores`). As the search goes, the trials measure it:
a trial's score at the rung against its score at the next rung, over the trials that reached the
next (the trials' measurement replaces calibration's once it has :data:`MIN_PAIRS` pairs). A rung
measured over at least :data:`MIN_PAIRS` pairs whose 95% interval of rho reaches down to
:data:`RANKS_ABOVE` (0) or below -- a ranking not measured to be better than chance -- stops
cutting: ASHA's stop there is not applied, the trial goes on to the next rung. Unmeasured (fewer
pairs), a rung cuts as ASHA does. The decision is measured again at every new pair, so a rung
that stopped cutting cuts again once its interval lies above 0 (the trials that then pass it are
all of them, not its top fraction, which measures its ranking over the whole range). Why these
figures (docs/search.md, "Early stopping"): of the rungs the project measured, CIFAR-10's (+0.25
[+0.05, +0.42] over 98 trials at epoch 20, +0.38 [+0.09, +0.61] over 43 at epoch 60) and the GPU
preset's short runs (+0.83) lie above 0 and keep cutting; GTSRB's (+0.11 [-0.16, +0.36] over 58,
-0.05 [-0.42, +0.33] over 27) reach below it and stop; 8 pairs is the fewest at which a ranking
like the GPU preset's (+0.83) is measured above 0 with some to spare (from 6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autoaug.search.score import asha_milestones

__all__ = [
    "MIN_PAIRS",
    "RANKS_ABOVE",
    "RUNG_GATE_ATTR",
    "RungGate",
    "calibration_scores",
    "rung_epochs",
    "ranking",
    "rung_ranking",
    "rung_text",
    "gate_line",
    "describe_rungs",
    "ended_trials",
    "from_study",
]

#: Trials below which a pair of epochs gets no rho.
MIN_TRIALS = 3
#: Pairs (a trial's scores at a rung and at the next; a calibration run's at the rung and at its
#: end) from which a rung's ranking decides whether it cuts (:class:`RungGate`).
MIN_PAIRS = 8
#: A rung cuts while the lower end of the 95% interval of its rho lies above this.
RANKS_ABOVE = 0.0
#: The Optuna study's user attribute holding what :class:`RungGate` decided (``RungGate.to_dict``).
RUNG_GATE_ATTR = "autoaug_rung_gate"


def rung_epochs(
    grace_period: int, reduction_factor: float, epochs: int, early_stopping: bool = True
) -> tuple[int, ...]:
    """Where :func:`rung_ranking` compares a search's trials: ASHA's milestones (none without early
    stopping) and the last epoch."""
    rungs = asha_milestones(int(grace_period), float(reduction_factor), int(epochs)) if early_stopping else ()
    return (*rungs, int(epochs))


def rung_ranking(trials: Sequence[Mapping[int, float]], at: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """How well a trial's score at one rung predicts its score at the next: for each pair of
    consecutive rungs, Spearman's rho between the two scores of the trials that reached the later
    one, its p-value (scipy) and its 95% interval (Fisher's z, ``1.96 / sqrt(n - 3)``; None below 4
    trials). ``trials``: each trial's score by epoch. ``at``: the rungs (ASHA's milestones and the
    last epoch); None: the epochs where trials ended (a trial cut elsewhere -- a search stopped and
    resumed cuts one at its first report after the resume -- then adds an epoch that is no rung). A
    pair with fewer than :data:`MIN_TRIALS` trials, or constant scores, has ``rho`` None."""
    ends = sorted(set(at) if at is not None else {max(t) for t in trials if t})
    return [
        {"from": a, "to": b, **ranking([(t[a], t[b]) for t in trials if a in t and b in t])}
        for a, b in zip(ends, ends[1:])
    ]


def ranking(pairs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Spearman's rho of ``pairs`` (x, y), its p-value (scipy) and its 95% interval (Fisher's z,
    ``1.96 / sqrt(n - 3)``; None below 4 pairs): ``{"n", "rho", "p_value", "low", "high"}``, rho
    None below :data:`MIN_TRIALS` pairs or with constant scores."""
    from scipy.stats import spearmanr

    rho = p = low = high = None
    if len(pairs) >= MIN_TRIALS:
        r = spearmanr([x for x, _ in pairs], [y for _, y in pairs])
        if not math.isnan(r.correlation):
            rho, p = float(r.correlation), float(r.pvalue)
            if len(pairs) > 3:
                z, half = math.atanh(max(-0.999999, min(0.999999, rho))), 1.96 / math.sqrt(len(pairs) - 3)
                low, high = math.tanh(z - half), math.tanh(z + half)
    return {"n": len(pairs), "rho": rho, "p_value": p, "low": low, "high": high}


def ended_at(trials: Sequence[Mapping[int, float]]) -> dict[int, int]:
    """How many trials ended at each epoch (their last reported one)."""
    ends: dict[int, int] = {}
    for t in trials:
        if t:
            ends[max(t)] = ends.get(max(t), 0) + 1
    return dict(sorted(ends.items()))


def rung_text(rows: Sequence[Mapping[str, Any]], stopped: Mapping[int, int]) -> str:
    """``epoch 20 -> 60: rho +0.15 [-0.39, +0.61] (15 trials, p 0.59); ...``, and how many trials
    ended where."""
    parts = []
    for r in rows:
        rho = "–" if r["rho"] is None else f"{r['rho']:+.2f}"
        if r.get("low") is not None:
            rho += f" [{r['low']:+.2f}, {r['high']:+.2f}]"
        p = "" if r["p_value"] is None else f", p {r['p_value']:.2f}"
        parts.append(f"epoch {r['from']} -> {r['to']}: rho {rho} ({r['n']} trials{p})")
    ended = ", ".join(f"{n} at epoch {e}" for e, n in sorted(stopped.items()))
    return "; ".join(parts) + (f" (trials ended: {ended})" if ended else "")


def calibration_scores(saved: Mapping[str, Any] | None, base: str | None) -> list[dict[int, float]]:
    """Each full-length run of calibration's published policies on ``base``, its search score by
    epoch (the epochs it validated: ``scores`` of
    :func:`autoaug.search.decide.proxy_runs.train_and_score`), from ``calibration.json``'s content
    ``saved``. Left out: the bases' runs (a base alone leads early, where augmentation slows
    learning, and ranks otherwise than the augmented policies a search proposes: docs/results.md),
    runs on another schedule than the trials' (``/epochs=`` keys), on another base, and runs that
    kept no scores (a calibration by an earlier version)."""
    saved = saved or {}
    transfer = (saved.get("record") or {}).get("transfer") or {}
    if base is None or transfer.get("base") != base:
        return []
    out = []
    for key, run in sorted((saved.get("runs") or {}).items()):
        if not key.startswith("transfer:") or "/epochs=" in key or not isinstance(run, Mapping):
            continue
        scores = run.get("scores")
        if isinstance(scores, Mapping) and scores:
            out.append({int(e): float(v) for e, v in scores.items() if v is not None})
    return out


class RungGate:
    """Whether each of ASHA's rungs cuts, measured as the search goes (the module documentation).

    ``rungs``: ASHA's milestones; ``last``: the trials' last epoch; ``calibration``: calibration's
    full-length runs, each its scores by epoch (:func:`calibration_scores`). :meth:`observe` takes a
    trial's score at a rung or at its last epoch and returns the decisions it changed;
    :meth:`cuts` is a rung's decision; :meth:`let_go` counts a trial ASHA would have stopped at a
    rung that does not cut. Plain data: pickled with the scheduler; its record (:meth:`to_dict`)
    is kept in the Optuna study (:data:`RUNG_GATE_ATTR`)."""

    def __init__(self, rungs: Sequence[int], last: int, calibration: Sequence[Mapping[int, float]] = ()) -> None:
        self.last = int(last)
        self.rungs = tuple(sorted({int(r) for r in rungs if 0 < int(r) < self.last}))
        #: Per rung: calibration's runs, the score at the rung against the final score.
        self.calibration = {
            r: ranking([(s[r], s[self.last]) for s in calibration if r in s and self.last in s]) for r in self.rungs
        }
        self.scores: dict[str, dict[int, float]] = {}  # trial id -> its score at the rungs and the end
        self.kept = {r: 0 for r in self.rungs}
        self.state = {r: self._decide(r) for r in self.rungs}
        #: Every change of a rung's decision, the first ones before any trial (calibration's).
        self.events: list[dict[str, Any]] = [
            {**self.state[r], "trials": 0} for r in self.rungs if not self.state[r]["cuts"]
        ]

    def next_epoch(self, rung: int) -> int:
        """The epoch a trial that passes ``rung`` is next compared at: the next rung, or the last."""
        return next((r for r in self.rungs if r > rung), self.last)

    def measures_at(self, epoch: int) -> bool:
        """Whether a score at ``epoch`` measures some rung (it is the epoch after one)."""
        return any(self.next_epoch(r) == int(epoch) for r in self.rungs)

    def rung_of(self, step: int) -> int | None:
        """The rung ASHA decides at when a trial reports ``step``: the highest one at or below it."""
        return max((r for r in self.rungs if r <= int(step)), default=None)

    def measured(self, rung: int) -> dict[str, Any]:
        """What ``rung``'s decision rests on: the trials' measurement (their score at the rung
        against the next, once :data:`MIN_PAIRS` trials have both), else calibration's (a run's
        score at the rung against its last, with as many runs), else none (``source`` None)."""
        to = self.next_epoch(rung)
        trials = ranking([(s[rung], s[to]) for s in self.scores.values() if rung in s and to in s])
        if trials["n"] >= MIN_PAIRS and trials["rho"] is not None:
            return {"source": "trials", "from": rung, "to": to, **trials}
        prior = self.calibration.get(rung) or {}
        if prior.get("n", 0) >= MIN_PAIRS and prior.get("rho") is not None:
            return {"source": "calibration", "from": rung, "to": self.last, **prior}
        return {"source": None, "from": rung, "to": to, **trials}

    def _decide(self, rung: int) -> dict[str, Any]:
        m = self.measured(rung)
        cuts = m["source"] is None or (m["low"] is not None and m["low"] > RANKS_ABOVE)
        return {"rung": rung, "next": self.next_epoch(rung), "cuts": cuts, **m}

    def cuts(self, rung: int) -> bool:
        return self.state[rung]["cuts"]

    def let_go(self, rung: int) -> None:
        """A trial ASHA would have stopped at ``rung`` goes on."""
        self.kept[rung] += 1

    def observe(self, trial_id: str, epoch: int, score: float) -> list[dict[str, Any]]:
        """Trial ``trial_id`` scored ``score`` at ``epoch`` (kept when it is a rung or the last
        epoch): the decisions this changed (each with ``trials``, the trials seen so far)."""
        epoch = int(epoch)
        if epoch != self.last and epoch not in self.rungs:
            return []
        self.scores.setdefault(str(trial_id), {})[epoch] = float(score)
        changed = []
        for rung in self.rungs:
            if self.next_epoch(rung) == epoch:
                new = self._decide(rung)
                if new["cuts"] != self.state[rung]["cuts"]:
                    changed.append({**new, "trials": len(self.scores)})
                self.state[rung] = new
        self.events += changed
        return changed

    def restore(self, record: Mapping[str, Any] | None, scores: Mapping[str, Mapping[int, float]]) -> list[dict]:
        """After a driver restart: the trials' ``scores`` (the study's) and what ``record`` (an
        earlier session's :meth:`to_dict`) said; returns the decisions that differ from its last."""
        record = record or {}
        self.scores = {str(k): {int(e): float(v) for e, v in s.items()} for k, s in scores.items()}
        self.events = [dict(e) for e in record.get("events") or []]
        before = {int(r): dict(v) for r, v in (record.get("rungs") or {}).items()}
        changed = []
        for rung in self.rungs:
            self.kept[rung] = int((before.get(rung) or {}).get("kept") or 0)
            self.state[rung] = self._decide(rung)
            was = (before.get(rung) or {}).get("cuts", True)
            if self.state[rung]["cuts"] != was:
                changed.append({**self.state[rung], "trials": len(self.scores)})
        self.events += changed
        return changed

    def to_dict(self) -> dict[str, Any]:
        """The record: the rule, calibration's measurement, each rung's decision now (and the trials
        it let go on), every change."""
        return {
            "rule": {"min_pairs": MIN_PAIRS, "ranks_above": RANKS_ABOVE, "interval": 0.95},
            "calibration": {str(r): m for r, m in self.calibration.items() if m["n"]},
            "rungs": {str(r): {**self.state[r], "kept": self.kept[r]} for r in self.rungs},
            "events": [dict(e) for e in self.events],
        }


def _interval(m: Mapping[str, Any]) -> str:
    rho = "–" if m.get("rho") is None else f"{m['rho']:+.2f}"
    return rho + (f" [{m['low']:+.2f}, {m['high']:+.2f}]" if m.get("low") is not None else "")


def _measure_text(m: Mapping[str, Any]) -> str:
    if m.get("source") == "calibration":
        return (
            f"calibration's {m['n']} full-length runs rank their final score by their epoch-{m['from']} score "
            f"at rho {_interval(m)}"
        )
    if m.get("source") == "trials":
        return f"over {m['n']} trials, the epoch-{m['from']} score ranks the epoch-{m['to']} one at rho {_interval(m)}"
    return f"not measured yet, {m.get('n', 0)} of {MIN_PAIRS} pairs: cuts as ASHA does"


def gate_line(event: Mapping[str, Any]) -> str:
    """The progress line of a change of a rung's decision (:meth:`RungGate.observe`)."""
    when = "before any trial" if not event.get("trials") else f"after {event['trials']} trials"
    if event["cuts"]:
        return (
            f"early stopping: the rung at epoch {event['rung']} cuts again ({when}): {_measure_text(event)}, "
            f"above {RANKS_ABOVE:g} at 95%"
        )
    return (
        f"early stopping: the rung at epoch {event['rung']} stops cutting ({when}): {_measure_text(event)}, an "
        f"interval reaching {RANKS_ABOVE:g} (a rung cuts only while the 95% interval of its rho lies above "
        f"{RANKS_ABOVE:g}, measured over {MIN_PAIRS} pairs or more); its trials go on to epoch {event['next']}"
    )


def _gate_lines(gate: Mapping[str, Any]) -> list[str]:
    """The summary's lines on what the rungs' decisions were (:meth:`RungGate.to_dict`)."""
    lines = []
    events = gate.get("events") or []
    for key, state in sorted((gate.get("rungs") or {}).items(), key=lambda kv: int(kv[0])):
        rung = int(key)
        mine = [e for e in events if int(e["rung"]) == rung]
        if not mine:
            lines.append(f"early stopping at epoch {rung}: cut throughout ({_measure_text(state)})")
            continue
        said = []
        for e in mine[:4]:
            when = "before any trial" if not e.get("trials") else f"after {e['trials']} trials"
            what = "cut again" if e["cuts"] else "stopped cutting"
            said.append(
                f"{what} {when} (rho {_interval(e)}, {e['n']} {'runs' if e['source'] == 'calibration' else 'trials'})"
            )
        more = f" and {len(mine) - 4} more changes" if len(mine) > 4 else ""
        kept = int(state.get("kept") or 0)
        end = "cutting" if state["cuts"] else "not cutting"
        lines.append(
            f"early stopping at epoch {rung}: {'; '.join(said)}{more}: {kept} trial{'s' if kept != 1 else ''} it "
            f"would have cut went on; {end} at the end ({_measure_text(state)}; a rung cuts only while the 95% "
            f"interval of its rho lies above {RANKS_ABOVE:g})"
        )
    return lines


def ended_trials(study: Any) -> list[dict[int, float]]:
    """Each ended trial's reported scores by step (``intermediate_values``) in an Optuna study:
    trials that completed or that ASHA pruned; not a trial a driver restart orphaned, whose
    epochs its new Optuna trial carries on."""
    import optuna

    ended = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [
        dict(t.intermediate_values) for t in study.get_trials(deepcopy=False, states=ended) if t.intermediate_values
    ]


def from_study(study: Any, at: Sequence[int] | None = None) -> dict[str, Any] | None:
    """The rung record of a search from its Optuna study: :func:`rung_ranking` over its
    :func:`ended_trials` at the rungs ``at`` (:func:`rung_epochs`; None: where trials ended), and
    where trials ended, and what the rungs decided (``gate``: :meth:`RungGate.to_dict`, kept in the study by
    the scheduler). None when fewer than two epochs ended trials (no early stopping, or none stopped)
    and no rung decided anything."""
    trials = ended_trials(study)
    gate = study.user_attrs.get(RUNG_GATE_ATTR)
    if len(ended_at(trials)) < 2 and not gate:
        return None
    rows = rung_ranking(trials, at)
    if not rows and not gate:
        return None
    record = {"pairs": rows, "ended": {str(e): n for e, n in ended_at(trials).items()}}
    return {**record, "gate": gate} if gate else record


def describe_rungs(record: Mapping[str, Any] | None) -> list[str]:
    """The summary's line on whether ASHA's rungs ranked this search's trials; nothing without a
    record. With what the rungs decided (``gate``), a line per rung: where it stopped cutting (or cut
    again) and why, and the trials it let go on. Without (a search before the rungs were gated): a
    rung whose interval lies below +0.5 is said not to rank well; one whose interval spans 0 to
    above +0.5 is said to be undecided at this number of trials."""
    if not record or not (record.get("pairs") or record.get("gate")):
        return []
    gate = _gate_lines(record["gate"]) if record.get("gate") else []
    rows = record.get("pairs") or []
    if not rows:
        return gate
    stopped = {int(e): n for e, n in (record.get("ended") or {}).items()}
    first = rows[0]
    line = f"early stopping: do ASHA's rungs rank these trials? {rung_text(rows, stopped)}"
    if gate:  # what the rungs decided, measured as the search went, is said next
        return [line, *gate]
    if first.get("high") is not None and first["high"] < 0.5:
        line += (
            f"; the rung at epoch {first['from']} ranked them poorly (rho below +0.5 at 95%), the trials it kept: "
            "among close trials its choices were close to random (the trials it stopped have no later score to "
            "check it by; a later first rung: --grace-period; none: --no-early-stopping; docs/search.md)"
        )
    elif first.get("low") is not None and first["low"] < 0 < first["high"]:
        line += f"; too few trials to tell whether the rung at epoch {first['from']} ranks"
    return [line]
