"""What the PBA method runs when its search runs (:meth:`PbaMethod.run`): the population's Ray Tune
experiment built -- its members a grid of their first policies under PBT (:class:`EpochPBT`), the
exploit/explore events logged -- or restored from the run directory, run, and read back: each member
as a trial with the schedule and ``pba.json`` state of its last checkpoint, and the events.

A module of its own so that :mod:`.method`, which ``autoaug --help`` imports for the method's settings
and flags, imports neither Ray Tune nor the trainer: :meth:`PbaMethod.run` imports this module when
the search runs, and hands it what it needs of :mod:`.method` (which this module does not import).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ray import tune
from ray.tune import ExperimentAnalysis

from autoaug.policies.schedule import Schedule
from autoaug.proxy_models.train import load_checkpoint
from autoaug.search.decide.assemble import TrialRecord
from autoaug.search.methods.base import PreparedSearch
from autoaug.search.methods.pba import trial
from autoaug.search.methods.pba.scheduler import EVENTS_FILE, EpochPBT, EventLog
from autoaug.search.score import METRIC
from autoaug.search.tune.experiment import Experiment, run_experiment
from autoaug.search.tune.pack import packed

if TYPE_CHECKING:
    from autoaug.search.methods.pba.method import PbaConfig

__all__ = ["run_population"]


def run_population(
    search: PreparedSearch, s: PbaConfig, explore: Any, initial_population: Callable[[], list[dict[str, Any]]]
) -> tuple[list[tuple[TrialRecord, Any, dict[str, Any]]], list[dict[str, Any]], float, dict[str, float] | None]:
    """Run (or continue) the population of ``search`` (settings ``s``; a new one's members start
    from ``initial_population()``, PBT explores with ``explore``; with ``pack`` above 1 its members
    trained K at a time by pack servers, :func:`~autoaug.search.tune.pack.packed`): ``(members,
    events, wall, packs)`` -- each member as :func:`_members` reads it, the exploit/explore events,
    the seconds it took, and what the pack servers did (None without packs)."""
    run = search.run
    t0 = time.time()
    # In packs every member's trial runs at once (it only waits on its server), K trained at a time
    # (PBA's pack_trials, "population").
    exp, pack_servers = packed(search.config, _experiment(search, s), search.display.log)
    with pack_servers:
        tuner = run_experiment(search, exp, lambda exp: _population(search, s, exp, explore, initial_population))
    results = tuner.get_results()
    wall = time.time() - t0
    members = _members(search, results)
    events = list(run.read_json(EVENTS_FILE)) if run.exists(EVENTS_FILE) else []
    return members, events, wall, getattr(pack_servers, "stats", None)


def _experiment(search: PreparedSearch, s: PbaConfig) -> Experiment:
    """The population's Tune experiment (:mod:`autoaug.search.tune.experiment`), as a restore needs it."""
    config = search.config
    return Experiment(
        name=config.name,
        storage=config.storage,
        study_url=None,
        num_trials=s.population,
        max_steps=config.epochs,
        seed=config.seed,
        trainable=search.trainable or trial.run_pba_trial,
        parameters={
            "train_config": config.train.to_dict(),
            "space": config.space.to_dict(),
            "policy_prefix": config.name,
            "score_window": config.score_window,
            "perturbation_interval": s.perturbation_interval,
        },
        # Every checkpoint is kept (they come at perturbation boundaries only: 30 of 0.6 MB per
        # member of pba-cpu). With a limit, a member that cloned another deletes the clone's
        # checkpoint as its own old one, under the feet of the clone and of other exploiters
        # (ray-project/ray#9036, #8441: FileNotFoundError when a checkpoint is registered).
        keep_checkpoints=None,
        proposer="pba",
        run_dir=search.run.uri,
    )


def _population(
    search: PreparedSearch,
    s: PbaConfig,
    exp: Experiment,
    explore: Any,
    initial_population: Callable[[], list[dict[str, Any]]],
) -> Experiment:
    """``exp`` as a new population starts: its members (a grid of their first policies,
    ``initial_population()``), PBT exploring with ``explore`` and the event log."""
    config = search.config
    scheduler = EpochPBT(
        last_epoch=config.epochs,
        time_attr="epoch",
        perturbation_interval=s.perturbation_interval,
        quantile_fraction=s.quantile,
        resample_probability=s.resample_probability,
        hyperparam_mutations={},
        custom_explore_fn=explore,
        log_config=True,
        synch=False,
        rotate=not exp.parameters.get("pack_servers"),  # a pack population: every member at once
    )
    # One sample of a grid: every member exists from the start, without a limit on concurrent
    # trials (a limiter would create the later members only once the first ones finished, and PBT
    # ranks members that exist together). The cluster's resources (cpus_per_trial) decide how many
    # train at a time; PBT pauses and rotates the others. In packs every member runs at once, and
    # the pack servers' rounds take them in turns, in step (PBT pauses only the exploited).
    return dataclasses.replace(
        exp,
        scheduler=scheduler,
        param_space={"policy": tune.grid_search(initial_population()), "explore": {}},
        callbacks=(*exp.callbacks, EventLog(config.storage, config.name, search.display)),
    )


def _members(search: PreparedSearch, results: Any) -> list[tuple[TrialRecord, Any, dict[str, Any]]]:
    """Each member of the population's Tune ``results`` as a trial: ``(record, schedule, state)``,
    the schedule and ``pba.json`` state of its last checkpoint (None and ``{}`` without one)."""
    config = search.config
    by_budget = search.budget_stopped(config.name)
    # The attempts of each member that failed and were retried (a worker killed, a node lost): Tune's
    # trials count them, its results do not.
    failures = {t.trial_id: int(getattr(t, "num_failures", 0) or 0) for t in ExperimentAnalysis(search.run.uri).trials}
    members = []
    for index, r in enumerate(results):
        last = r.metrics or {}
        trial_id = str(last.get("trial_id") or (r.path or "").rsplit("_", 1)[-1])
        epochs = int(last.get("epoch") or 0)
        state, schedule = _checkpointed(r.checkpoint)
        status = "failed" if r.error is not None else ("completed" if epochs >= config.epochs else "running")
        if status == "running" and trial_id in by_budget:
            status = "budget_stopped"  # at a perturbation boundary: its checkpoint holds the schedule it scored under
        params = dict(state.get("params") or (r.config or {}).get("policy", {}))
        policy = None
        if schedule is not None:
            policy = schedule.final
        record = TrialRecord(
            trial_id=trial_id,
            index=index,
            status=status,
            params=params,
            policy=policy,
            score=last.get(METRIC) if status in ("completed", "budget_stopped") else None,
            epochs=epochs,
            train_time_s=last.get("train_time_s"),
            num_failures=failures.get(trial_id, 0),
            error=None if r.error is None else f"{type(r.error).__name__}: {str(r.error).splitlines()[0][:300]}",
        )
        members.append((record, schedule, state))
    return members


def _checkpointed(checkpoint: Any) -> tuple[dict[str, Any], Any]:
    """``(state, schedule)`` of a member's last Tune ``checkpoint``: its ``pba.json`` and the
    schedule in the trainer's checkpoint; ``({}, None)`` without a checkpoint."""
    if checkpoint is None:
        return {}, None
    with checkpoint.as_directory() as d:
        with open(f"{d}/{trial.PBA_STATE}") as f:
            state = json.load(f)
        schedule = Schedule.from_dict(load_checkpoint(d)["schedule"])
    return state, schedule
