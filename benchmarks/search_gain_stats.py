"""The statistics, tables and bookkeeping of ``benchmarks/search_gain.py``, as pure functions: the
key of one re-scoring run, a cell of the gain table (the stored policy minus the warm start, paired
by seed, with its 95% Student-t interval: :func:`search_quality_stats.paired`), the table itself,
the best cell, each search's wall time and CPU-seconds accumulated over sessions, and the names
of the searches and their cells. ``search_gain.py`` runs the searches and the runs;
``search_gain_report.py`` writes the report."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_quality_stats import paired  # noqa: E402

#: Re-scoring run ``i`` of this benchmark trains with seed ``train.seed + GAIN_SEED_OFFSET + i``:
#: seeds no trial (``train.seed``), no search re-scoring (+1000) and no calibration (+2000) used.
GAIN_SEED_OFFSET = 3_000
#: Training settings that change no result (threads, where the data lies: the fingerprint says
#: which data); left out of :func:`train_key`.
_NOT_RESULT = ("seed", "num_threads", "data", "test_data")


#: Each search's wall time and CPU-seconds, over sessions (in the work folder).
SEARCHES_FILE = "searches.json"
#: ``--methods``: the other search methods, a row each, with the preset each runs on a CPU.
METHOD_PRESETS = {"density": "density-cpu", "pba": "pba-cpu"}


def search_name(n: int, sampler: str) -> str:
    """``sg-n28-tpe``: the training method's search of ``n`` trials with ``sampler``; ``sg-density``,
    ``sg-pba``: another method's search (``n`` 0: its preset sizes it)."""
    return f"sg-{sampler}" if sampler in METHOD_PRESETS else f"sg-n{n}-{sampler}"


def column_parts(column: str) -> tuple[str, str | None]:
    """A column of ``--samplers``: ``(sampler, variant label)``; ``random-g60`` -> ``("random", "g60")``,
    ``tpe`` -> ``("tpe", None)``."""
    sampler, _, label = column.partition("-")
    return sampler, label or None


def method_cells(methods: list[str]) -> list[tuple[int, str]]:
    """The cells of ``--methods``: ``(0, method)``, after the training method's searches."""
    return [(0, m) for m in methods]


def plan(trials: list[int], samplers: list[str]) -> list[tuple[int, str]]:
    """The searches, in the order they run (the first calibrates for the others)."""
    return [(n, s) for n in trials for s in samplers]


def calibrator(work: Path, order: list[tuple[int, str]]) -> str:
    """The search whose calibration the others reuse: a training-method search already in ``work``
    that measured the bases itself (no ``calibration_from``; the first by name if several), so a
    later invocation with other ``--trials``/``--samplers`` starts from the same base and warm start
    as the cells already in the table; else the first search of ``order``."""
    own = []
    for path in sorted((work / "runs").glob("sg-n*/search_config.json")):
        try:
            config = json.loads(path.read_text())["config"]
        except (OSError, ValueError, KeyError):
            continue  # an unreadable configuration names no calibration to reuse
        if config.get("method", "train") == "train" and not config.get("calibration_from"):
            own.append(path.parent.name)
    if own:
        return own[0]
    return search_name(*order[0])


def search_rungs(config: Mapping[str, Any]) -> tuple[int, ...]:
    """Where a search of ``config`` (a result's ``provenance.search.config``) stops trials early,
    then its last epoch, as its method says (:meth:`autoaug.search.methods.base.Method.rungs`);
    ``()`` for a method that stops none early."""
    from autoaug.search.methods.base import method_of

    method = method_of(config)
    return method.rungs(config) if method is not None else ()


def rungs_text(config: Mapping[str, Any]) -> str:
    """Where ASHA could stop a search's trials, from its configuration: ``"20, 60 of 120"``,
    ``"none (120 epochs)"``; ``"–"`` for a method that stops none early."""
    rungs = search_rungs(config)
    if not rungs:
        return "–"
    *milestones, epochs = rungs
    return f"{', '.join(map(str, milestones))} of {epochs}" if milestones else f"none ({epochs} epochs)"


def result_path(work: Path, name: str) -> Path:
    return work / "runs" / name / "result.json"


def race_name(name: str, seeds: int) -> str:
    return f"{name}-race{seeds}"


def train_key(train: Mapping[str, Any]) -> str:
    """12 hex digits naming a training configuration (a ``TrainConfig.to_dict()``) apart from its
    seed and its place: runs of two searches with the same proxy share a key, so the warm start's
    runs are trained once for every search that starts from it."""
    kept = {k: v for k, v in train.items() if k not in _NOT_RESULT}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:12]


def run_key(policy_hash: str, seed: int, train: str) -> str:
    """Key of one re-scoring run in ``rescore.json``: the policy's content hash, the seed and the
    training configuration (:func:`train_key`)."""
    return f"{policy_hash[:16]}/seed={seed}/train={train}"


def gain_cell(stored: Mapping[int, float], warm: Mapping[int, float], *, same_policy: bool = False) -> dict[str, Any]:
    """One cell of the gain table: the stored policy's re-scores minus the warm start's, paired by
    seed (same seed: same initialisation, data order and augmentation draws), their mean and the
    95% Student-t interval of the mean difference (``n``, ``mean``, ``std``, ``low``, ``high``,
    ``p_value``; :func:`search_quality_stats.paired`); ``beyond``: the interval excludes 0
    (None with fewer than 2 seeds). ``same_policy``: the search stored the warm start itself (its
    gain is 0 by construction; said in the table)."""
    seeds = sorted(set(stored) & set(warm))
    if not seeds:
        return {"n": 0, "mean": None, "low": None, "high": None, "beyond": None, "same_policy": same_policy}
    d = paired({s: stored[s] for s in seeds}, {s: warm[s] for s in seeds})
    beyond = None if d["low"] is None else bool(d["low"] > 0 or d["high"] < 0)
    return {**d, "beyond": beyond, "same_policy": same_policy}


def seeds_needed(mean: float | None, std: float | None, *, most: int = 1000) -> int | None:
    """The fewest paired seeds K (>= 2) whose 95% Student-t interval would exclude 0 if the mean
    difference and its spread stayed as measured: the smallest K with ``t(0.975, K-1) * std /
    sqrt(K) < |mean|``. None when the mean is 0 or unknown, or when more than ``most`` seeds
    would be needed (a gain that small cannot be told from the noise at any affordable K)."""
    from scipy import stats

    if mean is None or std is None or mean == 0 or math.isnan(mean) or math.isnan(std):
        return None
    for k in range(2, most + 1):
        if stats.t.ppf(0.975, k - 1) * std / math.sqrt(k) < abs(mean):
            return k
    return None


def needed_text(cells: Mapping[tuple[int, str], Mapping[str, Any]]) -> str:
    """One sentence: for each cell with a difference of its own (gain or loss) but a CI that holds
    0, the seeds it would need (:func:`seeds_needed`); empty when there is none."""
    parts = []
    for (n, sampler), c in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if not c.get("n") or c.get("same_policy") or c.get("beyond") or c.get("mean") is None:
            continue
        k = seeds_needed(c["mean"], c.get("std"))
        where = f"{sampler}" if not n else f"{sampler} at {n} trials"
        sd = f"spread of the differences {points(c.get('std'), sign=False)}"
        parts.append(f"{where} {points(c['mean'])} ({sd}): " + (f"K = {k}" if k else "more than 1,000"))
    if not parts:
        return ""
    return (
        "Seeds a difference would need for its 95% CI to exclude 0 (a gain above it, a loss below it) if its "
        "mean and spread stayed as measured (the fewest K with t(0.975, K-1) x spread / sqrt(K) below the "
        "mean's size; a planning figure, not a result: "
        "measuring more seeds until a CI clears would bias it): " + "; ".join(parts) + "."
    )


def points(x: float | None, sign: bool = True) -> str:
    """A fraction in points (``0.0009`` -> ``+0.09``); ``–`` for None / NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:+.2f}" if sign else f"{100 * x:.2f}"


def cell_text(cell: Mapping[str, Any] | None) -> str:
    """``+0.09 [-0.55, +0.73], K=5`` (points); ``–`` for a cell not measured yet."""
    if not cell or not cell.get("n"):
        return "–"
    if cell.get("same_policy"):
        return f"0 (stored the warm start), K={cell['n']}"
    ci = f" [{points(cell['low'])}, {points(cell['high'])}]" if cell.get("low") is not None else ""
    mark = "**" if cell.get("beyond") else ""
    return f"{mark}{points(cell['mean'])}{ci}{mark}, K={cell['n']}"


def cost_text(cost: Mapping[str, Any] | None) -> str:
    """``42.1 min / 4,870 CPU-s`` of a search (:func:`add_session`); ``–`` when not run yet."""
    if not cost:
        return "–"
    unfinished = "" if cost.get("finished") else " (unfinished)"
    missing = cost.get("cpu_unmeasured")
    more = f" + {missing} session{'s' if missing > 1 else ''} not measured" if missing else ""
    return f"{cost['wall_s'] / 60:.1f} min / {cost['cpu_s']:,.0f} CPU-s{more}{unfinished}"


def trials_text(counts: Mapping[str, Any]) -> str:
    """What ran of a search's trials (its provenance's ``counts``): ``28 (9 full, 19 stopped early)``,
    with those the time budget cut and those that failed when any."""
    if not counts:
        return "?"
    parts = [f"{counts.get('completed', 0)} full", f"{counts.get('early_stopped', 0)} stopped early"]
    if counts.get("budget_stopped"):
        parts.append(f"{counts['budget_stopped']} cut by the time budget")
    if counts.get("failed"):
        parts.append(f"{counts['failed']} failed")
    return f"{counts.get('trials', '?')} ({', '.join(parts)})"


def gain_table(
    cells: Mapping[tuple[int, str], Mapping[str, Any]],
    costs: Mapping[tuple[int, str], Mapping[str, Any]],
    trials: Sequence[int],
    samplers: Sequence[str],
) -> list[str]:
    """Markdown rows: one per number of trials, for each sampler its gain cell (:func:`cell_text`)
    and its search's wall time and CPU-seconds (:func:`cost_text`)."""
    head = "| trials |" + "".join(f" {s}: gain, points [95% CI] | {s}: wall / CPU |" for s in samplers)
    rule = "|---:|" + "---|---:|" * len(samplers)
    rows = [head, rule]
    for n in trials:
        rows.append(
            f"| {n} |"
            + "".join(f" {cell_text(cells.get((n, s)))} | {cost_text(costs.get((n, s)))} |" for s in samplers)
        )
    return rows


def best_cell(cells: Mapping[tuple[int, str], Mapping[str, Any]]) -> tuple[int, str] | None:
    """The (trials, sampler) whose stored policy gained most over the warm start (highest mean;
    ties: more trials), leaving out searches that stored the warm start; None when none did."""
    own = [(k, c) for k, c in cells.items() if c.get("n") and not c.get("same_policy") and c.get("mean") is not None]
    if not own:
        return None
    return max(own, key=lambda kc: (kc[1]["mean"], kc[0][0]))[0]


def add_session(
    ledger: dict[str, Any],
    name: str,
    wall_s: float,
    cpu_s: float | None,
    command: str,
    finished: bool,
    when: str,
    session: str | None = None,
) -> dict[str, Any]:
    """Add one session of search ``name`` (its wall time, the CPU-seconds of the processes it
    started, whether the search finished in it) to ``ledger`` (``{name: {wall_s, cpu_s, finished,
    sessions}}``, kept in the work folder): a search resumed another day sums its sessions.
    ``session``: an id of the session; a session already recorded under it is updated in place
    (the benchmark records a running search's session every minute, so one killed with the
    machine -- no ``finally`` runs -- keeps what it had spent up to its last record). ``cpu_s``
    None: a session whose CPU was not measured (recovered from the search's own record of its
    time); the entry counts them in ``cpu_unmeasured`` and :func:`cost_text` says so. Returns
    ``ledger``."""
    entry = ledger.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0, "finished": False, "sessions": []})
    record = {
        "finished_at": when,
        "wall_s": round(wall_s, 1),
        "cpu_s": None if cpu_s is None else round(cpu_s, 1),
        "finished": finished,
        "command": command,
    }
    if session is not None:
        record["session"] = session
    at = next((i for i, s in enumerate(entry["sessions"]) if session and s.get("session") == session), None)
    if at is None:
        entry["sessions"].append(record)
    else:
        entry["sessions"][at] = record
    entry["wall_s"] = sum(s["wall_s"] for s in entry["sessions"])
    # a session recovered from the search's own record after the benchmark was killed has no CPU
    entry["cpu_s"] = sum(s["cpu_s"] for s in entry["sessions"] if s.get("cpu_s") is not None)
    entry["cpu_unmeasured"] = sum(1 for s in entry["sessions"] if s.get("cpu_s") is None)
    entry["finished"] = any(s["finished"] for s in entry["sessions"])
    return ledger
