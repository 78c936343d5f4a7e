"""Does searching pay? The gain of a search's stored policy over its starting policy as trials grow.

For one dataset, on the search's own score (the proxy), three resumable stages (re-running the same
command reuses every finished search and every finished re-scoring run):

1. **searches** -- ``autoaug search --preset cpu --num-trials N --sampler S`` for each ``N`` of
   ``--trials`` (default 28, 100, 300) and each ``S`` of ``--samplers`` (default ``tpe`` and
   ``random``: Optuna's RandomSampler; ``tpe,random,local`` adds a column of the ``local``
   sampler, moves from the incumbent), in that order; a column ``S-LABEL`` is sampler ``S`` with
   the ``autoaug search`` arguments of ``--variant LABEL=ARGS`` (e.g. ``--samplers
   random,random-g60 --variant "g60=--grace-period 60"``: the same search with ASHA's first rung
   at epoch 60), named ``sg-nN-S-LABEL``. The first search measures the base and
   the published policies on the data (the preset's calibration); the others reuse its runs
   (``--calibration-from``: the same data, split and proxy; a later command with other
   ``--trials``/``--samplers`` reuses the calibration already in the work folder), so every search starts from the same
   base and warm start and spends its time on its trials (``--own-calibration``: each measures
   its own). The preset's 30-minute time budget would cut a search of more trials than the
   preset's own (28), so those run with ``--set time_budget_s=null`` (no budget: all N trials
   run). Each search's wall time and the CPU-seconds of the processes it started (sampled from
   ``/proc``, ``benchmarks/suite_cpu.py``) are summed over the sessions it took.
2. **rescore** -- each search's stored policy and its warm start (the published policy that
   transferred best, on the chosen base: the provenance's ``calibration.transfer``) trained under
   the proxy with the same ``--rescore-seeds`` K fresh seeds (``train.seed + 3000 + i``: seeds no
   trial, re-scoring or calibration run used), the search's re-scoring configuration (the trials'
   training, validated over the score's window), through the search's own loop of proxy runs
   (:func:`autoaug.search.decide.proxy_runs.train_runs`). Every finished run is saved
   (``rescore.json``, keyed by policy, seed and training configuration), so the warm start's K
   runs are trained once for all the searches that share it. A search that stored its warm start
   (nothing it found beat it in its own re-scoring) has its best own candidate trained with the
   same K seeds too (:func:`challenger`): what the search found, measured against the warm start
   as the stored policies are, whether or not the search's one-seed re-scoring kept it.
3. **eval** (``--eval``) -- the stored policy of the best cell (highest mean gain) and the warm
   start in the evaluation regime (``--eval-preset``, default ``eval-cpu``; ``--eval-seeds``, 5
   by default, paired) through ``autoaug compare``, as ``benchmarks/search_quality.py`` does.
   With ``--race``: the best cell of the race table, and the policy its search stored with the race.
   ``--eval-cell CELL`` evaluates that cell's policy instead (``28/random``, or ``pba`` of ``--methods``).
   ``--import-runs CSV`` reuses an earlier benchmark's runs of these policies (the same policy hash,
   seed and regime; e.g. the warm start's, evaluated by ``search_quality.py``).

4. **race** (``--race M``) -- each finished search finished again with the re-scoring race up
   to M runs per candidate (``rescore_max_seeds``, :func:`autoaug.search.decide.rescore.race`):
   its run directory copied with that one setting changed, then ``autoaug search --resume``
   (:func:`replay_race`); the policy it stores re-scored with the same K seeds. Without a time
   budget a search's trials do not depend on the setting, so the replay stores what the search
   with the race would have; a search that ran under a budget is not replayed.

5. **other methods** (``--methods density,pba``) -- a row each: that method's search at its CPU
   preset (``density-cpu``: Fast AutoAugment's density matching; ``pba-cpu``: PBA's schedule),
   its stored policy (PBA's: its schedule, each epoch with its stage's policy) trained with the same K seeds under the same re-scoring configuration as the
   first training-method search's cells and paired with the same warm-start runs (these methods
   have no warm start of their own), so the rows read like the cells above.

``--report-only`` starts no search and no replay: it reports the finished ones (training only the
K-seed runs they lack), e.g. to put rows measured by separate commands in one table.

The report (``results.md``, ``gain.json``) has one row per N and, per sampler, the gain of the
stored policy over the warm start in points (mean of the K paired differences, 95% Student-t CI;
bold when the CI excludes 0) and the search's wall time and CPU-seconds; and whether ASHA's
rungs ranked the searches' own trials (Spearman's rho between a trial's score at one rung and the
next, :func:`autoaug.search.decide.rungs.rung_ranking`).

::

    python benchmarks/search_gain.py --data ../shared/data/cifar10-jpeg               # hours, 2 cores
    python benchmarks/search_gain.py --data ../shared/data/gtsrb-32-png --eval
    python benchmarks/search_gain.py --data ../shared/data/cifar10-jpeg --smoke       # plumbing, minutes
    python benchmarks/search_gain.py --data ../shared/data/cifar10-jpeg --trials 28 --race 3
    python benchmarks/search_gain.py --data ../shared/data/cifar10-jpeg --trials 28 --methods density,pba

Scratch (run directories, the store, logs, ``rescore.json``) goes to ``--work`` (default
``runs/search-gain/<dataset>``); the small result files to ``--out`` (default
``benchmarks/results/search-gain-<dataset>/``). Interrupt it (Ctrl-C, or SIGTERM to its process
group) and run the same command again, another day if need be: finished searches and runs are
reused and an interrupted search resumes (``autoaug search --resume``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_runs import REPO, Timings, _autoaug, _compare, _now, _read_runs, import_runs  # noqa: E402
from search_gain_report import (  # noqa: E402  (what the searches and runs left, read and written up)
    cells_from,
    read_json,
    report,
    write_json,
)
from search_gain_stats import (  # noqa: E402  (pure: statistics, tables, bookkeeping)
    GAIN_SEED_OFFSET,
    METHOD_PRESETS,
    SEARCHES_FILE,
    add_session,
    best_cell,
    calibrator,
    column_parts,
    method_cells,
    plan,
    points,
    race_name,
    result_path,
    run_key,
    search_name,
    train_key,
)
from search_quality_stats import paired, summarize  # noqa: E402
from suite_cpu import sample  # noqa: E402

RESCORE_FILE = "rescore.json"  # every finished re-scoring run
CPU_SAMPLE_S = 2.0  # seconds between two samples of a search's processes' CPU (benchmarks/suite_cpu.py)
LEDGER_EVERY_S = 60.0  # seconds between two records of a running search's session in searches.json


def search_args(a: argparse.Namespace, work: Path, n: int, sampler: str, calibrated_by: str | None) -> list[str]:
    """``autoaug search`` arguments of the search of ``n`` trials with ``sampler`` (a new one); for
    a method of ``--methods`` (``sampler`` ``density`` or ``pba``), that method with its CPU preset
    (:data:`METHOD_PRESETS`), sized by the preset, measuring its own base (its proxy is not the
    ``cpu`` preset's, so the first search's calibration is not reused)."""
    if sampler in METHOD_PRESETS:
        preset = "smoke" if a.smoke else METHOD_PRESETS[sampler]
        args = ["search", "--data", a.data, "--method", sampler, "--preset", preset, "--name", search_name(n, sampler)]
        args += ["--storage", str(work / "runs"), "--store", str(work / "store"), "--seed", str(a.search_seed)]
        if a.smoke:
            args += ["--base", "auto"]
        if a.address:
            args += ["--address", a.address]
        return args + shlex.split(a.method_args)
    base, variant = column_parts(sampler)
    args = [
        "search",
        "--data",
        a.data,
        "--preset",
        a.preset,
        "--name",
        search_name(n, sampler),
        "--storage",
        str(work / "runs"),
        "--store",
        str(work / "store"),
        "--seed",
        str(a.search_seed),
        "--num-trials",
        str(n),
        "--sampler",
        base,
        *(shlex.split(a.variants[variant]) if variant else []),
    ]
    if a.preset_budget and n > a.preset_trials:  # the preset's time budget is sized for its own trials: lifted
        args += ["--set", "time_budget_s=null"]
    if a.smoke:  # the smoke preset measures nothing before its trials: as the cpu preset does
        args += ["--base", "auto", "--warm-start", "auto", "--space", "auto"]
    if calibrated_by:
        args += ["--calibration-from", calibrated_by]
    if a.address:
        args += ["--address", a.address]
    return args + shlex.split(a.search_args)


def run_search(a: argparse.Namespace, work: Path, n: int, sampler: str, calibrated_by: str | None) -> dict:
    """Run, resume or reuse one search; its ``result.json``. The session's wall time and the CPU
    of the processes it started go to ``searches.json`` even when it is interrupted."""
    name = search_name(n, sampler)
    result = result_path(work, name)
    if result.exists():
        print(f"search {name}: reusing the finished search")
        return json.loads(result.read_text())
    if a.report_only:
        return {}
    if (work / "runs" / name).exists():
        args = ["search", "--resume", name, "--storage", str(work / "runs")]
        if a.address:
            args += ["--address", a.address]
    else:
        args = search_args(a, work, n, sampler, calibrated_by)
    return _run_logged(work, name, args, result, work / f"{name}.log", f"the search {name}")


def _run_logged(work: Path, name: str, args: list[str], result: Path, log: Path, what: str) -> dict:
    """``autoaug ARGS`` until it writes ``result``; its wall time and the CPU of the processes it
    started added to ``searches.json`` under ``name`` (also when it is interrupted)."""
    before = {pid for pid in os.listdir("/proc") if pid.isdigit()}
    procs: dict[str, dict] = {}
    stop = threading.Event()
    me = str(os.getpid())
    # the processes this one starts from now on (not itself: ``before`` holds it), every CPU_SAMPLE_S
    sampler_thread = threading.Thread(target=sample, args=(stop, CPU_SAMPLE_S, before, procs, lambda: me), daemon=True)
    sampler_thread.start()
    start, code = time.monotonic(), None
    session, command = f"{_now()}-{me}-{uuid.uuid4().hex[:8]}", "autoaug " + shlex.join(args)

    def record(finished: bool) -> None:
        ledger = read_json(work / SEARCHES_FILE, {})
        cpu = sum(p["cpu_s"] for p in list(procs.values()))
        add_session(ledger, name, time.monotonic() - start, cpu, command, finished, _now(), session=session)
        write_json(work / SEARCHES_FILE, ledger)

    def keep_recording() -> None:  # a session killed with the machine keeps its last minute's record
        while not stop.wait(LEDGER_EVERY_S):
            record(False)

    recorder = threading.Thread(target=keep_recording, daemon=True)
    recorder.start()
    try:
        code, _ = _autoaug(args, log)
    finally:
        stop.set()
        sampler_thread.join()
        recorder.join()
        record(result.exists())
    if code != 0 or not result.exists():
        raise SystemExit(f"search_gain: {what} failed (exit {code}); see {log}; re-run this command to resume it")
    return json.loads(result.read_text())


def replay_race(a: argparse.Namespace, work: Path, cell: tuple[int, str], result: dict) -> dict | None:
    """The search of ``cell`` finished again with the re-scoring race up to ``a.race`` runs per
    candidate (``rescore_max_seeds``): its run directory (and the one whose calibration it reused)
    copied under ``work/race<M>/runs`` with that one setting changed, then ``autoaug search
    --resume``: Tune finds every trial finished, so the search goes straight to re-scoring (its
    first round's runs are in the copied ``rescore.json``), races and stores. Without a time
    budget the trials do not depend on the setting (a budget keeps time for the race's rounds), so
    this is what the search with the race would have stored. None (said) for a search with a
    budget, or with no re-scoring."""
    import shutil

    name = search_name(*cell)
    config = result["provenance"]["search"]["config"]
    if config.get("time_budget_s") is not None or not config.get("rescore"):
        print(f"race: {name} not replayed: it ran under a time budget or without re-scoring")
        return None
    root = work / f"race{a.race}"
    res = root / "runs" / name / "result.json"
    if res.exists():
        return json.loads(res.read_text())
    if a.report_only:
        return None
    for other in filter(None, [name, config.get("calibration_from")]):
        dest = root / "runs" / other
        if dest.exists():
            continue
        shutil.copytree(work / "runs" / other, dest, ignore=shutil.ignore_patterns("result.json"))
        path = dest / "search_config.json"
        saved = json.loads(path.read_text())
        saved["config"].update(storage=str(root / "runs"), store=str(root / "store"), rescore_max_seeds=a.race)
        write_json(path, saved)
    args = ["search", "--resume", name, "--storage", str(root / "runs")]
    if a.address:
        args += ["--address", a.address]
    label = race_name(name, a.race)
    return _run_logged(work, label, args, res, work / f"{label}.log", f"the race replay of {name}")


# ------------------------------------------------------------------------------------ re-scoring
def search_config(result: dict) -> Any:
    from autoaug.search.config import SearchConfig

    return SearchConfig.from_dict(result["provenance"]["search"]["config"])


def warm_start(result: dict, config: Any) -> tuple[Any, str]:
    """The search's warm start as a policy on its base, and what it is: the published policy that
    transferred best (``calibration.transfer``), else the first warm-start reference moved onto the
    stored policy's base. Refused in one line when the search had none."""
    from autoaug.policies import Policy, resolve_policy
    from autoaug.search.decide.calibrate import transfer_candidate

    calibration = result["provenance"].get("calibration") or {}
    candidate = transfer_candidate(calibration, "warm-start")
    if candidate is not None:
        t = calibration["transfer"]
        return candidate.policy, f"{t['best']} on {t['base']} (transferred best in calibration)"
    stored = Policy.from_dict(result["policy"])
    refs = config.warm_start if isinstance(config.warm_start, (list, tuple)) else ()
    if not refs:
        raise SystemExit(
            f"search_gain: the search {result['provenance']['search']['config'].get('name')!r} had no warm start "
            "(no calibration, no warm_start): the gain over the starting policy needs one; use a preset that "
            "measures it (cpu) or --search-args '--warm-start REF'"
        )
    policy = resolve_policy(refs[0]).with_base(stored.base).with_name("warm-start")
    return policy, f"{refs[0]} on {stored.base} (the search's first warm-start reference)"


def challenger(result: dict) -> tuple[Any, str] | None:
    """The search's best own candidate when it stored its warm start (what the search found, that
    its re-scoring did not keep): the candidate of ``selection.versus_transfer.own``, rebuilt from
    the trials it is made of -- one trial's point (a ``randaugment``/``trivialaugment`` family
    point, the best trial, the runner-up), or the union of several trials' sub-policies in the
    candidate's order, duplicates removed (``assembled``, ``survivors``: as the search assembled
    them) -- and checked against the hash its re-scoring recorded. None when the search stored a
    policy of its own, had no re-scoring, or the rebuilt policy is not the one it re-scored (a
    union with the warm start's sub-policies, ``warm_start+found``: said in the report)."""
    from autoaug.policies import Policy
    from autoaug.search.decide.assemble import union_policy

    selection = result["provenance"].get("selection") or {}
    own = (selection.get("versus_transfer") or {}).get("own")
    chosen = selection.get("chosen")
    if not own or chosen in (None, own):
        return None
    cand = next((c for c in selection.get("candidates") or [] if c.get("kind") == own), None)
    if cand is None or not cand.get("trial_ids"):
        return None
    trials = {t.get("trial_id"): t for t in result["provenance"].get("trials") or []}
    if any(not (trials.get(i) or {}).get("policy") for i in cand["trial_ids"]):
        return None
    parts = [Policy.from_dict(trials[i]["policy"]) for i in cand["trial_ids"]]
    policy = parts[0] if len(parts) == 1 else union_policy(parts[0].name, parts)
    if policy.content_hash != cand.get("policy_hash"):
        return None
    return policy, own


def rescore_plan(
    results: dict[tuple[int, str], dict], k: int, raced: dict[tuple[int, str], dict] | None = None
) -> tuple[list, dict, Any]:
    """The runs to train: ``[(key, policy, train config)]`` (each once), per search the keys of its
    stored policy's and its warm start's runs by seed (and of the policy the search stored with the
    race, ``raced``: :func:`replay_race`), and the config whose resources the runs take.

    A search of another method (``--methods``: it has no warm start of its own) is measured
    against the first training-method search's warm start, under that search's re-scoring
    configuration: the same proxy, seeds and warm-start runs as every other cell, so its row
    reads like theirs."""
    from autoaug.policies import Policy
    from autoaug.policies.schedule import provenance_schedule

    runs: dict[str, tuple] = {}
    per_search: dict[tuple[int, str], dict] = {}
    first = None
    reference = None  # (config, warm start, what) of the first training-method search
    for cell, result in sorted(results.items(), key=lambda kv: kv[0][1] in METHOD_PRESETS):
        if cell[1] in METHOD_PRESETS:
            if reference is None:
                raise SystemExit(
                    f"search_gain: {search_name(*cell)} is measured against the warm start of a training-method "
                    "search, and none finished: run the training searches first (--trials, --samplers)"
                )
            config, warm, what = reference
        else:
            config = search_config(result)
            warm, what = warm_start(result, config)
            reference = reference or (config, warm, what)
        first = first or config
        stored = Policy.from_dict(result["policy"])
        # a PBA search's product is its schedule (the store keeps its last stage as the version's
        # policy): the schedule is what a user trains with, so it is what the row measures
        stored = provenance_schedule(result["provenance"], stored) or stored
        base = config.rescore_train_config(0)
        tkey = train_key(base.to_dict())
        keys: dict[str, dict[int, str]] = {"stored": {}, "warm": {}, "challenger": {}, "race": {}}
        found = challenger(result) if stored.content_hash == warm.content_hash else None
        race = Policy.from_dict(raced[cell]["policy"]) if (raced or {}).get(cell) else None
        roles = [
            ("stored", stored),
            ("warm", warm),
            *([("challenger", found[0])] if found else []),
            *([("race", race)] if race is not None else []),
        ]
        for i in range(k):
            cfg = dataclasses.replace(base, seed=(config.train.seed + GAIN_SEED_OFFSET + i) % 2**31)
            for role, policy in roles:
                key = run_key(policy.content_hash, cfg.seed, tkey)
                keys[role][cfg.seed] = key
                runs.setdefault(key, (key, policy, cfg))
        per_search[cell] = {
            "keys": keys,
            "warm_start": what,
            "warm_hash": warm.content_hash,
            "stored_hash": stored.content_hash,
            "same_policy": stored.content_hash == warm.content_hash,
            "challenger": found[1] if found else None,
            "challenger_hash": found[0].content_hash if found else None,
            "stored_policy": stored,
            "warm_policy": warm,
            "race_hash": race.content_hash if race is not None else None,
            "race_policy": race,
            "race_chosen": ((raced or {}).get(cell) or {}).get("provenance", {}).get("selection", {}).get("chosen"),
            "race_record": ((raced or {}).get(cell) or {}).get("provenance", {}).get("selection", {}).get("race"),
        }
    return list(runs.values()), per_search, first


def rescore(a: argparse.Namespace, work: Path, runs: list, config: Any, timings: Timings) -> dict[str, Any]:
    """Train the runs not in ``rescore.json`` yet (in parallel, each saved as it finishes)."""
    from autoaug.core.ray_session import output_settings, ray_session
    from autoaug.search.decide.proxy_runs import train_runs

    path = work / RESCORE_FILE
    cached = read_json(path, {})
    if a.address is None:  # runs of another kind of machine (an earlier session elsewhere): trained again here
        from autoaug.core.machine import machine_kind

        other = [
            key
            for key, _, cfg in runs
            if (cached.get(key) or {}).get("machine") not in (None, machine_kind(cfg.resolve_device()))
        ]
        if other:
            kinds = sorted({cached[k]["machine"] for k in other})
            print(
                f"rescore: {len(other)} runs in {path.name} were trained on another kind of machine ({'; '.join(kinds)}): "
                "trained again here (one seed trains another model on another kind; runs pair only within one)"
            )
            cached = {k: v for k, v in cached.items() if k not in other}
    todo = [r for r in runs if r[0] not in cached]
    if not todo:
        print(f"rescore: all {len(runs)} runs finished already")
        return cached
    print(f"rescore: {len(todo)} of {len(runs)} proxy runs to train")

    def save(done: dict[str, Any]) -> None:
        # per-image scores are not needed here and make the file large: left out
        write_json(path, {k: {f: v for f, v in r.items() if f != "image_scores"} for k, r in done.items()})
        print(f"rescore: {sum(1 for r in runs if r[0] in done)} of {len(runs)} runs finished", flush=True)

    start = time.monotonic()
    try:
        with ray_session(a.address, **output_settings(False)):
            return train_runs(runs, config, cached=cached, save=save, task_name="autoaug-gain")
    finally:
        timings.add("rescore", time.monotonic() - start, f"{len(todo)} runs")


# ------------------------------------------------------------------------------------ evaluation
def evaluate(
    a: argparse.Namespace, work: Path, timings: Timings, best: tuple[int, str], per_search: dict, role: str = "stored"
) -> dict:
    """The best cell's stored policy (``role`` "race": the one it stored with the race) and its
    warm start through ``autoaug compare`` in the evaluation regime, paired by seed: their
    difference."""
    from autoaug.launch.compare.candidates import resolve_candidates

    folder = work / "eval-policies"
    folder.mkdir(parents=True, exist_ok=True)
    p = per_search[best]
    mine = search_name(*best) + (f"-race{a.race}" if role == "race" else "")
    paths = []
    for label, policy in ((mine, p[f"{role}_policy"]), ("warm-start", p["warm_policy"])):
        path = folder / f"{label}.json"
        path.write_text(json.dumps(policy.with_name(label).to_dict(), indent=1))
        paths.append(str(path))
    preset = ["--preset", a.eval_preset, *shlex.split(a.eval_args)]
    for csv_path in a.import_runs:  # runs of these policies recorded by an earlier benchmark: not trained again
        import_runs(a, Path(csv_path).resolve(), work / "eval", preset, paths)
    _compare(a, work, timings, "eval", work / "eval", preset, paths, a.eval_seeds, baselines=False)
    labels = [resolve_candidates((path,), (), None)[0].label for path in paths]
    from autoaug.core.machine import one_kind

    runs = _read_runs(work / "eval")
    summary = summarize(runs)
    diff = paired(summary[labels[0]]["seeds"], summary[labels[1]]["seeds"])
    machine = one_kind(runs).describe() if any(r.get("machine") for r in runs) else None
    return {"cell": list(best), "role": role, "labels": labels, "summary": summary, "paired": diff, "machine": machine}


def one_kind_of(done: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The finished proxy runs of one kind of machine (:func:`autoaug.core.machine.one_kind`: the kind of
    the most; a run of another kind pairs with nothing), the others left out in one line; and the kind
    (None: no run recorded its machine)."""
    from autoaug.core.machine import left_out_line, one_kind

    split = one_kind(list(done.items()), get=lambda kv: kv[1])
    line = left_out_line(
        split,
        lambda kv: f"{kv[0][:12]} seed {kv[1].get('seed')}",
        what="proxy runs",
        hint=f"delete their entries in {RESCORE_FILE} to train them again here",
        get=lambda kv: kv[1],
    )
    if line:
        print(f"rescore: {line}")
    return dict(split.kept), (split.describe() if split.kind is not None else None)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # finally blocks run: the session's time is recorded, runs saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--data",
        default=os.environ.get("AUTOAUG_CIFAR10"),
        help="folder with train.parquet and test.parquet (default $AUTOAUG_CIFAR10)",
    )
    p.add_argument(
        "--trials", default=argparse.SUPPRESS, help="numbers of trials, comma-separated (default 28,100,300)"
    )
    p.add_argument(
        "--samplers",
        default="tpe,random",
        help="autoaug search --sampler values, comma-separated (a column each; e.g. tpe,random,local)",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=ARGS",
        help="autoaug search arguments of the columns S-LABEL of --samplers (repeatable), "
        "e.g. 'g60=--grace-period 60' for --samplers random,random-g60",
    )
    p.add_argument("--preset", default=argparse.SUPPRESS, help="autoaug search --preset (default cpu)")
    p.add_argument(
        "--methods",
        default="",
        help=f"other search methods, a row each at their CPU preset ({', '.join(f'{m}: {v}' for m, v in METHOD_PRESETS.items())}), "
        "measured against the first search's warm start, e.g. density,pba",
    )
    p.add_argument("--method-args", default="", help="more autoaug search arguments for the --methods searches")
    p.add_argument("--search-seed", type=int, default=0, help="autoaug search --seed")
    p.add_argument("--search-args", default="", help="more autoaug search arguments (new searches only)")
    p.add_argument(
        "--rescore-seeds",
        type=int,
        default=argparse.SUPPRESS,
        help="K: proxy runs per policy, paired by seed (>= 5; default 5)",
    )
    p.add_argument(
        "--own-calibration",
        action="store_true",
        help="every search measures the bases and published policies itself (default: the first one does, "
        "the others reuse its runs with --calibration-from)",
    )
    p.add_argument(
        "--eval",
        action="store_true",
        help="also the best cell's policy (with --race: the best cell with the race) and the warm start in --eval-preset",
    )
    p.add_argument(
        "--eval-cell",
        default=None,
        metavar="CELL",
        help="with or instead of --eval: evaluate this cell's policy instead of the best cell's: N/SAMPLER "
        "(e.g. 28/random) or a method of --methods (e.g. pba)",
    )
    p.add_argument(
        "--eval-preset", default=argparse.SUPPRESS, help="training preset of the evaluation regime (default eval-cpu)"
    )
    p.add_argument("--eval-seeds", type=int, default=argparse.SUPPRESS, help="evaluation seeds per policy (default 5)")
    p.add_argument("--eval-args", default="", help="more autoaug compare arguments for the evaluation")
    p.add_argument(
        "--import-runs",
        action="append",
        default=[],
        metavar="CSV",
        help="an earlier benchmark's eval_runs.csv (repeatable): its runs of the evaluated policies (same policy "
        "hash, seed and regime) are reused in the evaluation instead of trained again; only runs of this kind of "
        "machine pair with its own (another CPU kind computes another model from one seed: docs/compare.md)",
    )
    p.add_argument("--cpus-per-run", type=int, default=1, help="CPUs per evaluation run")
    p.add_argument("--address", default=None, help="Ray cluster (default: embedded local Ray)")
    p.add_argument("--name", default=None, help="names the work and result folders (default: the data folder's name)")
    p.add_argument("--work", default=None, help="scratch folder (default runs/search-gain/<name>)")
    p.add_argument("--out", default=None, help="result folder (default benchmarks/results/search-gain-<name>)")
    p.add_argument(
        "--race",
        type=int,
        default=None,
        metavar="M",
        help="also finish each search again with the re-scoring race up to M runs per candidate "
        "(rescore_max_seeds) on its own trials, and report the gain of what it stores",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="start no search or replay: report the finished ones (their missing K-seed runs are trained)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="plumbing check: its defaults are the smoke preset, 5 and 6 trials, K = 2, the smoke evaluation "
        "with 2 seeds (an option given explicitly keeps its value)",
    )
    a = p.parse_args(argv)
    if not a.data:
        p.error("--data is required (or set AUTOAUG_CIFAR10)")
    a.data = os.path.abspath(os.path.expanduser(a.data))
    if not (Path(a.data) / "train.parquet").exists():
        p.error(f"--data {a.data}: no train.parquet there (expected a dataset folder of the Parquet shape)")
    # --smoke changes the defaults only: an option given explicitly keeps its value. 5 and 6 trials:
    # the aa space's warm start (AutoAugment's 25 sub-policies) is 5 candidates.
    defaults = (
        {"preset": "smoke", "trials": "5,6", "rescore_seeds": 2, "eval_preset": "smoke", "eval_seeds": 2}
        if a.smoke
        else {"preset": "cpu", "trials": "28,100,300", "rescore_seeds": 5, "eval_preset": "eval-cpu", "eval_seeds": 5}
    )
    for key, value in defaults.items():
        if not hasattr(a, key):
            setattr(a, key, value)
    try:
        a.trials = [int(x) for x in str(a.trials).split(",") if x.strip()]
    except ValueError:
        p.error(f"--trials {a.trials!r}: expected whole numbers separated by commas, e.g. 28,100,300")
    if not a.trials or min(a.trials) < 1:
        p.error(f"--trials {a.trials!r}: expected at least one number of trials, each 1 or more")
    from autoaug.search.config import SAMPLERS, SEARCH_PRESETS

    variants = {}
    for v in a.variant:
        label, eq, args = v.partition("=")
        if not eq or not re.fullmatch(r"[a-z0-9]+", label) or not args.strip():
            p.error(
                f"--variant {v!r}: expected LABEL=ARGS, a label of lower-case letters and digits, e.g. 'g60=--grace-period 60'"
            )
        variants[label] = args
    a.variants = variants
    a.samplers = [s.strip() for s in a.samplers.split(",") if s.strip()]
    bad = [s for s in a.samplers if column_parts(s)[0] not in SAMPLERS or column_parts(s)[1] not in (None, *variants)]
    if bad or not a.samplers:
        p.error(
            f"--samplers {','.join(a.samplers)!r}: expected some of {', '.join(SAMPLERS)}, or S-LABEL with a --variant LABEL "
            f"(given: {', '.join(variants) or 'none'})"
        )
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in METHOD_PRESETS]
    if bad:
        p.error(f"--methods {','.join(a.methods)!r}: expected some of {', '.join(METHOD_PRESETS)}")
    if a.preset not in SEARCH_PRESETS:
        p.error(f"--preset {a.preset!r}: expected one of {', '.join(SEARCH_PRESETS)}")
    missing = [c for c in a.import_runs if not Path(c).is_file()]
    if missing:
        p.error(f"--import-runs {missing[0]}: no such file (expected an eval_runs.csv of an earlier benchmark)")
    if a.eval_cell is not None:
        n, slash, sampler = a.eval_cell.rpartition("/")
        if not slash and sampler in a.methods:
            a.eval_cell = (0, sampler)
        elif slash and n.isdigit() and int(n) in a.trials and sampler in a.samplers:
            a.eval_cell = (int(n), sampler)
        else:
            p.error(
                f"--eval-cell {a.eval_cell!r}: expected N/SAMPLER with N of --trials and SAMPLER of --samplers "
                f"(e.g. {a.trials[0]}/{a.samplers[0]}), or a method of --methods"
            )
    if a.race is not None and not 2 <= a.race <= 100:
        p.error(f"--race {a.race}: expected the most runs per candidate, from 2 to 100")
    if a.rescore_seeds < (2 if a.smoke else 5):
        p.error(f"--rescore-seeds {a.rescore_seeds}: expected 5 or more (paired intervals need several seeds)")
    a.preset_trials = int(SEARCH_PRESETS[a.preset].get("num_trials") or 0)
    a.preset_budget = SEARCH_PRESETS[a.preset].get("time_budget_s")
    a.dataset = a.name or Path(a.data).name + ("-smoke" if a.smoke else "")
    work = Path(a.work or REPO / "runs" / "search-gain" / a.dataset).resolve()
    out = Path(a.out or REPO / "benchmarks" / "results" / f"search-gain-{a.dataset}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    timings = Timings(work / "timings.json")
    signal.signal(signal.SIGTERM, _terminate)

    order = plan(a.trials, a.samplers)
    calibrated_by = a.calibrated_by = None if a.own_calibration else calibrator(work, order)
    results = {}
    for n, sampler in order + method_cells(a.methods):
        name = search_name(n, sampler)
        mine = name == calibrated_by or sampler in METHOD_PRESETS
        result = run_search(a, work, n, sampler, None if mine else calibrated_by)
        if result:
            results[(n, sampler)] = result
        else:
            print(f"search {name}: not finished (--report-only): left out")
    raced = {}
    if a.race is not None:
        for cell, result in results.items():
            if cell[1] in METHOD_PRESETS:
                continue  # (no re-scoring of candidates to race)
            replayed = replay_race(a, work, cell, result)
            if replayed:
                raced[cell] = replayed
    if not results:
        raise SystemExit("search_gain: no finished search to report (--report-only)")
    runs, per_search, config = rescore_plan(results, a.rescore_seeds, raced)
    done = rescore(a, work, runs, config, timings)
    done, machine = one_kind_of(done)  # paired by seed only within one kind of machine
    cells = cells_from(per_search, done)
    evaluation = None
    # with --race, what the searches store with the race is what the table is about
    role = "race" if raced else "stored"
    pool = cells_from(per_search, done, "race") if raced else cells
    best = best_cell(pool)
    if a.eval_cell is not None:
        if a.eval_cell not in per_search:
            raise SystemExit(
                f"search_gain: --eval-cell {search_name(*a.eval_cell)}: no finished search of that cell in this table "
                f"(the cells: {', '.join(search_name(*c) for c in per_search)})"
            )
        evaluation = evaluate(a, work, timings, a.eval_cell, per_search, role)
        evaluation["chosen"] = True
    elif a.eval:
        if best is None:
            print("eval: every search stored its warm start: nothing to evaluate against it")
        else:
            evaluation = evaluate(a, work, timings, best, per_search, role)
    report(a, work, out, results, per_search, cells, evaluation, timings, done, machine)
    print(f"\nwrote {out}")
    print(f"best cell{' with the race' if raced else ''}: {best}; gain {points((pool.get(best) or {}).get('mean'))}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("search_gain: interrupted; run the same command again to resume (finished searches and runs are kept)")
