"""The search's proxy runs outside Tune: calibration's and re-scoring's (and a benchmark's), each
a Ray task with the trials' resources (:func:`train_runs`), trained alone (:func:`train_and_score`)
or, with ``SearchConfig.pack`` above 1, in packs as the trials are (:func:`train_and_score_pack`),
and scored as a trial is scored, with every validation image's outcome over the score's window
(what :mod:`autoaug.search.decide.noise` measures the noise of a comparison from).

A task's body imports the trainer (torch) after its clock starts, not at the top: ``autoaug
--help`` imports this module without them, and a run's ``wall_s`` counts them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from autoaug.policies import Policy
from autoaug.search.decide.noise import IMAGE_SCORES, encode_image_scores
from autoaug.search.score import METRIC, search_score

__all__ = [
    "pack_task_gpus",
    "packs_at_once",
    "parallel_runs",
    "run_pack",
    "train_and_score",
    "train_and_score_pack",
    "train_runs",
]


def train_and_score(train_config: dict[str, Any], policy: dict[str, Any], score_window: int = 1) -> dict[str, Any]:
    """Body of one re-scoring or calibration run (a Ray task; ``policy`` a policy's or a schedule's
    JSON form: :func:`autoaug.policies.schedule.trainable_from_dict`): the proxy training, its validation
    accuracy and search score, the search score after each validated epoch (``scores``, by epoch:
    calibration's at ASHA's rungs measure how they rank, :func:`autoaug.search.decide.rungs.calibration_scores`),
    the run's wall time from the task's start (``wall_s``: its start-up, beyond ``train_time_s``'s
    epochs, counted once, :func:`autoaug.search.budget.measured_run_s`), and every validation image's
    score over the score's window (:data:`autoaug.search.decide.noise.IMAGE_SCORES`: the noise of a
    comparison is measured from them)."""
    started = time.time()
    # After the clock starts (wall_s counts the task's imports: the trainer's of torch), and not at
    # the top: `autoaug --help` imports this module without them.
    from autoaug.policies.schedule import trainable_from_dict
    from autoaug.proxy_models.train import TrainConfig, train

    scored = _Scored(score_window)
    result = train(TrainConfig.from_dict(train_config), trainable_from_dict(policy), on_validate=scored.on_validate)
    return scored.result(result, started)


def train_and_score_pack(
    train_configs: Sequence[dict[str, Any]], policies: Sequence[dict[str, Any]], score_window: int = 1
) -> list[dict[str, Any]]:
    """:func:`train_and_score` for several runs trained together as one pack
    (:func:`autoaug.proxy_models.pack.train_pack`; their configurations differ in their seeds
    only): each run's result as its own task's would be (``wall_s``: the pack's), with ``pack``,
    the runs it trained beside. A run's score depends on its own seed and policy, not on its
    pack-mates, up to float rounding (``benchmarks/pack_quality.py``)."""
    started = time.time()
    from autoaug.policies.schedule import trainable_from_dict
    from autoaug.proxy_models.pack import train_pack
    from autoaug.proxy_models.train import TrainConfig

    configs = [TrainConfig.from_dict(c) for c in train_configs]
    scored = [_Scored(score_window) for _ in configs]
    results = train_pack(
        configs[0],
        [trainable_from_dict(p) for p in policies],
        seeds=[c.seed for c in configs],
        on_validate=[s.on_validate for s in scored],
    )
    return [{**s.result(r, started), "pack": len(configs)} for s, r in zip(scored, results)]


class _Scored:
    """A run's validations as it trains (each image right or wrong over the score's last
    ``score_window`` epochs) and, when it ends, its result (:func:`train_and_score`)."""

    def __init__(self, score_window: int) -> None:
        self.score_window = score_window
        self.window = max(1, int(score_window))  # the validations kept
        self.images: dict[int, Any] = {}  # epoch -> per-image right/wrong (the window's epochs are kept)
        self.val_id: str | None = None

    def on_validate(self, epoch: int, stats: Any, val_indices: Any) -> None:
        import numpy as np

        self.images[epoch] = np.asarray(stats.image_correct, dtype=bool)
        for old in sorted(self.images)[: -self.window]:
            del self.images[old]
        if self.val_id is None:
            self.val_id = hashlib.sha256(np.asarray(val_indices, dtype=np.int64).tobytes()).hexdigest()[:16]

    def result(self, result: Any, started: float) -> dict[str, Any]:
        import numpy as np

        accuracies = [row.get("val_accuracy") for row in result.history]
        out = {
            METRIC: search_score(accuracies, self.score_window),
            "val_accuracy": result.val_accuracy,
            "train_time_s": result.train_time_s,
            "wall_s": time.time() - started,
            "precision": result.precision,
            "machine": result.machine,  # its kind (autoaug.core.machine): runs pair by seed only within one
            "epochs": len(result.history),
            "scores": {
                str(i + 1): search_score(accuracies[: i + 1], self.score_window)
                for i, v in enumerate(accuracies)
                if v is not None
            },
        }
        if self.images:  # per image: the epochs of the score's window it was right in (search.decide.noise)
            counts = np.sum([self.images[e] for e in sorted(self.images)], axis=0)
            out[IMAGE_SCORES] = encode_image_scores(counts, len(self.images), self.val_id)
        return out


def train_runs(
    runs: Sequence[tuple[str, Policy, Any]],
    config: Any,
    *,
    cached: Mapping[str, Any] | None = None,
    save: Any = None,
    task_name: str = "autoaug-run",
    deadline: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Train each ``(key, policy, train_config)`` of ``runs`` under the proxy, in parallel on Ray
    with the trials' resources (``config.cpus_per_trial`` / ``gpus_per_trial``), scored as the
    trials are (:func:`train_and_score`, ``config.score_window``). The one loop of the search's
    runs outside Tune: re-scoring and calibration (:mod:`autoaug.search.decide.calibrate`).

    With ``config.pack`` above 1 the runs train as packs, as the trials do: runs whose training
    configurations differ in their seeds only, in order, in as few packs of at most
    ``config.pack`` as hold them but no fewer than run at once, as even as can be
    (:func:`autoaug.proxy_models.pack.plan_packs`; each a task of
    :func:`train_and_score_pack` on a pack server's resources: ``cpus_per_trial`` CPUs and its
    runs' share of a GPU, at most one). ``config.pack`` is the search's, as its driver resolved
    ``"auto"`` (:func:`autoaug.search.tune.pack.resolve_pack`); ``"auto"`` unresolved trains one
    run per task.

    ``cached``: runs of earlier sessions, ``{key: result}`` (not trained again); ``save``: a
    callable receiving the updated mapping after every finished task (a run, or a pack's runs
    together); ``deadline``: a ``time.time()`` after which the runs not finished are cancelled
    (a time budget). Returns ``{key: {METRIC, "val_accuracy", "train_time_s", "precision",
    "machine", "epochs", "seed", "val_size"}}`` (a run trained in a pack also ``pack``, its
    size), the cached runs included (and only the runs that finished).
    """
    import ray

    results: dict[str, dict[str, Any]] = dict(cached or {})
    todo = [(key, policy, cfg) for key, policy, cfg in runs if key not in results]
    if not todo:
        return results
    threads = max(1, int(config.cpus_per_trial))
    k = run_pack(config)
    pending: dict[Any, list[tuple[str, Any]]] = {}
    if k == 1:
        task = ray.remote(train_and_score)
        for key, policy, cfg in todo:
            ref = task.options(
                num_cpus=config.cpus_per_trial, num_gpus=config.gpus_per_trial, name=f"{task_name}:{key}"
            ).remote(dataclasses.replace(cfg, num_threads=threads).to_dict(), policy.to_dict(), config.score_window)
            pending[ref] = [(key, cfg)]
    else:
        from autoaug.proxy_models.pack import plan_packs

        task = ray.remote(train_and_score_pack)
        plan = plan_packs([cfg for _, _, cfg in todo], k, at_once=packs_at_once(config, k))
        for group in ([todo[i] for i in members] for members in plan):
            name = f"{task_name}:{group[0][0]}" + (f"+{len(group) - 1}" if len(group) > 1 else "")
            ref = task.options(
                num_cpus=config.cpus_per_trial, num_gpus=pack_task_gpus(len(group), config), name=name
            ).remote(
                [dataclasses.replace(cfg, num_threads=threads).to_dict() for _, _, cfg in group],
                [policy.to_dict() for _, policy, _ in group],
                config.score_window,
            )
            pending[ref] = [(key, cfg) for key, _, cfg in group]
    try:
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.time())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            if not ready and deadline is not None and time.time() >= deadline:
                break  # the rest is cancelled below
            for ref in ready:
                members = pending.pop(ref)
                out = ray.get(ref)
                for (key, cfg), result in zip(members, out if isinstance(out, list) else [out]):
                    results[key] = {**result, "seed": cfg.seed, "val_size": cfg.val_size}
                if save is not None:
                    save(results)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return results


def run_pack(config: Any) -> int:
    """The runs :func:`train_runs` trains together: ``config.pack`` (1 for ``"auto"`` not yet
    resolved, :func:`autoaug.search.tune.pack.resolve_pack`)."""
    pack = getattr(config, "pack", 1)
    return pack if isinstance(pack, int) and pack > 1 else 1


def parallel_runs(config: Any) -> int:
    """How many proxy runs with the trials' resources the Ray cluster runs at once (at least 1):
    with packs (:func:`run_pack`), the packs of ``config.pack`` that fit times their runs."""
    k = run_pack(config)
    return packs_at_once(config, k) * k


def packs_at_once(config: Any, k: int) -> int:
    """How many tasks of ``k`` runs (1: a run alone) the Ray cluster runs at once (at least 1):
    each ``cpus_per_trial`` CPUs and its runs' GPUs (:func:`pack_task_gpus`)."""
    from autoaug.core.ray_session import tasks_at_once

    return tasks_at_once(config.cpus_per_trial, config.gpus_per_trial if k == 1 else pack_task_gpus(k, config))


def pack_task_gpus(k: int, config: Any) -> float:
    """The GPUs a pack of ``k`` runs reserves (:func:`autoaug.proxy_models.pack_sizing.pack_gpus`)."""
    from autoaug.proxy_models.pack_sizing import pack_gpus

    return pack_gpus(k, config.gpus_per_trial)
