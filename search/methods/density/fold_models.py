"""The density method's fold models (Fast AutoAugment): the folds of the reduced training split,
the fold models trained on them (Ray tasks, saved in the run directory) and :class:`FoldScorer`,
which evaluates a fold model on its held-out fold augmented by a candidate policy."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import torch

from autoaug.core.metrics import metrics_json
from autoaug.policies.dali_apply import PolicyInputs
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.pack import even_packs, train_pack
from autoaug.proxy_models.pipeline import DaliLoader
from autoaug.proxy_models.splits import Split, config_groups, config_split, stratified_folds
from autoaug.proxy_models.train import TrainConfig, train
from autoaug.proxy_models.train_config import eval_batch_size
from autoaug.search.decide.proxy_runs import pack_task_gpus, packs_at_once, run_pack
from autoaug.search.methods.density.settings import DensityConfig
from autoaug.search.run_dir import RunDir, utc_now

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = [
    "FOLDS_DIR",
    "FoldScorer",
    "fold_packs",
    "fold_splits",
    "objective_value",
    "train_fold",
    "train_fold_models",
    "train_fold_pack",
]

#: Fold models: ``fold{k}.pt`` (weights) and ``fold{k}.json`` (scores, split, timing).
FOLDS_DIR = "folds"


def fold_splits(train_config: Any, folds: int, seed: int) -> tuple[Any, list]:
    """``(dataset, [Split per fold])`` of the reduced training split ``train_config`` describes
    (grouped by its ``group_by``: every group then lies in one fold)."""
    ds = open_dataset(train_config.data, split="train")
    split = config_split(ds, train_config, dataset_fingerprint=ds.fingerprint())
    return ds, stratified_folds(split, ds.labels, folds, seed=seed, groups=config_groups(ds, train_config))


# ----------------------------------------------------------------------------------------------
# Fold models
def train_fold(train_config: dict, fold: int, train_idx: Any, val_idx: Any, base: str = "standard") -> dict:
    """Body of one fold-model training (a Ray task): the search's ``base`` alone (no policy), on
    the other folds."""
    cfg = TrainConfig.from_dict(train_config)
    split = _fold_split(cfg, train_idx, val_idx)
    return _fold_summary(fold, train(cfg, base, split=split), split, base)


def train_fold_pack(
    train_config: dict, folds: list[int], train_idx: list, val_idx: list, base: str = "standard"
) -> list[dict]:
    """Body of a pack of fold-model trainings (a Ray task): the models of ``folds`` (``train_idx[i]``
    and ``val_idx[i]`` fold ``folds[i]``'s images) trained together in one pack
    (:func:`autoaug.proxy_models.pack.train_pack`), each as :func:`train_fold` trains it alone."""
    cfg = TrainConfig.from_dict(train_config)
    splits = [_fold_split(cfg, t, v) for t, v in zip(train_idx, val_idx)]
    results = train_pack(cfg, [base] * len(folds), splits=splits)
    return [
        {**_fold_summary(k, result, split, base), "pack": len(folds)}
        for k, result, split in zip(folds, results, splits)
    ]


def _fold_split(cfg: TrainConfig, train_idx: Any, val_idx: Any) -> Split:
    return Split(
        train=np.asarray(train_idx, dtype=np.int64), val=np.asarray(val_idx, dtype=np.int64), seed=cfg.split_seed
    )


def _fold_summary(fold: int, result: Any, split: Split, base: str) -> dict:
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in result.model.state_dict().items()}, buf)
    last = result.history[-1]
    return {
        "weights": buf.getvalue(),
        "fold": fold,
        "val_accuracy": result.val_accuracy,
        "val_loss": last.get("val_loss"),
        "train_time_s": result.train_time_s,
        "split_fingerprint": result.split_fingerprint,
        "train_size": int(len(split.train)),
        "heldout_size": int(len(split.val)),
        "base": base,
    }


def fold_packs(train_sizes: Sequence[int], batch_size: int, k: int, at_once: int = 1) -> list[list[int]]:
    """The folds (their indices in ``train_sizes``, each fold model's training images) in packs of
    at most ``k``: folds with as many steps an epoch (``batch_size`` each, the last partial batch
    dropped) share a pack, in as few packs as hold them but no fewer than ``at_once``, as even as
    can be (:func:`autoaug.proxy_models.pack.even_packs`)."""
    by_steps: dict[int, list[int]] = {}
    for i, size in enumerate(train_sizes):
        by_steps.setdefault(int(size) // batch_size, []).append(i)
    out = []
    for folds in by_steps.values():
        out += [[folds[j] for j in pack] for pack in even_packs(len(folds), k, at_once)]
    return out


def train_fold_models(config: SearchConfig, run: RunDir, *, session: str = "start", log: Any = None) -> list[dict]:
    """The ``K`` fold models of ``config`` (trained now as parallel Ray tasks, or read back from
    the run directory when an earlier session trained them). Returns one summary per fold, with
    ``weights`` (bytes) added. ``log``: a callable taking one line of progress.

    With ``config.pack`` above 1 the fold models train in packs (:func:`fold_packs`, each a task of
    :func:`train_fold_pack` on a pack's resources: ``cpus_per_trial`` CPUs and its runs' share of a
    GPU), as the search's other runs do; each fold's summary then says its pack's size (``pack``)."""
    d = config.method_settings(DensityConfig)
    folder = run.location / FOLDS_DIR
    _, splits = fold_splits(config.train, d.folds, d.fold_seed)
    out: dict[int, dict] = {}
    for k, split in enumerate(splits):
        if folder.exists(f"fold{k}.json") and folder.exists(f"fold{k}.pt"):
            info = folder.read_json(f"fold{k}.json")
            if info.get("split_fingerprint") == split.fingerprint and info.get("base", "standard") == config.space.base:
                out[k] = {**info, "weights": folder.read_bytes(f"fold{k}.pt")}
    todo = [k for k in range(d.folds) if k not in out]
    if todo:
        cfg = dataclasses.replace(config.train, num_threads=max(1, int(config.cpus_per_trial))).to_dict()
        pack = run_pack(config)
        in_packs = f", in packs of up to {pack}" if pack > 1 else ""
        if log:
            log(
                f"training {len(todo)} fold model(s) ({config.train.model}, {config.train.epochs} epochs, "
                f"base {config.space.base} alone) on {len(splits[0].train)}-{len(splits[-1].train)} images each{in_packs}"
            )
        pending: list[Any] = []  # (each a fold's summary, or a pack's list of them)
        base = config.space.base
        if pack == 1:
            task = ray.remote(train_fold)
            for k in todo:
                ref = task.options(
                    num_cpus=config.cpus_per_trial,
                    num_gpus=config.gpus_per_trial,
                    name=f"autoaug-fold:{config.name}:{k}",
                ).remote(cfg, k, splits[k].train.tolist(), splits[k].val.tolist(), base)
                pending.append(ref)
        else:
            task = ray.remote(train_fold_pack)
            sizes = [len(splits[k].train) for k in todo]
            for group in fold_packs(sizes, config.train.batch_size, pack, packs_at_once(config, pack)):
                folds = [todo[i] for i in group]
                ref = task.options(
                    num_cpus=config.cpus_per_trial,
                    num_gpus=pack_task_gpus(len(folds), config),
                    name=f"autoaug-fold:{config.name}:" + "+".join(map(str, folds)),
                ).remote(
                    cfg, folds, [splits[k].train.tolist() for k in folds], [splits[k].val.tolist() for k in folds], base
                )
                pending.append(ref)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    result = ray.get(ref)
                    for summary in result if isinstance(result, list) else [result]:
                        k = summary["fold"]
                        weights = summary.pop("weights")
                        info = {**summary, "trained_at": utc_now(), "session": session}
                        folder.write_bytes(weights, f"fold{k}.pt")
                        folder.write_text(metrics_json(info), f"fold{k}.json")
                        out[k] = {**info, "weights": weights}
                        if log:
                            together = f", in a pack of {info['pack']}" if info.get("pack", 1) > 1 else ""
                            log(
                                f"fold model {k + 1}/{d.folds}: held-out accuracy {info['val_accuracy']:.4f}, "
                                f"loss {info['val_loss']:.4f} ({info['train_time_s']:.0f} s{together})"
                            )
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
    return [out[k] for k in range(d.folds)]


# ----------------------------------------------------------------------------------------------
# Scoring
class FoldScorer:
    """A fold model and a DALI loader over its held-out fold whose policy step takes the policy
    as input: :meth:`score` evaluates the model on the held-out images augmented by a policy (each
    image drawing its own sub-policy) without rebuilding anything."""

    def __init__(self, train_config: Any, space: Any, weights: bytes, heldout: Any, *, seed: int = 0):
        cfg = train_config
        self.device = cfg.resolve_device()
        ds = open_dataset(cfg.data, split="train")
        self.learner = Learner(cfg, num_classes=ds.num_classes, steps_per_epoch=1, device=self.device)
        state = torch.load(io.BytesIO(weights), map_location=self.device, weights_only=True)
        self.learner.model.load_state_dict(state)
        spec = PolicyInputs(space.op_choices, space.num_sub_policies, space.ops_per_sub_policy, cfg.image_size)
        self.loader = DaliLoader(
            ds,
            np.asarray(heldout, dtype=np.int64),
            batch_size=eval_batch_size(cfg),
            train=False,
            seed=seed,
            image_size=cfg.image_size,
            num_threads=cfg.loader_threads or cfg.num_threads or 1,
            device=str(self.device),  # "cuda:N": DALI on the model's GPU
            policy_inputs=spec,
        )
        self.num_images = len(self.loader.indices)

    def score(self, policy: Any) -> tuple[float, float]:
        """``(accuracy, mean cross-entropy)`` of the fold model on the held-out fold augmented by
        ``policy`` (None: the plain held-out fold)."""
        self.loader.set_policy(policy)
        return self.learner.evaluate(self.loader)


def objective_value(objective: str, accuracy: float, loss: float) -> float:
    """The search metric of a density trial (maximised)."""
    return accuracy if objective == "accuracy" else -loss
