"""From finished trials to the final policy and its provenance.

AutoAugment's recipe (Cubuk et al., 2019, section 3): the sub-policies of the best ``N`` policies
(``N = 5``) are concatenated into the final policy. :func:`assemble_policy` does that, removing
duplicate sub-policies (keeping the first, i.e. the one from the better trial): the rule
``concatenate``, the ``aa`` space family's. In the ``randaugment`` and ``trivialaugment`` families a
candidate is one point (a set of operations and a magnitude), and a union of points is no point of
the family, so the final policy is the best-ranked trial's policy itself: the rule ``best``
(:data:`FAMILY_RULES`, :func:`assembly_rule`). The provenance's ``assembly.rule`` says which.

Ranking: a trial that trained for more epochs outranks one stopped earlier by the ASHA
scheduler (their scores were measured at different points of training and are not comparable;
ASHA stops a trial only when it was worse than its peers at that rung), then higher score, then
creation order.

:func:`build_provenance` gathers what the stored policy records: the search configuration,
dataset and split fingerprints, every trial's policy, score and status, library versions, the git
commit of the code and wall time.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoaug.policies import Op, Policy
from autoaug.policies import ops as _ops

__all__ = [
    "TrialRecord",
    "AssembledPolicy",
    "SUCCESS_STATUSES",
    "FINISHED_STATUSES",
    "rank_trials",
    "assemble_policy",
    "assembly_rule",
    "ASSEMBLY_RULES",
    "FAMILY_RULES",
    "union_policy",
    "library_versions",
    "git_info",
    "build_provenance",
]

#: Trial statuses that can carry a score (``budget_stopped``: ended by the search's time budget,
#: scored on what it had reported; one that had reported nothing has no score).
SUCCESS_STATUSES = ("completed", "early_stopped", "budget_stopped")
#: Statuses of trials that will not run again.
FINISHED_STATUSES = SUCCESS_STATUSES + ("failed",)

#: How the final policy is made from the ranked trials (the provenance's ``assembly.rule``).
ASSEMBLY_RULES = {
    "concatenate": "the sub-policies of the best top_n trials concatenated, duplicates removed (AutoAugment)",
    "best": "the best-ranked trial's policy itself (randaugment/trivialaugment families: points are not mixed)",
    "transfer": "no trial ran (calibration used the time budget): the published policy that transferred best",
}
#: The rule of each search space family (:data:`autoaug.search.space.FAMILIES`).
FAMILY_RULES = {"aa": "concatenate", "randaugment": "best", "trivialaugment": "best"}


def assembly_rule(family: str) -> str:
    """The assembly rule of space family ``family`` (:data:`FAMILY_RULES`)."""
    if family not in FAMILY_RULES:
        raise ValueError(f"no assembly rule for space family {family!r}; expected one of {list(FAMILY_RULES)}")
    return FAMILY_RULES[family]


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a search, as recorded in the result and the provenance.

    Attributes:
        trial_id: Ray Tune trial id.
        index: creation order (0-based).
        status: ``completed`` (all epochs), ``early_stopped`` (by ASHA), ``budget_stopped`` (by the
            search's time budget), ``failed`` (raised more often than ``max_failures`` allows), or
            ``pending``/``running`` (unfinished).
        params: the Optuna parameters (= the trial's Tune config).
        policy: the decoded candidate policy (None if the parameters could not be decoded).
        score: last reported validation accuracy (None if the trial never reported).
        epochs: epochs trained.
        train_time_s: training time reported by the trainer (excludes data set-up).
        error: one-line error of a failed trial.
        optuna_number: the matching trial number in the Optuna study.
        num_failures: attempts that raised.
        note: how the record was reconciled after a driver restart, if it was.
    """

    trial_id: str
    index: int
    status: str
    params: Mapping[str, Any]
    policy: Policy | None
    score: float | None
    epochs: int = 0
    train_time_s: float | None = None
    error: str | None = None
    optuna_number: int | None = None
    num_failures: int = 0
    note: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status in SUCCESS_STATUSES and self.score is not None and self.policy is not None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @classmethod
    def from_dict(cls, t: Mapping[str, Any]) -> TrialRecord:
        """The record :meth:`to_dict` wrote (in ``result.json`` and the provenance)."""
        return cls(
            trial_id=t["trial_id"],
            index=t["index"],
            status=t["status"],
            params=t["params"],
            policy=None if t["policy"] is None else Policy.from_dict(t["policy"]),
            score=t["score"],
            epochs=t["epochs"],
            train_time_s=t["train_time_s"],
            error=t["error"],
            optuna_number=t["optuna_number"],
            num_failures=t["num_failures"],
            note=t.get("note"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "index": self.index,
            "optuna_number": self.optuna_number,
            "status": self.status,
            "score": self.score,
            "epochs": self.epochs,
            "train_time_s": self.train_time_s,
            "num_failures": self.num_failures,
            "error": self.error,
            "note": self.note,
            "policy": None if self.policy is None else self.policy.to_dict(),
            "policy_hash": None if self.policy is None else self.policy.content_hash,
            "params": dict(self.params),
        }


@dataclass(frozen=True)
class AssembledPolicy:
    """The final policy and how it was put together."""

    policy: Policy
    selected: tuple[TrialRecord, ...]
    duplicates_removed: int
    sources: tuple[str, ...] = field(default=())  # trial id of each final sub-policy
    rule: str = "concatenate"  # ASSEMBLY_RULES

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "rule_is": ASSEMBLY_RULES.get(self.rule, self.rule),
            "selected_trials": [t.trial_id for t in self.selected],
            "selected_scores": [t.score for t in self.selected],
            "num_sub_policies": len(self.policy.sub_policies),
            "duplicates_removed": self.duplicates_removed,
            "sub_policy_sources": list(self.sources),
            "ranking": "epochs trained (desc), then score (desc), then creation order",
        }


def rank_trials(trials: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Trials with a score, best first (see the module documentation for the order)."""
    scored = [t for t in trials if t.succeeded]
    return sorted(scored, key=lambda t: (-t.epochs, -float(t.score), t.index))


def _effective_key(sub: Sequence[Op]) -> tuple:
    # Operations without a magnitude (AutoContrast, Invert, Equalize) ignore their bin, so two
    # sub-policies differing only there are the same augmentation.
    return tuple(
        (op.op, round(op.probability, 6), op.magnitude_bin if _ops.REGISTRY[op.op].has_magnitude else None)
        for op in sub
    )


def assemble_policy(
    trials: Iterable[TrialRecord],
    *,
    name: str,
    top_n: int = 5,
    num_magnitude_bins: int | None = None,
    base: str | None = None,
    ranges: str | None = None,
    rule: str = "concatenate",
) -> AssembledPolicy:
    """Concatenate the sub-policies of the ``top_n`` best trials, duplicates removed (``rule``
    ``concatenate``); or, with ``rule="best"``, the best trial's policy alone (``top_n`` ignored).

    ``num_magnitude_bins``, ``base`` and ``ranges`` default to those of the best trial's policy;
    every selected policy must agree with them.

    Raises:
        ValueError: if ``top_n`` < 1, no trial has a score, the rule is unknown, or the selected
            policies disagree on bins, base or ranges.
    """
    if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
        raise ValueError(f"top_n must be an integer >= 1, got {top_n!r}")
    if rule not in ASSEMBLY_RULES:
        raise ValueError(f"unknown assembly rule {rule!r}; expected one of {list(ASSEMBLY_RULES)}")
    ranked = rank_trials(trials)
    if not ranked:
        raise ValueError("no trial finished with a score: nothing to assemble a policy from")
    selected = tuple(ranked[: 1 if rule == "best" else top_n])
    first = selected[0].policy
    bins = first.num_magnitude_bins if num_magnitude_bins is None else num_magnitude_bins
    base = first.base if base is None else base
    ranges = first.ranges if ranges is None else ranges
    seen: set[tuple] = set()
    subs: list[tuple[Op, ...]] = []
    sources: list[str] = []
    duplicates = 0
    for trial in selected:
        p = trial.policy
        if (p.num_magnitude_bins, p.base, p.ranges) != (bins, base, ranges):
            raise ValueError(
                f"trial {trial.trial_id}: policy has num_magnitude_bins={p.num_magnitude_bins}, "
                f"base={p.base!r}, ranges={p.ranges!r}; expected {bins}, {base!r}, {ranges!r}"
            )
        for sub in p.sub_policies:
            key = _effective_key(sub)
            # "best": the point as it is (TrivialAugment's AutoContrast at 31 bins is 31 draws of it)
            if key in seen and rule != "best":
                duplicates += 1
                continue
            seen.add(key)
            subs.append(sub)
            sources.append(trial.trial_id)
    policy = Policy(name, bins, subs, base=base, ranges=ranges)
    return AssembledPolicy(policy, selected, duplicates, tuple(sources), rule)


def union_policy(name: str, parts: Sequence[Policy]) -> Policy:
    """One policy holding the sub-policies of ``parts`` in order, duplicates removed (the first
    kept); every part must have the first part's magnitude bins, base and ranges."""
    if not parts:
        raise ValueError("union_policy needs at least one policy")
    first = parts[0]
    seen: set[tuple] = set()
    subs: list[tuple[Op, ...]] = []
    for p in parts:
        if (p.num_magnitude_bins, p.base, p.ranges) != (first.num_magnitude_bins, first.base, first.ranges):
            raise ValueError(
                f"policy {p.name!r} has num_magnitude_bins={p.num_magnitude_bins}, base={p.base!r}, "
                f"ranges={p.ranges!r}; expected those of {first.name!r}"
            )
        for sub in p.sub_policies:
            key = _effective_key(sub)
            if key not in seen:
                seen.add(key)
                subs.append(sub)
    return Policy(name, first.num_magnitude_bins, subs, base=first.base, ranges=first.ranges)


# ----------------------------------------------------------------------------------------------
# Provenance


_LIBRARIES = ("torch", "torchvision", "ray", "optuna", "pyarrow", "numpy", "autoaug")


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries a search result depends on (None when missing)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist in _LIBRARIES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    dali = None
    for dist in importlib.metadata.distributions():
        dist_name = (dist.metadata.get("Name") or "").lower()
        if dist_name.startswith("nvidia-dali") and "tf-plugin" not in dist_name:
            dali = f"{dist.version} ({dist_name})"
            break
    versions["nvidia-dali"] = dali
    return versions


def git_info(path: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout holding ``path`` (default: this package), or
    None when it is not in a git checkout or git is unavailable."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def build_provenance(
    *,
    search_config: Mapping[str, Any],
    data: Mapping[str, Any],
    trials: Sequence[TrialRecord],
    assembled: AssembledPolicy,
    metric: str,
    mode: str,
    run_dir: str,
    optuna: Mapping[str, Any],
    timing: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON-able provenance stored with the final policy (and in ``result.json``)."""
    counts = {s: sum(t.status == s for t in trials) for s in FINISHED_STATUSES}
    best = assembled.selected[0] if assembled.selected else None  # (none: no trial ran)
    return {
        "kind": "autoaug.search",
        "search": {"name": search_config.get("name"), "config": dict(search_config), "run_dir": run_dir},
        "dataset": dict(data.get("dataset", {})),
        "split": dict(data.get("split", {})),
        "metric": {"name": metric, "mode": mode},
        "best": None
        if best is None
        else {
            "trial_id": best.trial_id,
            "score": best.score,
            "epochs": best.epochs,
            "policy": best.policy.to_dict(),
        },
        "assembly": assembled.to_dict(),
        "counts": {"trials": len(trials), **counts},
        "trials": [t.to_dict() for t in trials],
        "optuna": dict(optuna),
        "versions": library_versions(),
        "git": git_info(),
        "host": {"platform": platform.platform(), "node": platform.node()},
        "time": dict(timing),
    }
