"""Density matching (Fast AutoAugment, Lim et al., NeurIPS 2019): score candidates without training.

``SearchConfig.method == "density"``. Instead of training the proxy model once per candidate,

1. **Fold models.** The reduced training split is cut into ``K`` stratified folds
   (:func:`autoaug.proxy_models.splits.stratified_folds`). Fold model ``k`` is the proxy model
   (``SearchConfig.train``) trained with the base augmentation ``standard`` on the other ``K-1``
   folds. The ``K`` trainings are Ray tasks (the trials' resources, any node of a cluster); each
   one's weights and held-out scores are written to the run directory (``folds/fold{k}.pt``,
   ``folds/fold{k}.json``) as soon as it finishes, and a resumed search never trains them again.
2. **Scoring trials.** For each fold, ``T`` rounds of ``B`` Ray Tune trials proposed by Optuna
   (``OptunaSearch`` over the same :class:`~autoaug.search.space.SearchSpace` and sampler table as
   the training method; one study per round, ``NAME.f{k}-r{t}``, in the run's Optuna storage). A
   trial applies its candidate policy to the held-out fold with the DALI pipeline -- each image
   draws its own sub-policy, no base crop/flip -- and evaluates the fold model on it: accuracy and
   mean cross-entropy. The pipeline's policy step takes the policy's tables as inputs
   (:class:`autoaug.policies.dali_apply.PolicyInputs`), so a trial process builds its pipeline and
   loads its fold model once and every later trial on that fold only feeds new tables.
   The search metric (:data:`~autoaug.search.config.METRIC`, what Optuna maximises) is the objective,
   ``DensityConfig.objective``: the accuracy, or minus the loss.
3. **Selection.** The ``N`` best candidates of every round are kept; their sub-policies, merged
   with the training method's assembly (duplicates removed), are the final policy, stored with
   the same provenance plus ``method`` (folds, rounds, every fold model's plain held-out scores,
   each round's kept trials) -- every candidate's score is in ``trials``.

Each round is its own Tune experiment in ``{run}/stages/NAME.f{k}-r{t}`` with Tune's own resume;
finished rounds are recorded in ``density.json`` and never run again.
"""
from __future__ import annotations

import dataclasses
import io
import time
from typing import Any, Callable, Mapping

from autoaug.core.metrics import metrics_json
from autoaug.core.errors import SearchFailedError, SearchInterruptedError
from autoaug.search.assemble import TrialRecord, assemble_policy, build_provenance, rank_trials, utc_now
from autoaug.search.config import METRIC, MODE, SearchConfig
from autoaug.search.run_dir import RunDir

__all__ = [
    "DENSITY_FILE",
    "FOLDS_DIR",
    "STAGES_DIR",
    "check_density_config",
    "fold_splits",
    "train_fold_models",
    "FoldScorer",
    "run_density_trial",
    "run_density",
]

#: Finished rounds (their trials and kept candidates) and the fold models' summaries.
DENSITY_FILE = "density.json"
#: Fold models: ``fold{k}.pt`` (weights) and ``fold{k}.json`` (scores, split, timing).
FOLDS_DIR = "folds"
#: Tune experiments of the rounds.
STAGES_DIR = "stages"


# ----------------------------------------------------------------------------------------------
# Checks and folds
def check_density_config(config: SearchConfig) -> None:
    """Checks of a density search that need the whole configuration (``ValueError``)."""
    d, t = config.density, config.train
    if t.train_size:
        smallest_train = t.train_size - -(-t.train_size // d.folds)
        if t.train_size < d.folds:
            raise ValueError(
                f"density.folds is {d.folds} but train.train_size is {t.train_size}: each fold needs at least one image"
            )
        if smallest_train < t.batch_size:
            raise ValueError(
                f"density.folds {d.folds} of train.train_size {t.train_size} leave {smallest_train} images to train a "
                f"fold model, fewer than one batch of {t.batch_size}; lower train.batch_size or the number of folds"
            )
    if len(stage_name(config.name, d.folds - 1, d.rounds - 1)) > 128:
        raise ValueError(f"search name {config.name!r} is too long for the density method's round names; "
                         "use at most 110 characters")


def stage_name(name: str, fold: int, round_: int) -> str:
    """The Tune experiment and Optuna study of round ``round_`` of fold ``fold``."""
    return f"{name}.f{fold}-r{round_}"


def fold_splits(train_config: Any, folds: int, seed: int) -> tuple[Any, list]:
    """``(dataset, [Split per fold])`` of the reduced training split ``train_config`` describes."""
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import reduced_split, stratified_folds

    ds = open_dataset(train_config.data, split="train")
    fingerprint = ds.fingerprint()
    split = reduced_split(ds.labels, train_size=train_config.train_size or None, val_size=train_config.val_size,
                          seed=train_config.split_seed, dataset_fingerprint=fingerprint)
    return ds, stratified_folds(split, ds.labels, folds, seed=seed)


# ----------------------------------------------------------------------------------------------
# Fold models
def _train_fold(train_config: dict, fold: int, train_idx: Any, val_idx: Any) -> dict:
    """Body of one fold-model training (a Ray task): ``standard`` augmentation, the other folds."""
    import numpy as np
    import torch

    from autoaug.proxy_models.splits import Split
    from autoaug.proxy_models.train import TrainConfig, train

    cfg = TrainConfig.from_dict(train_config)
    split = Split(train=np.asarray(train_idx, dtype=np.int64), val=np.asarray(val_idx, dtype=np.int64),
                  seed=cfg.split_seed)
    result = train(cfg, "standard", split=split)
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
    }


def _fold_train_config(config: SearchConfig) -> Any:
    return dataclasses.replace(config.train, num_threads=max(1, int(config.cpus_per_trial)))


def train_fold_models(config: SearchConfig, run: RunDir, *, session: str = "start",
                      log: Callable[[str], None] | None = None) -> list[dict]:
    """The ``K`` fold models of ``config`` (trained now as parallel Ray tasks, or read back from
    the run directory when an earlier session trained them). Returns one summary per fold, with
    ``weights`` (bytes) added."""
    import ray

    d = config.density
    folder = run.location / FOLDS_DIR
    _, splits = fold_splits(config.train, d.folds, d.fold_seed)
    out: dict[int, dict] = {}
    for k, split in enumerate(splits):
        if folder.exists(f"fold{k}.json") and folder.exists(f"fold{k}.pt"):
            info = folder.read_json(f"fold{k}.json")
            if info.get("split_fingerprint") == split.fingerprint:
                out[k] = {**info, "weights": folder.read_bytes(f"fold{k}.pt")}
    todo = [k for k in range(d.folds) if k not in out]
    if todo:
        cfg = _fold_train_config(config).to_dict()
        if log:
            log(f"training {len(todo)} fold model(s) ({config.train.model}, {config.train.epochs} epochs, "
                f"standard augmentation) on {len(splits[0].train)}-{len(splits[-1].train)} images each")
        task = ray.remote(_train_fold)
        pending = {
            task.options(num_cpus=config.cpus_per_trial, num_gpus=config.gpus_per_trial,
                         name=f"autoaug-fold:{config.name}:{k}").remote(
                cfg, k, splits[k].train.tolist(), splits[k].val.tolist()): k
            for k in todo
        }  # fmt: skip
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
                        log(f"fold model {k + 1}/{d.folds}: held-out accuracy {info['val_accuracy']:.4f}, "
                            f"loss {info['val_loss']:.4f} ({info['train_time_s']:.0f} s)")
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
        import numpy as np
        import torch

        from autoaug.policies.dali_apply import PolicyInputs
        from autoaug.proxy_models.data import open_dataset
        from autoaug.proxy_models.pipeline import DaliLoader
        from autoaug.proxy_models.train import EVAL_BATCH_SIZE, Learner

        cfg = train_config
        self.device = cfg.resolve_device()
        ds = open_dataset(cfg.data, split="train")
        self.learner = Learner(cfg, num_classes=ds.num_classes, steps_per_epoch=1, device=self.device)
        state = torch.load(io.BytesIO(weights), map_location=self.device, weights_only=True)
        self.learner.model.load_state_dict(state)
        spec = PolicyInputs(space.op_choices, space.num_sub_policies, space.ops_per_sub_policy, cfg.image_size)
        self.loader = DaliLoader(
            ds, np.asarray(heldout, dtype=np.int64), batch_size=max(cfg.batch_size, EVAL_BATCH_SIZE),
            train=False, seed=seed, image_size=cfg.image_size, num_threads=cfg.num_threads or 1,
            device="gpu" if self.device.type == "cuda" else "cpu", policy_inputs=spec,
        )  # fmt: skip
        self.num_images = len(self.loader.indices)

    def score(self, policy: Any) -> tuple[float, float]:
        """``(accuracy, mean cross-entropy)`` of the fold model on the held-out fold augmented by
        ``policy`` (None: the plain held-out fold)."""
        self.loader.set_policy(policy)
        return self.learner.evaluate(self.loader)


# Trial processes are reused between trials (reuse_actors): the scorer of a fold is built once per
# process. A cache of what a process already built, keyed by the fold model's content.
_SCORERS: dict[str, FoldScorer] = {}


def objective_value(objective: str, accuracy: float, loss: float) -> float:
    """The search metric of a density trial (maximised)."""
    return accuracy if objective == "accuracy" else -loss


def run_density_trial(config: dict, *, train_config: dict, space: dict, policy_prefix: str, fold: dict,
                      score_window: int = 1) -> None:
    """Ray Tune function trainable of a density-matching trial: one candidate, one scoring pass
    (``score_window`` is the training method's and means nothing here: one report per trial)."""
    from ray import tune

    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.space import SearchSpace
    from autoaug.search.trial import trial_policy

    t0 = time.perf_counter()
    search_space = SearchSpace.from_dict(space)
    key = fold["key"]
    scorer = _SCORERS.get(key)
    if scorer is None:
        _SCORERS.clear()  # one fold per process at a time: rounds run one after another
        cfg = TrainConfig.from_dict(train_config)
        scorer = _SCORERS[key] = FoldScorer(cfg, search_space, fold["weights"], fold["heldout"], seed=fold["seed"])
    trial_id = tune.get_context().get_trial_id() or "local"
    policy = trial_policy(config, search_space, f"{policy_prefix}-{trial_id}")
    t1 = time.perf_counter()
    accuracy, loss = scorer.score(policy)
    t2 = time.perf_counter()
    tune.report({
        METRIC: objective_value(fold["objective"], accuracy, loss),
        "fold_accuracy": accuracy, "fold_loss": loss, "epoch": 1, "fold": fold["index"],
        "score_time_s": t2 - t1, "setup_time_s": t1 - t0, "train_time_s": t2 - t0,
    })  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The search
def _stage_config(config: SearchConfig, stage: str, study_url: str, run: RunDir, round_: int) -> SearchConfig:
    """A training-method-shaped configuration for one round's Tune experiment: ``B`` one-step
    trials, FIFO (no ASHA), the run's Optuna storage, Tune's files under ``stages/``."""
    d = config.density
    train = dataclasses.replace(config.train, epochs=1, warmup_epochs=0.0)
    return config.replace(
        name=stage, storage=(run.location / STAGES_DIR).uri, optuna_storage=study_url, train=train,
        num_trials=d.trials_per_round, early_stopping=False, method="train", rescore=False,
        warm_start=config.warm_start if round_ == 0 else (), seed=(config.seed + 7919 * _stage_index(stage, d)) % 2**32,
    )  # fmt: skip


def _stage_index(stage: str, d: Any) -> int:
    fold, round_ = stage.rsplit(".f", 1)[1].split("-r")
    return int(fold) * d.rounds + int(round_)


def _fold_parameters(config: SearchConfig, fold: dict, k: int, heldout: Any) -> dict:
    import hashlib

    return {
        "fold": {
            "key": hashlib.sha256(fold["weights"]).hexdigest()[:16] + f"-{k}",
            "index": k,
            "weights": fold["weights"],
            "heldout": [int(i) for i in heldout],
            "objective": config.density.objective,
            "seed": config.train.seed,
        }
    }


def _stage_records(stage_cfg: SearchConfig, stage_run: RunDir, study: Any, stage: str) -> list[TrialRecord]:
    from ray.tune import ExperimentAnalysis

    from autoaug.search.records import trial_records

    records = trial_records(stage_cfg, stage_run, study)
    extras = {t.trial_id: (t.last_result or {}) for t in ExperimentAnalysis(stage_run.uri).trials}
    out = []
    for r in records:
        last = extras.get(r.trial_id, {})
        note = r.note
        if last.get("fold_accuracy") is not None:
            scores = f"accuracy {last['fold_accuracy']:.6f}, loss {last['fold_loss']:.6f}"
            note = scores if note is None else f"{scores}; {note}"
        out.append(dataclasses.replace(r, trial_id=f"{stage}/{r.trial_id}", note=note))
    return out


def _run_stage(config: SearchConfig, run: RunDir, study_url: str, k: int, round_: int, fold_params: dict,
               *, resume_errored: bool, log: Callable[[str], None]) -> dict:
    """Run (or continue) one round; returns its record for ``density.json``."""
    import optuna
    from ray import tune

    from autoaug.search import tuner as _tuner
    from autoaug.search.study import check_study, delete_study, make_storage

    stage = stage_name(config.name, k, round_)
    cfg = _stage_config(config, stage, study_url, run, round_)
    stage_run = RunDir(cfg.storage, stage)
    trainable = run_density_trial
    d = config.density
    log(f"fold {k + 1}/{d.folds}, round {round_ + 1}/{d.rounds}: scoring {d.trials_per_round} candidates "
        f"on {len(fold_params['fold']['heldout'])} held-out images")
    if stage_run.exists() and tune.Tuner.can_restore(stage_run.uri):
        tuner = tune.Tuner.restore(
            stage_run.uri, trainable=_tuner._trainable(cfg, trainable, fold_params),
            resume_unfinished=True, resume_errored=resume_errored,
        )  # fmt: skip
    else:
        if stage_run.exists():
            stage_run.delete()
        delete_study(stage, study_url)  # a round that stopped before Tune saved anything
        tuner = _tuner._build_tuner(cfg, stage_run, study_url, trainable, parameters=fold_params)
    t0 = time.time()
    _tuner._fit(tuner, cfg)
    study = optuna.load_study(study_name=stage, storage=make_storage(study_url))
    records = _stage_records(cfg, stage_run, study, stage)
    finished = sum(r.finished for r in records)
    if finished < d.trials_per_round:
        raise SearchInterruptedError(
            f"search {config.name!r} stopped in round {round_ + 1} of fold {k + 1} with {finished} of "
            f"{d.trials_per_round} candidates scored; resume it with: autoaug search --resume {config.name} "
            f"--storage {config.storage}"
        )
    plain = [dataclasses.replace(r, trial_id=r.trial_id.split("/", 1)[1]) for r in records]
    problems = check_study(study, plain, cfg.space)
    top = rank_trials(records)[: d.top_per_round]
    best = f"best {METRIC} {top[0].score:.4f}" if top else "no candidate scored"
    log(f"fold {k + 1}/{d.folds}, round {round_ + 1}/{d.rounds} done in {time.time() - t0:.0f} s: {best}")
    return {
        "fold": k, "round": round_, "stage": stage, "trials": [r.to_dict() for r in records],
        "top": [r.trial_id for r in top], "problems": problems, "wall_time_s": time.time() - t0,
    }  # fmt: skip


def _record_from_dict(t: Mapping[str, Any]) -> TrialRecord:
    from autoaug.policies import Policy

    return TrialRecord(
        trial_id=t["trial_id"], index=t["index"], status=t["status"], params=t["params"],
        policy=None if t["policy"] is None else Policy.from_dict(t["policy"]), score=t["score"],
        epochs=t["epochs"], train_time_s=t["train_time_s"], error=t["error"], optuna_number=t["optuna_number"],
        num_failures=t["num_failures"], note=t.get("note"),
    )  # fmt: skip


def run_density(config: SearchConfig, run: RunDir, state: dict, *, study_url: str, session_started: float,
                resume_errored: bool = False) -> dict:
    """Fold models, rounds, selection and storing of a density search (inside a Ray session).
    Returns the ``result.json`` content."""
    from autoaug.policies.store import PolicyStore

    def log(text: str) -> None:
        if config.verbose >= 1:
            print(text, flush=True)

    d = config.density
    kind = (state.get("sessions") or [{}])[-1].get("kind", "start")
    t0 = time.time()
    folds = train_fold_models(config, run, session=f"{kind} {len(state.get('sessions', []))}", log=log)
    fold_wall = time.time() - t0
    _, splits = fold_splits(config.train, d.folds, d.fold_seed)
    done = run.read_json(DENSITY_FILE) if run.exists(DENSITY_FILE) else {"stages": {}}
    done["folds"] = [{k: v for k, v in f.items() if k != "weights"} for f in folds]
    done.setdefault("fold_training_wall_s", {})[str(len(state.get("sessions", [])))] = fold_wall
    run.write_json(DENSITY_FILE, done)
    for k in range(d.folds):
        params = _fold_parameters(config, folds[k], k, splits[k].val)
        for round_ in range(d.rounds):
            stage = stage_name(config.name, k, round_)
            if stage in done["stages"]:
                continue
            done["stages"][stage] = _run_stage(config, run, study_url, k, round_, params,
                                               resume_errored=resume_errored, log=log)
            run.write_json(DENSITY_FILE, done)

    stages = [done["stages"][stage_name(config.name, k, r)] for k in range(d.folds) for r in range(d.rounds)]
    trials = [_record_from_dict(t) for s in stages for t in s["trials"]]
    trials = [dataclasses.replace(t, index=i) for i, t in enumerate(trials)]
    by_id = {t.trial_id: t for t in trials}
    kept = [by_id[i] for s in stages for i in s["top"]]
    if not kept:
        failed = [t for t in trials if t.status == "failed"]
        first = failed[0] if failed else trials[0]
        raise SearchFailedError(
            f"all {len(trials)} candidates of search {config.name!r} failed; first error "
            f"(trial {first.trial_id}): {first.error or 'no score reported'}"
        )
    assembled = assemble_policy(kept, name=config.name, top_n=len(kept),
                                num_magnitude_bins=config.space.num_magnitude_bins, base=config.space.base,
                                ranges=config.space.ranges)  # fmt: skip
    now = time.time()
    problems = [f"{s['stage']}: {p}" for s in stages for p in s["problems"]]
    timing = {
        "started_at": state.get("started_at"), "finished_at": utc_now(),
        "elapsed_s": now - float(state.get("started_ts", session_started)),
        "last_session_s": now - session_started, "sessions": state.get("sessions", []),
        "trial_train_time_s": sum(t.train_time_s or 0.0 for t in trials),
        "fold_training_s": sum(float(f.get("train_time_s") or 0.0) for f in done["folds"]),
        "fold_training_wall_s": done.get("fold_training_wall_s", {}),
        "rounds_wall_s": sum(float(s.get("wall_time_s") or 0.0) for s in stages),
    }  # fmt: skip
    optuna_info = {
        "storage": _redact(study_url), "study_name": [s["stage"] for s in stages], "num_trials": len(trials),
        "consistent_with_tune": not problems, "problems": problems,
    }
    provenance = build_provenance(
        search_config=config.to_dict(), data=state["data"], trials=trials, assembled=assembled, metric=METRIC,
        mode=MODE, run_dir=run.uri, optuna=optuna_info, timing=timing,
    )  # fmt: skip
    provenance["method"] = {
        "name": "density",
        "objective": d.objective,
        "metric_is": "fold accuracy" if d.objective == "accuracy" else "minus the fold loss",
        "folds": d.folds, "rounds": d.rounds, "trials_per_round": d.trials_per_round,
        "top_per_round": d.top_per_round, "fold_seed": d.fold_seed,
        "fold_models": done["folds"],
        "rounds_kept": [{"stage": s["stage"], "fold": s["fold"], "round": s["round"], "kept": s["top"]}
                        for s in stages],
    }  # fmt: skip
    store = PolicyStore(config.store)
    final = assembled.policy
    version = store.save(final, config.name, metadata=provenance)
    return {
        "policy": final.to_dict(),
        "policy_hash": final.content_hash,
        "stored": {"name": config.name, "version": version, "ref": f"{config.name}@{version}", "store": store.uri},
        "provenance": provenance,
    }


def _redact(url: str) -> str:
    from autoaug.search.study import redact

    return redact(url)


def describe(config: SearchConfig) -> str:
    """One line for ``autoaug search``'s header."""
    d = config.density
    return (f"  method: density matching, {d.folds} folds x {d.rounds} rounds x {d.trials_per_round} candidates "
            f"({d.num_trials} trials), top {d.top_per_round} per round, objective {d.objective}")
