"""What a search records: the data it ran on, one :class:`TrialRecord` per Tune trial, and the
:class:`SearchOutcome` (rebuilt from ``result.json`` for a finished search)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Container, Mapping

import optuna

from autoaug.search.decide.assemble import SUCCESS_STATUSES, AssembledPolicy, TrialRecord
from autoaug.search.methods.base import METHODS
from autoaug.search.tune.progress import trial_error
from autoaug.search.run_dir import RunDir
from autoaug.search.score import METRIC, MODE
from autoaug.search.space import SearchSpace
from autoaug.search.tune.study import final_step, study_trials_by_tune_id

__all__ = ["SearchOutcome", "describe_data", "trial_records", "outcome_from_result"]


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
        space = ((self.provenance.get("search") or {}).get("config") or {}).get("space") or {}
        family = space.get("family", "aa")
        if family == "aa":  # a PBA member's last policy
            return f"final policy = the best trial's, {num} sub-policies"
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
        lines = [self.policy.table(max_rows=SUMMARY_ROWS), ""]
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
            scores = ", ".join(
                f"{c['kind']} ({c['num_sub_policies']} sub-policies) {c[METRIC]:.4f}"
                for c in selection["candidates"]
                if c.get(METRIC) is not None
            )
            # the first candidate re-scored (under a time budget, not every candidate is)
            first = next((c for c in selection["candidates"] if c.get("runs")), selection["candidates"][0])
            runs = first.get("runs") or [{"seed": first.get("seed", "?")}]
            seeds = ", ".join(str(r.get("seed")) for r in runs)
            val = f", {first['val_size']} validation images" if first.get("val_size") else ""
            lines.append(
                f"re-scored under the proxy (mean over seed{'s' if len(runs) > 1 else ''} {seeds}{val}): "
                f"{scores}; stored: {selection['chosen']}"
            )
            from autoaug.search.decide.rescore import describe_selection

            lines += describe_selection(selection)
        method = METHODS.get(((self.provenance.get("search") or {}).get("config") or {}).get("method", ""))
        if method is not None:  # what the method's own record says (a PBA search: its schedule)
            lines += method.summary(self.provenance.get("method") or {})
        from autoaug.search.budget import describe_budget
        from autoaug.search.decide.calibrate import describe_calibration

        from autoaug.search.decide.op_effects import describe_effects

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


def trial_records(
    run: RunDir, study: optuna.Study, *, space: SearchSpace, name: str, epochs: int, budget_stopped: Container[str] = ()
) -> list[TrialRecord]:
    """One :class:`TrialRecord` per trial of the Tune experiment in ``run``, in creation order:
    its parameters decoded in ``space``, whatever its family (policies named ``{name}-{trial id}``), ``completed``
    when it reported ``epochs`` results, ``budget_stopped`` when the search's time budget ended it
    earlier (``budget_stopped``: those trials' ids; scored on what it reported, if anything).

    Tune's final experiment state gives status, last metrics and errors. For a trial that the
    Optuna study recorded as finished while Tune's snapshot was older (the driver died in
    between, and the study guard did not run it again), the study's value and step are the
    result.
    """
    from ray.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis(run.uri, default_metric=METRIC, default_mode=MODE)
    latest = study_trials_by_tune_id(study)
    names = set(space.param_names())
    epochs_needed = epochs
    records = []
    trials = sorted(analysis.trials, key=lambda t: (_creation_index(t), t.trial_id))
    for index, trial in enumerate(trials):
        params = {k: v for k, v in (trial.config or {}).items() if k in names}
        try:
            policy = space.to_policy(params, name=f"{name}-{trial.trial_id}")
        except ValueError:
            policy = None
        last = trial.last_result or {}
        epochs = int(last.get("epoch") or 0)
        score = last.get(METRIC)
        error = note = None
        if trial.status == "ERROR":
            status = "failed"
            error = trial_error(trial)
        elif trial.status == "TERMINATED":
            status = "completed" if epochs >= epochs_needed else _stopped(trial.trial_id, budget_stopped)
        elif trial.status == "RUNNING":
            status = "running"
        else:
            status = "pending"
        frozen = latest.get(trial.trial_id)
        if frozen is not None and frozen.state.is_finished() and status in SUCCESS_STATUSES:
            # The study records a trial's first end, Tune's snapshot can be older (driver killed
            # in between): the study's result is the trial's result.
            step = final_step(frozen)
            if frozen.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) and (
                int(last.get("training_iteration") or 0) != step
                or score is None
                or not math.isclose(float(score), frozen.value, rel_tol=1e-9)
            ):
                score, epochs = frozen.value, step
                status = "completed" if step >= epochs_needed else _stopped(trial.trial_id, budget_stopped)
                note = "result from the Optuna study: the trial ended after Tune's last snapshot"
            elif frozen.state == optuna.trial.TrialState.FAIL:
                status, score = "failed", None
                error = "failed before the driver stopped (the error was recorded in the Optuna study only)"
        records.append(
            TrialRecord(
                trial_id=trial.trial_id,
                index=index,
                status=status,
                params=params,
                policy=policy,
                score=None if score is None else float(score),
                epochs=epochs,
                train_time_s=last.get("train_time_s"),
                error=error,
                optuna_number=None if frozen is None else frozen.number,
                num_failures=int(getattr(trial, "num_failures", 0) or 0),
                note=note,
            )
        )
    return records


def _stopped(trial_id: str, budget_stopped: Container[str]) -> str:
    """The status of a trial that ended before its last epoch without an error."""
    return "budget_stopped" if trial_id in budget_stopped else "early_stopped"


def _creation_index(trial: Any) -> int:
    # Tune's experiment tag starts with the trial counter: "3_sp0_op0_mag=9,...".
    head = str(getattr(trial, "experiment_tag", "") or "").split("_", 1)[0]
    return int(head) if head.isdigit() else sys.maxsize


def outcome_from_result(result: Mapping[str, Any], run: RunDir) -> SearchOutcome:
    """The :class:`SearchOutcome` a ``result.json`` describes."""
    from autoaug.policies import Policy

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
