"""What a person sees of a training-method search (:class:`TrainReporter`): the lines before it
starts (the trials, ASHA's schedule, the proxy) and, in its summary, whether ASHA's rungs ranked
its trials (:func:`autoaug.search.decide.rungs.describe_rungs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autoaug.search.decide.rungs import describe_rungs
from autoaug.search.methods.base import MethodReporter

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["TrainReporter"]


class TrainReporter(MethodReporter):
    def describe(self, config: SearchConfig) -> list[str]:
        s, t = self.method.settings_in(config), config.train
        stopping = (
            f"ASHA (grace {s.grace_period} epochs, reduction factor {s.reduction_factor:g})"
            if s.early_stopping
            else "off"
        )
        reports = "" if s.report_every == 1 else f", each reporting every {s.report_every} epochs"
        return [
            f"  method: one proxy training per candidate, {s.num_trials} trials{reports}, early stopping {stopping}",
            self.proxy_line(t),
        ]

    def summary(self, record: Mapping[str, Any]) -> list[str]:
        """Whether ASHA's rungs ranked the trials, and which stopped cutting."""
        return describe_rungs(record.get("rungs"))
