"""The story of a search, from a configuration to a stored policy -- the same for every method.

::

    from autoaug.search.config import SearchConfig
    from autoaug.search.tuner import run_search, resume_search

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
   (:data:`autoaug.search.config.METHODS`, :mod:`autoaug.search.method`) scores candidates --
   the training method trains the proxy once per candidate (:mod:`autoaug.search.train_method`),
   the density method evaluates fold models on augmented held-out folds
   (:mod:`autoaug.search.density`) -- resuming from what earlier sessions left, and returns its
   trials, the assembled policy and the final candidates.
3. **Re-scoring** (:func:`_rescore`): with ``SearchConfig.rescore`` and more than one candidate,
   each is trained again under the proxy with fresh seeds (:mod:`autoaug.search.rescore`), every
   finished run saved in ``rescore.json``.
4. **Choosing, storing, the result** (:func:`_store`): the best re-scored candidate (or the
   method's first), the provenance (configuration, data, every trial, Optuna, timing, the
   method's own record, the selection), ``PolicyStore.save`` and ``result.json``. The outcome
   (:class:`~autoaug.search.records.SearchOutcome`) is rebuilt from that file, so a finished
   search and a resumed finished search answer the same.

For Ray Tune, Optuna and their consistency across a driver crash see
:mod:`autoaug.search.experiment` and :mod:`autoaug.search.reconcile`.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from autoaug.core.errors import RunExistsError, SearchError, SearchInterruptedError, UserInputError
from autoaug.search.assemble import build_provenance
from autoaug.search.config import SearchConfig
from autoaug.search.method import MethodResult, PreparedSearch, resume_hint
from autoaug.search.records import SearchOutcome, describe_data, outcome_from_result
from autoaug.search.rescore import RESCORE_FILE, candidate_scores, choose, rescore_candidates
from autoaug.search.run_dir import CONFIG_FILE, RESULT_FILE, RunDir, RunState, default_runs_root
from autoaug.search.score import METRIC, MODE
from autoaug.search.study import check_no_study, delete_study, run_study_url

__all__ = ["run_search", "resume_search", "SearchOutcome"]


def run_search(
    config: SearchConfig,
    *,
    address: str | None = None,
    session: Callable[[], Any] | None = None,
    overwrite: bool = False,
    trainable: Callable | None = None,
    display: Any = None,
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
            :func:`autoaug.search.trial.run_trial`, same signature), e.g. for another trainer.
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
    from autoaug.proxy_models.train import resolve_config

    started = time.time()
    # Sized to the data (a split per class becomes a total, an automatic image size the data's):
    # what the trials train, what the run records and what a resume reads back.
    if config.train.data is not None:  # (no data: check_runnable says so)
        config = config.replace(train=resolve_config(config.train))
    config.check_runnable()
    run = RunDir(config.storage, config.name)
    _check_store(config)
    if run.exists():
        if not overwrite:
            state = "finished" if run.exists(RESULT_FILE) else "unfinished"
            hint = "" if state == "finished" else f"resume it with --resume {config.name}, or "
            raise RunExistsError(
                f"a search named {config.name!r} already exists in {config.storage} ({state}); "
                f"{hint}choose another --name, or pass --overwrite to start it again"
            )
        if config.optuna_storage:
            delete_study(config.name, config.optuna_storage)
        run.delete()
    data = describe_data(config.train)
    study_url = run_study_url(config, run)
    if config.optuna_storage:  # the default SQLite file lives in the (new) run directory
        check_no_study(config.name, study_url)
    state = RunState.new(config.to_dict(), data, study_url, address=address, started=started)
    run.write_json(CONFIG_FILE, state.to_dict())
    return _search(config, run, state, session=session, address=address, trainable=trainable,
                   display=display, started=started)


def resume_search(
    name: str,
    storage: str | None = None,
    *,
    address: str | None = None,
    store: str | None = None,
    resume_errored: bool = False,
    session: Callable[[], Any] | None = None,
    trainable: Callable | None = None,
    display: Any = None,
) -> SearchOutcome:
    """Continue the search ``name`` in ``storage`` (default runs root) after its driver stopped.

    The method continues where the run directory says it stopped (for the training method:
    unfinished trials from their latest checkpoints, then the remaining trials), and the result
    is re-scored, chosen and stored as in :func:`run_search`. A search that already finished is
    not run again: its stored outcome is returned. ``resume_errored`` also retries trials that
    had failed. ``store`` overrides the policy store of the original configuration;
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
    if not config.search_method.can_resume(run):
        raise SearchError(
            f"the search {name!r} stopped before Ray Tune saved any state in {run.uri}; nothing to "
            f"resume: start it again with --overwrite"
        )
    state = state.resumed(address)
    run.write_json(CONFIG_FILE, state.to_dict())
    return _search(config, run, state, session=session, address=address, trainable=trainable, display=display,
                   started=started, resume_errored=resume_errored)


def _search(config: SearchConfig, run: RunDir, state: RunState, *, session: Callable[[], Any] | None,
            address: str | None, trainable: Callable | None, display: Any, started: float,
            resume_errored: bool = False) -> SearchOutcome:
    """The method, then re-scoring (both inside the Ray session), then choosing and storing; a full
    or read-only filesystem on the way is one line that says how to resume."""
    try:
        return _run_and_store(config, run, state, session=session, address=address, trainable=trainable,
                              display=display, started=started, resume_errored=resume_errored)
    except Exception as exc:  # a full disk mid-search: what is saved is kept, and the search resumes
        from autoaug.search.tune_storage import storage_failure

        error = storage_failure(exc, run.uri, resume_hint(config))
        if error is None:
            raise
        raise error from None


def _run_and_store(config: SearchConfig, run: RunDir, state: RunState, *, session: Callable[[], Any] | None,
                   address: str | None, trainable: Callable | None, display: Any, started: float,
                   resume_errored: bool) -> SearchOutcome:
    from autoaug.search.calibrate import calibrate, transfer_candidate
    from autoaug.search.experiment import tune_output

    display = _display(display, config.verbose)
    with tune_output(config.verbose), _session(session, address, config.verbose):
        calibration = calibrate(config, run, display)  # base / warm start "auto": measured first
        if calibration is not None:
            config = calibration.apply(config)
        search = PreparedSearch(config=config, run=run, state=state, display=display, trainable=trainable,
                                resume_errored=resume_errored)
        found = config.search_method.run(search)
        if calibration is not None and config.rescore:  # the best published policy competes too
            extra = transfer_candidate(calibration.record, config.name)
            if extra is not None:
                found = dataclasses.replace(found, candidates=[*found.candidates, extra])
        scores = _rescore(config, run, found, display)
    return _store(config, run, state, found, scores, started=started,
                  calibration=None if calibration is None else calibration.record)


def _rescore(config: SearchConfig, run: RunDir, found: MethodResult, display: Any) -> dict | None:
    """With ``config.rescore`` and more than one candidate: train each candidate under the proxy
    (``rescore_seeds`` fresh seeds), saving the runs in the run directory; their mean scores."""
    candidates = found.candidates
    if not config.rescore or len(candidates) < 2:
        return None
    cached = run.read_json(RESCORE_FILE) if run.exists(RESCORE_FILE) else {}
    if len(candidate_scores(candidates, config, cached)) < len(candidates):
        what = ", ".join(f"{c.kind} ({len(c.policy.sub_policies)} sub-policies)" for c in candidates)
        val = config.rescore_train_config().val_size
        display.log(
            f"re-scoring the final candidates under the proxy ({config.epochs} epochs, "
            f"{config.rescore_seeds} fresh seed{'s' if config.rescore_seeds > 1 else ''}, {val} validation images): {what}"
        )
    runs = rescore_candidates(
        candidates, config, cached=cached, save=lambda results: run.write_json(RESCORE_FILE, results)
    )
    scores = candidate_scores(candidates, config, runs)
    if not all(c.key in scores for c in candidates):
        raise SearchInterruptedError(
            f"search {config.name!r} stopped before its final policy was re-scored; " + resume_hint(config)
        )
    display.log(f"re-scored ({METRIC}, mean of {config.rescore_seeds}): "
                + ", ".join(f"{c.kind} {scores[c.key][METRIC]:.4f}" for c in candidates))
    return scores


def _store(config: SearchConfig, run: RunDir, state: RunState, found: MethodResult, scores: dict | None, *,
           started: float, calibration: dict | None = None) -> SearchOutcome:
    """Choose the final policy, store it with its provenance and write ``result.json``.
    ``config`` is the configuration the method ran (base and warm start as calibrated)."""
    from autoaug.policies.store import PolicyStore

    timing = state.timing(started, trial_train_time_s=sum(t.train_time_s or 0.0 for t in found.trials),
                          **found.timing)
    provenance = build_provenance(
        search_config=config.to_dict(), data=state.data, trials=found.trials, assembled=found.assembled,
        metric=METRIC, mode=MODE, run_dir=run.uri, optuna=found.optuna, timing=timing,
    )  # fmt: skip
    if found.provenance is not None:
        provenance["method"] = dict(found.provenance)
    if calibration is not None:
        provenance["calibration"] = calibration
    final = found.candidates[0].policy
    if scores is not None:
        chosen, provenance["selection"] = choose(found.candidates, scores)
        final = chosen.policy
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


def _session(session: Callable[[], Any] | None, address: str | None, verbose: int) -> Any:
    if session is not None:
        return session()
    from autoaug.core.ray_session import output_settings, ray_session

    return ray_session(address, **output_settings(verbose >= 2))


def _display(display: Any, verbose: int) -> Any:
    if display is not None:
        return display
    from autoaug.core.progress import Progress

    return Progress("plain" if verbose >= 1 else "quiet")


def _check_store(config: SearchConfig) -> None:
    from autoaug.policies.store import PolicyStore

    try:
        PolicyStore(config.store)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None
