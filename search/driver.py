"""The story of a search, from a configuration to a stored policy -- the same for every method.

::

    from autoaug.search.config import SearchConfig
    from autoaug.search.driver import run_search, resume_search

    config = SearchConfig.from_preset("cpu", name="cifar10-r8", data="train.parquet")
    outcome = run_search(config)                     # embedded local Ray, or address="ray://..."
    print(outcome.policy.table(), outcome.reference)  # e.g. cifar10-r8@1
    outcome = resume_search("cifar10-r8")            # after the driver was killed or interrupted

In order (each step below is one function of this module):

1. **Check** (:func:`run_search`): the configuration (shared checks, then the method's own), the
   store and the name, an existing run of the same name, the data (dataset and split
   fingerprints: this also decodes it) -- all before Ray starts. The run directory
   ``{storage}/{name}`` receives ``search_config.json`` (:class:`~autoaug.search.run_dir.RunState`).
   :func:`resume_search` reads it back instead and returns a finished search's outcome as it is.
2. **The method** (:func:`_search`): inside the Ray session (embedded, or a cluster) the method
   (:data:`autoaug.search.config.METHODS`, :mod:`autoaug.search.methods.base`: the methods of the
   ``autoaug.methods`` entry-point group) scores candidates, resuming from what earlier
   sessions left, and returns its trials, the assembled policy and the final candidates.
3. **Re-scoring** (:func:`_rescore`): with ``SearchConfig.rescore`` and more than one candidate,
   each is trained again under the proxy with fresh seeds (:mod:`autoaug.search.decide.rescore`), every
   finished run saved in ``rescore.json``.
4. **Choosing, storing, the result** (:func:`_store`): the best re-scored candidate (or the
   method's first), the provenance (configuration, data, every trial, Optuna, timing, the
   method's own record, the selection, the time budget), ``PolicyStore.save`` and
   ``result.json``. The outcome (:class:`~autoaug.search.records.SearchOutcome`) is rebuilt from
   that file, so a finished search and a resumed finished search answer the same.

With ``SearchConfig.time_budget_s`` all of it runs under one clock (:mod:`autoaug.search.budget`):
the method's trials stop when what is left is what re-scoring and storing need, re-scoring keeps
to what is left, and a resumed search continues with the time its earlier sessions left.

For Ray Tune, Optuna and their consistency across a driver crash see
:mod:`autoaug.search.tune.experiment` and :mod:`autoaug.search.tune.searcher`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from autoaug.core import ray_session
from autoaug.core.errors import RunExistsError, SearchError, UserInputError
from autoaug.core.progress import Progress
from autoaug.policies.schedule import PROVENANCE_KEY as SCHEDULE_KEY
from autoaug.policies.store import PolicyStore
from autoaug.proxy_models import train_config
from autoaug.search.budget import STORE_RESERVE_S, Budget, format_duration, measured_run_s
from autoaug.search.config import SearchConfig
from autoaug.search.decide import op_effects, proxy_runs, rescore
from autoaug.search.decide.assemble import AssembledPolicy, build_provenance
from autoaug.search.decide.calibrate import (
    AUTO,
    CALIBRATION_FILE,
    calibrate,
    calibration_source,
    next_search,
    transfer_candidate,
)
from autoaug.search.decide.rescore import (
    RACE_RESERVED_SEEDS,
    RESCORE_FILE,
    candidate_scores,
    choose,
    missing_runs,
    rescore_candidates,
)
from autoaug.search.methods.base import MethodResult, PreparedSearch, interrupted, no_study, resume_hint
from autoaug.search.records import SearchOutcome, describe_data, outcome_from_result
from autoaug.search.run_dir import CONFIG_FILE, RESULT_FILE, RunDir, RunState, default_runs_root
from autoaug.search.score import METRIC, MODE
from autoaug.search.tune.experiment import tune_output
from autoaug.search.tune.study import check_studies, delete_study, redact, run_study_url
from autoaug.search.tune.tune_storage import storage_failure

__all__ = ["run_search", "resume_search", "SearchOutcome"]


def run_search(
    config: SearchConfig,
    *,
    address: str | None = None,
    session: Callable[[], Any] | None = None,
    overwrite: bool = False,
    trainable: Callable | None = None,
    display: Progress | None = None,
) -> SearchOutcome:
    """Run the search ``config`` to completion and store the final policy.

    Args:
        config: the search.
        address: Ray cluster to connect to (``ray://host:10001``, ``auto``); None starts an
            embedded local Ray (no dashboard). Ignored when Ray is already initialized. The
            connection is :func:`autoaug.core.ray_session.ray_session`'s.
        session: a function returning a context manager that connects Ray for the search (used
            instead of the default ``ray_session(address)``, e.g. one that also prints what it
            joined); it is entered only after the configuration and the data were checked.
        overwrite: delete an existing run directory (and its study) of the same name first.
        trainable: replaces the method's trial function (the training method's
            :func:`autoaug.search.methods.train.trial.run_trial`, same signature), e.g. for another trainer.
        display: the :class:`autoaug.core.progress.Progress` the progress goes to (bars on a
            terminal); None: plain lines on stdout when ``config.verbose >= 1``, else nothing.

    Raises:
        ValueError: bad configuration or data (before Ray starts; an
            :class:`autoaug.core.errors.UserInputError` or ``DataError``).
        ClusterError: Ray could not be started or reached.
        RunExistsError: the run directory exists and ``overwrite`` is false.
        SearchFailedError: every trial failed (the message shows the first error).
        SearchInterruptedError: interrupted before all trials finished (resume it).
    """
    started = time.time()
    # Sized to the data (a split per class becomes a total, an automatic image size the data's):
    # what the trials train, what the run records and what a resume reads back.
    if config.train.data is not None:  # (no data: check_runnable says so)
        config = config.replace(train=train_config.resolve_config(config.train))
    config = config.with_warm_start_family()
    config.check_runnable()
    run = RunDir(config.storage, config.name)
    _check_store(config)
    if run.exists() and not overwrite:
        state = "finished" if run.exists(RESULT_FILE) else "unfinished"
        hint = "" if state == "finished" else f"resume it with --resume {config.name}, or "
        raise RunExistsError(
            f"a search named {config.name!r} already exists in {config.storage} ({state}); "
            f"{hint}choose another --name, or pass --overwrite to start it again"
        )
    studies = config.search_method.study_names(config)
    if config.optuna_storage:  # a database other searches may share (the default SQLite file is the run's)
        check_studies(config.optuna_storage, studies, run.uri, own_ok=overwrite)
    data = describe_data(config.train)
    calibration_source(config, data)  # another search's calibration to reuse: checked before any work
    if overwrite:  # and everything checked
        for study in studies if config.optuna_storage else ():
            delete_study(study, config.optuna_storage, run_uri=run.uri)  # its own only
        if run.exists():
            run.delete()
    study_url = run_study_url(config, run)
    state = RunState.new(config.to_dict(), data, study_url, address=address, started=started)
    run.write_json(CONFIG_FILE, state.to_dict())
    try:
        return _search(
            config, run, state, session=session, address=address, trainable=trainable, display=display, started=started
        )
    except _NeverStarts:
        run.delete()  # refused before any work: no run to resume, and the name stays free
        raise


def resume_search(
    name: str,
    storage: str | None = None,
    *,
    address: str | None = None,
    store: str | None = None,
    resume_errored: bool = False,
    session: Callable[[], Any] | None = None,
    trainable: Callable | None = None,
    display: Progress | None = None,
) -> SearchOutcome:
    """Continue the search ``name`` in ``storage`` (default runs root) after its driver stopped.

    The method continues where the run directory says it stopped (for the training method:
    unfinished trials from their latest checkpoints, then the remaining trials), and the result
    is re-scored, chosen and stored as in :func:`run_search`. A search that already finished is
    not run again: its stored outcome is returned. A search with a time budget continues with what
    its earlier driver sessions left of it (:mod:`autoaug.search.budget`). ``resume_errored`` also
    retries trials that had failed. ``store`` overrides the policy store of the original configuration;
    ``address``/``session``/``trainable``/``display`` as in :func:`run_search`.
    """
    started = time.time()
    run = RunDir(storage or default_runs_root(), name)
    if not run.exists(CONFIG_FILE):
        raise UserInputError(
            f"no search named {name!r} in {run.storage} (no {CONFIG_FILE} in {run.uri}); "
            "check --name/--resume and --storage"
        )
    state = RunState.from_dict(run.read_json(CONFIG_FILE))
    config = SearchConfig.from_dict(state.config)
    if store is not None:
        config = config.replace(store=store)
    _check_store(config)
    if run.exists(RESULT_FILE):
        return outcome_from_result(run.read_json(RESULT_FILE), run)
    if config.optuna_storage:  # reachable, and its studies still this search's
        check_studies(
            config.optuna_storage, config.search_method.study_names(config), run.uri, own_ok=True, resuming=True
        )
    if not config.search_method.can_resume(run) and not run.exists(CALIBRATION_FILE):  # (killed in calibration)
        raise SearchError(
            f"the search {name!r} stopped before Ray Tune saved any state in {run.uri}; nothing to "
            f"resume: start it again with --overwrite"
        )
    state = state.resumed(address)
    run.write_json(CONFIG_FILE, state.to_dict())
    return _search(
        config,
        run,
        state,
        session=session,
        address=address,
        trainable=trainable,
        display=display,
        started=started,
        resume_errored=resume_errored,
    )


def _search(
    config: SearchConfig,
    run: RunDir,
    state: RunState,
    *,
    session: Callable[[], Any] | None,
    address: str | None,
    trainable: Callable | None,
    display: Progress | None,
    started: float,
    resume_errored: bool = False,
) -> SearchOutcome:
    """The method, then re-scoring (both inside the Ray session), then choosing and storing; a full
    or read-only filesystem on the way is one line that says how to resume."""
    with _resumable(config, run):
        display = _display(display, config.verbose)
        budget = None
        if config.time_budget_s is not None:
            budget = Budget.open(
                run, config.time_budget_s, session=state.session_label, started=started, say=display.log
            )
            display.log(budget.describe_start())
        with contextlib.nullcontext() if budget is None else budget.running():  # its clock saved as it runs
            with tune_output(config.verbose), _session(session, address, config.verbose) as info:
                _check_resources(config, info, display)
                from autoaug.search.tune.pack import resolve_pack  # (torch's import: when a search runs)

                config = resolve_pack(config, display.log)  # pack "auto": measured once, for every run
                if budget is not None:  # what re-scoring will need, known to calibration's forecast
                    _plan_rescore(config, run, budget, before_calibration=True)
                calibration = calibrate(config, run, display, budget)  # base / warm start "auto": measured first
                if calibration is not None:
                    config = calibration.apply(config)
                transfer = None
                if calibration is not None and config.rescore:  # the best published policy competes too
                    transfer = transfer_candidate(calibration.record, config.name, calibration.runs, config)
                if budget is not None:
                    _plan_rescore(config, run, budget, transfer=transfer)
                search = PreparedSearch(
                    config=config,
                    run=run,
                    state=state,
                    display=display,
                    trainable=trainable,
                    resume_errored=resume_errored,
                    budget=budget,
                )
                if _no_time_for_trials(config, run, budget, transfer):
                    found = _transfer_only(config, transfer, calibration.record, budget, display)
                    scores, race = None, None
                else:
                    found = config.search_method.run(search)
                    if transfer is not None:
                        found = dataclasses.replace(found, candidates=with_transfer(found.candidates, transfer))
                    scores, race = _rescore(
                        config,
                        run,
                        found,
                        display,
                        budget,
                        calibration=None if calibration is None else calibration.record,
                    )
            return _store(
                config,
                run,
                state,
                found,
                scores,
                started=started,
                calibration=None if calibration is None else calibration.record,
                budget=budget,
                race=race,
            )


@contextlib.contextmanager
def _resumable(config: SearchConfig, run: RunDir) -> Iterator[None]:
    """A full or read-only filesystem (what Tune or the driver raised) as one line that says how to
    resume: what is saved is kept, and the search resumes."""
    try:
        yield
    except Exception as exc:
        error = storage_failure(exc, run.uri, resume_hint(config))
        if error is None:
            raise
        raise error from None


def _plan_rescore(
    config: SearchConfig, run: RunDir, budget: Budget, *, transfer: Any = None, before_calibration: bool = False
) -> None:
    """Tell ``budget`` what re-scoring will need (the runs of the most candidates the method can
    return, and of the ``transfer`` candidate unless calibration measured it, as many at once as
    the cluster runs), so that trials stop in time for it. ``before_calibration``: planned before
    calibration runs (for its forecast, :func:`autoaug.search.decide.calibrate.calibrate`), with the
    published policy that will transfer best competing, measured by its calibration runs, when
    calibration measures the published policies (``--warm-start auto``); planned again after it."""
    method = config.search_method
    own = method.max_candidates(config)
    calibrated = before_calibration and config.warm_start == AUTO  # calibration will measure the transfer
    competes = transfer is not None or calibrated
    warm_measured = calibrated or (transfer is not None and bool(transfer.runs))
    # Before calibration chooses the family (--space auto), the fewest runs any family needs: the
    # forecast then says "no trial will run" only where none will.
    configs = (
        [config.replace(family=f) for f in method.space_families] if calibrated and config.family == AUTO else [config]
    )
    trained = min(method.candidates_to_train(c, warm_start_measured=warm_measured) for c in configs)
    trained += transfer is not None and not transfer.runs
    runs = trained * config.rescore_seeds if config.rescore and own + competes >= 2 else 0
    measured = {}
    for name in (RESCORE_FILE, CALIBRATION_FILE):  # proxy runs of this search, measured
        if run.exists(name):
            saved = run.read_json(name)
            measured.update(saved.get("runs", {}) if name == CALIBRATION_FILE else saved)
    slots = proxy_runs.parallel_runs(config) if runs else 1
    # The race's rounds (config.rescore_max_seeds), one after the other, up to RACE_RESERVED_SEEDS
    # runs per contender, each round kept from the trials as one wave of runs (two runs on one
    # slot): the leader and its nearest challengers, as many as run at once. A round with more
    # candidates within the noise runs them all where the time left fits, else the leader's
    # nearest first (rescore.race); later rounds run on the time the trials leave. (Not a run for
    # every candidate that may contend, up to 5: where runs are long that leaves the trials next
    # to nothing for rounds the race seldom needs: benchmarks/results/budget-rungs-gtsrb.)
    reserved = max(0, min(config.race_seeds, RACE_RESERVED_SEEDS) - config.rescore_seeds)
    contenders = min(trained + (competes and warm_measured), max(2, slots))
    waves = reserved * math.ceil(contenders / slots) if contenders >= 2 else 0
    budget.plan_rescore(
        runs,
        slots,
        measured_run_s(measured, config.train.epochs),
        config.epochs,
        waves,
        race_rounds=reserved,
        contenders=contenders,
    )


def _no_time_for_trials(config: SearchConfig, run: RunDir, budget: Budget | None, transfer: Any) -> bool:
    """Whether calibration left the trials no time: the budget's time for trials is gone
    (:meth:`Budget.expired`) before any trial ran, and calibration measured the published policy
    that transferred best, a result the search can store. Trials would only be stopped at their
    first report (an epoch whose ranking says nothing of the last: docs/search.md) with no time
    to re-score what they found. A search whose trials started (an earlier driver session's Tune
    state) goes on with them; one that decided this before (the budget's record) decides it again."""
    if budget is None or transfer is None or not transfer.runs:
        return False
    if budget.ended is not None:
        return budget.ended.get("stage") == "calibration"
    return not config.search_method.can_resume(run) and budget.expired()


def _transfer_only(
    config: SearchConfig, transfer: Any, calibration: dict, budget: Budget, display: Progress
) -> MethodResult:
    """The search's result when calibration left no time for trials: no trial, and the
    ``transfer`` candidate (the published policy that transferred best), stored as calibration
    measured it (nothing is re-scored: its runs are in the calibration record)."""
    planned = config.search_method.num_trials(config)
    spent, left = budget.spent_s(), max(budget.remaining_s(), 0.0)
    published = calibration["transfer"]
    score = published["scores"][published["best"]]  # what calibration recorded of it
    runs = len(score["runs"])
    measured = f"{100 * score['mean']:.2f}% over {runs} run{'s' if runs > 1 else ''}"
    note = (
        f"calibration ended at {format_duration(spent)} of the {format_duration(budget.total_s)} budget, leaving "
        f"{format_duration(left)}, less than trials and re-scoring need (about {format_duration(budget.reserve_s())}): "
        f"none of the {planned} {config.search_method.unit} ran; stored {published['best']} on {published['base']}, "
        f"the published policy that transferred best, as calibration measured it ({measured}); "
        f"{next_search(config.name, spent)}"
    )
    display.log(f"time budget: {note}")
    budget.end("calibration", note=note)
    return MethodResult(
        trials=(),
        assembled=AssembledPolicy(transfer.policy, (), 0, (), rule="transfer"),
        candidates=[transfer],
        optuna=no_study("no trial ran: calibration used the time budget"),
    )


def rescoring_text(config: SearchConfig) -> str:
    """How a candidate is re-scored, in words: ``120 epochs, 1 fresh seed, 5,000 validation images``
    (or ``the rest validate (at most 10,000)`` where the split sizes validation by what is left;
    with packs, ``in packs of up to 8``)."""
    seeds = f"{config.rescore_seeds} fresh seed{'s' if config.rescore_seeds > 1 else ''}"
    k = proxy_runs.run_pack(config)
    packs = f"in packs of up to {k}" if k > 1 else ""
    parts = (f"{config.epochs} epochs", seeds, config.rescore_train_config().describe_val(), packs)
    return ", ".join(p for p in parts if p)


def _rescore(
    config: SearchConfig,
    run: RunDir,
    found: MethodResult,
    display: Progress,
    budget: Budget | None = None,
    *,
    calibration: dict | None = None,
) -> tuple[dict | None, dict | None]:
    """With ``config.rescore`` and more than one candidate: train each candidate under the proxy
    (``rescore_seeds`` fresh seeds), saving the runs in the run directory; their mean scores. A
    candidate measured already (the transfer, by its calibration runs: ``Candidate.runs``) is not
    trained again. Under a time budget only the candidates whose runs fit in the time left
    (:func:`_within_budget`), and the measured ones: with none of the others, those are stored.
    Then, with ``config.rescore_max_seeds``, the race (:func:`_race`) gives the candidates within
    the noise of the leader more runs. Returns the scores (None: nothing to choose from) and the
    race's record (None: no race)."""
    candidates = found.candidates
    if not config.rescore or len(candidates) < 2:
        return None, None
    cached = run.read_json(RESCORE_FILE) if run.exists(RESCORE_FILE) else {}
    deadline = None
    if budget is not None:
        candidates, deadline = _within_budget(config, run, found, cached, budget, display)
        if len(candidates) < 2 and not any(c.runs for c in candidates):
            return None, None  # (the transfer measured in calibration alone: it is stored)
    if len(candidate_scores(candidates, config, cached)) < len(candidates):
        what = ", ".join(f"{c.kind} ({len(c.policy.sub_policies)} sub-policies)" for c in candidates if not c.runs)
        what += "".join(
            f"; {c.kind}: its {len(c.runs)} calibration run{'s' if len(c.runs) > 1 else ''}, not trained again"
            for c in candidates
            if c.runs
        )
        display.log(f"re-scoring the final candidates under the proxy ({rescoring_text(config)}): {what}")
    runs = rescore_candidates(
        candidates,
        config,
        cached=cached,
        save=lambda results: run.write_json(RESCORE_FILE, results),
        deadline=deadline,
    )
    scores = candidate_scores(candidates, config, runs)
    if not all(c.key in scores for c in candidates):
        if budget is None or budget.remaining_s() > STORE_RESERVE_S:  # not the budget's deadline
            raise interrupted(config, "before its final policy was re-scored")
        return _cut_rescore(candidates, scores, budget, display), None
    record = None
    if config.race_seeds > config.rescore_seeds and len(candidates) >= 2:
        counts, runs, record = _race(config, run, candidates, runs, display, budget, deadline, calibration)
        scores = candidate_scores(candidates, config, runs, counts)
    display.log(
        f"re-scored ({METRIC}, mean of each candidate's runs): "
        + ", ".join(
            f"{c.kind} {scores[c.key][METRIC]:.4f} ({len(scores[c.key]['runs'])}"
            f"{', calibration runs among them' if c.runs else ''})"
            for c in candidates
        )
    )
    return scores, record


def _race(
    config: SearchConfig,
    run: RunDir,
    candidates: list,
    runs: dict,
    display: Progress,
    budget: Budget | None,
    deadline: float | None,
    calibration: dict | None,
) -> tuple[dict, dict, dict]:
    """The re-scoring race (:func:`autoaug.search.decide.rescore.race`) on the cluster: each
    round's runs in parallel, saved in ``rescore.json`` as they finish; under a time budget a
    round starts only when its runs fit in the time left (a measured run's length, as many at
    once as the cluster runs), and the budget's deadline cancels what does not finish."""

    rounds = 0

    def train(more: list, counts: dict, saved: dict) -> dict:
        nonlocal rounds
        rounds += 1
        return rescore_candidates(
            more,
            config,
            cached=saved,
            save=lambda results: run.write_json(RESCORE_FILE, results),
            deadline=deadline,
            counts=counts,
        )

    fits = None
    if budget is not None:
        slots = proxy_runs.parallel_runs(config)
        plan = budget.race or {}
        wave = math.ceil(int(plan.get("contenders") or 2) / slots)  # the waves of a round the budget kept

        def fits(n: int) -> bool:
            """``n`` runs fit in the time left -- with, for a round larger than the budget kept,
            the waves of the rounds it kept still to come (a round for every contender within the
            noise does not take the rounds promised to the leader and its nearest challengers)."""
            run_s = measured_run_s(runs, config.train.epochs) or budget.run_s()
            if run_s is None:
                return True
            waves = math.ceil(n / slots)
            if waves > wave:
                waves += wave * max(0, int(plan.get("reserved_rounds") or 0) - rounds - 1)
            return waves * run_s <= budget.remaining_s() - STORE_RESERVE_S

    counts, runs, record = rescore.race(
        candidates, config, runs, train=train, calibration=calibration, fits=fits, say=display.log
    )
    if budget is not None:
        budget.race_ran(record)
        kept = (budget.race or {}).get("reserved_rounds")
        if record["ended"] == "budget":
            display.log(
                f"time budget: the re-scoring race stopped after {len(record['rounds'])} round(s)"
                + (f" ({kept} kept from the trials)" if kept else "")
                + ": the next did not fit in the time left"
            )
    return counts, runs, record


def _within_budget(
    config: SearchConfig, run: RunDir, found: MethodResult, cached: dict, budget: Budget, display: Progress
) -> tuple[list, float]:
    """The candidates re-scoring has time for -- the first ones, in the method's order, whose runs
    not yet done fit in the time left less what storing needs, in waves of as many runs as the
    cluster runs at once, each as long as a measured proxy run -- and the deadline of their runs.
    Says what it leaves out (and records it in the budget)."""
    candidates = list(found.candidates)
    measured = [c for c in candidates if c.runs]  # (the transfer, from calibration) compete whatever is left
    trained = [c for c in candidates if not c.runs]
    left = budget.remaining_s() - STORE_RESERVE_S
    deadline = time.time() + max(left, 0.0)
    run_s = (
        measured_run_s({**(cached or {}), **_trial_runs(found.trials, config)})
        if budget.run_s() is None
        else budget.run_s()
    )
    if run_s is None:  # nothing measured: try them all, the deadline stops what does not fit
        return candidates, deadline
    slots = proxy_runs.parallel_runs(config)
    fits = len(trained)
    while fits > 0 and math.ceil(missing_runs(trained[:fits], config, cached) / slots) * run_s > left:
        fits -= 1
    if fits == len(trained):
        return candidates, deadline
    kept = [c for c in candidates if c.runs or c in trained[:fits]]
    what = (
        f"{format_duration(max(left, 0.0))} left for re-scoring runs of about {format_duration(run_s)} "
        f"({slots} at once)"
    )
    also = f" and {', '.join(c.kind for c in measured)} (measured in calibration)" if measured else ""
    if len(kept) >= 2 and fits:
        note = (
            f"re-scored the first {fits} of {len(trained)} candidates "
            f"({', '.join(c.kind for c in trained[:fits])}){also}: {what}"
        )
    elif measured:
        note = (
            f"the search's own candidates not re-scored ({len(trained)}): {what}; "
            f"stored {measured[0].kind}, the best published policy, as measured in calibration"
        )
    else:
        note = (
            f"not re-scored ({len(candidates)} candidates): {what}; stored the method's first candidate, "
            f"{candidates[0].kind}"
        )
    _budget_cut(budget, display, note, len(candidates), len(kept) if fits else 0)
    return kept, deadline


def with_transfer(candidates: list, transfer: Any) -> list:
    """The method's candidates and the ``transfer`` candidate (the published policy that
    transferred best), last; a candidate that is that very policy (a family search's warm start)
    competes as the transfer, once, in its place."""
    same = [c for c in candidates if c.policy.content_hash == transfer.policy.content_hash]
    rest = [c for c in candidates if c not in same]
    if not same or not rest:  # (nothing of its own but that policy: both compete)
        return [*candidates, transfer]
    first = candidates.index(same[0])  # in its place: a budget that cuts re-scoring keeps it as long
    return [
        *[c for c in candidates[:first] if c not in same],
        transfer,
        *[c for c in candidates[first:] if c not in same],
    ]


def _trial_runs(trials: Any, config: SearchConfig) -> dict:
    """The trials that trained every epoch, as measured proxy runs (their training time)."""
    return {
        t.trial_id: {"train_time_s": t.train_time_s}
        for t in trials
        if t.status == "completed" and t.train_time_s and t.epochs >= config.epochs
    }


def _cut_rescore(candidates: list, scores: dict, budget: Budget, display: Progress) -> dict | None:
    """Re-scoring stopped at the budget's deadline: the candidates with all their runs compete if
    there are two or more, else the method's first candidate is stored."""
    done = [c for c in candidates if c.key in scores]
    own = [c for c in done if not c.runs]
    if own and len(done) >= 2:
        note = (
            f"the budget ran out during re-scoring: {len(done)} of {len(candidates)} candidates re-scored "
            f"({', '.join(c.kind for c in done)}); the others were not"
        )
    elif any(c.runs for c in done):
        note = (
            f"the budget ran out during re-scoring, with none of the search's own candidates re-scored; "
            f"stored {done[0].kind}, the best published policy, as measured in calibration"
        )
    else:
        note = (
            f"the budget ran out during re-scoring, with {len(done)} of {len(candidates)} candidates re-scored; "
            f"stored the method's first candidate, {candidates[0].kind}"
        )
    _budget_cut(budget, display, note, len(candidates), len(done) if own else 0)
    return {c.key: scores[c.key] for c in done} if len(done) >= 2 or any(c.runs for c in done) else None


def _budget_cut(budget: Budget, display: Progress, note: str, candidates: int, rescored: int) -> None:
    """Say and record that the budget cut re-scoring (fewer than two re-scored: none compete)."""
    display.log(f"time budget: {note}")
    budget.rescore = {"candidates": candidates, "rescored": rescored if rescored >= 2 else 0, "note": note}
    budget.end("rescore")


def _shareable(config: dict[str, Any]) -> dict[str, Any]:
    """A search's configuration as the stored policy's provenance shows it: without the Optuna
    storage's password (the run directory's ``search_config.json`` keeps the URL, to resume)."""
    if config.get("optuna_storage"):
        config = {**config, "optuna_storage": redact(config["optuna_storage"])}
    return config


def _store(
    config: SearchConfig,
    run: RunDir,
    state: RunState,
    found: MethodResult,
    scores: dict | None,
    *,
    started: float,
    calibration: dict | None = None,
    budget: Budget | None = None,
    race: dict | None = None,
) -> SearchOutcome:
    """Choose the final policy, store it with its provenance and write ``result.json``.
    ``config`` is the configuration the method ran (base and warm start as calibrated)."""
    timing = state.timing(started, trial_train_time_s=sum(t.train_time_s or 0.0 for t in found.trials), **found.timing)
    provenance = build_provenance(
        search_config=_shareable(config.to_dict()),
        data=state.data,
        trials=found.trials,
        assembled=found.assembled,
        metric=METRIC,
        mode=MODE,
        run_dir=run.uri,
        optuna=found.optuna,
        timing=timing,
    )
    if found.provenance is not None:
        provenance["method"] = dict(found.provenance)
    if calibration is not None:
        provenance["calibration"] = calibration
    # What helps and hurts on this data, from the runs on the chosen base (search.decide.op_effects).
    provenance["op_effects"] = op_effects.from_provenance(provenance, config.train.epochs)
    if budget is not None:
        provenance["budget"] = _budget_record(config, found, budget)
    final = found.candidates[0].policy
    if scores is not None:
        chosen, provenance["selection"] = choose(found.candidates, scores, calibration, race)
        final = chosen.policy
    schedule = found.schedule
    if schedule is not None and schedule.final.content_hash == final.content_hash:
        # the schedule a user trains with, whose last stage is the stored policy (policies.schedule reads it)
        provenance[SCHEDULE_KEY] = {**schedule.to_dict(), "content_hash": schedule.content_hash}
    store = PolicyStore(config.store)
    version = store.save(final, config.name, metadata=provenance)
    result = {
        "policy": final.to_dict(),
        "policy_hash": final.content_hash,
        "stored": {"name": config.name, "version": version, "ref": f"{config.name}@{version}", "store": store.uri},
        "provenance": provenance,
    }
    run.write_json(RESULT_FILE, result)
    return outcome_from_result(result, run)


def _budget_record(config: SearchConfig, found: MethodResult, budget: Budget) -> dict:
    """The provenance's ``budget``: the clock, the sessions, what the budget ended, and the trials
    it left: how many of those planned were scored, stopped by it with a score, stopped by it with none
    (``not_started``: not started, or started and stopped before their first report)."""
    record = budget.record()
    trials = found.trials
    record["trials"] = {
        "unit": config.search_method.unit,
        "planned": config.search_method.num_trials(config),
        "scored": sum(1 for t in trials if t.succeeded),
        "stopped": sum(1 for t in trials if t.status == "budget_stopped" and t.score is not None),
        "not_started": sum(1 for t in trials if t.status == "budget_stopped" and t.score is None),
    }
    return record


class _NeverStarts(UserInputError):
    """No node of the local Ray can start a trial (raised before any work)."""


def _check_resources(config: SearchConfig, info: Any, display: Progress) -> None:
    """Refuse before any work a search whose trials (and calibration and re-scoring runs, which
    ask for the same) no node of the local Ray can start: they would wait forever. On a cluster,
    one line says so and the search goes on (an autoscaler may add such a node)."""
    short = ray_session.shortfall(config.cpus_per_trial, config.gpus_per_trial)
    if short is None:
        return
    what = f"each trial {short.text} ({info.describe() if info is not None else 'Ray'})"
    if info is not None and info.embedded:
        fix = (
            "lower --cpus-per-trial"
            if short.resource == "CPU"
            else "give --gpus-per-trial 0 with a CPU preset (--preset cpu), or --address a Ray cluster with GPUs"
        )
        raise _NeverStarts(f"{what}: it would never start; {fix}")
    display.log(f"warning: {what}: its trials wait until such a node joins (an autoscaler's, or `ray start`)")


def _session(session: Callable[[], Any] | None, address: str | None, verbose: int) -> Any:
    if session is not None:
        return session()
    return ray_session.ray_session(address, **ray_session.output_settings(verbose >= 2))


def _display(display: Progress | None, verbose: int) -> Progress:
    if display is not None:
        return display
    return Progress("plain" if verbose >= 1 else "quiet")


def _check_store(config: SearchConfig) -> None:
    try:
        PolicyStore(config.store)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None
