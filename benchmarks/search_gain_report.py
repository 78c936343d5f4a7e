"""The report of ``benchmarks/search_gain.py``: each cell's gain from the saved runs, the trials'
per-epoch scores (for the rung ranking), and ``results.md`` / ``gain.json`` with their tables.
``search_gain.py`` runs the searches and the runs; this module reads what they left."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_runs import _now  # noqa: E402
from search_gain_stats import (  # noqa: E402  (pure: statistics, tables, bookkeeping)
    GAIN_SEED_OFFSET,
    METHOD_PRESETS,
    SEARCHES_FILE,
    cell_text,
    cost_text,
    gain_cell,
    gain_table,
    method_cells,
    needed_text,
    plan,
    points,
    race_name,
    rungs_text,
    search_name,
    search_rungs,
    trials_text,
)

from autoaug.search.decide.rungs import ended_at, rung_ranking, rung_text

if TYPE_CHECKING:
    import argparse

    from eval_runs import Timings


def write_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def read_json(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def trial_scores(work: Path, name: str) -> list[dict[int, float]]:
    """Each ended trial's search score by epoch in the Optuna study of the search in run directory
    ``name`` (the scores a search's own rung record reads:
    :func:`autoaug.search.decide.rungs.ended_trials`); none for a search with no study in its run
    directory. The study is named for the search as its ``search_config.json`` records it, which is
    not the folder's name when the folder is a link to a search run under another name."""
    from autoaug.search.decide.rungs import ended_trials
    from autoaug.search.run_dir import CONFIG_FILE, STUDY_FILE
    from autoaug.search.tune.study import open_study

    run = work / "runs" / name
    if not (run / STUDY_FILE).exists():
        return []
    study = read_json(run / CONFIG_FILE, {}).get("config", {}).get("name") or name
    return ended_trials(open_study(study, storage=f"sqlite:///{run / STUDY_FILE}"))


def cells_from(per_search: dict, done: dict[str, Any], role: str = "stored") -> dict[tuple[int, str], dict]:
    """Per search, the gain of its ``role`` policy (``stored``; ``race``: stored with the race)
    over the warm start, the same K paired seeds."""
    from autoaug.search.score import METRIC

    def scores(keys: dict[int, str]) -> dict[int, float]:
        return {int(s): float(done[k][METRIC]) for s, k in keys.items() if k in done}

    same = {"stored": "stored_hash", "race": "race_hash"}[role]
    return {
        cell: gain_cell(scores(p["keys"][role]), scores(p["keys"]["warm"]), same_policy=p[same] == p["warm_hash"])
        for cell, p in per_search.items()
        if p["keys"][role]
    }


def challenger_cells(per_search: dict, done: dict[str, Any]) -> dict[tuple[int, str], dict]:
    """For each search that stored its warm start and whose best own candidate is rebuilt
    (:func:`challenger`): that candidate minus the warm start, the same K paired seeds."""
    from autoaug.search.score import METRIC

    def scores(keys: dict[int, str]) -> dict[int, float]:
        return {int(s): float(done[k][METRIC]) for s, k in keys.items() if k in done}

    return {
        cell: gain_cell(scores(p["keys"]["challenger"]), scores(p["keys"]["warm"]))
        for cell, p in per_search.items()
        if p["keys"]["challenger"]
    }


# ---------------------------------------------------------------------------------------- report
def no_trial(result: dict) -> bool:
    """Whether calibration used the search's time budget, so that no trial ran and the published
    policy that transferred best was stored as calibration measured it."""
    ended = ((result.get("provenance") or {}).get("budget") or {}).get("ended") or {}
    return ended.get("stage") == "calibration"


def report(
    a: argparse.Namespace,
    work: Path,
    out: Path,
    results: dict,
    per_search: dict,
    cells: dict,
    evaluation: dict | None,
    timings: Timings,
    done: dict[str, Any],
    machine: str | None = None,
) -> dict:
    """``results.md`` and ``gain.json``; ``machine``: the kind of machine the paired runs trained on
    (:func:`autoaug.core.machine.one_kind`), said under the tables."""
    ledger = read_json(work / SEARCHES_FILE, {})
    costs = {cell: ledger.get(search_name(*cell)) for cell in plan(a.trials, a.samplers) + method_cells(a.methods)}
    # the warm starts (a search's own calibration round may choose another than the one it reused)
    warm = {}
    for cell, p in per_search.items():
        warm.setdefault(p["warm_start"], []).append(search_name(*cell))
    warm_text = (
        next(iter(warm), "–")
        if len(warm) <= 1
        else "; ".join(f"{what}: {', '.join(f'`{n}`' for n in names)}" for what, names in warm.items())
    )
    lines = [
        f"# Does searching pay? `{a.preset}` searches on `{a.dataset}`",
        "",
        f"Gain of each search's stored policy over its warm start ({warm_text}), "
        f"on the search's own score (the proxy: mean validation accuracy over the last epochs), each trained "
        f"with the same {a.rescore_seeds} fresh seeds (seed = train seed + {GAIN_SEED_OFFSET} + i), paired by "
        "seed: mean difference in points and its two-sided 95% Student-t CI (bold: the CI excludes 0). "
        "Wall time and CPU-seconds: the search alone (calibration, trials, its own re-scoring, storing), summed "
        "over the sessions it took; CPU sampled from /proc every 2 s (a floor).",
        "",
        *gain_table(cells, costs, a.trials, a.samplers),
        "",
    ]
    rows = [cell for cell in method_cells(a.methods) if cell in per_search]
    if rows:
        lines += [
            "The other search methods, a row each, at their CPU preset's size: the stored policy (PBA's: the "
            "schedule it found, each epoch with its stage's policy) against the same warm start, under the same "
            "proxy, with the same seeds as the cells above (these methods have no warm start of their own).",
            "",
            "| method | preset | what ran | gain, points [95% CI] | wall / CPU |",
            "|---|---|---|---|---:|",
        ]
        for cell in rows:
            r = results[cell]
            preset = "smoke" if a.smoke else METHOD_PRESETS[cell[1]]
            lines.append(
                f"| {cell[1]} | `{preset}` | {trials_text(r['provenance'].get('counts') or {})} | "
                f"{cell_text(cells.get(cell))} | {cost_text(costs.get(cell))} |"
            )
        lines.append("")
    needed = needed_text({cell: c for cell, c in cells.items() if cell in per_search})
    if needed:
        lines += [needed, ""]
    raced = cells_from(per_search, done, "race")
    if raced:
        extra = {
            cell: ledger.get(race_name(search_name(*cell), a.race))
            for cell in plan(a.trials, a.samplers)
            if ledger.get(race_name(search_name(*cell), a.race))
        }
        both = {
            cell: {
                "wall_s": (costs.get(cell) or {}).get("wall_s", 0.0) + e["wall_s"],
                "cpu_s": (costs.get(cell) or {}).get("cpu_s", 0.0) + e["cpu_s"],
                "cpu_unmeasured": (costs.get(cell) or {}).get("cpu_unmeasured", 0) + e.get("cpu_unmeasured", 0),
                "finished": e.get("finished"),
                "sessions": e.get("sessions", []),
            }
            for cell, e in extra.items()
        }
        lines += [
            f"**With the re-scoring race** (`rescore_max_seeds: {a.race}`): the same searches finished again "
            "from their own trials (`--race`: each run directory copied with that one setting changed, then "
            "`autoaug search --resume`; without a time budget the trials do not depend on it, so this is what "
            "the search with the race stores). The candidates within the noise of the leader get more fresh "
            "seeds (1001, 1002, ...; not the K seeds below). Gain of the policy it stored over the warm start, "
            "the same K paired seeds; wall / CPU: the search's plus the replay's (its Ray start and the race's "
            "runs).",
            "",
            *gain_table(raced, both, a.trials, a.samplers),
            "",
            "| search | stored with the race | race rounds | ended | stored without it |",
            "|---|---|---:|---|---|",
        ]
        for cell, p in per_search.items():
            if not p["race_hash"]:
                continue
            record = p["race_record"] or {}
            lines.append(
                f"| `{search_name(*cell)}` | {p['race_chosen']} (`{p['race_hash'][:12]}`) | "
                f"{len(record.get('rounds') or [])} | {record.get('ended', '–')} | "
                f"{(results[cell]['provenance'].get('selection') or {}).get('chosen')} (`{p['stored_hash'][:12]}`) |"
            )
        lines.append("")
    found = challenger_cells(per_search, done)
    kept = [cell for cell, p in per_search.items() if p["same_policy"]]
    if kept:
        lines += [
            "What the searches that stored their warm start had found: their best own candidate (the one "
            "their re-scoring compared with the warm start and did not keep) minus the warm start, the same "
            "seeds, paired:",
            "",
            "| search | candidate | gain, points [95% CI] |",
            "|---|---|---|",
        ]
        for cell in kept:
            p = per_search[cell]
            if p["challenger"]:
                what = f"{p['challenger']} (`{p['challenger_hash'][:12]}`)"
            elif no_trial(results[cell]):
                what = "none: no trial ran"
            else:
                what = "not rebuilt"
            lines.append(f"| `{search_name(*cell)}` | {what} | {cell_text(found.get(cell))} |")
        lines.append("")
    trials = [  # the training method's trials (a PBA member or a density candidate has no ASHA rungs)
        t for cell in per_search if cell[1] not in METHOD_PRESETS for t in trial_scores(work, search_name(*cell))
    ]
    at = sorted(
        {
            e
            for cell in per_search
            if cell[1] not in METHOD_PRESETS
            for e in search_rungs(results[cell]["provenance"]["search"]["config"])
        }
    )
    rungs = rung_ranking(trials, at or None)
    if rungs:
        stopped = ended_at(trials)
        lines += [
            f"Do ASHA's rungs rank? Over the {len(trials)} trials of these searches, Spearman's rho between a "
            f"trial's score at one rung and at the next: {rung_text(rungs, stopped)}.",
            "",
        ]
    if len(per_search) > 1 and not a.own_calibration:
        lines += [
            f"The first search (`{a.calibrated_by}`) measured the bases and the "
            "published policies; the other training-method searches reused its runs (`--calibration-from`), so "
            "their time excludes it" + ("; the other methods measured their own base." if a.methods else "."),
            "",
        ]
    lines += [
        "| search | trials run | ASHA's rungs (epochs) | stored policy | sub-policies | hash | warm start hash |",
        "|---|---:|---|---|---:|---|---|",
    ]
    for cell, p in per_search.items():
        r = results[cell]
        ran = trials_text(r["provenance"].get("counts") or {})
        chosen = (r["provenance"].get("selection") or {}).get("chosen") or (
            "transfer, as calibration measured it (no trial ran)" if no_trial(r) else "not re-scored: the method's own"
        )
        lines.append(
            f"| `{search_name(*cell)}` | {ran} | {rungs_text(r['provenance']['search']['config'])} | {chosen} | "
            f"{len(r['policy']['sub_policies'])} | "
            f"`{p['stored_hash'][:12]}` | `{p['warm_hash'][:12]}` |"
        )
    if evaluation:
        d = evaluation["paired"]
        lines += [
            "",
            f"## In the evaluation regime (`{a.eval_preset}`)",
            "",
            f"`{evaluation['labels'][0]}` (the "
            f"{'policy stored with the race' if evaluation.get('role') == 'race' else 'stored policy'} of the "
            f"{'cell chosen with --eval-cell' if evaluation.get('chosen') else 'best cell'}) "
            "minus the warm start, test accuracy, "
            f"paired by seed ({len(d['seeds'])} seeds): {points(d['mean'])} [{points(d['low'])}, "
            f"{points(d['high'])}] points (p = {d['p_value'] if d['p_value'] is None else round(d['p_value'], 3)})"
            + (f"; runs trained on {evaluation['machine']}." if evaluation.get("machine") else "."),
        ]
    stages = [f"{stage} {t['wall_s'] / 60:.1f} min" for stage, t in timings.data.items()]
    if stages:
        lines += ["", f"Wall time after the searches (all sessions): {'; '.join(stages)}."]
    lines += ["", "## Commands", "", "```", "python " + shlex.join(["benchmarks/search_gain.py", *sys.argv[1:]])]
    for entry in ledger.values():
        for s in entry["sessions"]:
            lines.append(s["command"].replace(str(work), "$WORK"))
    lines += [
        "```",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}; written {_now()}."
        + (f" The paired proxy runs trained on {machine} (runs pair by seed only within one kind)." if machine else ""),
    ]
    text = "\n".join(lines).replace(str(work), "$WORK").replace(a.data, "$DATA")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text + "\n")
    doc = {
        "dataset": a.dataset,
        "preset": a.preset,
        "trials": a.trials,
        "samplers": a.samplers,
        "methods": a.methods,
        "rescore_seeds": a.rescore_seeds,
        "seed_offset": GAIN_SEED_OFFSET,
        "cells": {f"{n}/{s}": {**c, "search": search_name(n, s)} for (n, s), c in cells.items()},
        "race": a.race,
        "race_cells": {f"{n}/{s}": {**c, "search": search_name(n, s)} for (n, s), c in raced.items()},
        "searches": {
            search_name(*cell): {
                "cost": ledger.get(search_name(*cell)),
                "warm_start": p["warm_start"],
                "warm_hash": p["warm_hash"],
                "stored_hash": p["stored_hash"],
                "challenger": p["challenger"],
                "challenger_hash": p["challenger_hash"],
                "challenger_gain": found.get(cell),
                "race_hash": p["race_hash"],
                "race_chosen": p["race_chosen"],
                "race_record": p["race_record"],
                "stored_policy": results[cell]["policy"],
                "counts": results[cell]["provenance"].get("counts"),
                "calibration_reused": bool((results[cell]["provenance"].get("calibration") or {}).get("reused")),
            }
            for cell, p in per_search.items()
        },
        "rungs": rungs,
        "eval": evaluation,
        "machine": machine,
        "timings": timings.data,
        "written_at": _now(),
    }
    write_json(out / "gain.json", doc)
    print(text)
    return doc
