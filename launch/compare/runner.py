"""Running a comparison: every (policy, seed) pair is one Ray task training
:func:`autoaug.proxy_models.train.train`; finished runs are saved as ``runs/<run id>.json`` as
soon as they finish and reused by a re-run with the same ``--out``."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import ray
from ray.util.queue import Queue

from autoaug.core import ray_session as cluster
from autoaug.core.errors import CompareError, RunFailedError
from autoaug.core.location import Location
from autoaug.core.machine import left_out_line, one_kind
from autoaug.core.metrics import metrics_json
from autoaug.launch.compare.candidates import Candidate, resolve_candidates
from autoaug.launch.compare.config import CompareConfig
from autoaug.launch.compare.per_class import run_balanced_accuracy
from autoaug.launch.compare.report import Comparison, _pct, attach_evaluations, summarize, write_outputs
from autoaug.launch.compare_task import train_one, train_pack_runs
from autoaug.proxy_models.data import open_dataset
from autoaug.proxy_models.train_config import resolve_config, sizing_record

if TYPE_CHECKING:
    from autoaug.core.progress import Progress

__all__ = ["run_compare", "run_id", "run_record", "load_run", "sized_to_data"]

#: Training-config fields that may differ between a stored run and the comparison reusing it:
#: they do not change what is computed (where the data lives, how many threads run it; DALI's
#: output does not depend on its thread count).
_REUSABLE_CHANGES = frozenset({"data", "test_data", "num_threads", "loader_threads", "device"})
#: Optional fields added later keep the format: a record without ``test_class_correct`` /
#: ``test_class_total`` (written before per-class counts existed) still loads; its per-class and
#: balanced accuracies are reported as unavailable (autoaug.launch.compare.per_class).
_RUN_FORMAT = 1


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "policy"


def run_id(candidate: Candidate, seed: int) -> str:
    """File-name-safe id of one run: ``<label>-<hash prefix>-seed<seed>``."""
    return f"{_slug(candidate.label)}-{candidate.policy_hash[:8]}-seed{seed}"


def run_record(candidate: Candidate, seed: int, config: Any, outcome: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "format": _RUN_FORMAT,
        "run_id": run_id(candidate, seed),
        "policy": candidate.label,
        "kind": candidate.kind,
        "ref": candidate.ref,
        "store_ref": candidate.store_ref,
        "policy_hash": candidate.policy_hash,
        "policy_json": candidate.policy.to_dict(),
        **({} if candidate.schedule is None else {"schedule_json": candidate.schedule.to_dict()}),
        "base": candidate.base,
        "rebased_from": candidate.rebased_from,
        "seed": seed,
        "train_config": config.to_dict(),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        **dict(outcome),
    }


def load_run(
    data: bytes | None, path: str, candidate: Candidate, seed: int, config: Any, dataset_fp: str
) -> dict[str, Any] | None:
    """The stored record (``data``, read from ``path``) of a finished run if it matches this
    comparison; None when there is none; raises :class:`CompareError` if it is stale."""
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise CompareError(f"{path} is not a readable run record ({exc}); delete it to train that run again") from None
    if record.get("format") != _RUN_FORMAT or record.get("test_accuracy") is None:
        raise CompareError(f"{path} is not a finished run record of this version; delete it to train that run again")
    problems = []
    if record.get("policy_hash") != candidate.policy_hash:
        problems.append(f"policy hash {str(record.get('policy_hash'))[:12]} vs {candidate.policy_hash[:12]}")
    # records written before "base" existed: the base is in the policy (absent: standard)
    recorded_base = record.get("base") or (record.get("policy_json") or {}).get("base", "standard")
    if recorded_base != candidate.base:
        problems.append(f"base {recorded_base} vs {candidate.base}")
    for key, before, now in config.changed_fields(record.get("train_config", {}), ignore=_REUSABLE_CHANGES):
        problems.append(f"{key}: {before!r} vs {now!r}")
    if record.get("dataset_fingerprint") != dataset_fp:
        problems.append("the training data differ (dataset fingerprint)")
    if problems:
        raise CompareError(
            f"{path} holds a run of another comparison ({'; '.join(problems)}); use another --out, "
            "or delete that folder's runs/ to train again"
        )
    return record


def sized_to_data(config: CompareConfig) -> tuple[CompareConfig, str, dict[str, Any], tuple[str, ...]]:
    """``(config with its training config sized to the data, dataset fingerprint, sizing record,
    class names)``.

    The one place a comparison resolves its regime (:func:`autoaug.proxy_models.train_config.resolve_config`:
    a split per class becomes a total, an automatic image size the data's own): every run trains,
    and every run record keeps, the resolved config, so finished runs are reused exactly when
    they computed the same thing, whichever way the regime was asked for. The fingerprint covers
    the class names."""
    t = config.train
    try:
        ds = open_dataset(t.data, split="train")
        resolved = resolve_config(t, ds)
        fp = ds.fingerprint()
        test = open_dataset(t.test_data, split="test")
    except (ValueError, OSError) as exc:  # DatasetError is a ValueError
        raise CompareError(str(exc)) from None
    if tuple(test.classes) != tuple(ds.classes):
        raise CompareError(
            f"test data {t.test_data} has classes {list(test.classes)[:10]}, but the training data "
            f"{t.data} has {list(ds.classes)[:10]}"
        )
    sizing = sizing_record(t, resolved, num_classes=ds.num_classes)
    return dataclasses.replace(config, train=resolved), fp, sizing, tuple(ds.classes)


def _describe_run(r: Mapping[str, Any]) -> str:
    where = f", node {r['node_id'][:8]}" if r.get("node_id") else ""
    val = r.get("val_accuracy")
    val_txt = f", val {_pct(val, 1)}%" if val is not None else ""
    balanced = run_balanced_accuracy(r)
    bal_txt = f" (balanced {_pct(balanced, 2)}%)" if balanced is not None else ""
    pack = f" in a pack of {r['pack']}" if r.get("pack", 1) > 1 else ""
    return (
        f"{r['policy']} seed {r['seed']}: test {_pct(r['test_accuracy'], 2)}%{bal_txt}{val_txt} "
        f"({r['train_time_s']:.0f} s{pack}{where})"
    )


def run_compare(
    config: CompareConfig, *, progress: Callable[[str], Any] | None = None, display: Progress | None = None
) -> Comparison:
    """Train every (policy, seed) run not finished yet, then summarise, write and attach.

    ``progress(line)`` receives one line per finished (or reused) run, ``[k/total] ...``, and a
    few status lines. ``display`` (an :class:`autoaug.core.progress.Progress`) also gets a bar of
    the runs (done/total, ETA) and one bar of epochs per running run, fed after every epoch
    through a Ray queue; its lines replace ``progress``. Raises :class:`CompareError` for bad input
    or a failed run (the runs that finished stay saved, so re-running resumes).
    """
    say = display.log if display is not None else (progress or (lambda line: None))
    candidates = resolve_candidates(config.policies, config.baselines, config.store, config.base)
    config, dataset_fp, sizing, classes = sized_to_data(config)
    out = Location.parse(config.out, what="--out")
    try:
        out.child("runs").mkdir()
        out.write_text(json.dumps({**_config_dict(config, candidates), "sizing": sizing}, indent=2), "compare.json")
    except OSError as exc:
        raise CompareError(f"cannot write to --out {out.uri}: {exc}") from None

    jobs = [(c, seed) for c in candidates for seed in config.seeds]
    total = len(jobs)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    todo: list[tuple[Candidate, int]] = []
    for c, seed in jobs:
        rel = f"runs/{run_id(c, seed)}.json"
        record = load_run(
            out.read_bytes_if_exists(rel), out.child(rel).uri, c, seed, config.run_config(seed), dataset_fp
        )
        if record is None:
            todo.append((c, seed))
        else:
            done[(c.policy_hash, seed)] = record
    say(
        f"compare: {len(candidates)} policies x {len(config.seeds)} seeds = {total} runs"
        + (f" ({len(done)} finished earlier, reused from {out.child('runs').uri})" if done else "")
    )
    t = config.train
    say(f"compare: {t.model}, {t.epochs} epochs, {t.describe_split()}, {t.image_size}x{t.image_size} images")
    for i, record in enumerate(done.values(), 1):
        say(f"[{i}/{total}] reused  {_describe_run(record)}")

    trained = 0
    if todo:
        trained = _run_all(config, todo, done, out, total, say, display)

    runs = [done[(c.policy_hash, seed)] for c, seed in jobs]
    # Paired by seed only within one kind of machine: the runs of another kind (reused records trained
    # elsewhere, a cluster of two kinds) are left out, in one line.
    split = one_kind(runs)
    left = left_out_line(
        split,
        lambda r: f"{r['policy']} seed {r['seed']}",
        hint=f"train them on one kind: delete their records in {out.child('runs').uri} to train them here, "
        "or compare in another --out",
    )
    if left:
        say(f"compare: {left}")
    comparison = Comparison(
        config=config,
        candidates=candidates,
        runs=split.kept,
        summaries=summarize(candidates, split.kept),
        dataset_fingerprint=dataset_fp,
        trained=trained,
        classes=classes,
        machine=split.describe() if split.kind is not None else None,
        left_out=split.left_out,
        left_out_note=left,
    )
    write_outputs(comparison)
    if config.attach:
        attach_evaluations(comparison)
    return comparison


def _config_dict(config: CompareConfig, candidates: Sequence[Candidate]) -> dict[str, Any]:
    return {
        "policies": list(config.policies),
        "baselines": list(config.baselines),
        "base": config.base,
        "candidates": [
            {
                "label": c.label,
                "ref": c.ref,
                "kind": c.kind,
                "store_ref": c.store_ref,
                "policy_hash": c.policy_hash,
                "base": c.base,
                "rebased_from": c.rebased_from,
            }
            for c in candidates
        ],
        "seeds": list(config.seeds),
        "train_config": config.train.to_dict(),
        "cpus_per_run": config.cpus_per_run,
        "gpus_per_run": config.gpus_per_run,
        "pack": config.pack,
        "address": config.address,
    }


def _run_all(
    config: CompareConfig,
    todo: Sequence[tuple[Candidate, int]],
    done: dict[tuple[str, int], dict[str, Any]],
    out: Location,
    total: int,
    say: Callable[[str], Any],
    display: Progress | None = None,
) -> int:
    """Train the runs of ``todo`` as Ray tasks, each record saved (``out``) and kept in ``done`` as
    soon as it finishes; returns how many were trained."""
    with cluster.ray_session(config.address, **cluster.output_settings(bool(config.verbose))) as info:
        each = f"in packs of up to {config.pack}, {config.cpus_per_run} CPU(s) per pack" if config.pack > 1 else ""
        say(
            f"compare: {len(todo)} runs to train on {info.describe()}; "
            + (each or f"{config.cpus_per_run} CPU(s) per run")
        )
        _check_fits_a_node(config, info)
        bars = display is not None and display.live
        queue = None
        if bars:
            queue = Queue(actor_options={"num_cpus": 0})  # takes no CPU from the runs
            epochs = config.train.epochs
            display.add(
                "runs", "compare", total=total, unit="runs", completed=len(done), status=f"{len(todo)} to train"
            )
        pending = _submit(config, todo, queue)
        finished: set[str] = set()  # run ids whose bar is gone (a late queue item must not bring it back)
        trained = 0
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5 if bars else None)
                if bars:
                    _show_epochs(display, queue, epochs, finished)
                for ref in ready:
                    members = pending.pop(ref)
                    try:
                        outcomes = ray.get(ref)
                    except Exception as exc:
                        cause = getattr(exc, "cause", None) or exc
                        c, seed, _ = members[0]
                        what = f"run {c.label} seed {seed}" + (
                            f" (in a pack of {len(members)})" if len(members) > 1 else ""
                        )
                        raise RunFailedError(
                            f"{what} failed: {type(cause).__name__}: {cause}".splitlines()[0]
                            + f" ({len(done)} finished runs are saved in {out.child('runs').uri}; re-run to resume)"
                        ) from None
                    for (c, seed, run_cfg), outcome in zip(
                        members, outcomes if isinstance(outcomes, list) else [outcomes]
                    ):
                        record = run_record(c, seed, run_cfg, outcome)
                        out.write_text(metrics_json(record, indent=1), f"runs/{record['run_id']}.json")
                        done[(c.policy_hash, seed)] = record
                        trained += 1
                        say(f"[{len(done)}/{total}] trained {_describe_run(record)}")
                        if bars:
                            finished.add(record["run_id"])
                            display.remove(f"run:{record['run_id']}")
                    if bars:
                        display.update("runs", completed=len(done), status=f"{len(pending)} left")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if bars:
                display.remove("runs")
                for c, seed in todo:
                    display.remove(f"run:{run_id(c, seed)}")
    return trained


def _check_fits_a_node(config: CompareConfig, info: Any) -> None:
    """A task asking for more than any single node has would wait forever: refused here."""
    short = cluster.shortfall(config.cpus_per_run, config.gpus_per_run)
    if short is not None:
        hint = (
            "lower --cpus-per-run"
            if short.resource == "CPU"
            else "use --gpus-per-run 0 with a CPU preset (--preset cpu) or run on GPU machines"
        )
        raise CompareError(f"each run {short.text} ({info.describe()}); {hint}")


def _submit(
    config: CompareConfig, todo: Sequence[tuple[Candidate, int]], queue: Any
) -> dict[Any, list[tuple[Candidate, int, Any]]]:
    """Submit every run of ``todo`` as a Ray task, or with ``config.pack`` above 1 as packs (one
    task of :func:`~autoaug.launch.compare_task.train_pack_runs` each, planned by
    :func:`~autoaug.proxy_models.pack.plan_packs`); ``{its object ref: [(candidate, seed, its
    config), ...]}``."""
    pending: dict[Any, list[tuple[Candidate, int, Any]]] = {}
    runs = [(c, seed, config.run_config(seed)) for c, seed in todo]
    # a node or worker that died: retried twice; an exception in training: not retried
    retry = {"max_retries": 2, "retry_exceptions": False}
    if config.pack == 1:
        task = ray.remote(train_one)
        for c, seed, run_cfg in runs:
            ref = task.options(
                num_cpus=config.cpus_per_run,
                num_gpus=config.gpus_per_run,
                name=f"autoaug-compare:{run_id(c, seed)}",
                **retry,
            ).remote(run_cfg.to_dict(), c.trained.to_dict(), queue, run_id(c, seed))
            pending[ref] = [(c, seed, run_cfg)]
        return pending
    from autoaug.proxy_models.pack import plan_packs
    from autoaug.proxy_models.pack_sizing import pack_gpus

    task = ray.remote(train_pack_runs)
    for members in plan_packs([cfg for _, _, cfg in runs], config.pack, at_once=_packs_at_once(config)):
        group = [runs[i] for i in members]
        ids = [run_id(c, seed) for c, seed, _ in group]
        ref = task.options(
            num_cpus=config.cpus_per_run,
            num_gpus=pack_gpus(len(group), config.gpus_per_run),
            name=f"autoaug-compare:{ids[0]}" + (f"+{len(ids) - 1}" if len(ids) > 1 else ""),
            **retry,
        ).remote([cfg.to_dict() for _, _, cfg in group], [c.trained.to_dict() for c, _, _ in group], queue, ids)
        pending[ref] = group
    return pending


def _packs_at_once(config: CompareConfig) -> int:
    """How many packs of ``config.pack`` runs the Ray cluster trains at once (at least 1): each
    ``cpus_per_run`` CPUs and its runs' GPUs, at most one."""
    from autoaug.proxy_models.pack_sizing import pack_gpus

    return cluster.tasks_at_once(config.cpus_per_run, pack_gpus(config.pack, config.gpus_per_run))


def _show_epochs(display: Progress, queue: Any, epochs: int, finished: set[str]) -> None:
    """Move the per-run epoch bars by what the runs put on the queue since the last call."""
    try:
        items = queue.get_nowait_batch(queue.qsize())
    except Exception:  # the queue actor is gone: no epoch bars
        return
    for key, epoch, val in items:
        if key in finished:
            continue
        name = f"run:{key}"
        if not display.has(name):
            display.add(name, f"  {key}", total=epochs, unit="epochs")
        display.update(name, completed=epoch, status="" if val is None else f"val {100 * val:.1f}%")
