"""The interface of a search method.

A method turns a prepared search into scored candidate policies. It does not decide how the
search starts or ends: :mod:`autoaug.search.tuner` checks the configuration and the data, opens
the run directory and the Ray session, runs the method, re-scores its candidates, chooses one,
stores it and writes the result -- the same for every method. A method implements:

* ``settings``: the frozen dataclass of its own settings, held by ``SearchConfig`` in the field
  ``settings.FIELD`` (``SearchConfig.train_method``, ``SearchConfig.density``);
* ``check(config)``: the checks of its settings that need the whole configuration
  (``ValueError``), run before anything starts;
* ``describe(config)``: the lines ``autoaug search`` prints about it before it starts;
* ``num_trials(config)``: how many candidates it scores (the warm start must fit in its first
  batch: ``warm_start_capacity(config)``), called ``unit`` in messages (``trials``, ``candidates``,
  ``members``); ``max_candidates(config)``: how many final candidates it can return for
  re-scoring at most (what a time budget keeps time for);
* ``can_resume(run)``: whether a stopped search left enough to continue from;
* ``run(search)``: inside the Ray session, score candidates and return a :class:`MethodResult`.
  It resumes by itself from what earlier sessions left in the run directory, raises
  :class:`~autoaug.core.errors.SearchInterruptedError` when stopped before its candidates are
  all scored and :class:`~autoaug.core.errors.SearchFailedError` when every one failed, and
  reports through ``search.display`` (:class:`autoaug.core.progress.Progress`). With a time
  budget (``search.budget``, :class:`autoaug.search.budget.Budget`) it passes the budget to its
  Tune experiments, proposes nothing more once the budget says trials must end, and then
  returns what it scored instead of raising ``SearchInterruptedError`` (``budget.ended`` set).

Methods import nothing of each other; what they share (building and running a Ray Tune
experiment of Optuna-proposed trials) is :mod:`autoaug.search.experiment`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence

from autoaug.core.errors import SearchFailedError
from autoaug.search.assemble import AssembledPolicy, TrialRecord
from autoaug.search.rescore import Candidate
from autoaug.search.run_dir import RunDir, RunState

if TYPE_CHECKING:
    from autoaug.search.config import SearchConfig

__all__ = ["Method", "MethodSettings", "PreparedSearch", "MethodResult", "all_failed", "resume_hint",
           "check_validation_left_to_the_method"]


class MethodSettings:
    """Base of a method's settings dataclass: built from its mapping form (unknown keys refused
    in one line) and written back to it. ``WHAT`` names the settings in messages and ``FIELD``
    is the ``SearchConfig`` field holding them."""

    WHAT: ClassVar[str]
    FIELD: ClassVar[str]

    @classmethod
    def from_value(cls, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"SearchConfig.{cls.FIELD} must be a mapping of its settings, got {type(value).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown {cls.WHAT} setting(s) {unknown}; expected some of {sorted(known)}")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PreparedSearch:
    """What a method gets: a checked configuration, its run directory and saved state, where the
    progress goes, and the caller's replacements."""

    config: "SearchConfig"
    run: RunDir
    state: RunState
    display: Any  # autoaug.core.progress.Progress
    #: Replaces the method's trial function (same signature), e.g. for another trainer.
    trainable: Callable | None = None
    #: A resumed search also retries the trials that had failed.
    resume_errored: bool = False
    #: The search's time budget (:class:`autoaug.search.budget.Budget`); None: no budget.
    budget: Any = None

    def budget_ended(self) -> bool:
        """The time budget ended the search (it stopped trials or proposals, in any session)."""
        return self.budget is not None and self.budget.ended is not None

    @property
    def study_url(self) -> str:
        return self.state.study_url


@dataclass(frozen=True)
class MethodResult:
    """What a method found: every trial, the assembled policy, the candidates re-scoring chooses
    from (the first is the one stored without re-scoring) and the method's records for the
    provenance."""

    trials: Sequence[TrialRecord]
    assembled: AssembledPolicy
    candidates: Sequence[Candidate]
    #: The provenance's ``optuna`` record (storage, study names, consistency with Tune).
    optuna: Mapping[str, Any]
    #: Method-specific entries of the provenance's ``time`` record.
    timing: Mapping[str, Any] = field(default_factory=dict)
    #: The provenance's ``method`` record (None: the training method's, which has none).
    provenance: Mapping[str, Any] | None = None


class Method(Protocol):
    name: str
    help: str
    settings: type
    unit: str

    def check(self, config: "SearchConfig") -> None: ...
    def describe(self, config: "SearchConfig") -> list[str]: ...
    def num_trials(self, config: "SearchConfig") -> int: ...
    def max_candidates(self, config: "SearchConfig") -> int: ...
    def warm_start_capacity(self, config: "SearchConfig") -> tuple[int, str]: ...
    def can_resume(self, run: RunDir) -> bool: ...
    def run(self, search: PreparedSearch) -> MethodResult: ...


def check_validation_left_to_the_method(train: Any, why: str) -> None:
    """A ``ValueError`` line when the search's training config sets which epochs validate
    (``eval_every``, ``eval_from``, ``eval_epochs``): a method that scores by validation decides
    that itself (``why`` says how)."""
    for setting, default in (("eval_every", 1), ("eval_from", 1), ("eval_epochs", None)):
        value = getattr(train, setting)
        if value != default:
            raise ValueError(f"train.{setting} is {value}: {why}; set {setting} to "
                             f"{'null' if default is None else default}")


def all_failed(trials: Sequence[TrialRecord], name: str, what: str = "trials") -> SearchFailedError:
    """The error of a search none of whose trials produced a score (the first error shown)."""
    failed = [t for t in trials if t.status == "failed"]
    first = failed[0] if failed else trials[0]
    return SearchFailedError(
        f"all {len(trials)} {what} of search {name!r} failed; first error "
        f"(trial {first.trial_id}): {first.error or 'no score reported'}"
    )


def resume_hint(config: "SearchConfig") -> str:
    """How to continue a search that stopped: the end of every "interrupted" message."""
    return f"resume it with: autoaug search --resume {config.name} --storage {config.storage}"
