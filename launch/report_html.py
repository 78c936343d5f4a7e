"""``autoaug report NAME --html OUT.html``: a search's story in one self-contained HTML page.

One file a browser opens from a disk, a mail or an artifact store: the CSS is inline, every
picture a base64 ``data:`` URI (matplotlib and :func:`autoaug.policies.preview.render_grid`
PNGs), no script, no font, no link to anything outside the file. Read through the same
:class:`~autoaug.search.run_dir.RunDir` and Optuna storage as the PNG report
(:func:`autoaug.search.report.load_report_data`), so a run directory on an artifact store works as
one on the disk. Sections (:data:`SECTIONS`):

* **Decisions**: the provenance summarised (:func:`autoaug.launch.summary.provenance_lines`: the
  base, the published policy that transferred, the margin with its 95% interval, the noise);
* **Trials**: the score of each trial over the search's time with the best so far, the learning
  curves (the scores per epoch, the trials' intermediate values), the best trials' points;
* **Rungs**: where trials ended and whether the early-stopping rungs ranked them
  (:mod:`autoaug.search.decide.rungs`);
* **Race**: the re-scoring of the final candidates and the race's rounds, when it ran;
* **What helps and hurts**: the op effects (:mod:`autoaug.search.decide.op_effects`);
* **The stored policy**: in its family form (:func:`autoaug.policies.describe.describe`) with a
  grid of the user's own images (the data path of the provenance) augmented by it and by the warm
  start beside it; when the data cannot be read the page says so instead;
* **Comparisons**: the stored version's evaluations (``autoaug compare`` attaches them).

A part that cannot be read (no result yet: the search runs; a store out of reach) is said in its
section; the page is still written.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import optuna
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from autoaug.core.extras import missing
from autoaug.launch.policies_preview import preview_images
from autoaug.launch.summary import evaluation_lines, provenance_lines
from autoaug.policies.describe import describe
from autoaug.policies.policy import Policy
from autoaug.policies.preview import render_grid
from autoaug.policies.reference import resolve_policy
from autoaug.policies.store import PolicyStore
from autoaug.search.decide.op_effects import describe_effects, plot_effects
from autoaug.search.decide.rescore import describe_selection
from autoaug.search.decide.rungs import describe_rungs, from_study
from autoaug.search.methods.base import method_of
from autoaug.search.records import ran_text
from autoaug.search.report import load_report_data, top_trials
from autoaug.search.run_dir import CONFIG_FILE, RESULT_FILE, RunDir
from autoaug.search.score import METRIC

__all__ = ["write_html_report", "SECTIONS"]

#: The sections of the page, by their element id and heading (every page has each, saying when
#: it has nothing to show).
SECTIONS: tuple[tuple[str, str], ...] = (
    ("decisions", "Decisions"),
    ("trials", "Trials"),
    ("rungs", "Rungs"),
    ("race", "Race"),
    ("effects", "What helps and hurts"),
    ("policy", "The stored policy"),
    ("compare", "Comparisons"),
)

#: Images of the user's data in the grids, and draws of each policy per image.
GRID_IMAGES = 4
GRID_COLUMNS = 5

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
header{background:#233044;color:#fff;padding:14px 28px}
header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#cfd8e3;font-size:13px}
nav{padding:8px 28px;background:#e9edf2;font-size:13px}
nav a{margin-right:14px;color:#233044}
main{padding:8px 28px 28px;max-width:1200px}
section{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:10px 18px 14px;margin:14px 0}
h2{font-size:18px;margin:6px 0 10px;color:#233044}
h3{font-size:14px;margin:12px 0 6px}
pre{background:#f3f5f7;padding:8px 10px;border-radius:4px;overflow-x:auto;font-size:12px;line-height:1.35}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border-bottom:1px solid #e3e7ec;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7}
img{max-width:100%;height:auto;border:1px solid #e3e7ec}
.row{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
.row figure{margin:0;flex:1 1 460px}
figcaption{font-size:12px;color:#555;margin-top:3px}
.note{color:#8a5300;background:#fff6e5;border-left:3px solid #e0a030;padding:6px 10px;font-size:13px}
.muted{color:#666;font-size:13px}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _pre(lines: Iterable[str]) -> str:
    text = "\n".join(lines)
    return f"<pre>{_e(text)}</pre>" if text.strip() else ""


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def _muted(text: str) -> str:
    return f'<p class="muted">{_e(text)}</p>'


def _img(png: bytes, alt: str, caption: str = "") -> str:
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{_e(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="{uri}" alt="{_e(alt)}">{cap}</figure>'


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=96)
    return buf.getvalue()


def _figure() -> tuple[Figure, Any]:
    """A figure of one plot (matplotlib's object interface: no pyplot, no backend to choose)."""
    fig = Figure(figsize=(6, 3.6))
    return fig, fig.subplots()


# ----------------------------------------------------------------------------------------------
# Trials


def _minutes(trials: Sequence[Any]) -> list[float] | None:
    """Minutes from the first trial's start to each trial's end (None: the study has no times)."""
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    if not starts or any(t.datetime_complete is None for t in trials):
        return None
    t0 = min(starts)
    return [(t.datetime_complete - t0).total_seconds() / 60 for t in trials]


def _trials_over_time(trials: Sequence[Any], metric: str) -> bytes:
    fig, ax = _figure()
    order = sorted(trials, key=lambda t: (t.datetime_complete or datetime.min.replace(tzinfo=None), t.number))
    xs = _minutes(order)
    label = "minutes since the first trial started"
    if xs is None:
        xs, label = [float(t.number) for t in order], "trial (Optuna number)"
    values = [t.value for t in order]
    pruned = [t.state == optuna.trial.TrialState.PRUNED for t in order]
    ax.scatter(
        [x for x, p in zip(xs, pruned) if not p],
        [v for v, p in zip(values, pruned) if not p],
        label="ran all epochs",
        zorder=3,
    )
    if any(pruned):
        ax.scatter(
            [x for x, p in zip(xs, pruned) if p],
            [v for v, p in zip(values, pruned) if p],
            color="tab:gray",
            marker="x",
            label="stopped early (its last score)",
            zorder=3,
        )
    best, running = float("-inf"), []
    for v in values:
        best = max(best, v)
        running.append(best)
    ax.step(xs, running, where="post", color="tab:red", label="best so far")
    ax.set_xlabel(label)
    ax.set_ylabel(metric)
    ax.set_title("score of each trial as it ended")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def _learning_curves(trials: Sequence[Any], metric: str, top: int) -> bytes | None:
    curves = [t for t in trials if t.intermediate_values]
    if not curves:
        return None
    fig, ax = _figure()
    best = {t.number for t in sorted(trials, key=lambda t: t.value, reverse=True)[:top]}
    for t in curves:
        steps = sorted(t.intermediate_values)
        mark = t.number in best
        ax.plot(
            steps,
            [t.intermediate_values[s] for s in steps],
            marker="o",
            markersize=3,
            alpha=0.9 if mark else 0.35,
            linewidth=1.8 if mark else 0.8,
            label=f"#{t.number} ({t.value:.3f})" if mark else None,
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"learning curves (best {len(best)} labelled)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def _trials_section(data: Any, top: int) -> str:
    if not data.trials:
        return _note("no trial has finished yet: nothing to draw")
    figs = [_img(_trials_over_time(data.trials, METRIC), "score of each trial over time")]
    curves = _learning_curves(data.trials, METRIC, top)
    if curves is not None:
        figs.append(_img(curves, "learning curves", "the scores per epoch (the values the rungs compared)"))
    states: dict[str, int] = {}
    for t in data.trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    counts = ", ".join(f"{n} {s.lower()}" for s, n in states.items())
    rows = [
        (f"#{r['number']}", f"{r['value']:.4f}", r.get("point") or "(parameters of another space)")
        for r in top_trials(data.trials, top, data.space)
    ]
    return (
        _muted(f"{len(data.trials)} finished trials ({counts}); the {data.space.family} space")
        + f'<div class="row">{"".join(figs)}</div>'
        + f"<h3>best {len(rows)} trials</h3>"
        + _table(("trial", METRIC, "point"), rows)
    )


# ----------------------------------------------------------------------------------------------
# Rungs, race, effects


def _rungs_section(rungs: Mapping[str, Any] | None) -> str:
    if not rungs:
        return _muted("no trial was stopped early at more than one epoch: no rung to rank")
    ended = sorted(((int(e), n) for e, n in (rungs.get("ended") or {}).items()))
    pairs = rungs.get("pairs") or []
    rows = [
        (
            f"{p.get('from')} -> {p.get('to')}",
            p.get("n"),
            "" if p.get("rho") is None else f"{p['rho']:+.2f}",
            "" if p.get("low") is None else f"[{p['low']:+.2f}, {p['high']:+.2f}]",
        )
        for p in pairs
    ]
    return (
        _pre(describe_rungs(rungs))
        + "<h3>where trials ended</h3>"
        + _table(("epoch", "trials"), ended)
        + "<h3>rank correlation between rungs</h3>"
        + _table(("epochs", "trials", "Spearman rho", "95% interval"), rows)
    )


def _race_section(provenance: Mapping[str, Any]) -> str:
    selection = provenance.get("selection")
    if not selection:
        return _muted("the final candidates were not re-scored (no race)")
    parts = [_pre(describe_selection(selection, ran_text(provenance)))]
    candidates = [c for c in selection.get("candidates") or [] if isinstance(c, Mapping)]
    if candidates:
        rows = [
            (
                c.get("kind", "?"),
                c.get("num_sub_policies", ""),
                "" if c.get("val_accuracy") is None else f"{c['val_accuracy']:.4f}",
                len(c.get("runs") or []),
            )
            for c in candidates
        ]
        parts.append("<h3>candidates</h3>" + _table(("candidate", "sub-policies", "mean score", "runs"), rows))
    race = selection.get("race") or {}
    rounds = race.get("rounds") or []
    if rounds:
        rows = [(i + 1, _short(r)) for i, r in enumerate(rounds)]
        parts.append(f"<h3>the race: {len(rounds)} round(s), ended as {_e(race.get('ended'))}</h3>")
        parts.append(_table(("round", "contenders and scores"), rows))
    return "".join(parts)


def _short(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _effects_section(provenance: Mapping[str, Any]) -> str:
    effects = provenance.get("op_effects")
    lines = describe_effects(effects, unclear=20)
    if not lines:
        return _muted("the search recorded no op effects")
    parts = [_pre(lines)]
    with tempfile.TemporaryDirectory(prefix="autoaug-report-") as tmp:
        path = plot_effects(effects or {}, os.path.join(tmp, "ops.png"))
        if path:
            with open(path, "rb") as f:
                parts.append(f'<div class="row">{_img(f.read(), "what helps and hurts")}</div>')
    return "".join(parts)


# ----------------------------------------------------------------------------------------------
# The policy and its grids


def _warm_start(config: Mapping[str, Any], provenance: Mapping[str, Any]) -> str | None:
    """The search's (first) warm-start reference: the configured one, or with ``auto`` the
    published policy calibration chose; None: none."""
    warm = config.get("warm_start")
    if isinstance(warm, str) and warm.strip().lower() == "auto":
        warm = ((provenance.get("calibration") or {}).get("transfer") or {}).get("warm_start") or []
    if isinstance(warm, str):
        warm = [warm] if warm else []
    refs = [r for r in warm or [] if isinstance(r, str) and r]
    return refs[0] if refs else None


def _grid(policy: Any, images: Any, backend: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="autoaug-report-") as tmp:
        path = render_grid(policy, images, os.path.join(tmp, "grid.png"), columns=GRID_COLUMNS, seed=0, backend=backend)
        return path.read_bytes()


def _backend() -> str:
    return "torchvision" if missing(["nvidia.dali"]) else "dali"


def _policy_section(result: Mapping[str, Any] | None, config: Mapping[str, Any], store: str | None) -> str:
    if not result or not result.get("policy"):
        return _muted("no policy stored yet (the search has not finished)")
    provenance = result.get("provenance") or {}
    try:
        policy = Policy.from_dict(result["policy"])
    except (ValueError, KeyError, TypeError) as exc:
        return _note(f"the stored policy cannot be read: {exc}")
    ref = (result.get("stored") or {}).get("ref", policy.name)
    parts = [f"<h3>{_e(ref)}</h3>", _pre(describe(policy))]
    policies = [(f"the stored policy {ref}", policy)]
    warm = _warm_start(config, provenance)
    if warm is None:
        parts.append(_muted("this search started from no warm start: the grid shows the stored policy alone"))
    else:
        try:
            policies.append((f"the warm start {warm}", resolve_policy(warm, store=store)))
        except Exception as exc:  # noqa: BLE001 - the page says it and shows the rest
            parts.append(_note(f"the warm start {warm} cannot be read: {exc}"))
    source = ((provenance.get("dataset") or {}).get("source")) or ((config.get("train") or {}).get("data"))
    if not isinstance(source, str) or not source:
        parts.append(_note("the provenance names no data: no grid of its images"))
        return "".join(parts)
    try:
        images = preview_images(source, GRID_IMAGES, None, GRID_COLUMNS)
    except Exception as exc:  # noqa: BLE001 - a data path moved or out of reach: said, not fatal
        parts.append(_note(f"the search's data {source} cannot be read here, so no grid of its images: {exc}"))
        return "".join(parts)
    if len(policies) == 2 and policies[1][1].with_base(policy.base).content_hash == policy.content_hash:
        parts.append(
            _muted(f"the stored policy is the warm start {warm} itself (no trial beat it): the grids are alike")
        )
    backend = _backend()
    figs = []
    for label, pol in policies:
        try:
            figs.append(_img(_grid(pol, images, backend), f"images augmented by {label}", label))
        except Exception as exc:  # noqa: BLE001
            figs.append(_note(f"cannot draw {label}: {exc}"))
    parts.append(
        _muted(
            f"{len(images)} images of {source}, the original first, then {GRID_COLUMNS} draws of each policy "
            f"(the policy step alone, its base not drawn; backend {backend})"
        )
    )
    parts.append(f'<div class="row">{"".join(figs)}</div>')
    return "".join(parts)


def _compare_section(result: Mapping[str, Any] | None) -> str:
    stored = (result or {}).get("stored") or {}
    if not stored.get("ref") or not stored.get("store"):
        return _muted("no stored version to compare")
    try:
        record = PolicyStore(stored["store"]).get(stored["ref"])
    except Exception as exc:  # noqa: BLE001 - a store out of reach: said in the page
        return _note(f"the policy store {stored['store']} cannot be read here: {exc}")
    if not record.evaluations:
        return _muted(f"no comparison attached to {stored['ref']} (autoaug compare attaches them)")
    rows = []
    for ev in record.evaluations:
        r = ev.results if isinstance(ev.results, Mapping) else {}
        ci = r.get("ci95")
        rows.append(
            (
                ev.attached_at,
                r.get("kind", ""),
                r.get("metric", ""),
                "" if not isinstance(r.get("mean"), (int, float)) else f"{r['mean'] * 100:.2f}%",
                f"[{ci[0] * 100:.2f}, {ci[1] * 100:.2f}]" if isinstance(ci, list) and len(ci) == 2 else "",
                r.get("n", ""),
                r.get("rank", ""),
            )
        )
    return _pre(evaluation_lines(record.evaluations)) + _table(
        ("attached", "kind", "metric", "mean", "95% interval", "seeds", "rank"), rows
    )


# ----------------------------------------------------------------------------------------------
# The page


def write_html_report(name: str, storage: str, out: str, *, top: int = 5) -> str:
    """Write search ``name``'s page (see the module documentation) to ``out``; returns its path."""
    data = load_report_data(name, storage)
    run = RunDir(storage, name)
    result = run.read_json(RESULT_FILE) if run.exists(RESULT_FILE) else None
    provenance = (result or {}).get("provenance") or {}
    config = (run.read_json(CONFIG_FILE).get("config") or {}) if run.exists(CONFIG_FILE) else {}
    method = method_of(config)
    rungs = from_study(data.study, (method.rungs(config) if method is not None else ()) or None)
    store = ((result or {}).get("stored") or {}).get("store")

    decisions = _pre(provenance_lines(provenance)) if provenance else ""
    if not decisions:
        decisions = _note(
            "the search has not finished: no decision recorded yet (the trials below are the study's so far)"
        )
    body = {
        "decisions": decisions,
        "trials": _trials_section(data, top),
        "rungs": _rungs_section(rungs),
        "race": _race_section(provenance),
        "effects": _effects_section(provenance),
        "policy": _policy_section(result, config, store),
        "compare": _compare_section(result),
    }
    stored = ((result or {}).get("stored") or {}).get("ref")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = f"{len(data.trials)} finished trials" + (f"; stored as {stored}" if stored else "; not finished")
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>autoaug search {_e(name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<header><h1>Search {_e(name)}</h1><p>{_e(head)} &middot; {_e(data.run_dir)} &middot; written {when}</p></header>",
        "<nav>" + "".join(f'<a href="#{i}">{_e(h)}</a>' for i, h in SECTIONS) + "</nav>",
        "<main>",
    ]
    for ident, heading in SECTIONS:
        page.append(f'<section id="{ident}"><h2>{_e(heading)}</h2>{body[ident]}</section>')
    page.append("</main></body></html>")
    path = os.path.abspath(os.path.expanduser(out))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(page))
    return path
