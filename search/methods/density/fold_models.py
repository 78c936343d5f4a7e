"""The density method's fold models (Fast AutoAugment): the folds of the reduced training split,
the fold models trained on them (Ray tasks, saved in the run directory) and :class:`FoldScorer`,
which evaluates a fold model on its held-out fold augmented by a candidate policy."""

from __future__ import annotations

import dataclasses
import io
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import torch

from autoaug.core.metrics import metrics_json
from autoaug.policies.dali_apply import PolicyInputs
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.pipeline import DaliLoader
from autoaug.proxy_models.splits import Split, config_groups, config_split, stratified_folds
from autoaug.proxy_models.train import TrainConfig, train
from autoaug.proxy_models.train_config import eval_batch_size
from autoaug.search.methods.density.settings import DensityConfig
from autoaug.search.run_dir import RunDir, utc_now

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["FOLDS_DIR", "fold_splits", "train_fold", "train_fold_models", "FoldScorer", "objective_value"]

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
    split = Split(
        train=np.asarray(train_idx, dtype=np.int64), val=np.asarray(val_idx, dtype=np.int64), seed=cfg.split_seed
    )
    result = train(cfg, base, split=split)  # the presets none, crop, standard are the bases alone
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


def train_fold_models(config: SearchConfig, run: RunDir, *, session: str = "start", log: Any = None) -> list[dict]:
    """The ``K`` fold models of ``config`` (trained now as parallel Ray tasks, or read back from
    the run directory when an earlier session trained them). Returns one summary per fold, with
    ``weights`` (bytes) added. ``log``: a callable taking one line of progress."""
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
        if log:
            log(
                f"training {len(todo)} fold model(s) ({config.train.model}, {config.train.epochs} epochs, "
                f"base {config.space.base} alone) on {len(splits[0].train)}-{len(splits[-1].train)} images each"
            )
        task = ray.remote(train_fold)
        pending = {
            task.options(
                num_cpus=config.cpus_per_trial, num_gpus=config.gpus_per_trial, name=f"autoaug-fold:{config.name}:{k}"
            ).remote(cfg, k, splits[k].train.tolist(), splits[k].val.tolist(), config.space.base): k
            for k in todo
        }
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    k = pending.pop(ref)
                    result = ray.get(ref)
                    weights = result.pop("weights")
                    info = {**result, "trained_at": utc_now(), "session": session}
                    folder.write_bytes(weights, f"fold{k}.pt")
                    folder.write_text(metrics_json(info), f"fold{k}.json")
                    out[k] = {**info, "weights": weights}
                    if log:
                        log(
                            f"fold model {k + 1}/{d.folds}: held-out accuracy {info['val_accuracy']:.4f}, "
                            f"loss {info['val_loss']:.4f} ({info['train_time_s']:.0f} s)"
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
