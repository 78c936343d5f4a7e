"""What helps and what hurts on this data: each operation's measured effect on the proxy score.

A search trains the proxy many times with policies that use the operations in different amounts:
the published policies of the calibration's transfer race (AutoAugment-SVHN's ``Invert``,
RandAugment's fourteen operations at one magnitude, ...), the base alone, and every trial that
trained every epoch, all on the chosen base. :func:`estimate` reads from those runs how the score
moves with each operation:

* an operation's **usage** in a policy (:func:`usage`) is how often it is applied to one image:
  the policy draws one sub-policy uniformly and applies each of its operations with its
  probability, so ``usage[op] = sum over sub-policies of (probability of op) / sub-policies``
  (RandAugment N=2 over 14 operations: 2/14 for each);
* an operation's **effect** is the least-squares slope of the runs' scores against its usage,
  with the operations already found to matter held in the model (forward selection: a search
  makes fewer runs than there are operations, so a joint regression is not identified; the
  other operations' effects count as noise): the change of the proxy score per application per
  image, in points. Whether a run augments at all is held in the model too, when some runs do not
  (the base alone): the gap between the base alone and any policy is the policies' common
  effect, not that of an operation every policy happens to use (without it, on CIFAR-10, every
  published policy's ``Solarize`` "helped" by +41 points per application: the base alone scored
  6 points below them and used none);
* its 95% interval (Student's t over the runs, simultaneous over the operations: Bonferroni) uses the larger of the runs' spread around that
  line and the measured noise of one run's score (:mod:`autoaug.search.decide.noise`: the
  calibration's repeats and per-image scores); an operation **hurts** when the whole interval is
  below zero, **helps** when it is above, and is **unclear** otherwise: with the few runs a
  search makes, most are.

The effects are measured with the other operations present and at the magnitudes the runs used:
they say which operations this data punishes (a flip on traffic signs, ``Invert`` on them), not a
law of each operation. ``Identity`` is left out (it changes nothing).

The record (:func:`estimate`) is stored in the policy's provenance (``op_effects``); the search's
summary, ``autoaug policies show`` (:func:`describe_effects`) and ``autoaug report``
(:func:`plot_effects`) show it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autoaug.policies import Policy, presets

__all__ = ["IGNORED", "usage", "observations", "estimate", "from_provenance", "describe_effects", "plot_effects"]

#: Operations that change nothing and are left out of the table.
IGNORED = ("Identity",)


def usage(policy: Any) -> dict[str, float]:
    """How often each operation is applied to one image by ``policy`` (a
    :class:`~autoaug.policies.Policy` or its dict): one sub-policy drawn uniformly, each of its
    operations applied with its probability. The identity policy uses none."""
    if not isinstance(policy, Policy):
        policy = Policy.from_dict(policy)
    subs = policy.sub_policies
    out: dict[str, float] = {}
    for sub in subs:
        for op in sub:
            if op.op not in IGNORED and op.probability > 0:
                out[op.op] = out.get(op.op, 0.0) + op.probability / len(subs)
    return out


def observations(provenance: Mapping[str, Any], epochs: int) -> list[dict[str, Any]]:
    """The runs of a search that scored a policy on the chosen base over the trials' whole
    schedule (``epochs``): the calibration's published policies and the base alone (when they
    ran that schedule), and every trial that trained every epoch. Each: ``label``, ``usage``,
    ``score`` (a fraction)."""
    obs: list[dict[str, Any]] = []
    calibration = provenance.get("calibration") or {}
    transfer = calibration.get("transfer") or {}
    if transfer and calibration.get("epochs", epochs) == epochs:
        for ref, scored in (transfer.get("scores") or {}).items():
            used = usage(presets.resolve(ref))
            obs += [{"label": ref, "usage": used, "score": float(s)} for s in scored.get("runs") or []]
        base = (calibration.get("base") or {}).get("scores", {}).get(transfer.get("base")) or {}
        obs += [{"label": transfer["base"], "usage": {}, "score": float(s)} for s in base.get("runs") or []]
    for trial in provenance.get("trials") or []:
        if trial.get("status") == "completed" and trial.get("policy") and trial.get("score") is not None:
            if (trial.get("epochs") or 0) >= epochs:
                obs.append(
                    {"label": f"trial {trial['trial_id']}", "usage": usage(trial["policy"]), "score": trial["score"]}
                )
    return obs


def _noise_sd(calibration: Mapping[str, Any]) -> tuple[float | None, str]:
    for stage in ("transfer", "base"):
        noise = (calibration.get(stage) or {}).get("noise") or {}
        if noise.get("sd"):
            return float(noise["sd"]), f"one run's spread {noise['sd'] * 100:.2f} points, measured in calibration"
    return None, ""


def estimate(obs: Sequence[Mapping[str, Any]], noise_sd: float | None = None, source: str = "") -> dict[str, Any]:
    """Each operation's effect from the runs ``obs`` (:func:`observations`): the least-squares
    slope of the score on the operation's usage, with the operations already found to matter
    held in the model (forward selection: a search has fewer runs than operations, so they
    cannot all be fitted at once), with a 95% interval from the larger of the runs' spread
    around the fit and ``noise_sd`` (one run's score spread as measured; None: the spread
    alone), simultaneous over the operations (Bonferroni: a search with no operation of any
    effect names one in 20 searches). Returns the record (``ops`` ordered from the
    most harmful to the most helpful; empty, with ``why_not``, when fewer than 4 runs)."""
    import numpy as np
    from scipy.special import stdtrit  # Student's t quantile, as stats.t.ppf without importing scipy.stats (1 s)

    ops = sorted({op for o in obs for op, u in o["usage"].items() if u > 0})
    record: dict[str, Any] = {"runs": len(obs), "ops": []}
    if len(obs) < 4 or not ops:
        record["why_not"] = f"{len(obs)} run(s) on the chosen base over the whole schedule: too few"
        return record
    y = np.array([float(o["score"]) for o in obs])
    columns = {op: np.array([o["usage"].get(op, 0.0) for o in obs]) for op in ops}
    # whether a run augments at all (the base alone does not), held in every fit when runs differ in it
    augmented = np.array([float(any(u > 0 for u in o["usage"].values())) for o in obs])
    common = [augmented] if 0 < augmented.sum() < len(obs) else []
    among = augmented > 0 if common else np.ones(len(obs), dtype=bool)

    def varies(x: Any) -> bool:
        return float(np.sum((x[among] - x[among].mean()) ** 2)) > 1e-12

    # every augmenting run used it alike: nothing to tell (beyond augmenting at all)
    columns = {op: x for op, x in columns.items() if varies(x)}
    if not columns:
        record["why_not"] = f"every one of the {len(obs)} runs applied the operations alike"
        return record
    # Simultaneous 95% intervals over the operations (Bonferroni): one claim in 20 searches.
    level = 1 - 0.025 / max(len(columns), 1)

    def fit(op: str, given: Sequence[str]) -> dict[str, Any] | None:
        """``op``'s slope with the operations ``given`` held in the model (an intercept too)."""
        names = [*given, op] if op not in given else list(given)
        x = np.column_stack([np.ones(len(y)), *common, *(columns[n] for n in names)])
        dof = len(y) - x.shape[1]
        if dof < 2:
            return None
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        resid = y - x @ coef
        spread = float(math.sqrt(np.sum(resid**2) / dof))
        cov = np.linalg.pinv(x.T @ x)
        i = 1 + len(common) + names.index(op)
        se = max(spread, noise_sd or 0.0) * math.sqrt(max(float(cov[i, i]), 0.0))
        half = float(stdtrit(dof, level)) * se
        return {"effect": float(coef[i]), "se": se, "ci95": half}

    held = _forward_selection(columns, fit)
    record.update(
        {
            "ops": _effect_rows(columns, held, fit),
            "noise_sd": noise_sd,
            "noise_source": source or "the runs' spread around each line",
            "method": "least-squares slope on the usage, forward selection; simultaneous 95% t intervals",
            "held": held,
        }
    )
    return record


def _forward_selection(columns: Mapping[str, Any], fit: Callable[[str, Sequence[str]], Any]) -> list[str]:
    """The operations held in the model, in the order they joined it: the operation clearest
    beyond its interval joins, and the others are measured again with it held (including one
    operation changes how much of the others a policy applies, so a strong one would otherwise
    make them look better or worse); until none is beyond its interval. ``fit(op, held)``: the
    slope record of ``op`` with ``held`` in the model (None: too few runs)."""
    held: list[str] = []
    while True:
        fits = {op: fit(op, held) for op in columns if op not in held}
        beyond = {
            op: abs(f["effect"]) / max(f["ci95"], 1e-12) for op, f in fits.items() if f and f["ci95"] < abs(f["effect"])
        }
        if not beyond:
            break
        held.append(max(beyond, key=beyond.get))
    return held


def _effect_rows(
    columns: Mapping[str, Any], held: Sequence[str], fit: Callable[[str, Sequence[str]], Any]
) -> list[dict[str, Any]]:
    """One row per operation (``columns``: its usage in each run), its slope with the operations
    ``held`` in the model and its verdict (a held operation hurts or helps; the others are
    unclear), from the most harmful to the most helpful."""
    rows = []
    for op, x in columns.items():
        f = fit(op, held)
        if f is None:
            continue
        verdict = "unclear"
        if op in held:
            verdict = "hurts" if f["effect"] < 0 else "helps"
        rows.append(
            {
                "op": op,
                **f,
                "verdict": verdict,
                "runs_with": int((x > 0).sum()),
                "max_usage": float(x.max()),
            }
        )
    rows.sort(key=lambda r: r["effect"])
    return rows


def from_provenance(provenance: Mapping[str, Any], epochs: int) -> dict[str, Any]:
    """:func:`estimate` on a search's provenance, with the noise its calibration measured."""
    sd, source = _noise_sd(provenance.get("calibration") or {})
    return estimate(observations(provenance, epochs), sd, source)


def describe_effects(record: Mapping[str, Any] | None, *, unclear: int = 3) -> list[str]:
    """Lines a person reads: the operations that hurt and help beyond the noise, and the largest
    ``unclear`` others; or why there is no estimate."""
    if not record:
        return []
    if not record.get("ops"):
        return [f"what helps and hurts on this data: no estimate ({record.get('why_not', 'no runs')})"]
    rows = record["ops"]
    width = max(len(r["op"]) for r in rows)
    head = (
        f"what helps and hurts on this data (proxy score change per application per image, points, "
        f"+- its 95% interval; {record['runs']} runs on the chosen base; {record.get('noise_source') or 'noise'}):"
    )
    clear = [r for r in rows if r["verdict"] != "unclear"]
    others = sorted((r for r in rows if r["verdict"] == "unclear"), key=lambda r: -abs(r["effect"]))[:unclear]
    lines = [head]
    for r in sorted(clear, key=lambda r: r["effect"]) + others:
        lines.append(
            f"  {r['verdict']:<8}{r['op']:<{width}}  {r['effect'] * 100:+6.2f} +- {r['ci95'] * 100:.2f}"
            f"  ({r['runs_with']} runs with it)"
        )
    rest = len(rows) - len(clear) - len(others)
    if not clear:
        lines.append("  no operation helps or hurts beyond the noise")
    if rest > 0:
        lines.append(f"  ... and {rest} more within the noise")
    return lines


def plot_effects(record: Mapping[str, Any], out: str, title: str = "") -> str | None:
    """A horizontal bar per operation (effect, its 95% interval), red for hurts, green for
    helps, grey for unclear, into the PNG ``out``; None when there is no estimate."""
    rows = (record or {}).get("ops") or []
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour = {"hurts": "tab:red", "helps": "tab:green", "unclear": "tab:gray"}
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.4))
    ys = range(len(rows))
    ax.barh(
        list(ys),
        [r["effect"] * 100 for r in rows],
        xerr=[r["ci95"] * 100 for r in rows],
        color=[colour[r["verdict"]] for r in rows],
        alpha=0.85,
        capsize=3,
    )
    ax.set_yticks(list(ys), [f"{r['op']} ({r['runs_with']})" for r in rows])
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("proxy score change per application per image (points, 95% interval)")
    ax.set_title(title or f"what helps and hurts on this data ({record['runs']} runs; red: hurts, green: helps)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
