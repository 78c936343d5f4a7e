"""Before a search: measure on the user's data which base and which published policy to start from.

A search's defaults were CIFAR-10's: every candidate on the ``standard`` base (crop + horizontal
flip) and the first trials AutoAugment's CIFAR-10 sub-policies. On data where a flip changes the
label (traffic signs, text, digits) or where another published policy suits better, both cost
more than the search finds (docs/search.md, "Searching your own dataset"). So, when asked
(``SearchConfig.base == "auto"``, ``SearchConfig.warm_start == "auto"``; the ``cpu``, ``paper``
and ``density-cpu`` presets), the search first trains the proxy -- the trials' own training
configuration, seeds ``train.seed + CALIBRATION_SEED_OFFSET + i`` -- and scores each run as a trial
is scored (:data:`~autoaug.search.score.METRIC`):

1. **Bases** (``base: auto``): each base alone (``none``, ``crop``, ``standard``:
   :mod:`autoaug.policies.bases`), ``calibration_seeds`` runs each, as a race
   (:func:`_race`): the noise of a run's score is measured on these runs, per image and, from
   repeated runs, per run (:mod:`autoaug.search.decide.noise`; with one seed each, ``standard`` runs
   twice so the first round measures it), and the bases whose mean is within the noise of the
   best mean (difference under twice its standard error) get one more run each, together with
   the best, for at most ``base_extra_seeds`` rounds; the others are dropped. Of the best base
   and those still within the noise of it, the one that augments most (``standard``, then
   ``crop``, then ``none``: :data:`~autoaug.search.decide.calibration_choices.BASE_STRENGTH`) is
   kept: an augmentation that changes labels shows as a gap far beyond the noise (a flip on
   traffic signs: 6 points under the proxy), while one the proxy cannot tell from a weaker one
   still pays in the longer final training (CIFAR-10: the flip within the noise under the proxy
   with one run each, +1.5 points in ``eval-cpu``).
2. **Transfer** (``warm_start: auto``): each published policy of ``TRANSFER_REFS`` moved onto
   that base, the same race (``transfer_extra_seeds`` rounds; ``autoaugment-cifar10`` runs twice
   in the first). The search warm-starts from the best-scoring one that fits the search space.
   With ``SearchConfig.family: auto`` each is a point of its own family (``TRANSFER_FAMILY``,
   among the families the method searches) and the search looks in the best one's family;
   otherwise, in the ``aa`` space, AutoAugment's three policies fit and RandAugment's and
   TrivialAugment's uniform operations at one magnitude of 31 bins do not: when one of them
   transfers best, the summary says so and the best AutoAugment policy is the warm start.
   The choices on the runs' scores, and the lines that say them, are
   :mod:`autoaug.search.decide.calibration_choices`'.

With re-scoring on, the published policy that transferred best (on the chosen base) is also a
final candidate (``transfer``, :func:`transfer_candidate`): a search stores it when none of its
own candidates re-scores higher, and its summary says so.

Every run is a Ray task with the trials' resources, saved as it finishes in the run directory
(``calibration.json``), so a resumed search trains only the runs it lacks and makes the same
choice. A new search can reuse the runs of an earlier search's calibration
(``SearchConfig.calibration_from``, ``--calibration-from NAME``) when both measured the same
data, split and proxy (:func:`calibration_protocol`): they stand for its own runs, seed for seed,
and the choices are made again on them, so its time budget goes to its trials. The scores, the choice and why are in the stored policy's provenance (``calibration``),
printed by the search's summary and by ``autoaug policies show``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autoaug.core import failpoints
from autoaug.core.errors import UserInputError
from autoaug.policies import Policy, presets
from autoaug.policies.bases import NAMES as BASE_NAMES
from autoaug.search.budget import format_duration, measured_run_s
from autoaug.search.decide import proxy_runs
from autoaug.search.decide.calibration_choices import (
    BASE_STRENGTH,
    TRANSFER_FAMILY,
    TRANSFER_REFS,
    choose_base,
    describe_calibration,
    rank_transfer,
)
from autoaug.search.decide.rescore import Candidate
from autoaug.search.decide.warm_start import warm_start_policies
from autoaug.search.run_dir import CONFIG_FILE, RunDir, RunState
from autoaug.search.score import METRIC, score_epochs

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.budget import Budget

__all__ = [
    "AUTO",
    "CALIBRATION_FILE",
    "CALIBRATION_SEED_OFFSET",
    "Calibration",
    "needs_calibration",
    "calibration_train_config",
    "calibration_protocol",
    "calibration_source",
    "calibrate",
    "transfer_candidate",
]

AUTO = "auto"
CALIBRATION_FILE = "calibration.json"
#: Calibration run ``i`` uses seed ``train.seed + CALIBRATION_SEED_OFFSET + i``: seeds no trial and
#: no re-scoring run uses.
CALIBRATION_SEED_OFFSET = 2_000


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What the calibration chose: ``base`` (None: not calibrated, the configuration's own),
    ``warm_start`` (None: not calibrated), ``record`` (the provenance: every run's score,
    the choice and why), ``family`` (the space family, None: not calibrated) and ``runs`` (every
    run's result by key, per-image scores included: ``calibration.json``'s)."""

    base: str | None
    warm_start: tuple[str, ...] | None
    record: dict[str, Any]
    family: str | None = None
    runs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def apply(self, config: Any) -> Any:
        """``config`` with its ``base`` and ``warm_start`` as chosen (a configuration with
        nothing automatic left)."""
        changes: dict[str, Any] = {}
        if self.base is not None:
            changes["base"] = self.base
        if self.warm_start is not None:
            changes["warm_start"] = self.warm_start
        if self.family is not None:
            changes["family"] = self.family
        return config.replace(**changes) if changes else config


def needs_calibration(config: Any) -> bool:
    return config.base == AUTO or config.warm_start == AUTO


def calibration_epochs(config: Any) -> int:
    """The epochs of one calibration run: ``config.calibration_epochs``, else the trials' own."""
    return config.calibration_epochs or config.train.epochs


def calibration_train_config(config: Any, seed_index: int = 0) -> Any:
    """The training configuration of calibration run ``seed_index``: the trials' own on the
    calibration's schedule (:func:`calibration_epochs`: a whole run of that many epochs, its
    warm-up and decay compressed to it), with seed ``train.seed + CALIBRATION_SEED_OFFSET +
    seed_index``, validated only over the last ``score_window`` epochs (all the score reads) and,
    on the trials' schedule, the ``score_window`` epochs up to each epoch where the search's
    method stops trials early (ASHA's rungs, :meth:`Method.rungs`): the runs' scores there measure
    how well each rung ranks before any trial (:func:`autoaug.search.decide.rungs.calibration_scores`),
    for about 2% more time (10 more validations in 120 epochs of the `cpu` preset)."""
    epochs = calibration_epochs(config)
    rungs: tuple[int, ...] = ()
    if epochs == config.train.epochs:
        rungs = tuple(config.search_method.rungs(config.to_dict()))[:-1]
    return dataclasses.replace(
        config.train,
        epochs=epochs,
        warmup_epochs=min(config.train.warmup_epochs, epochs),
        seed=(config.train.seed + CALIBRATION_SEED_OFFSET + seed_index) % 2**31,
        eval_from=max(1, epochs - config.score_window + 1),
        eval_epochs=score_epochs(epochs, config.score_window, rungs) if rungs else None,
    )


def _key(stage: str, label: str, cfg: Any, trial_epochs: int | None = None) -> str:
    """A calibration run's key in ``calibration.json``; runs on another schedule than the
    trials' (``trial_epochs``) say their epochs, so a search never reads them as the other's."""
    epochs = "" if trial_epochs is None or cfg.epochs == trial_epochs else f"/epochs={cfg.epochs}"
    return f"{stage}:{label}/seed={cfg.seed}{epochs}"


#: Training settings that change how fast a calibration run goes, not what it trains or scores
#: (the seed is matched run by run; the data by its fingerprints; the epochs validated besides the
#: score's last window change nothing in training).
_NOT_PROTOCOL = ("seed", "data", "test_data", "num_threads", "loader_threads", "eval_from", "eval_epochs")
_KEY_RE = re.compile(r"^(?P<stage>[a-z]+):(?P<label>[^/]+)/seed=(?P<seed>\d+)(?P<rest>.*)$")


def calibration_protocol(config: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """What a search's calibration runs depend on besides their seeds: the dataset and the split
    (``data``: :func:`autoaug.search.records.describe_data`'s fingerprints), the calibration
    runs' training configuration (:func:`calibration_train_config`) and how a run is scored. Two
    searches with the same protocol train the same calibration run for the same seed index."""
    train = calibration_train_config(config, 0).to_dict()
    return {
        "dataset": (data.get("dataset") or {}).get("fingerprint"),
        "split": (data.get("split") or {}).get("fingerprint"),
        "train": {k: v for k, v in sorted(train.items()) if k not in _NOT_PROTOCOL},
        "trial_epochs": config.train.epochs,
        "score_window": config.score_window,
    }


@dataclasses.dataclass(frozen=True)
class CalibrationSource:
    """An earlier search's calibration, as :func:`calibration_source` found it: its ``name``,
    its runs keyed as this search's own (``runs``) and the base its published policies ran on
    (``transfer_base``: their runs stand for this search's only on that base)."""

    name: str
    runs: Mapping[str, Any]
    transfer_base: str | None


def calibration_source(config: Any, data: Mapping[str, Any]) -> CalibrationSource | None:
    """The calibration ``config.calibration_from`` names (None: none named), checked before any
    work: the search exists in ``config.storage``, its calibration finished and measured the same
    protocol (:func:`calibration_protocol`). Its runs are keyed by this search's seeds (run ``i``
    of theirs is run ``i`` of this one). Raises :class:`UserInputError` naming what is wrong."""
    name = config.calibration_from
    if name is None:
        return None
    flag = f"--calibration-from {name}"
    if name == config.name:
        raise UserInputError(f"{flag}: that is this search's own name; it reuses another search's calibration")
    if not needs_calibration(config):
        raise UserInputError(
            f"{flag}: this search measures nothing before its trials (its base and warm start are given, "
            "not auto), so there is no calibration to reuse"
        )
    source = RunDir(config.storage, name)
    if not source.exists(CONFIG_FILE):
        raise UserInputError(f"{flag}: no search named {name!r} in {source.storage}")
    saved = source.read_json(CALIBRATION_FILE) if source.exists(CALIBRATION_FILE) else {}
    if not saved.get("record"):
        raise UserInputError(
            f"{flag}: the search {name!r} has no finished calibration (its base and warm start were given, or "
            f"it stopped while measuring: resume it with --resume {name} first)"
        )
    state = RunState.from_dict(source.read_json(CONFIG_FILE))
    theirs = type(config).from_dict(state.config)  # (a SearchConfig: config imports this module)
    mine_p, theirs_p = calibration_protocol(config, data), calibration_protocol(theirs, state.data)
    if mine_p != theirs_p:
        what = next(k for k in mine_p if mine_p[k] != theirs_p[k])
        if what == "train":
            field = next(
                k
                for k in sorted(set(mine_p[what]) | set(theirs_p[what]))
                if mine_p[what].get(k) != theirs_p[what].get(k)
            )
            differs = f"the proxy's {field} ({theirs_p[what].get(field)!r} there, {mine_p[what].get(field)!r} here)"
        else:
            differs = {
                "dataset": "the data (another dataset fingerprint)",
                "split": "the reduced split (another split fingerprint: sizes, split seed or groups)",
            }.get(what, f"{what} ({theirs_p[what]!r} there, {mine_p[what]!r} here)")
        raise UserInputError(f"{flag}: the search {name!r} calibrated another protocol: {differs}")
    mine_seeds = config.train.seed + CALIBRATION_SEED_OFFSET
    their_seeds = theirs.train.seed + CALIBRATION_SEED_OFFSET
    runs: dict[str, Any] = {}
    for key, result in (saved.get("runs") or {}).items():
        m = _KEY_RE.match(key)
        if m is None:
            continue
        index = (int(m["seed"]) - their_seeds) % 2**31
        runs[f"{m['stage']}:{m['label']}/seed={(mine_seeds + index) % 2**31}{m['rest']}"] = result
    return CalibrationSource(name, runs, (saved["record"].get("transfer") or {}).get("base"))


def _first_round_runs(labels: int, first: Sequence[Any], extra: Sequence[Any]) -> int:
    """The runs of a race's first round (:func:`_race`): every label with the ``first`` seeds,
    plus, when that is one seed and more rounds are allowed, a repeat of the first label."""
    return labels * len(first) + (1 if len(first) == 1 and extra else 0)


def _race(
    train: Any,
    stage: str,
    policies: Mapping[str, Any],
    what: str,
    decide: Any,
    first: Sequence[Any],
    extra: Sequence[Any],
    affordable: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score ``policies`` as a race: every one with the ``first`` seeds (plus, when that is one
    seed and more rounds are allowed, a second run of the first policy, in the same batch, last:
    the per-run noise is measured from the first round on, in the slot an odd number of runs
    leaves idle on 2); then, one round per seed of ``extra``, one more run for
    the best and each policy within the noise of it, until none is (the others are dropped:
    they are beyond the noise). ``decide(runs)`` is :func:`choose_base` or a
    :func:`rank_transfer`. ``affordable(stage, labels, cfg)``: whether a round training those
    runs still fits the time it may take (None: always); a round that does not is not run, and
    the last round's record says so. Returns the final decision and the rounds that ran again."""
    labels = list(policies)
    seeds: dict[str, list[Any]] = {label: list(first) for label in labels}
    plan = [(label, policies[label], cfg) for label in labels for cfg in first]
    # The repeat, in the same batch: on 2 slots it fills the one an odd count leaves idle.
    if len(plan) < _first_round_runs(len(labels), first, extra):
        seeds[labels[0]].append(extra[0])
        plan.append((labels[0], policies[labels[0]], extra[0]))
        what += f" ({labels[0]} twice, to measure the noise)"
    runs = train(stage, plan, what)
    rounds: list[dict[str, Any]] = []
    decision = decide(runs)
    for cfg in extra:
        tied = [decision["best"], *decision["within_noise"]]
        if len(tied) < 2:
            break
        rounds.append(
            {
                "best": decision["best"],
                "within_noise": decision["within_noise"],
                "threshold": decision["noise"]["threshold"],
            }
        )
        todo = {label: policies[label] for label in tied if cfg not in seeds[label]}
        if todo and affordable is not None and not affordable(stage, list(todo), cfg):
            rounds[-1]["stopped"] = "time"
            break
        if todo:
            more = train(
                stage, [(label, p, cfg) for label, p in todo.items()], f"{', '.join(tied)} within the noise, more runs"
            )
            for label, rs in more.items():
                seeds[label].append(cfg)
                runs[label] += rs
        decision = decide(runs)
    return decision, rounds


#: The share of a search's time budget the calibration's races may spend: a round that would
#: end past it is not run (the first round always is: nothing can be chosen without it), and a
#: round of the bases' race must leave room for the published policies' first round.
CALIBRATION_SHARE = 1 / 3


def suggested_budget_s(calibration_s: float) -> float:
    """A time budget in which a calibration of ``calibration_s`` seconds takes at most
    :data:`CALIBRATION_SHARE` of it, rounded up to 10 minutes (what the forecast suggests)."""
    return math.ceil(calibration_s / CALIBRATION_SHARE / 600) * 600


def next_search(name: str, calibration_s: float) -> str:
    """What to do when calibration leaves a search's trials no time: a larger budget
    (:func:`suggested_budget_s`), or the next search reusing search ``name``'s calibration runs."""
    return (
        f"for trials, give this data --time-budget {format_duration(suggested_budget_s(calibration_s))} "
        f"(calibration a third of it), or start the next search with --calibration-from {name} "
        "(it reuses these runs)"
    )


def calibrate(config: Any, run: RunDir, display: Progress, budget: Budget | None = None) -> Calibration | None:
    """Run what ``config`` leaves to measurement (``base``, ``warm_start`` ``"auto"``) inside the
    search's Ray session, resuming from ``calibration.json`` in the run directory ``run``; None
    when nothing is automatic. With a time budget, the races run more rounds only while they
    fit in :data:`CALIBRATION_SHARE` of it."""
    if not needs_calibration(config):
        return None
    cached = run.read_json(CALIBRATION_FILE) if run.exists(CALIBRATION_FILE) else {}
    calibration = _CalibrationRuns(config, run, display, budget, cached)
    source = None
    if config.calibration_from and not cached:  # (a resumed search has them in its own file)
        source = _reuse_base_runs(calibration)
    record: dict[str, Any] = {
        "seeds": [c.seed for c in calibration.cfgs],
        "epochs": calibration_epochs(config),
        "train_size": config.train.train_size,
        "val_size": config.train.val_size,
    }
    # A calibration that ended keeps its choice when the search resumes, even under a later version
    # whose rule would choose otherwise: the trials already ran on that base, from that warm start.
    made: Mapping[str, Any] = cached.get("record") or {}
    base = _base_stage(calibration, record, made)
    chosen_base = base if base is not None else config.space.base
    families = config.search_method.space_families if config.family == AUTO else ()
    _reuse_transfer_runs(calibration, source, chosen_base)
    reuse = calibration.reuse
    if reuse.get("runs"):
        record["reused"] = reuse
    warm = _transfer_stage(calibration, record, made, chosen_base, families)
    run.write_json(
        CALIBRATION_FILE,
        {"runs": calibration.runs, "record": record, **({"reused": reuse} if reuse.get("runs") else {})},
    )
    for line in describe_calibration(record):
        display.log(line)
    family = (record.get("transfer") or {}).get("family") if families else None
    return Calibration(base=base, warm_start=warm, record=record, family=family, runs=calibration.runs)


class _CalibrationRuns:
    """A calibration's proxy runs: those saved in ``calibration.json`` (``cached``: what an earlier
    session left), the runs of each race's rounds trained as a batch and saved as each finishes
    (:meth:`train`), and under a time budget whether another round fits (:meth:`affordable`) and
    when the runs will end (:meth:`forecast`). ``reuse``: whose runs it reused (kept in the file:
    a resumed search says so too); ``cfgs``: the first round's training configurations (one per
    calibration seed); ``extra``: those of the later rounds."""

    def __init__(self, config: Any, run: RunDir, display: Progress, budget: Budget | None, cached: Mapping) -> None:
        self.config, self.run, self.display, self.budget = config, run, display, budget
        self.runs: dict[str, Any] = dict(cached.get("runs", {}))
        self.reuse: dict[str, Any] = dict(cached.get("reused") or {})
        self.cfgs = [calibration_train_config(config, i) for i in range(config.calibration_seeds)]
        self.extra = [
            calibration_train_config(config, i)
            for i in range(
                config.calibration_seeds,
                config.calibration_seeds + max(config.base_extra_seeds, config.transfer_extra_seeds),
            )
        ]

    def key(self, stage: str, label: str, cfg: Any) -> str:
        return _key(stage, label, cfg, self.config.train.epochs)

    def train(self, stage: str, plan: Sequence[tuple[str, Any, Any]], what: str) -> dict[str, list[dict[str, Any]]]:
        """Every ``(label, policy, seed's config)`` run of ``plan`` not saved yet, in one batch (as
        many at once as the cluster runs, in this order); each label's runs, in the plan's order."""
        todo = [(self.key(stage, label, c), policy, c) for label, policy, c in plan]
        missing = sum(1 for k, _, _ in todo if k not in self.runs)
        if missing:
            k = proxy_runs.run_pack(self.config)
            packs = f", in packs of up to {k}" if k > 1 else ""
            epochs = calibration_epochs(self.config)
            self.display.log(f"calibration: {what}: {missing} proxy run(s) of {epochs} epochs{packs}")
            self.forecast(missing)
        self.runs.update(
            proxy_runs.train_runs(todo, self.config, cached=self.runs, save=self._save, task_name="autoaug-calibrate")
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for label, _, c in plan:
            out.setdefault(label, []).append(self.runs[self.key(stage, label, c)])
        return out

    def _save(self, results: Mapping[str, Any]) -> None:
        """Say each newly finished run and save them all in ``calibration.json``."""
        for key in [k for k in results if k not in self.runs]:
            r = results[key]
            self.display.log(f"calibration: {key}: {METRIC} {r[METRIC]:.4f} ({r.get('train_time_s') or 0:.0f} s)")
        self.runs.update(results)
        reuse = self.reuse
        self.run.write_json(CALIBRATION_FILE, {"runs": self.runs, **({"reused": reuse} if reuse.get("runs") else {})})
        failpoints.hit("calibrate.after_run_saved")

    def pace(self) -> tuple[float, int] | None:
        """Under a time budget, a proxy run's time as measured so far and how many run at once
        (None: no budget, or no run measured yet)."""
        if self.budget is None:
            return None
        run_s = measured_run_s(self.runs)
        return None if run_s is None else (run_s, proxy_runs.parallel_runs(self.config))

    def affordable(self, stage: str, labels: Sequence[str], cfg: Any) -> bool:
        """Whether another round of a race fits in the calibration's share of the time budget,
        with what must follow it: a round of the bases' race leaves room for the published
        policies' first round (their choice cannot be made without it)."""
        config, budget = self.config, self.budget
        missing = [label for label in labels if self.key(stage, label, cfg) not in self.runs]
        measured = self.pace() if missing else None
        if measured is None:
            return True
        run_s, slots = measured
        after = 0
        if stage == "base" and config.warm_start == AUTO:
            after = _first_round_runs(len(TRANSFER_REFS), self.cfgs, self.extra[: config.transfer_extra_seeds])
        waves = math.ceil(len(missing) / slots) + math.ceil(after / slots)
        return budget.spent_s() + waves * run_s <= CALIBRATION_SHARE * budget.total_s

    def forecast(self, missing: int) -> None:
        """Say, before ``missing`` runs start, when they will end if that is past the time budget
        or leaves less than re-scoring and storing need (the budget's plan of them, with runs as
        long as calibration's): the budget does not cut calibration, so the trials will have little
        or no time -- better known now than at the end. (A later round runs only within a third of
        the budget.)"""
        budget = self.budget
        measured = self.pace()
        if measured is None:
            return
        run_s, slots = measured
        ends = budget.spent_s() + math.ceil(missing / slots) * run_s
        need = budget.reserve_s(run_s)
        if ends + need <= budget.total_s:
            return
        if ends > budget.total_s:
            when = " (which does not cut calibration), leaving the trials little or no time"
        else:
            when = (
                f", leaving {format_duration(budget.total_s - ends)}, less than trials and re-scoring need (about "
                f"{format_duration(need)}): no trial will run, the published policy that transferred best will be "
                "stored"
            )
        self.display.log(
            f"calibration: {missing} runs of about {format_duration(run_s)}, {slots} at once: it will end at "
            f"about {format_duration(ends)} of the {format_duration(budget.total_s)} time budget{when}; "
            f"{next_search(self.config.name, ends)}"
        )


def _reuse_base_runs(calibration: _CalibrationRuns) -> CalibrationSource:
    """``--calibration-from``: the earlier search's calibration (:func:`calibration_source`), its
    bases' runs taken as this one's (with ``base: auto``) and said in one line."""
    config, run = calibration.config, calibration.run
    source = calibration_source(config, RunState.from_dict(run.read_json(CONFIG_FILE)).data)
    reused = {k: v for k, v in source.runs.items() if k.startswith("base:") and config.base == AUTO}
    calibration.runs.update(reused)
    calibration.reuse = {"search": source.name, "runs": len(reused)}
    calibration.display.log(
        f"calibration: reusing the runs of search {source.name!r} (same data, split and proxy): "
        f"nothing it measured is trained again"
    )
    return source


def _base_stage(calibration: _CalibrationRuns, record: dict[str, Any], made: Mapping[str, Any]) -> str | None:
    """The base (``base: auto``): the one an ended calibration chose (``made``, its record), else the
    bases' race (:func:`_race`, :func:`choose_base`); kept in ``record["base"]``, with the extra
    seeds that ran (``base_extra_seeds``). None: the configuration gives its base."""
    config = calibration.config
    if config.base == AUTO and made.get("base"):
        record["base"] = made["base"]
        if "base_extra_seeds" in made:
            record["base_extra_seeds"] = made["base_extra_seeds"]
        return record["base"]["chosen"]
    if config.base != AUTO:
        return None
    strength = {b: i for i, b in enumerate(BASE_STRENGTH)}
    bases = {b: presets.resolve(b) for b in sorted(BASE_NAMES, key=lambda b: strength.get(b, len(strength)))}
    extra = calibration.extra[: config.base_extra_seeds]
    decision, rounds = _race(
        calibration.train,
        "base",
        bases,
        "each base alone",
        choose_base,
        calibration.cfgs,
        extra,
        calibration.affordable,
    )
    record["base"] = decision if not rounds else {**decision, "rounds": rounds}
    more = sorted({c.seed for c in extra for b in bases if calibration.key("base", b, c) in calibration.runs})
    if more:
        record["base_extra_seeds"] = more
    return record["base"]["chosen"]


def _reuse_transfer_runs(calibration: _CalibrationRuns, source: CalibrationSource | None, base: str) -> None:
    """``--calibration-from``: the earlier search's runs of the published policies taken as this
    one's when they ran on ``base``, the chosen one; otherwise said in one line (with
    ``warm_start: auto`` they are measured here)."""
    if source is not None and source.transfer_base == base:  # their published policies ran on it
        transfer_runs = {k: v for k, v in source.runs.items() if k.startswith("transfer:")}
        calibration.runs.update(transfer_runs)
        calibration.reuse["runs"] += len(transfer_runs)
    elif source is not None and calibration.config.warm_start == AUTO:
        calibration.display.log(
            f"calibration: search {source.name!r} ran the published policies on base {source.transfer_base}, "
            f"not {base}: they are measured here"
        )


def _transfer_stage(
    calibration: _CalibrationRuns,
    record: dict[str, Any],
    made: Mapping[str, Any],
    base: str,
    families: Sequence[str],
) -> tuple[str, ...] | None:
    """The warm start (``warm_start: auto``): the one an ended calibration chose on ``base``
    (``made``, its record), else the published policies' race on ``base`` (:func:`_race`,
    :func:`rank_transfer`; with ``families``, ``family: auto``'s, each a point of its own family
    among them); kept in ``record["transfer"]``. None: the configuration gives its warm start."""
    config = calibration.config
    if config.warm_start == AUTO and (made.get("transfer") or {}).get("base") == base:
        record["transfer"] = made["transfer"]
        return tuple(record["transfer"]["warm_start"])
    if config.warm_start != AUTO:
        return None
    auto_family = bool(families)
    space = dataclasses.replace(config.space, base=base)
    policies = {ref: presets.resolve(ref).with_base(base) for ref in TRANSFER_REFS}
    fits: dict[str, str | None] = {}
    for ref in TRANSFER_REFS:
        own = TRANSFER_FAMILY[ref]
        if auto_family and own not in families:
            fits[ref] = f"its family, {own}, is not one search method {config.method} searches"
            continue
        try:  # family auto: each in its own family
            warm_start_policies([ref], space.with_family(own) if auto_family else space)
            fits[ref] = None
        except ValueError as exc:
            fits[ref] = str(exc).split(": ", 1)[-1]
    decision, rounds = _race(
        calibration.train,
        "transfer",
        policies,
        f"the published policies on base {base}",
        lambda r: rank_transfer(r, fits),
        calibration.cfgs,
        calibration.extra[: config.transfer_extra_seeds],
        calibration.affordable,
    )
    record["transfer"] = {"base": base, **decision, **({"rounds": rounds} if rounds else {})}
    if auto_family:
        chosen = decision["warm_start"]
        record["transfer"]["family"] = TRANSFER_FAMILY[chosen[0]] if chosen else config.space.family
    return tuple(record["transfer"]["warm_start"])


def transfer_candidate(
    record: Mapping[str, Any] | None, name: str, runs: Mapping[str, Any] | None = None, config: Any = None
) -> Any:
    """The published policy that transferred best, on the base it was measured on and named
    ``name``, as a final candidate of re-scoring (kind ``"transfer"``): so a search never stores
    a policy that re-scores below the best published one, and says so when none of its own does
    better. None when the calibration scored no published policy.

    With ``runs`` (the calibration's, :attr:`Calibration.runs`) and the search's ``config``: when
    the calibration ran the trials' schedule and re-scoring validates on the images calibration
    did (no ``rescore_val_size``), a calibration run of it is a re-scoring run with another seed,
    so its runs are the candidate's (:attr:`autoaug.search.decide.rescore.Candidate.runs`): re-scoring
    does not train it again, and it competes whatever the time budget leaves of re-scoring. (They
    are the runs that made it the best of the published policies, so its mean is, if anything,
    high: the search's own candidates are compared against a bar a little above it.)"""
    transfer = (record or {}).get("transfer")
    if not transfer:
        return None
    published = presets.resolve(transfer["best"]).with_base(transfer["base"])
    policy = Policy(name, published.num_magnitude_bins, published.sub_policies, published.base, published.ranges)
    measured: tuple[Mapping[str, Any], ...] = ()
    if runs and config is not None and record.get("epochs") == config.train.epochs and config.rescore_val_size is None:
        prefix = f"transfer:{transfer['best']}/seed="
        measured = tuple(runs[k] for k in sorted(runs) if k.startswith(prefix) and "/epochs=" not in k)
    return Candidate("transfer", policy, (), None, measured)
