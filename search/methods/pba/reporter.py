"""What a person sees of a PBA search (:class:`PbaReporter`): the population before it starts, the
schedule the stored policy is the last stage of in its summary, and, for ``autoaug report``,
where its record is (PBT proposed its policies: no Optuna study to draw)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autoaug.search.methods.base import MethodReporter

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["PbaReporter"]


class PbaReporter(MethodReporter):
    def describe(self, config: SearchConfig) -> list[str]:
        s, t = self.method.settings_in(config), config.train
        return [
            f"  method: population based augmentation, {s.population} members ({s.init} start), perturbed every "
            f"{s.perturbation_interval} epochs (bottom {s.quantile:g} clones the top, resample probability "
            f"{s.resample_probability:g}, shifts up to {s.max_shift})",
            self.proxy_line(t),
        ]

    def optuna_studies(self, config: SearchConfig) -> str | None:
        return None  # PBT's exploit/explore proposes the policies

    def best_policy_line(self, num_sub_policies: int) -> str | None:
        return f"final policy = the best trial's, {num_sub_policies} sub-policies"  # the best member's last stage

    def summary(self, record: Mapping[str, Any]) -> list[str]:
        """The schedule the stored policy is the last stage of."""
        if not record.get("schedule_hash"):
            return []
        # (a result recorded before the schedule had the provenance's own key: its stages here)
        starts = record.get("stage_starts") or [s["start"] for s in (record.get("schedule") or {}).get("stages", [])]
        return [
            f"schedule: {len(starts)} stage(s) from {', '.join(f'{x:.0%}' for x in starts)} of training "
            f"(stage epochs {[e + 1 for e in record.get('stage_epochs', [])]}), hash "
            f"{record['schedule_hash'][:12]}; the policy above is its last stage; "
            f"{len(record.get('events', []))} exploit/explore events in the population of "
            f"{record.get('population')}"
        ]

    def report_note(self, name: str, run_uri: str) -> str | None:
        return (
            f"search {name!r} is a PBA search: no Optuna study to draw (PBT proposed its policies); "
            f"its schedule, population and events: autoaug policies show {name}, and {run_uri}/{self.method.record_file}"
        )
