"""What one member of a PBA population runs (:mod:`autoaug.search.methods.pba.method`): the proxy training under a
schedule that grows as Ray Tune's ``PopulationBasedTraining`` exploits and explores.

Kept small, like :mod:`autoaug.search.methods.train.trial`, so that Ray workers import only this, the search
space, the schedule and the trainer.

A member trains the proxy (``SearchConfig.train``) epoch by epoch with the trainer's own loop
(:func:`autoaug.proxy_models.train.train` given a :class:`~autoaug.policies.schedule.Schedule`)
and reports the search score after every epoch. At every perturbation boundary (and after the
last epoch) its report carries a checkpoint: the trainer's ``checkpoint.pt`` (model, optimizer,
learning-rate schedule, DALI loader state, the policy of every epoch trained and the schedule so
far) and ``pba.json`` (the member that wrote it, its current parameters and its lineage of
exploit/explore events). So when PBT makes a weak member exploit a strong one -- restart it from
the strong one's checkpoint with a perturbed copy of its configuration -- the member continues
the strong one's *weights and policy history* together: its schedule is the strong member's up to
this epoch, then its own perturbed policy.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

from ray import tune

from autoaug.policies.schedule import Schedule
from autoaug.proxy_models.train import TrainConfig, load_checkpoint
from autoaug.search.space import SearchSpace
from autoaug.search.tune.epochs import EpochResults
from autoaug.search.tune.pack import train_trial

__all__ = ["run_pba_trial", "PBA_STATE", "EVENTS_KEY", "boundaries", "start_schedule"]

#: The PBA part of a member's checkpoint (next to the trainer's ``checkpoint.pt``).
PBA_STATE = "pba.json"
#: The result key of a report announcing exploit/explore events (a JSON list).
EVENTS_KEY = "pba_events"


def start_schedule(
    me: str, params: dict, operations: dict, policy: Any, checkpoint: dict | None, state: dict | None, epochs: int
) -> tuple[Any, list[dict], list[dict]]:
    """The schedule a member trains, its lineage and the events of this start.

    ``checkpoint``/``state``: the trainer checkpoint and ``pba.json`` it starts from (None: a new
    member). A checkpoint written by another member is an exploit (the member clones it) followed
    by an explore (its own, perturbed policy from this epoch on); its own checkpoint (a restart
    after a pause, a failure or a driver restart) continues as it was. ``operations``: how the
    explore changed each parameter (``resample``, ``+2``, ...), recorded with the changes.
    """
    if checkpoint is None:
        return Schedule(policy.name, [(0.0, policy)]), [], []
    done = int(checkpoint["epoch"])
    prior = Schedule.from_dict(checkpoint["schedule"])
    state = state or {}
    lineage = list(state.get("lineage", []))
    owner = state.get("member", me)
    if owner == me:
        return prior, lineage, []
    old = state.get("params", {})
    changes = {k: [old.get(k), v] for k, v in params.items() if old.get(k) != v}
    event = {
        "epoch": done,
        "member": me,
        "cloned": owner,
        "clone_policy_hash": prior.at(done - 1, epochs).content_hash if done > 0 else None,
        "policy_hash": policy.content_hash,
        "changes": {k: [*v, operations.get(k)] for k, v in sorted(changes.items())},
    }
    lineage.append(event)
    return prior.then(done / epochs, policy), lineage, [event]


def run_pba_trial(
    config: dict,
    *,
    train_config: dict,
    space: dict,
    policy_prefix: str,
    score_window: int = 1,
    perturbation_interval: int = 1,
    pack_servers: tuple[str, ...] = (),
) -> None:
    """Ray Tune function trainable of one PBA member (see the module documentation).

    ``config["policy"]``: the member's current search-space parameters (PBT's explore rewrites
    them, :func:`autoaug.search.methods.pba.method.explore_params`); ``config["explore"]``: how the last explore
    changed them (recorded in the events). With ``pack_servers`` the member's epochs are trained
    by one of those pack servers beside other members
    (:func:`autoaug.search.tune.pack.train_trial`), up to its next perturbation boundary at a
    time; it reports each epoch as its own run would. A member restarted from a checkpoint (an
    exploit: another member's) sends it with its schedule, and the server starts it from there.
    """
    search_space = SearchSpace.from_dict(space)
    cfg = TrainConfig.from_dict(train_config)
    me = tune.get_context().get_trial_id() or "local"
    params = dict(config["policy"])
    policy = search_space.to_policy(params, name=f"{policy_prefix}-{me}")

    with tempfile.TemporaryDirectory(prefix="autoaug-pba-") as scratch:
        checkpoint = tune.get_checkpoint()
        trainer_state = pba_state = None
        with checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext() as resume_from:
            if resume_from is not None:
                trainer_state = load_checkpoint(resume_from)
                path = os.path.join(resume_from, PBA_STATE)
                if os.path.exists(path):
                    with open(path) as f:
                        pba_state = json.load(f)
            results = EpochResults(score_window, trainer_state["history"] if trainer_state is not None else ())
            schedule, lineage, events = start_schedule(
                me, params, dict(config.get("explore") or {}), policy, trainer_state, pba_state, cfg.epochs
            )
            pending = list(events)
            marks = boundaries(cfg.epochs, perturbation_interval)

            def report(metrics: dict[str, Any]) -> None:
                out = results(metrics)
                out["stage"] = schedule.stage_index(int(metrics["epoch"]) - 1, cfg.epochs)
                if pending:
                    out[EVENTS_KEY] = json.dumps(pending)
                    pending.clear()
                epoch = int(metrics["epoch"])
                if epoch in marks:
                    with open(os.path.join(scratch, PBA_STATE), "w") as f:
                        json.dump({"member": me, "params": params, "lineage": lineage}, f)
                    tune.report(out, checkpoint=tune.Checkpoint.from_directory(scratch))
                else:
                    tune.report(out)

            train_trial(
                cfg,
                schedule,
                servers=pack_servers,
                key=me,
                report=report,
                checkpoint_dir=scratch,
                resume_from=resume_from,
                report_at=marks,
            )


def boundaries(epochs: int, interval: int) -> list[int]:
    """The epochs at which a member checkpoints (PBT may exploit there): every ``interval``-th, and the last."""
    return sorted({*range(interval, epochs + 1, interval), epochs})
