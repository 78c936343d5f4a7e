"""Run a policy search with Ray Tune + Optuna, resume it, and turn it into a stored policy.

::

    from autoaug.search.config import SearchConfig
    from autoaug.search.tuner import run_search, resume_search

    config = SearchConfig.from_preset("cpu", name="cifar10-r8", data="train.parquet")
    outcome = run_search(config)                     # embedded local Ray, or address="ray://..."
    print(outcome.policy.table(), outcome.reference)  # e.g. cifar10-r8@1
    outcome = resume_search("cifar10-r8")            # after the driver was killed or interrupted

How the pieces fit (``ray.tune.Tuner``):

* **Search algorithm**: ``OptunaSearch`` over :meth:`SearchSpace.distributions` (TPE by default:
  multivariate, constant liar, seeded), wrapped in ``ConcurrencyLimiter``. The Optuna study lives
  in an Optuna storage -- ``optuna.db`` (SQLite) in the run directory unless ``optuna_storage``
  names another -- so ``optuna.load_study(study_name=NAME, storage=URL)`` can inspect it. Each
  Optuna trial carries the user attribute ``tune_trial_id``.
* **Scheduler**: ``ASHAScheduler`` on ``val_accuracy`` with ``time_attr="training_iteration"``
  (one iteration = one epoch), or FIFO when early stopping is off.
* **Trials**: :func:`autoaug.search.trial.run_trial` under ``tune.with_resources`` (CPUs, fractional
  GPUs) and ``tune.with_parameters`` (the shared training configuration: common random
  numbers); ``reuse_actors`` keeps trial processes alive between trials. Each epoch is reported
  with ``ray.tune.report(metrics, checkpoint=...)``; ``FailureConfig(max_failures)`` retries a
  trial that raises from its last checkpoint before marking it failed.
* **Run directory** ``{storage}/{name}`` (Tune's ``storage_path``/``name``, a local folder or a
  URI) holds Tune's experiment state, trial checkpoints, ``search_config.json``, the SQLite
  study and, at the end, ``result.json``. :func:`resume_search` restores it with
  ``tune.Tuner.restore``.

Consistency between Tune and Optuna across a driver crash
--------------------------------------------------------
After ``kill -9`` the study can be slightly ahead of Tune's last snapshot; on restore
:mod:`autoaug.search.reconcile` reconciles the two (the study being the record of which trials
ended: finished trials are not trained again, orphaned proposals are re-used, retried failures
are linked). :func:`autoaug.search.study.check_study` verifies the result: one finished Optuna trial per finished Tune trial, same
parameters, same score, nothing left running.

The other pieces: :mod:`autoaug.search.run_dir` (the run directory), :mod:`autoaug.search.study`
(samplers, Optuna storage, the consistency check), :mod:`autoaug.search.progress` (progress
lines), :mod:`autoaug.search.records` (trial records, the outcome) and
:mod:`autoaug.core.ray_session` (the Ray connection).
"""
from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any, Callable

import optuna
from ray import tune
from ray.tune.search import ConcurrencyLimiter

from autoaug.core.errors import (
    RunExistsError,
    SearchError,
    SearchFailedError,
    SearchInterruptedError,
    UserInputError,
)
from autoaug.policies import Policy
from autoaug.search.assemble import assemble_policy, build_provenance, union_policy, utc_now
from autoaug.search.config import METRIC, MODE, SearchConfig
from autoaug.search.loggers import experiment_loggers
from autoaug.search.progress import ProgressCallback
from autoaug.search.reconcile import StoppedTrials, StudySearch, attach_display, make_scheduler
from autoaug.search.records import SearchOutcome, describe_data, outcome_from_result, trial_records
from autoaug.search.run_dir import CONFIG_FILE, RESULT_FILE, RunDir
from autoaug.search.study import (
    check_no_study,
    check_study,
    delete_study,
    make_sampler,
    make_storage,
    redact,
    run_study_url,
)
from autoaug.search.rescore import RESCORE_FILE, Candidate, candidate_scores, choose, rescore_candidates
from autoaug.search.trial import run_trial
from autoaug.search.warm_start import warm_start_points, warm_start_policies

__all__ = ["run_search", "resume_search", "SearchOutcome"]

logger = logging.getLogger(__name__)

_TRIAL_DIR_PREFIX = "trial_"


def run_search(
    config: SearchConfig,
    *,
    address: str | None = None,
    session: Callable[[], Any] | None = None,
    overwrite: bool = False,
    trainable: Callable | None = None,
    display: Any = None,
) -> SearchOutcome:
    """Run the search ``config`` to completion and store the assembled policy.

    Args:
        config: the search.
        address: Ray cluster to connect to (``ray://host:10001``, ``auto``); None starts an
            embedded local Ray (no dashboard). Ignored when Ray is already initialized. The
            connection is :func:`autoaug.core.ray_session.ray_session`'s.
        session: a function returning a context manager that connects Ray for the search (used
            instead of the default ``ray_session(address)``, e.g. one that also prints what it
            joined); it is entered only after the configuration and the data were checked.
        overwrite: delete an existing run directory (and its study) of the same name first.
        trainable: replaces :func:`autoaug.search.trial.run_trial` (same signature), e.g. for another
            trainer.
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
        _delete_run(config, run)
    data = describe_data(config.train)
    study_url = run_study_url(config, run)
    if config.optuna_storage:  # the default SQLite file lives in the (new) run directory
        check_no_study(config.name, study_url)
    state = {
        "config": config.to_dict(),
        "data": data,
        "optuna": {"storage": study_url, "study_name": config.name},
        "started_at": utc_now(),
        "started_ts": started,
        "sessions": [{"started_at": utc_now(), "kind": "start", "address": address}],
    }
    run.write_json(CONFIG_FILE, state)
    _quiet_tune(config.verbose)
    display = _display(display, config.verbose)
    if config.method == "density":
        return _run_density(config, run, state, session, address, started)
    with _session(session, address, config.verbose):
        tuner = _build_tuner(config, run, study_url, trainable, display)
        _fit(tuner, config)
        _rescore(config, run, study_url, display)
    return _finish(config, run, state, session_started=started)


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

    Unfinished trials continue from their latest checkpoints, the remaining trials are run, and
    the result is assembled and stored as in :func:`run_search`. A search that already finished
    is not run again: its stored outcome is returned. ``resume_errored`` also retries trials
    that had failed. ``store`` overrides the policy store of the original configuration;
    ``address``/``session``/``display`` as in :func:`run_search`.
    """
    from autoaug.search.config import default_runs_root

    started = time.time()
    run = RunDir(storage or default_runs_root(), name)
    if not run.exists(CONFIG_FILE):
        raise UserInputError(
            f"no search named {name!r} in {run.storage} (no {CONFIG_FILE} in {run.uri}); "
            "check --name/--resume and --storage"
        )
    state = run.read_json(CONFIG_FILE)
    config = SearchConfig.from_dict(state["config"])
    if store is not None:
        config = config.replace(store=store)
    _check_store(config)
    if run.exists(RESULT_FILE):
        return outcome_from_result(run.read_json(RESULT_FILE), run)
    if config.method == "density":
        state.setdefault("sessions", []).append({"started_at": utc_now(), "kind": "resume", "address": address})
        run.write_json(CONFIG_FILE, state)
        _quiet_tune(config.verbose)
        return _run_density(config, run, state, session, address, started, resume_errored=resume_errored)
    if not tune.Tuner.can_restore(run.uri):
        raise SearchError(
            f"the search {name!r} stopped before Ray Tune saved any state in {run.uri}; nothing to "
            f"resume: start it again with --overwrite"
        )
    state.setdefault("sessions", []).append({"started_at": utc_now(), "kind": "resume", "address": address})
    run.write_json(CONFIG_FILE, state)
    _quiet_tune(config.verbose)
    with _session(session, address, config.verbose):
        tuner = tune.Tuner.restore(
            run.uri,
            trainable=_trainable(config, trainable),
            resume_unfinished=True,
            resume_errored=resume_errored,
        )
        display = _display(display, config.verbose)
        attach_display(tuner, display, config.num_trials, config.epochs)
        _fit(tuner, config)
        _rescore(config, run, state["optuna"]["storage"], display)
    return _finish(config, run, state, session_started=started)


def _run_density(config: SearchConfig, run: RunDir, state: dict, session: Callable[[], Any] | None,
                 address: str | None, started: float, *, resume_errored: bool = False) -> SearchOutcome:
    """The density-matching method (:mod:`autoaug.search.density`): fold models, rounds, store."""
    from autoaug.search.density import run_density

    with _session(session, address, config.verbose):
        result = run_density(config, run, state, study_url=state["optuna"]["storage"], session_started=started,
                             resume_errored=resume_errored)
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


def _quiet_tune(verbose: int) -> None:
    # CheckpointConfig(num_to_keep=1) makes Tune snapshot the experiment state after every trial
    # checkpoint (each epoch) on purpose -- it keeps a restored run close to where the driver
    # stopped -- so its "snapshotting triggered multiple times" warning is expected noise.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if verbose < 2:
        # Tune's own console output (its configuration box, "View detailed results here", the
        # TensorBoard hint naming a driver staging folder) only with -v: the legacy output engine
        # at verbose=0 prints nothing; our progress display says what matters.
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
        # The progress line already shows each failure in one line (and Tune names the trial's
        # error.txt); full tracebacks only when verbose.
        os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")


def _fit(tuner: tune.Tuner, config: SearchConfig) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tuner.fit()


def _check_store(config: SearchConfig) -> None:
    from autoaug.policies.store import PolicyStore, validate_name

    try:
        validate_name(config.name)
        PolicyStore(config.store)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None


def _delete_run(config: SearchConfig, run: RunDir) -> None:
    if config.optuna_storage:
        delete_study(config.name, config.optuna_storage)
    run.delete()


def _finish(config: SearchConfig, run: RunDir, state: dict, *, session_started: float) -> SearchOutcome:
    from autoaug.policies.store import PolicyStore

    study_url = state["optuna"]["storage"]
    study = optuna.load_study(study_name=config.name, storage=make_storage(study_url))
    trials = trial_records(config, run, study)
    finished = [t for t in trials if t.finished]
    if len(finished) < config.num_trials:
        raise SearchInterruptedError(
            f"search {config.name!r} stopped with {len(finished)} of {config.num_trials} trials finished; "
            f"resume it with: autoaug search --resume {config.name} --storage {config.storage}"
        )
    if not any(t.succeeded for t in trials):
        failed = [t for t in trials if t.status == "failed"]
        first = failed[0] if failed else trials[0]
        raise SearchFailedError(
            f"all {len(trials)} trials of search {config.name!r} failed; first error "
            f"(trial {first.trial_id}): {first.error or 'no score reported'}"
        )
    problems = check_study(study, trials, config.space)
    for problem in problems:
        logger.warning("Optuna study %s: %s", config.name, problem)
    assembled = assemble_policy(
        trials,
        name=config.name,
        top_n=config.top_n,
        num_magnitude_bins=config.space.num_magnitude_bins,
        base=config.space.base,
        ranges=config.space.ranges,
    )
    now = time.time()
    timing = {
        "started_at": state.get("started_at"),
        "finished_at": utc_now(),
        "elapsed_s": now - float(state.get("started_ts", session_started)),
        "last_session_s": now - session_started,
        "sessions": state.get("sessions", []),
        "trial_train_time_s": sum(t.train_time_s or 0.0 for t in trials),
    }
    optuna_info = {
        "storage": redact(study_url),
        "study_name": config.name,
        "num_trials": len(study.trials),
        "consistent_with_tune": not problems,
        "problems": problems,
    }
    provenance = build_provenance(
        search_config=config.to_dict(),
        data=state["data"],
        trials=trials,
        assembled=assembled,
        metric=METRIC,
        mode=MODE,
        run_dir=run.uri,
        optuna=optuna_info,
        timing=timing,
    )
    final = assembled.policy
    if config.rescore:
        candidates = _final_candidates(config, trials, assembled)
        scores = candidate_scores(candidates, config, run.read_json(RESCORE_FILE) if run.exists(RESCORE_FILE) else {})
        if len(candidates) > 1 and not all(c.key in scores for c in candidates):
            raise SearchInterruptedError(
                f"search {config.name!r} stopped before its final policy was re-scored; resume it with: "
                f"autoaug search --resume {config.name} --storage {config.storage}"
            )
        chosen, provenance["selection"] = choose(candidates, scores)
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


def _final_candidates(config: SearchConfig, trials: list, assembled: Any) -> list[Candidate]:
    """What re-scoring chooses from: the assembled policy; the best single trial; with a warm
    start, the warm-start policies extended by the selected trials the sampler proposed (those
    that are not warm-start candidates) -- the published policy plus what the search found; with
    early stopping, ``survivors``: every trial ASHA let run the full budget, assembled (more
    sub-policies than the top ``top_n`` when more trials survived: the re-scores measured that
    a policy of more vetted sub-policies can generalise better, docs/search.md).
    Candidates identical to an earlier one are left out."""
    best = assembled.selected[0]
    single = Policy(config.name, best.policy.num_magnitude_bins, best.policy.sub_policies,
                    base=best.policy.base, ranges=best.policy.ranges)
    out = [Candidate("assembled", assembled.policy, tuple(t.trial_id for t in assembled.selected), None)]
    out.append(Candidate("best_trial", single, (best.trial_id,), best.score))
    if config.warm_start:
        # Warm-start candidates as the trials decode them (to_params -> to_policy is the identity
        # on the space's grid, so these compare equal to the warm-start trials' policies).
        warm = [config.space.to_policy(config.space.to_params(p), name=p.name)
                for p in warm_start_policies(config.warm_start, config.space, store=config.store)]
        warm_subs = {p.sub_policies for p in warm}
        found = [t for t in assembled.selected if t.policy.sub_policies not in warm_subs]
        if found:
            extended = union_policy(config.name, [*warm, *(t.policy for t in found)])
            out.append(Candidate("warm_start+found", extended, tuple(t.trial_id for t in found), None))
    survivors = [t for t in trials if t.succeeded and t.epochs >= config.epochs]
    if config.early_stopping and len(survivors) > len(assembled.selected):
        union = assemble_policy(survivors, name=config.name, top_n=len(survivors),
                                num_magnitude_bins=config.space.num_magnitude_bins, base=config.space.base,
                                ranges=config.space.ranges)  # fmt: skip
        out.append(Candidate("survivors", union.policy, tuple(t.trial_id for t in union.selected), None))
    unique: dict[str, Candidate] = {}
    for c in out:
        unique.setdefault(c.policy.content_hash, c)
    return list(unique.values())


def _rescore(config: SearchConfig, run: RunDir, study_url: str, display: Any) -> None:
    """With ``config.rescore``: train the final candidates under the proxy (``rescore_seeds`` fresh seeds),
    saving their scores in the run directory (:mod:`autoaug.search.rescore`)."""
    if not config.rescore:
        return
    study = optuna.load_study(study_name=config.name, storage=make_storage(study_url))
    trials = trial_records(config, run, study)
    if sum(t.finished for t in trials) < config.num_trials or not any(t.succeeded for t in trials):
        return  # _finish says what is missing
    assembled = assemble_policy(
        trials, name=config.name, top_n=config.top_n, num_magnitude_bins=config.space.num_magnitude_bins,
        base=config.space.base, ranges=config.space.ranges,
    )
    candidates = _final_candidates(config, trials, assembled)
    if len(candidates) < 2:
        return
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
    line = ", ".join(f"{c.kind} {scores[c.key][METRIC]:.4f}" for c in candidates)
    display.log(f"re-scored ({METRIC}, mean of {config.rescore_seeds}): {line}")


def _trainable(config: SearchConfig, trainable: Callable | None = None,
               parameters: dict[str, Any] | None = None) -> Any:
    """``trainable`` (default :func:`run_trial`) with the shared configuration (and ``parameters``,
    e.g. a density search's fold model) passed through Ray's object store, and its resources."""
    fn = trainable if trainable is not None else run_trial
    fn = tune.with_parameters(
        fn, train_config=config.train.to_dict(), space=config.space.to_dict(), policy_prefix=config.name,
        score_window=config.score_window,
        **(parameters or {}),
    )
    resources = {"cpu": config.cpus_per_trial, "gpu": config.gpus_per_trial}
    return tune.with_resources(fn, resources)


def _trial_dirname(trial: Any) -> str:
    return f"{_TRIAL_DIR_PREFIX}{trial.trial_id}"


def _trial_name(trial: Any) -> str:
    return f"{_TRIAL_DIR_PREFIX}{trial.trial_id}"


def _build_tuner(config: SearchConfig, run: RunDir, study_url: str, trainable: Callable | None,
                 display: Any = None, parameters: dict[str, Any] | None = None) -> tune.Tuner:
    display = _display(display, config.verbose)
    storage = make_storage(study_url)
    searcher = StudySearch(
        space=config.space.distributions(),
        metric=METRIC,
        mode=MODE,
        sampler=make_sampler(config.sampler, config.seed, config.startup_trials),
        study_name=config.name,
        storage=storage,
    )
    searcher.set_sampler_spec(config.sampler, config.seed, config.startup_trials)
    searcher.set_max_steps(config.epochs)
    if config.warm_start:
        # The first proposals are the known sub-policies (a fresh study only: a resumed search
        # restores its study, enqueued trials included).
        for params in warm_start_points(config.warm_start, config.space, store=config.store):
            searcher.study.enqueue_trial(params, skip_if_exists=True)
    searcher.study.set_user_attr(
        "autoaug_search", {"name": config.name, "run_dir": run.uri, "space": config.space.to_dict()}
    )
    search_alg = ConcurrencyLimiter(searcher, max_concurrent=config.concurrency) if config.concurrency else searcher
    # One object, shared by the scheduler (which fills it) and the progress lines (which read it).
    stopped = StoppedTrials()
    scheduler = make_scheduler(config, study_url, stopped)
    callbacks: list[Any] = [ProgressCallback(config.num_trials, config.epochs, stopped=stopped, display=display)]
    callbacks += experiment_loggers(config)
    return tune.Tuner(
        _trainable(config, trainable, parameters),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode=MODE,
            search_alg=search_alg,
            scheduler=scheduler,
            num_samples=config.num_trials,
            reuse_actors=config.reuse_actors,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_dirname,
        ),
        run_config=tune.RunConfig(
            name=config.name,
            storage_path=config.storage,
            callbacks=callbacks,
            verbose=1 if config.verbose >= 2 else 0,
            failure_config=tune.FailureConfig(max_failures=config.max_failures, fail_fast=False),
            # The latest two checkpoints: Tune's experiment snapshot can lag one report behind
            # (it is forced every num_to_keep checkpoints and every >= 10 s), and a restored
            # trial needs the checkpoint that snapshot names.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        ),
    )
