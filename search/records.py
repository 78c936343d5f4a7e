"""What a search records: the data it ran on and the :class:`SearchOutcome` (rebuilt from
``result.json`` for a finished search). One :class:`TrialRecord` per Tune trial is
:func:`autoaug.search.tune.results.trial_records`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoaug.policies import Policy
from autoaug.policies.describe import describe
from autoaug.search.budget import describe_budget
from autoaug.search.decide.assemble import AssembledPolicy, TrialRecord
from autoaug.search.decide.calibration_choices import describe_calibration
from autoaug.search.decide.op_effects import describe_effects
from autoaug.search.decide.rescore import describe_selection
from autoaug.search.methods.base import METHODS, Method
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC
from autoaug.search.space import SearchSpace

__all__ = ["SearchOutcome", "describe_data", "outcome_from_result", "ran_text"]


def ran_text(provenance: Mapping[str, Any] | None) -> str | None:
    """What a search ran, from its provenance, as the gain over its starting policy is said with
    it (``+0.09 [-0.55, +0.73] points after 28 trials``: in the unit of its method); None when the
    provenance does not say."""
    p = provenance or {}
    n = (p.get("counts") or {}).get("trials")
    if not isinstance(n, int):
        return None
    method = METHODS.get(((p.get("search") or {}).get("config") or {}).get("method", ""))
    unit = getattr(method, "unit", "trials")
    return f"{n} {unit.removesuffix('s') if n == 1 else unit}"


def rescored_line(selection: Mapping[str, Any]) -> str:
    """The summary's line of the final candidates' re-scores (``provenance["selection"]``): each
    candidate's mean score, the seeds said once when every re-scored candidate ran the same ones,
    else each candidate's own (the published policy's runs are calibration's, with seeds of their
    own, beside a candidate trained on one fresh seed)."""
    candidates = list(selection.get("candidates") or [])
    rescored = [c for c in candidates if c.get(METRIC) is not None]

    def seeds(c: Mapping[str, Any]) -> list[str]:
        return [str(r.get("seed")) for r in (c.get("runs") or [{"seed": c.get("seed", "?")}])]

    def plural(s: list[str]) -> str:
        return f"seed{'s' if len(s) > 1 else ''} {', '.join(s)}"

    # the first candidate re-scored (under a time budget, not every candidate is)
    first = next((c for c in candidates if c.get("runs")), candidates[0] if candidates else {})
    val = f"{first['val_size']} validation images" if first.get("val_size") else ""
    if len({tuple(seeds(c)) for c in rescored}) <= 1:
        scores = ", ".join(f"{c['kind']} ({c['num_sub_policies']} sub-policies) {c[METRIC]:.4f}" for c in rescored)
        head = f"mean over {plural(seeds(first))}" + (f", {val}" if val else "")
    else:
        scores = ", ".join(
            f"{c['kind']} ({c['num_sub_policies']} sub-policies) {c[METRIC]:.4f} ({plural(seeds(c))})" for c in rescored
        )
        head = "mean over each candidate's seeds" + (f", {val}" if val else "")
    return f"re-scored under the proxy ({head}): {scores}; stored: {selection.get('chosen')}" + _race_text(selection)


_RACE_ENDS = {
    "decided": "one led beyond the noise",
    "max_seeds": "every contender had its most runs",
    "budget": "the time budget left no room for the next",
}


def _race_text(selection: Mapping[str, Any]) -> str:
    """What the re-scoring race did (``selection["race"]``), for the re-scores' line."""
    race = selection.get("race")
    if not race:
        return ""
    rounds = race.get("rounds") or ()
    confirm = sum(1 for r in rounds if r.get("confirm"))
    within = len(rounds) - confirm
    ended = _RACE_ENDS.get(race.get("ended"), race.get("ended"))
    what = ["a round confirming a lead measured on one run"] if confirm else []
    if within or not confirm:
        what.append(f"{within} round{'' if within == 1 else 's'} for the candidates within the noise of the leader")
    return f" (race up to {race.get('max_seeds')} runs each: {', then '.join(what)}; ended as {ended})"


@dataclass(frozen=True)
class SearchOutcome:
    """What a finished search produced."""

    policy: Any  # policies.Policy
    score: float | None  # the best trial's (None: no trial ran, the time budget went to calibration)
    best_trial: TrialRecord | None
    trials: tuple[TrialRecord, ...]
    assembled: AssembledPolicy
    store_uri: str
    version: int
    run_dir: str
    provenance: Mapping[str, Any]
    study_problems: tuple[str, ...] = ()

    @property
    def reference(self) -> str:
        """``name@version`` in the policy store."""
        return f"{self.policy.name}@{self.version}"

    @property
    def method(self) -> Method | None:
        """The registered method that ran this search (None: one not registered in this process)."""
        return METHODS.get(((self.provenance.get("search") or {}).get("config") or {}).get("method", ""))

    def method_fields(self) -> dict[str, Any]:
        """What the method adds to ``autoaug search --json``'s result from its provenance record."""
        return {} if self.method is None else self.method.reporter.result_fields(self.provenance.get("method") or {})

    def _assembly_line(self) -> str:
        """How the final policy was made: AutoAugment's concatenation, or (rule ``best``) the best
        trial's point of the space family, described."""
        num = self.provenance.get("assembly", {}).get("num_sub_policies", len(self.assembled.policy.sub_policies))
        if self.best_trial is None:  # (the time budget went to calibration)
            transfer = (self.provenance.get("calibration") or {}).get("transfer") or {}
            what = f"{transfer['best']} on {transfer['base']}, " if transfer.get("best") else ""
            return f"final policy = {what}the published policy that transferred best, as calibration measured it, {num} sub-policies"
        if self.assembled.rule != "best":
            return (
                f"assembled policy = best {len(self.assembled.selected)} trials, {num} sub-policies "
                f"({self.assembled.duplicates_removed} duplicates removed)"
            )
        own = self.method.reporter.best_policy_line(num) if self.method is not None else None
        if own is not None:  # the method's words (a PBA member's last policy)
            return own
        space = ((self.provenance.get("search") or {}).get("config") or {}).get("space") or {}
        family = space.get("family", "aa")
        try:
            point = SearchSpace.from_dict(space).describe_point(self.best_trial.params)
        except ValueError:
            point = "its parameters do not decode in the recorded space"
        return f"final policy = the best trial's ({family} family point: {point}), {num} sub-policies"

    def _budget_stopped_text(self, counts: Mapping[str, Any]) -> str:
        """The trials the time budget stopped, those with a score (ranked on what they reported)
        apart from those without one (not started, or stopped before their first report)."""
        stopped = int(counts.get("budget_stopped") or 0)
        if not stopped:
            return ""
        unscored = sum(1 for t in self.trials if t.status == "budget_stopped" and t.score is None)
        scored = stopped - unscored
        return "".join(
            [
                f"{scored} stopped by the time budget, " if scored else "",
                f"{unscored} stopped by it before a first score, " if unscored else "",
            ]
        )

    def summary(self) -> str:
        counts = self.provenance["counts"]
        best = self.best_trial
        # its name, size and hash, then the policy as people think of it (a family point, its
        # table, or by operation: autoaug.policies.describe)
        lines = [self.policy.table(max_rows=0).splitlines()[0], *describe(self.policy, max_rows=SUMMARY_ROWS), ""]
        if best is None:
            lines.append(f"no trial ran; {self._assembly_line()}")
        else:
            lines += [
                f"best trial {best.trial_id}: {METRIC} {self.score:.4f} ({best.epochs} epoch{'' if best.epochs == 1 else 's'})",
                f"trials: {counts['completed']} completed, {counts['early_stopped']} stopped early, "
                + self._budget_stopped_text(counts)
                + f"{counts['failed']} failed; "
                + self._assembly_line(),
            ]
        selection = self.provenance.get("selection")
        if selection:
            lines.append(rescored_line(selection))
            lines += describe_selection(selection, ran_text(self.provenance))
        if self.method is not None:  # what the method's own record says (a PBA search: its schedule)
            lines += self.method.reporter.summary(self.provenance.get("method") or {})
        calibration = self.provenance.get("calibration")
        lines += describe_calibration(calibration)
        name = ((self.provenance.get("search") or {}).get("config") or {}).get("name")
        if calibration and not calibration.get("reused") and name:
            runs = sum(
                len(score.get("runs") or ())
                for stage in ("base", "transfer")
                for score in ((calibration.get(stage) or {}).get("scores") or {}).values()
            )
            if runs:
                lines.append(
                    f"a later search of this data and proxy can reuse these {runs} proxy runs instead of "
                    f"training them again: --calibration-from {name}"
                )
        lines += describe_effects(self.provenance.get("op_effects"))
        lines += describe_budget(self.provenance.get("budget"))
        lines += [
            f"stored as {self.reference} in {self.store_uri}",
            f"run directory: {self.run_dir}",
        ]
        if self.study_problems:
            lines.append(f"WARNING: Optuna study inconsistent with Tune: {'; '.join(self.study_problems)}")
        return "\n".join(lines)


#: Sub-policies the summary lists (a RandAugment point of N=3 has 2,744; `policies show` lists all).
SUMMARY_ROWS = 25


def describe_data(train_config: Any) -> dict[str, Any]:
    """Dataset and split fingerprints of the trainer's reduced split, computed the way the
    trainer computes them (this also validates the data before Ray starts). Raises
    ``ValueError`` (``DatasetError``) for unreadable data."""
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import config_split

    ds = open_dataset(train_config.data, split="train")
    fingerprint = ds.fingerprint()
    split = config_split(ds, train_config, dataset_fingerprint=fingerprint)  # grouped as the trainer's
    return {
        "dataset": {
            "source": str(train_config.data),
            "fingerprint": fingerprint,
            "num_images": len(ds),
            "classes": list(ds.classes),
        },
        "split": {
            "fingerprint": split.fingerprint,
            "seed": int(split.seed),
            "train_size": int(len(split.train)),
            "val_size": int(len(split.val)),
            "group_by": train_config.group_by,
        },
    }


def outcome_from_result(result: Mapping[str, Any], run: RunDir) -> SearchOutcome:
    """The :class:`SearchOutcome` a ``result.json`` describes."""
    prov = result["provenance"]
    trials = [TrialRecord.from_dict(t) for t in prov["trials"]]
    by_id = {t.trial_id: t for t in trials}
    assembly = prov["assembly"]
    selected = tuple(by_id[i] for i in assembly["selected_trials"])
    policy = Policy.from_dict(result["policy"])
    assembled = AssembledPolicy(
        policy,
        selected,
        assembly["duplicates_removed"],
        tuple(assembly["sub_policy_sources"]),
        assembly.get("rule", "concatenate"),  # results written before space families: concatenate
    )
    return SearchOutcome(
        policy=policy,
        score=selected[0].score if selected else None,
        best_trial=selected[0] if selected else None,
        trials=tuple(trials),
        assembled=assembled,
        store_uri=result["stored"]["store"],
        version=result["stored"]["version"],
        run_dir=run.uri,
        provenance=prov,
        study_problems=tuple(prov["optuna"]["problems"]),
    )
