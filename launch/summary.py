"""What a person reads about a stored policy: its provenance in a few lines, its evaluations, and
what to do with it next.

* :func:`provenance_lines` -- a search's provenance (``kind: autoaug.search``) summarised in three
  sections of at most about 25 lines: *what made it* (search, method and its settings, preset,
  seed, data and split with their fingerprints, the proxy), *what the search measured* (trials,
  base, the published policy that transferred best, the stored policy's margin over it with its
  95% interval, the noise, the time budget, what helps and hurts, the method's own lines) and
  *where it came from* (run directory, Optuna study, code commit, library versions, time); any
  other provenance (a policy saved by hand) as one short line per key. ``autoaug policies show``
  prints it; ``--provenance`` prints the whole record, ``--json`` the document.
* :func:`evaluation_lines` -- one line per evaluation attached to the policy.
* :func:`next_steps` -- the commands and Python lines that use a stored version (the end of
  ``autoaug search`` and of ``autoaug policies show``).

Nothing here names a search method: a method's settings, unit and summary lines come from the
method registry (:data:`autoaug.search.config.METHODS`), which imports neither Ray nor Optuna (the
light install shows a search's policy too); a method it does not know is named and left at that.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from autoaug.policies import bases
from autoaug.search.budget import describe_budget, format_duration
from autoaug.search.config import METHODS
from autoaug.search.decide.rescore import gain_text

__all__ = ["provenance_lines", "evaluation_lines", "next_steps", "SEARCH_KIND", "VALUE_WIDTH"]

#: ``provenance["kind"]`` of a policy a search stored (:func:`autoaug.search.decide.assemble.build_provenance`).
SEARCH_KIND = "autoaug.search"
#: The longest value a summary line shows of a record it does not know (the rest: ``--provenance``).
VALUE_WIDTH = 100
#: The keys of a provenance saved by hand shown one per line (the others counted).
MAX_KEYS = 12


def _field(key: str, value: str) -> str:
    return f"  {key:<13} {value}"


def _labelled(line: str) -> str:
    """A method's summary line (``early stopping: do ASHA's rungs rank ...``, ``schedule: 3
    stage(s) ...``) as a field under its own label; a line with no short label under ``method``."""
    label, sep, rest = line.partition(": ")
    if sep and label and len(label) <= 16 and ":" not in label:
        return _field(label, rest)
    return _field("method", line)


def _short(value: Any, width: int = VALUE_WIDTH) -> str:
    """``value`` as compact JSON (a string as itself), cut to ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _pts(fraction: float) -> str:
    return f"{fraction * 100:.2f}"


def _count(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _hash(value: Any) -> str:
    return str(value)[:12] if value else "?"


def _method(name: str | None) -> Any:
    """The registered method of that name, or None (none named, or one the registry does not know)."""
    if not name:
        return None
    return METHODS.get(name)


def _settings_text(method: Any, config: Mapping[str, Any]) -> str:
    """The method's settings as the configuration recorded them, ``name value`` each."""
    settings = method.settings
    values = config if settings.TOP_LEVEL else (config.get(settings.FIELD) or {})
    return ", ".join(f"{n} {_short(values[n], 24)}" for n in settings.names() if n in values)


# ----------------------------------------------------------------------------------------------
# A search's provenance


def provenance_lines(provenance: Mapping[str, Any] | None) -> list[str]:
    """The provenance summarised for a person (see the module documentation); ``[]`` when empty."""
    if not provenance:
        return []
    if provenance.get("kind") != SEARCH_KIND:
        return _other_lines(provenance)
    return [
        "what made it",
        *_made_lines(provenance),
        "what the search measured",
        *_measured_lines(provenance),
        "where it came from",
        *_origin_lines(provenance),
    ]


def _made_lines(p: Mapping[str, Any]) -> list[str]:
    search = p.get("search") or {}
    config = search.get("config") or {}
    name = config.get("method")
    method = _method(name)
    how = [repr(search.get("name") or config.get("name"))]
    if config.get("preset"):
        how.append(f"preset {config['preset']}")
    if "seed" in config:
        how.append(f"seed {config['seed']}")
    if config.get("sampler") and (p.get("optuna") or {}).get("study_name"):
        margin = (p.get("optuna") or {}).get("sampler_margin")  # (a sampler that moves from an incumbent)
        beyond = f" (its incumbent replaced beyond {margin * 100:.2f} points, the measured noise)" if margin else ""
        how.append(f"sampler {config['sampler']}{beyond}")
    lines = [_field("search", ", ".join(how))]
    if name:
        lines.append(_field("method", name + (f": {method.help}" if method is not None else "")))
    settings = _settings_text(method, config) if method is not None else ""
    if settings:
        lines.append(_field("settings", settings))
    space = config.get("space") or {}
    if space:
        family = space.get("family")
        lines.append(
            _field(
                "space",
                ", ".join(
                    x
                    for x in (
                        f"family {family}" if family else "",
                        f"{space['num_sub_policies']} sub-policies" if "num_sub_policies" in space else "",
                        f"{len(space['ops'])} op types" if space.get("ops") else "",
                        f"excluded {', '.join(space['exclude_ops'])}" if space.get("exclude_ops") else "",
                        f"ranges {space['ranges']}" if space.get("ranges") else "",
                    )
                    if x
                ),
            )
        )
    data = p.get("dataset") or {}
    if data:
        shape = ", ".join(
            x
            for x in (
                f"{_count(data['num_images'])} images" if "num_images" in data else "",
                f"{len(data['classes'])} classes" if data.get("classes") else "",
            )
            if x
        )
        lines.append(
            _field(
                "data",
                f"{data.get('source', '?')}"
                + (f": {shape}" if shape else "")
                + f"; fingerprint {_hash(data.get('fingerprint'))}",
            )
        )
    split = p.get("split") or {}
    if split:
        grouped = f", grouped by {split['group_by']}" if split.get("group_by") else ""
        lines.append(
            _field(
                "split",
                f"train {_count(split.get('train_size'))}, val {_count(split.get('val_size'))}, seed "
                f"{split.get('seed')}{grouped}; fingerprint {_hash(split.get('fingerprint'))}",
            )
        )
    train = config.get("train") or {}
    if train:
        size = f", {train['image_size']}x{train['image_size']}" if isinstance(train.get("image_size"), int) else ""
        lines.append(
            _field(
                "proxy",
                f"{train.get('model', '?')}, {train.get('epochs', '?')} epochs, batch {train.get('batch_size', '?')}, "
                f"lr {train.get('lr', '?')}{size} on {train.get('device', '?')}",
            )
        )
    return lines


def _measured_lines(p: Mapping[str, Any]) -> list[str]:
    """*What the search measured*: the trials, the base and the published policy calibration
    measured, the stored policy's margin, the noise, the time budget, what helps and hurts, and
    the method's own lines."""
    config = (p.get("search") or {}).get("config") or {}
    method = _method(config.get("method"))
    calibration = p.get("calibration") or {}
    base, transfer = calibration.get("base"), calibration.get("transfer")
    winner = transfer.get("best") if transfer else None
    versus = (p.get("selection") or {}).get("versus_transfer")
    lines = [
        _trials_line(p, getattr(method, "unit", "trials")),
        *_base_lines(base, config),
        *_transfer_lines(transfer, winner),
        *_selection_lines(p, versus, winner),
    ]
    noise = (versus or {}).get("noise") or (base or {}).get("noise") or (transfer or {}).get("noise")
    if noise and noise.get("source"):
        lines.append(_field("noise", noise["source"]))
    budget = p.get("budget")
    described = describe_budget(budget) if budget else []
    if described:  # ("time budget: 30m, ..." when it did not end the search)
        lines.append(_field("time budget", described[0].removeprefix("time budget: ")))
    effects = _effects_line(p.get("op_effects"))
    if effects:
        lines.append(_field("ops", effects))
    if method is not None:
        lines += [_labelled(line) for line in method.reporter.summary(p.get("method") or {})]
    return lines


def _trials_line(p: Mapping[str, Any], unit: str) -> str:
    """How many trials (or the method's unit) ran of those planned, how they ended, and the best."""
    counts = p.get("counts") or {}
    parts = [
        f"{counts.get(key)} {what}"
        for key, what in (
            ("completed", "completed"),
            ("early_stopped", "stopped early"),
            ("budget_stopped", "stopped by the time budget"),
            ("failed", "failed"),
        )
        if counts.get(key)
    ]
    planned = ((p.get("budget") or {}).get("trials") or {}).get("planned")
    total = counts.get("trials", 0)
    ran = f"{total} of {planned} {unit}" if planned and planned != total else f"{total} {unit}"
    best = p.get("best")
    metric = (p.get("metric") or {}).get("name", "score")
    best_text = (
        f"; best {best.get('trial_id')}: {metric} {best['score']:.4f} after {_plural(best.get('epochs'), 'epoch')}"
        if best and isinstance(best.get("score"), (int, float))
        else ""
    )
    return _field(unit, f"{ran}" + (f" ({', '.join(parts)})" if parts else "") + best_text)


def _base_lines(base: Mapping[str, Any] | None, config: Mapping[str, Any]) -> list[str]:
    """The base: the one calibration chose with each base's score, or the one given."""
    if base:
        measured = [
            (b, s["mean"]) for b, s in (base.get("scores") or {}).items() if isinstance(s, Mapping) and "mean" in s
        ]
        scores = ", ".join(f"{b} {_pts(m)}" for b, m in sorted(measured, key=lambda x: -x[1]))
        return [_field("base", f"{base.get('chosen')}, measured first (proxy score %: {scores})")]
    if (config.get("space") or {}).get("base"):
        return [_field("base", f"{config['space']['base']} (given, not measured)")]
    return []


def _transfer_lines(transfer: Mapping[str, Any] | None, winner: str | None) -> list[str]:
    """The published policy that transferred best (``winner``), its score and the warm start."""
    if not (transfer and winner):
        return []
    mean = ((transfer.get("scores") or {}).get(winner) or {}).get("mean")
    score = f" ({_pts(mean)}%)" if isinstance(mean, (int, float)) else ""
    warm = transfer.get("warm_start") or []
    start = f"; warm start {warm[0]}" if warm else "; no warm start"
    return [_field("transfer", f"{winner} transferred best of the published policies{score}{start}")]


def _selection_lines(p: Mapping[str, Any], versus: Mapping[str, Any] | None, winner: str | None) -> list[str]:
    """The re-scoring: the stored policy's margin over the published policy that transferred best
    (``versus``) with its interval, or the number of candidates re-scored."""
    selection = p.get("selection") or {}
    if versus and isinstance(versus.get("margin"), (int, float)):
        # Only for a search's re-scored provenance: `policies show` of others does not load it (light path).
        from autoaug.search.records import ran_text

        than = winner or "the best published policy"
        ran = ran_text(p)
        verdict = "beyond the noise" if versus.get("beyond") else "within the noise"
        return [
            _field(
                "margin",
                f"{gain_text(versus)}, {versus.get('own')} over {than}{f' after {ran}' if ran else ''} "
                f"(95% interval, re-scored), {verdict}; stored: {selection.get('chosen')}",
            )
        ]
    if selection.get("chosen"):
        return [
            _field("re-scored", f"{len(selection.get('candidates') or [])} candidates; stored: {selection['chosen']}")
        ]
    return []


def _effects_line(record: Mapping[str, Any] | None) -> str:
    """What helps and hurts in one line (``autoaug policies show --provenance``: every op)."""
    if not record:
        return ""
    rows = record.get("ops") or []
    if not rows:
        return f"no estimate of what helps and hurts ({record.get('why_not', 'no runs')})"
    said = []
    for verdict in ("helps", "hurts"):
        named = [r for r in rows if r.get("verdict") == verdict]
        if named:
            said.append(
                f"{verdict} "
                + ", ".join(f"{r['op']} {r['effect'] * 100:+.2f} +- {r['ci95'] * 100:.2f}" for r in named[:4])
                + (f" and {len(named) - 4} more" if len(named) > 4 else "")
            )
    unclear = sum(r.get("verdict") == "unclear" for r in rows)
    if not said:
        said.append("no operation helps or hurts beyond the noise")
    if unclear:
        said.append(f"{unclear} within the noise")
    runs = f" ({record['runs']} runs; points per application, 95% interval)" if record.get("runs") else ""
    return "; ".join(said) + runs


def _origin_lines(p: Mapping[str, Any]) -> list[str]:
    lines = []
    run_dir = (p.get("search") or {}).get("run_dir")
    if run_dir:
        lines.append(_field("run directory", run_dir))
    optuna = p.get("optuna") or {}
    if optuna.get("study_name"):
        names = optuna["study_name"]
        names = ", ".join(map(str, names)) if isinstance(names, list) else names
        study = f"{names} in {optuna.get('storage')}"
        if optuna.get("consistent_with_tune") is False:
            study += f" (inconsistent with Tune: {'; '.join(optuna.get('problems') or [])})"
        lines.append(_field("Optuna study", study))
    elif optuna.get("note"):
        lines.append(_field("Optuna study", f"none ({optuna['note']})"))
    git = p.get("git") or {}
    if git.get("commit"):
        lines.append(
            _field("code", f"commit {git['commit'][:12]}" + (" (uncommitted changes)" if git.get("dirty") else ""))
        )
    elif git:
        lines.append(_field("code", "no git commit recorded (not run from a checkout)"))
    versions = p.get("versions") or {}
    if versions:
        lines.append(_field("libraries", ", ".join(f"{k} {str(v).split(' (')[0]}" for k, v in versions.items())))
    time = p.get("time") or {}
    if time.get("started_at"):
        sessions = len(time.get("sessions") or ())
        elapsed = time.get("elapsed_s")
        took = f", {format_duration(float(elapsed))}" if isinstance(elapsed, (int, float)) else ""
        host = (p.get("host") or {}).get("node")
        lines.append(
            _field(
                "time",
                f"started {_when(time['started_at'])}{took}"
                + (f" in {sessions} driver sessions" if sessions > 1 else "")
                + (f", on host {host}" if host else ""),
            )
        )
    return lines


def _when(iso: str) -> str:
    return iso.replace("T", " ").split(".")[0].rstrip("Z") + "Z"


def _other_lines(provenance: Mapping[str, Any]) -> list[str]:
    """A provenance not written by a search (``policies import --metadata``, a library save): one
    short line per key."""
    keys = list(provenance)
    lines = ["provenance (not a search's: saved by hand or by other code)"]
    width = max(13, *(len(str(k)) for k in keys[:MAX_KEYS]))
    lines += [f"  {str(k):<{width}} {_short(provenance[k])}" for k in keys[:MAX_KEYS]]
    if len(keys) > MAX_KEYS:
        lines.append(f"  ... and {len(keys) - MAX_KEYS} more keys")
    return lines


# ----------------------------------------------------------------------------------------------
# Evaluations


def evaluation_lines(evaluations: Sequence[Any]) -> list[str]:
    """One line per evaluation (``autoaug compare``'s: the metric's mean, its 95% interval, seeds,
    rank; any other: its results, cut short)."""
    if not evaluations:
        return ["evaluations   (none attached)"]
    lines = [f"evaluations ({len(evaluations)})"]
    for ev in evaluations:
        results = ev.results
        when = _when(ev.attached_at) if isinstance(ev.attached_at, str) else ev.attached_at
        lines.append(f"  {when}  {_evaluation_text(results)}")
    return lines


def _evaluation_text(results: Any) -> str:
    if not isinstance(results, Mapping) or not isinstance(results.get("mean"), (int, float)):
        return _short(results)
    ci = results.get("ci95")
    interval = f" [{ci[0] * 100:.2f}, {ci[1] * 100:.2f}]" if isinstance(ci, list) and len(ci) == 2 else ""
    others = results.get("compared_with") or {}
    rank = f", rank {results['rank']} of {len(others) + 1}" if results.get("rank") else ""
    seeds = f" over {results['n']} seeds" if results.get("n") else ""
    where = f" ({results['out']})" if results.get("out") else ""
    base = f" on base {results['base']}" if results.get("base") else ""
    return (
        f"{results.get('kind', 'evaluation')}: {results.get('metric', 'score')} {results['mean'] * 100:.2f}%"
        f"{interval}{seeds}{rank}{base}{where}"
    )


# ----------------------------------------------------------------------------------------------
# Next steps


def next_steps(
    ref: str,
    *,
    store: str | None,
    data: str | None = None,
    schedule_stages: int | None = None,
    base: str | None = None,
) -> list[str]:
    """What to do with the stored version ``ref`` (``NAME@N``): compare it with the baselines,
    export it for timm, load it in Python. ``store``: the store's location as the person passes it
    (None: the default store, no ``--store`` needed); ``data``: the data it was searched on (None:
    a placeholder); ``schedule_stages``: the stages of a schedule (a PBA result), else None;
    ``base``: the policy's base, said in the comment of the transform line (what
    ``to_torchvision()`` applies before the policy: no flip on ``crop``)."""
    at = f" --store {_quoted(store)}" if store else ""
    name = ref.split("@")[0]
    lines = [
        "next steps: compare with the baselines (docs/compare.md), export for timm, load in Python "
        + ("(a schedule: docs/search.md)" if schedule_stages else "(docs/store.md)"),
        # (compare's defaults: the cpu training preset, 3 seeds, the six baselines, --out runs/compare)
        f"  autoaug compare --policy {ref}{at} --data {_quoted(data) if data else 'DATA'}",
    ]
    if schedule_stages:  # a schedule: timm takes one policy (its last stage), Python switches them per epoch
        return [
            *lines,
            f"  autoaug policies export {ref}{at} --format timm --stage {schedule_stages - 1} --out {name}.timm.json",
            "  from autoaug.policies.reference import resolve_schedule",
            *([] if store else ["  from autoaug.policies.store import PolicyStore"]),
            f"  schedule = resolve_schedule({_py(ref)}, store={_py(store) if store else 'PolicyStore()'})",
            "  transform = schedule.to_torchvision(epochs=EPOCHS)   # transform.set_epoch(e) every epoch",
        ]
    opened = f"PolicyStore({_py(store)})" if store else "PolicyStore()"
    return [
        *lines,
        f"  autoaug policies export {ref}{at} --format timm --out {name}.timm.json",
        "  from autoaug.policies.store import PolicyStore",
        f"  policy = {opened}.load({_py(ref)})",
        f"  transform = policy.to_torchvision()   # {_base_then_policy(base)}",
    ]


def _base_then_policy(base: str | None) -> str:
    """``its base (pad-and-random-crop), then the policy``: what a policy's transform applies."""
    if base is None:
        return "its base, then the policy"
    summary = bases.get(base).summary
    return "the policy alone (base none)" if summary == "nothing" else f"its base {base} ({summary}), then the policy"


def _py(text: str) -> str:
    """``text`` as a Python string literal, in double quotes."""
    return json.dumps(text)


def _quoted(text: str) -> str:
    """``text`` as one shell word."""
    return shlex.quote(text)
