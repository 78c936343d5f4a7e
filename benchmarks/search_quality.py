"""Search quality: does a searched policy beat the hand-made baselines on a fair protocol?

One command, four resumable stages (re-running the same command reuses every finished stage and
every finished training run; each stage's wall time is recorded in ``timings.json``):

1. **search** -- ``autoaug search`` with the search preset (default ``cpu``) on the search split
   (split seed 0, validation held out), storing the found policy as ``<name>@N`` in a scratch store.
2. **eval** -- ``autoaug compare`` of the found policy and every baseline (``none``, ``crop``,
   ``standard``, ``randaugment:n=2,m=9``, ``trivialaugment`` and the three published AutoAugment
   policies, as published) in the *evaluation regime* (default training preset ``eval-cpu``:
   another training split (split seed 1), more epochs, no validation), ``--seeds`` seeds, scored on
   the test split. When the search chose another base than ``standard``, the best published
   policy is then also evaluated moved onto that base (``work/rebased/<ref>-on-<base>.json``), so
   the table shows what the search adds beyond its base.
3. **fidelity** (``--fidelity K``, K > 0) -- how well proxies rank policies the way the evaluation
   regime does: ``K`` random policies of the search space (seeded) are also trained in the
   evaluation regime (``--fidelity-seeds``), and every policy (baselines, found, random) is
   trained under each proxy (``--proxy``; default: the old 15-epoch ``cpu`` proxy and the search
   preset's proxy; ``--proxy-seeds``); Spearman's rank correlation between the proxy's
   validation accuracy (the search objective) and the evaluation regime's test accuracy.
4. **report** -- ``results.md`` (mean, std, 95% CI, rank; the found policy's paired difference to
   each baseline, paired by seed, with its 95% CI), ``quality.png``, ``quality.json``, the search's
   provenance (``search_result.json``), the found policy (``found_policy.json``; a PBA search's
   schedule also in ``found_schedule.json``) and the commands, in ``--out`` (default ``benchmarks/results/search-quality-<name>/``).

::

    python benchmarks/search_quality.py --data ../shared/data/cifar10-jpeg             # 2 CPU cores
    python benchmarks/search_quality.py --data ... --fidelity 5                         # + proxy fidelity
    python benchmarks/search_quality.py --data ... --search-preset paper --eval-preset final \\
        --address ray://head:10001 --name gpu                                           # a GPU cluster
    python benchmarks/search_quality.py --data ... --smoke                              # plumbing, minutes
    python benchmarks/search_quality.py --data ... --method pba                         # PBA (pba-cpu preset)

Scratch (Ray run directories, the study, the store, checkpoints and run records) goes to
``--work`` (default ``runs/search-quality/<name>``); only the small result files go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_runs import BASELINES, REPO, Timings, _autoaug, _compare, _now, _read_runs, import_runs  # noqa: E402, F401  (tests reach them here too)
from search_quality_stats import (  # noqa: E402  (statistics, tables, the figure; tests reach them here too)
    balanced_paired,
    over_search_seeds,
    paired,
    plot,
    results_table,
    same_recipe,
    search_recipe,
    spearman,
    summarize,
)
from search_quality_stats import (
    diff_table as _diff_table,
)
from search_quality_stats import (
    seeds_table as _seeds_table,
)

#: The published policies, evaluated as published (on the standard base).
STRONG = ("randaugment:n=2,m=9", "trivialaugment", "autoaugment-cifar10", "autoaugment-svhn", "autoaugment-imagenet")
#: The proxy the search used before this benchmark existed (15 epochs of ResNet-8, lr 0.2).
OLD_PROXY = (
    "old-cpu15=--preset cpu --set train.epochs=15 --set train.lr=0.2 --set train.train_size=4000 "
    "--set train.val_size=1000 --set train.model=resnet-8"
)


def stage_search(a: argparse.Namespace, work: Path, timings: Timings) -> str:
    """Run (or resume, or reuse) the search; returns the stored reference of the found policy."""
    runs, store = work / "runs", work / "store"
    result = runs / a.search_name / "result.json"
    if result.exists():
        ref = json.loads(result.read_text())["stored"]["ref"]
        print(f"search: reusing the finished search {a.search_name} ({ref})")
        return ref
    if (runs / a.search_name).exists():
        args = ["search", "--resume", a.search_name, "--storage", str(runs)]
    else:
        args = [
            "search",
            "--data",
            a.data,
            "--preset",
            a.search_preset,
            "--name",
            a.search_name,
            "--storage",
            str(runs),
            "--store",
            str(store),
            "--seed",
            str(a.search_seed),
            *shlex.split(a.search_args),
        ]
        if a.method:
            args += ["--method", a.method]
        if a.address:
            args += ["--address", a.address]
    code, seconds = _autoaug(args, work / "search.log")
    timings.add("search", seconds, "autoaug " + shlex.join(args))
    if code != 0 or not result.exists():
        raise SystemExit(
            f"search_quality: the search failed (exit {code}); see {work / 'search.log'}; "
            "re-run this command to resume it"
        )
    return json.loads(result.read_text())["stored"]["ref"]


def found_schedule(search_result: dict) -> dict | None:
    """The schedule a search found (a PBA search: its provenance's ``schedule``; the stored policy is
    only its last stage), or None for a search that found a policy."""
    from autoaug.policies.schedule import PROVENANCE_KEY

    return search_result["provenance"].get(PROVENANCE_KEY)


def also_policies(a: argparse.Namespace, work: Path) -> dict[str, Path]:
    """The found policies of earlier results folders (``--also DIR``), written as policy JSON
    files named after their searches (``work/also/<search name>.json``, so their label in the
    comparison says which search found them). Returns ``{file path: results folder}``."""
    out: dict[str, Path] = {}
    folder = work / "also"
    for d in a.also:
        src = Path(d).resolve()
        result = src / "search_result.json"
        if not result.exists():
            raise SystemExit(
                f"search_quality: --also {d}: no search_result.json there (expected a results folder "
                "of this benchmark, e.g. benchmarks/results/search-quality-cpu16-eval-cpu)"
            )
        found = json.loads(result.read_text())
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{found['stored']['name']}.json"
        # A PBA result is its schedule (the stored policy is only its last stage): the schedule
        # file is what trains, and what its committed runs' policy hash is.
        path.write_text(json.dumps(found_schedule(found) or found["policy"], indent=1))
        out[str(path)] = src
    return out


def twins(work: Path, policies: Sequence[str]) -> dict[str, dict[str, str]]:
    """The evaluated policies that are a baseline, or an earlier one of ``policies``, under
    another name (same content hash: a search that stored the published policy it started
    from, two seeds that stored the same one). ``autoaug compare`` trains each policy once and
    refuses a second name for it, so a twin is left out of the comparison and its rows are its
    twin's runs: same policy, same seeds, the same runs. ``{ref: {"label", "twin", "hash",
    "store_ref"}}`` (``label``: what compare would call it; ``twin``: the label it is)."""
    from autoaug.launch.compare.candidates import resolve_candidates

    seen = {c.policy_hash: c.label for c in resolve_candidates((), BASELINES, None)}
    out: dict[str, dict[str, str]] = {}
    for ref in policies:
        (c,) = resolve_candidates((ref,), (), str(work / "store"))
        if c.policy_hash in seen:
            out[ref] = {"label": c.label, "twin": seen[c.policy_hash], "hash": c.policy_hash, "store_ref": c.store_ref}
        else:
            seen[c.policy_hash] = c.label
    return out


def with_twins(runs: list[dict[str, Any]], twins_: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """``runs`` (compare's ``runs.csv`` rows) and, for every twin (:func:`twins`), its twin's rows
    under its own label and reference."""
    out = list(runs)
    for ref, t in twins_.items():
        out += [
            {**r, "policy": t["label"], "ref": ref, "store_ref": t["store_ref"] or "", "kind": "policy"}
            for r in runs
            if r["policy"] == t["twin"]
        ]
    return out


def rebased_best(work: Path, found_base: str) -> str | None:
    """The published policy with the best mean test accuracy in the evaluation so far, moved onto
    ``found_base`` (the base the search chose), as a policy file ``work/rebased/<ref>-on-<base>.json``;
    None when the search kept ``standard``, the published policies' own base."""
    if found_base == "standard":
        return None
    from autoaug.policies import Policy, resolve_policy

    summary = summarize(_read_runs(work / "eval"))
    best = max((b for b in STRONG if b in summary), key=lambda b: summary[b]["mean"])
    name = f"{best.split(':')[0]}-on-{found_base}"
    folder = work / "rebased"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    policy = resolve_policy(best).with_base(found_base)
    path.write_text(Policy(name, policy.num_magnitude_bins, policy.sub_policies, policy.base, policy.ranges).to_json())
    return str(path)


def random_policies(a: argparse.Namespace, work: Path, k: int) -> list[str]:
    """``k`` policies drawn uniformly from the search's space (seeded), saved as JSON files."""
    import random

    from autoaug.search.config import SearchConfig

    space = SearchConfig.from_preset(a.search_preset, name="fidelity", data=a.data).space
    rng = random.Random(a.fidelity_seed)
    paths = []
    folder = work / "fidelity-policies"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(k):
        policy = space.to_policy(space.random_params(rng), name=f"random-{i}")
        path = folder / f"random-{i}.json"
        path.write_text(policy.to_json())
        paths.append(str(path))
    return paths


def search_proxy_args(search_preset: str) -> list[str]:
    """``autoaug compare`` arguments that train exactly what one trial of the search preset trains."""
    from autoaug.search.config import SEARCH_PRESETS

    train = dict(SEARCH_PRESETS[search_preset]["train"])
    args = ["--preset", str(train.pop("preset", "cpu"))]
    for key, value in train.items():
        args += ["--set", f"train.{key}={json.dumps(value)}"]
    return args


def _write_fidelity(work: Path, fidelity: dict[str, Any]) -> None:
    (work / "fidelity.json").write_text(json.dumps(fidelity, indent=1))


def proxy_scores(compare_out: Path) -> dict[str, float]:
    """Mean validation accuracy (the search's objective) per policy under a proxy."""
    by: dict[str, list[float]] = {}
    for r in _read_runs(compare_out):
        if r.get("val_accuracy") not in (None, ""):
            by.setdefault(r["policy"], []).append(float(r["val_accuracy"]))
    return {k: sum(v) / len(v) for k, v in by.items()}


# ------------------------------------------------------------------------------------------ report
def report(
    a: argparse.Namespace,
    work: Path,
    out: Path,
    found_ref: str,
    timings: Timings,
    fidelity: dict[str, Any] | None,
    also: dict[str, Path] | None = None,
    twins_: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Tables, verdict, plot and provenance into ``out``. ``also``: ``{policy file: results folder}``
    of the ``--also`` searches (:func:`also_policies`); ``twins_``: the evaluated policies that are
    another row (:func:`twins`)."""
    from autoaug.core.machine import one_kind

    also = also or {}
    twins_ = twins_ or {}
    runs = with_twins(_read_runs(work / "eval"), twins_)
    summary = summarize(runs)
    machine = one_kind(runs).describe() if any(r.get("machine") for r in runs) else None
    found = next(r["policy"] for r in runs if r.get("store_ref") == found_ref or r["policy"] == found_ref)
    others = list(dict.fromkeys(r["policy"] for r in runs if r.get("ref") in also))
    search_result = json.loads((work / "runs" / a.search_name / "result.json").read_text())
    found_base = search_result["policy"].get("base", "standard")
    # --also searches with this search's config and another seed: replicates of this search.
    label_src = {r["policy"]: also[r["ref"]] for r in runs if r.get("ref") in also}
    recipe = search_recipe(search_result)
    replicates = [
        o
        for o in others
        if same_recipe(recipe, search_recipe(json.loads((label_src[o] / "search_result.json").read_text())))
    ]
    rebased = [r["policy"] for r in runs if "/rebased/" in (r.get("ref") or "")]
    rebased = list(dict.fromkeys(rebased))
    rows = [*BASELINES, *rebased, *others]
    diffs = {b: paired(summary[found]["seeds"], summary[b]["seeds"]) for b in rows if b in summary}
    also_diffs = {o: {b: paired(summary[o]["seeds"], summary[b]["seeds"]) for b in [*BASELINES, found]} for o in others}
    best_strong = max((b for b in STRONG if b in summary), key=lambda b: summary[b]["mean"])
    verdict = {
        "beats_none_beyond_ci": bool(diffs["none"]["low"] is not None and diffs["none"]["low"] > 0),
        "beats_standard_beyond_ci": bool(diffs["standard"]["low"] is not None and diffs["standard"]["low"] > 0),
        "best_strong_baseline": best_strong,
        "reaches_best_strong_mean": summary[found]["mean"] >= summary[best_strong]["mean"],
        "gap_to_best_strong_points": 100 * (summary[found]["mean"] - summary[best_strong]["mean"]),
        "beats_every_row_beyond_ci": all(
            d["low"] is not None and d["low"] > 0 for b, d in diffs.items() if b not in others
        ),
    }
    compare_cfg = json.loads((work / "eval" / "compare.json").read_text())
    train = compare_cfg["train_config"]
    regime = (
        f"{train['model']}, {train['train_size']} training images (split seed {train['split_seed']}), "
        f"{train['epochs']} epochs, batch {train['batch_size']}, lr {train['lr']}"
    )
    schedule = found_schedule(search_result)
    n_sub = len(search_result["policy"]["sub_policies"])
    if schedule:  # a PBA search: the schedule trains, its last stage is the stored policy
        stages = len(schedule["stages"])
        what = (
            f"schedule `{found}` ({stages} stage{'' if stages == 1 else 's'}, trained as a schedule: each epoch "
            f"with its stage's policy; last stage {n_sub} sub-policies, schedule hash "
            f"`{schedule['content_hash'][:12]}`)"
        )
    else:
        what = f"policy `{found}` ({n_sub} sub-policies, hash `{search_result['policy_hash'][:12]}`)"
    lines = [
        f"# Search quality: `{a.search_preset}` search, evaluated in `{a.eval_preset}`",
        "",
        f"Found {what} against the default baselines. Evaluation regime: {regime}; "
        f"test accuracy on the test split, seeds {', '.join(map(str, sorted(summary[found]['seeds'])))}; "
        "mean, sample std and two-sided 95% Student-t CI of the mean, in %, of the test accuracy and of the "
        "balanced accuracy (the mean of the per-class test accuracies; per class: `eval_per_class.csv`).",
        "",
    ]
    from autoaug.search.decide.calibration_choices import describe_calibration

    for t in twins_.values():
        lines += [
            f"`{t['label']}` is `{t['twin']}` itself (content hash `{t['hash'][:12]}`): `autoaug compare` trains a "
            f"policy once, so its rows are `{t['twin']}`'s runs, and its paired difference to it is 0 by construction.",
            "",
        ]
    measured = describe_calibration(search_result["provenance"].get("calibration"))
    if measured:
        lines += [
            "What the search measured on the data before its trials (proxy runs, one seed each unless said):",
            "",
            *[f"- {line}" for line in measured],
            "",
        ]
    marks = {label: f" (the best published policy moved onto the search's base, `{found_base}`)" for label in rebased}
    marks |= {
        label: " **(found)**"
        if label == found
        else " (found by the same search, another seed)"
        if label in replicates
        else " (found by another search)"
        for label in [found, *others]
    }
    lines += results_table(summary, marks)
    lines += _diff_table(
        f"Paired differences, `{found}` minus baseline (same seed: same initialisation, data "
        "order and test set), in points:",
        diffs,
        {b: balanced_paired(summary, found, b) for b in diffs},
    )
    for o, od in also_diffs.items():
        what = "the same search, another seed" if o in replicates else "another search"
        lines += _diff_table(
            f"Paired differences, `{o}` (found by {what}, `--also`) minus baseline, in points:",
            od,
            {b: balanced_paired(summary, o, b) for b in od},
        )
    lines += [
        "",
        f"- beats `none` beyond the CI: **{verdict['beats_none_beyond_ci']}**; beats `standard` beyond the CI: "
        f"**{verdict['beats_standard_beyond_ci']}**",
        f"- best strong baseline (mean): `{best_strong}`; found minus it: {verdict['gap_to_best_strong_points']:+.2f} "
        f"points (goal: >= 0): **{verdict['reaches_best_strong_mean']}**",
        f"- beats every row above beyond the paired CI: **{verdict['beats_every_row_beyond_ci']}**",
    ]
    over = None
    if replicates:
        over = over_search_seeds(summary, [found, *replicates], [b for b in BASELINES if b in summary])
        verdict["over_search_seeds"] = {
            "searches": 1 + len(replicates),
            "gap_to_best_strong_points": 100 * over["vs"][best_strong]["over_eval_seeds"]["mean"],
        }
        lines += _seeds_table(found, over, best_strong)
    if fidelity:
        lines += [
            "",
            "## Proxy fidelity",
            "",
            "Spearman rank correlation between each proxy's validation accuracy (the search objective; "
            "mean over the proxy seeds) and the evaluation regime's test accuracy (mean over seeds):",
            "",
            "| proxy | policies | Spearman rho | p |",
            "|---|---:|---:|---:|",
        ]
        for name, f in fidelity.items():
            lines.append(f"| `{name}` | {f['n_policies']} | {f['spearman']:+.3f} | {f['p_value']:.3f} |")
    lines += ["", "## Wall time", "", "| stage | wall time (min, all sessions) |", "|---|---:|"]
    for stage, t in timings.data.items():
        lines.append(f"| {stage} | {t['wall_s'] / 60:.1f} |")
    lines += ["", "## Commands", "", "```", "python " + shlex.join(["benchmarks/search_quality.py", *sys.argv[1:]])]
    for t in timings.data.values():
        for s in t["sessions"]:
            lines.append(s["command"].replace(str(work), "$WORK"))
    lines += [
        "```",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}; written {_now()}. Wall times "
        "include waiting for the cores when other jobs share the machine (see quality.json: timings)."
        + (f" The evaluation's runs trained on {machine} (paired by seed only within one kind)." if machine else ""),
    ]
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines).replace(str(work), "$WORK").replace(str(REPO.parent), "..")
    (out / "results.md").write_text(text + "\n")
    plot(summary, diffs, found, out / "quality.png", f"{a.eval_preset}: {regime}", others)
    doc = {
        "found": found,
        "found_ref": found_ref,
        "summary": summary,
        "paired": diffs,
        "verdict": verdict,
        "also": {o: {"paired": also_diffs[o], "same_search_other_seed": o in replicates} for o in others},
        "twins": twins_,
        "machine": machine,
        "over_search_seeds": over,
        "fidelity": fidelity,
        "timings": timings.data,
        "eval_train_config": train,
        "search_preset": a.search_preset,
        "eval_preset": a.eval_preset,
        "written_at": _now(),
    }
    (out / "quality.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "search_result.json").write_text(json.dumps(search_result, indent=1))
    (out / "found_policy.json").write_text(json.dumps(search_result["policy"], indent=1))
    if schedule is not None:
        # what a PBA search found (found_policy.json is its last stage): `autoaug policies import` takes it
        (out / "found_schedule.json").write_text(json.dumps(schedule, indent=1))
    for name in ("results.md", "runs.csv", "comparison.png", "per_class.csv", "per_class.png"):
        src = work / "eval" / name
        if src.exists():
            (out / f"eval_{name}").write_bytes(src.read_bytes())
    print("\n".join(lines))
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--data",
        default=os.environ.get("AUTOAUG_CIFAR10"),
        help="folder with train.parquet and test.parquet (default $AUTOAUG_CIFAR10)",
    )
    p.add_argument("--name", default=None, help="study name (default: <search-preset>-<eval-preset>)")
    p.add_argument(
        "--search-preset", default=None, help="autoaug search --preset (default: cpu; pba-cpu with --method pba)"
    )
    p.add_argument("--search-seed", type=int, default=0, help="autoaug search --seed")
    p.add_argument("--search-args", default="", help="more autoaug search arguments, e.g. '--num-trials 20'")
    p.add_argument("--eval-preset", default="eval-cpu", help="training preset of the evaluation regime")
    p.add_argument("--eval-args", default="", help="more autoaug compare arguments for the evaluation")
    p.add_argument("--seeds", type=int, default=5, help="evaluation seeds per policy (3 or more; 5 by default)")
    p.add_argument("--fidelity", type=int, default=0, help="random policies for the proxy-fidelity stage (0: skip)")
    p.add_argument("--fidelity-seed", type=int, default=0, help="seed of the random policies")
    p.add_argument(
        "--proxy",
        action="append",
        default=None,
        metavar="NAME=COMPARE-ARGS",
        help="a proxy to measure (repeatable); default: the search preset's proxy and the old 15-epoch cpu proxy",
    )
    p.add_argument(
        "--fidelity-seeds",
        type=int,
        default=2,
        help="evaluation-regime seeds per random policy (the fidelity stage only needs ranks)",
    )
    p.add_argument("--proxy-seeds", type=int, default=1, help="seeds per policy under each proxy")
    p.add_argument("--cpus-per-run", type=int, default=1, help="CPUs per evaluation run")
    p.add_argument("--address", default=None, help="Ray cluster (default: embedded local Ray)")
    p.add_argument("--work", default=None, help="scratch folder (default runs/search-quality/<name>)")
    p.add_argument("--out", default=None, help="result folder (default benchmarks/results/search-quality-<name>)")
    p.add_argument(
        "--import-runs",
        action="append",
        default=[],
        metavar="CSV",
        help="seed the evaluation with the baselines' finished runs recorded in a committed runs.csv "
        "(e.g. benchmarks/results/<name>/eval_runs.csv); repeatable",
    )
    p.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="RESULTS_DIR",
        help="also evaluate the found policy of an earlier run of this benchmark (its results folder, "
        "e.g. the other search method's); its evaluation runs there are reused; repeatable",
    )
    p.add_argument("--smoke", action="store_true", help="plumbing check: smoke presets, 2 seeds")
    p.add_argument(
        "--method",
        default=None,
        choices=("train", "density", "pba"),
        help="autoaug search --method (default: the search preset's); density also names the study "
        "<search-preset>-<eval-preset>-density; pba searches with the pba-cpu preset unless "
        "--search-preset says otherwise (the found schedule is evaluated as a schedule)",
    )
    a = p.parse_args(argv)
    if not a.data:
        p.error("--data is required (or set AUTOAUG_CIFAR10)")
    a.data = os.path.abspath(os.path.expanduser(a.data))
    a.search_preset = a.search_preset or ("pba-cpu" if a.method == "pba" else "cpu")
    if a.smoke:
        a.search_preset, a.eval_preset, a.seeds = "smoke", "smoke", 2
        a.proxy = a.proxy or ["smoke=--preset smoke"]
        if a.method == "pba":  # a population of 4, perturbed every epoch of the smoke preset's few
            a.search_args += " --set pba.population=4 --set pba.perturbation_interval=1"
    if a.seeds < 2:
        p.error("--seeds must be at least 2 for confidence intervals (3 or more recommended)")
    a.name = a.name or f"{a.search_preset}-{a.eval_preset}" + (
        f"-{a.method}" if a.method in ("density", "pba") and a.method not in a.search_preset else ""
    )
    a.search_name = f"sq-{a.name}"
    work = Path(a.work or REPO / "runs" / "search-quality" / a.name).resolve()
    out = Path(a.out or REPO / "benchmarks" / "results" / f"search-quality-{a.name}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    timings = Timings(work / "timings.json")

    extra = shlex.split(a.eval_args)
    also = also_policies(a, work)
    # Runs recorded in committed results (the --also folders' own and --import-runs) are reused,
    # not trained again: of the baselines and the --also policies now, of the rebased row below.
    committed = [
        *(src / "eval_runs.csv" for src in also.values() if (src / "eval_runs.csv").exists()),
        *(Path(p).resolve() for p in a.import_runs),
    ]
    for csv_path in committed:
        import_runs(a, csv_path, work / "eval", ["--preset", a.eval_preset, *extra], list(also))
    found_ref = stage_search(a, work, timings)
    same = twins(work, [found_ref, *also])
    evaluated = [p for p in [found_ref, *also] if p not in same]
    _compare(a, work, timings, "eval", work / "eval", ["--preset", a.eval_preset, *extra], evaluated, a.seeds)
    found_base = json.loads((work / "runs" / a.search_name / "result.json").read_text())["policy"].get(
        "base", "standard"
    )
    rebased = rebased_best(work, found_base)
    if rebased is not None:
        same = twins(work, [found_ref, *also, rebased])
        evaluated = [p for p in [found_ref, *also, rebased] if p not in same]
    if rebased is not None and rebased in evaluated:  # the same comparison, one more policy: only its runs train
        for csv_path in committed:  # unless an earlier benchmark trained them
            import_runs(a, csv_path, work / "eval", ["--preset", a.eval_preset, *extra], [rebased])
        _compare(
            a,
            work,
            timings,
            "eval",
            work / "eval",
            ["--preset", a.eval_preset, *extra],
            evaluated,
            a.seeds,
        )
    fidelity = None
    if a.fidelity > 0:
        # The random policies are scored in the evaluation regime in a folder of their own (fewer
        # seeds: they only need a rank), then every policy under each proxy.
        random_paths = random_policies(a, work, a.fidelity)
        _compare(
            a,
            work,
            timings,
            "eval-random",
            work / "eval-random",
            ["--preset", a.eval_preset, *extra],
            random_paths,
            a.fidelity_seeds,
            baselines=False,
        )
        eval_scores = {k: v["mean"] for k, v in summarize(_read_runs(work / "eval")).items()}
        eval_scores.update({k: v["mean"] for k, v in summarize(_read_runs(work / "eval-random")).items()})
        proxies = a.proxy or [OLD_PROXY, f"{a.search_preset}={shlex.join(search_proxy_args(a.search_preset))}"]
        fidelity = {}
        for spec in proxies:
            name, _, args = spec.partition("=")
            pout = _compare(
                a,
                work,
                timings,
                f"proxy-{name}",
                work / f"proxy-{name}",
                shlex.split(args),
                [*(p for p in [found_ref] if p not in same), *random_paths],
                a.proxy_seeds,
            )
            fidelity[name] = spearman(proxy_scores(pout), eval_scores)
            _write_fidelity(work, fidelity)
    report(a, work, out, found_ref, timings, fidelity, also=also, twins_=same)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
